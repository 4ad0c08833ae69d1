/**
 * The body of `tent recv` (loaded when the command runs).
 *
 * @since 0.1.0
 */
import { notificationText } from "@tent/rpc"
import { Console, Effect, Stream } from "effect"
import { makeEngine } from "../../Node.js"
import type { RecvOptions } from "../../Options.js"
import { CliFailure, failWith } from "../../Render.js"

export const run = (o: RecvOptions) =>
  Effect.scoped(
    Effect.gen(function* () {
      if (o.count < 1) return yield* Effect.fail(new CliFailure("--count must be at least 1"))
      const engine = yield* makeEngine(o)
      yield* Console.log(
        o.json
          ? JSON.stringify({ event: "listening", segment: engine.segmentName, address: engine.address })
          : `listening on ${engine.address}: waiting for ${o.count} notification(s), at most ${o.timeout} s`
      )
      let got = 0
      yield* engine.notifications.pipe(
        Stream.take(o.count),
        Stream.runForEach((n) => {
          got++
          const { name, msg } = notificationText(n)
          return Console.log(o.json ? JSON.stringify({ name, msg }) : `${name}: ${msg}`)
        }),
        Effect.timeoutFail({
          duration: `${o.timeout} seconds`,
          onTimeout: () =>
            new CliFailure(
              `received ${got} of ${o.count} notification(s) on ${engine.address} within ${o.timeout} s; check: did the sender target this address?`
            )
        })
      )
      // No wait before exiting: an acknowledgement still owed is sent before a QP is destroyed (SoftVerbs), and a
      // NIC acknowledges on arrival.
    })
  ).pipe(failWith("recv"))
