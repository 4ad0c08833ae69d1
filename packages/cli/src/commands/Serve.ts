/**
 * `tent serve`: one engine node (control plane, RDMA devices, a registered segment of `--segment-size` bytes) until
 * interrupted; prints its address, then each received notification as a line (`--json`: JSON lines).
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import { Command, Options } from "@effect/cli"
import { notificationText } from "@tent/rpc"
import { Console, Effect, Stream } from "effect"
import { makeEngine, nodeOptions } from "../Node.js"
import { failWith } from "../Render.js"

const text = (b: Uint8Array) => new TextDecoder("utf-8", { fatal: false }).decode(b)

export const options = {
  ...nodeOptions,
  segmentSize: Options.integer("segment-size").pipe(
    Options.withDescription("bytes of memory to register as this node's segment (peers WRITE/READ it)"),
    Options.withDefault(1 << 20)
  ),
  digest: Options.boolean("digest").pipe(
    Options.withDescription("with each notification, print the SHA-256 of the whole segment (to check a transfer)")
  ),
  json: Options.boolean("json").pipe(Options.withDescription("print JSON lines instead of text"))
}

export const command = Command.make("serve", options, (o) =>
  Effect.scoped(
    Effect.gen(function* () {
      if (o.segmentSize <= 0) return yield* Effect.fail(new Error("--segment-size must be positive"))
      const engine = yield* makeEngine(o)
      const segment = yield* engine.registerSegment(Buffer.alloc(o.segmentSize))
      const ready = { segment: engine.segmentName, address: engine.address, addr: segment.addr, size: segment.length }
      yield* Console.log(
        o.json
          ? JSON.stringify({ event: "listening", ...ready })
          : `listening on ${engine.address}: segment ${engine.segmentName}, ${segment.length} bytes at ${segment.addr} (Ctrl-C stops)`
      )
      yield* Stream.runForEach(engine.notifications, (n) =>
        Effect.suspend(() => {
          const sha = o.digest ? createHash("sha256").update(segment.buffer).digest("hex") : undefined
          if (o.json) {
            const { name, msg } = notificationText(n)
            return Console.log(JSON.stringify(sha === undefined ? { name, msg } : { name, msg, sha256: sha }))
          }
          return Console.log(`${text(n.name)}: ${text(n.msg)}${sha === undefined ? "" : `  (segment sha256 ${sha})`}`)
        })
      )
    })
  ).pipe(failWith("serve"))
).pipe(
  Command.withDescription(
    "Run one engine node (control plane, soft NICs, a registered segment) until interrupted; print each received notification as a line."
  )
)
