/**
 * `tent recv`: starts a node, prints its address, waits for `--count` notifications (at most `--timeout` seconds),
 * prints each, and exits 0; a timeout is one line and a non-zero exit.
 *
 * @since 0.1.0
 */
import { Command, Options } from "@effect/cli"
import { notificationText } from "@tent/rpc"
import { Console, Effect, Stream } from "effect"
import { makeEngine, nodeOptions } from "../Node.js"
import { CliFailure, failWith } from "../Render.js"

export const command = Command.make(
  "recv",
  {
    ...nodeOptions,
    count: Options.integer("count").pipe(
      Options.withDescription("notifications to wait for before exiting"),
      Options.withDefault(1)
    ),
    timeout: Options.float("timeout").pipe(
      Options.withDescription("seconds to wait for them at most"),
      Options.withDefault(60)
    ),
    json: Options.boolean("json").pipe(Options.withDescription("print JSON lines instead of text"))
  },
  (o) =>
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
).pipe(
  Command.withDescription(
    "Start a node, print its address, wait for --count notifications (at most --timeout s), print them and exit 0."
  )
)
