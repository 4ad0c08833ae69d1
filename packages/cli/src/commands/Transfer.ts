/**
 * `tent transfer PEER --bytes N [--notify NAME=MSG]`: starts a short-lived node, fills N bytes with a pattern of
 * `--seed`, RDMA-WRITEs them into the first buffer of PEER's segment at `--offset` (one batch, sliced over the
 * rails), optionally with a transfer-bound notification, waits for the batch, and prints the bytes' SHA-256.
 * `--verify` READs the range back from the peer and compares.
 * The body (`run/Transfer.ts`) is loaded when the command runs.
 *
 * @since 0.1.0
 */
import { Command } from "@effect/cli"
import { type TransferOptions, transferOptions } from "../Options.js"
import { lazy } from "../Render.js"

const body = lazy(
  "transfer",
  () => import("./run/Transfer.js"),
  (m, o: TransferOptions) => m.run(o)
)
const toMooncake = lazy(
  "transfer",
  () => import("./run/Mooncake.js"),
  (m, o: TransferOptions) => m.transfer(o)
)

/**
 * The `tent transfer` command; its options are `Options.transferOptions`.
 *
 * @since 0.1.0
 */
export const command = Command.make("transfer", transferOptions, (o) => (o.mooncake ? toMooncake(o) : body(o))).pipe(
  Command.withDescription(
    "RDMA-WRITE --bytes of a seeded pattern into PEER's segment (optionally with a transfer-bound notification) and print their SHA-256."
  )
)
