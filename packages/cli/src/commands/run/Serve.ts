/**
 * The body of `tent serve` (loaded when the command runs).
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import { notificationText } from "@tent/rpc"
import { Console, Effect, Stream } from "effect"
import { makeEngine } from "../../Node.js"
import { failWith } from "../../Render.js"
import type { ServeOptions } from "../Serve.js"

const text = (b: Uint8Array) => new TextDecoder("utf-8", { fatal: false }).decode(b)

export const run = (o: ServeOptions) =>
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
