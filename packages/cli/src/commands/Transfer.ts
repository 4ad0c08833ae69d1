/**
 * `tent transfer PEER --bytes N [--notify NAME=MSG]`: starts a short-lived node, fills N bytes with a pattern of
 * `--seed`, RDMA-WRITEs them into the first buffer of PEER's segment at `--offset` (one batch, sliced over the
 * rails), optionally with a transfer-bound notification, waits for the batch, and prints the bytes' SHA-256.
 * `--verify` READs the range back from the peer and compares.
 * The body (`run/Transfer.ts`) is loaded when the command runs.
 *
 * @since 0.1.0
 */
import { Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import { Effect } from "effect"
import { nodeOptions } from "../Options.js"
import { lazy } from "../Render.js"
import { peerArg } from "./Send.js"

/** The bytes `tent transfer` writes: a deterministic pattern of `seed`. */
export const pattern = (length: number, seed: number): Buffer => {
  const b = Buffer.allocUnsafe(length)
  let x = (seed * 2654435761) >>> 0 || 1
  for (let i = 0; i < length; i++) {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    b[i] = x & 0xff
  }
  return b
}

/** `--notify NAME=MSG` split at its first `=` (a message may hold more); anything else is a usage error that says so. */
export const notifyOption = (text: string) => {
  const at = text.indexOf("=")
  return at > 0
    ? Effect.succeed({ name: text.slice(0, at), msg: text.slice(at + 1) })
    : Effect.fail(
        ValidationError.invalidValue(
          HelpDoc.p(
            `--notify wants NAME=MSG, the notification's name and message joined by "=" (for example --notify done=req-7), got ${JSON.stringify(text)}`
          )
        )
      )
}

export const options = {
  ...nodeOptions,
  peer: peerArg,
  bytes: Options.integer("bytes").pipe(Options.withDescription("how many bytes to write")),
  offset: Options.integer("offset").pipe(
    Options.withDescription("where in the peer's first buffer to write"),
    Options.withDefault(0)
  ),
  seed: Options.integer("seed").pipe(Options.withDescription("seed of the byte pattern"), Options.withDefault(1)),
  notify: Options.text("notify").pipe(
    Options.withDescription(
      "NAME=MSG: a transfer-bound notification, sent once the batch completed (for example --notify done=req-7)"
    ),
    Options.mapEffect(notifyOption),
    Options.optional
  ),
  verify: Options.boolean("verify").pipe(
    Options.withDescription("READ the range back from the peer and compare it with what was written")
  )
}

/** What `tent transfer`'s arguments parse to. */
export type TransferOptions = Command.Command.ParseConfig<typeof options>

export const command = Command.make(
  "transfer",
  options,
  lazy(
    "transfer",
    () => import("./run/Transfer.js"),
    (m, o: TransferOptions) => m.run(o)
  )
).pipe(
  Command.withDescription(
    "RDMA-WRITE --bytes of a seeded pattern into PEER's segment (optionally with a transfer-bound notification) and print their SHA-256."
  )
)
