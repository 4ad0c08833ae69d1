/**
 * `tent send PEER NAME MSG`: starts a short-lived node, sends one notification to the segment `PEER` (a `tent serve`
 * address, `host:port`), waits until the notify SEND is acknowledged, and exits 0; otherwise one line and non-zero.
 *
 * @since 0.1.0
 */
import { Args, Command } from "@effect/cli"
import type { Diagnostics } from "@tent/core"
import { makeNotification } from "@tent/rpc"
import { Console, Effect } from "effect"
import { makeNode, nodeOptions } from "../Node.js"
import { CliFailure, failWith } from "../Render.js"

/** Waits (at most `ms`) until no notify SEND of this engine is in flight, so leaving does not drop one. */
export const drained = (diagnostics: Diagnostics.DiagnosticsShape, peer: string, ms = 10_000) =>
  Effect.gen(function* () {
    const deadline = Date.now() + ms
    for (;;) {
      const eps = yield* diagnostics.endpoints
      const pending = eps.reduce((n, e) => n + e.pending, 0)
      if (pending === 0) return
      if (Date.now() >= deadline) {
        return yield* Effect.fail(
          new CliFailure(
            `${pending} notification(s) posted to ${peer} were not acknowledged within ${ms / 1000} s; check: is the peer stopped, or its notify QP in error?`
          )
        )
      }
      yield* Effect.sleep("10 millis")
    }
  })

export const peerArg = Args.text({ name: "PEER" }).pipe(
  Args.withDescription("the peer's segment name: the host:port `tent serve` printed")
)

export const command = Command.make(
  "send",
  {
    ...nodeOptions,
    peer: peerArg,
    name: Args.text({ name: "NAME" }).pipe(Args.withDescription("the notification's name")),
    msg: Args.text({ name: "MSG" }).pipe(Args.withDescription("the notification's message"))
  },
  (o) =>
    Effect.scoped(
      Effect.gen(function* () {
        const { engine, diagnostics } = yield* makeNode(o)
        const t0 = performance.now()
        yield* engine.sendNotification(o.peer, makeNotification(o.name, o.msg))
        yield* drained(diagnostics, o.peer)
        yield* Console.log(`sent ${o.name} to ${o.peer} in ${(performance.now() - t0).toFixed(1)} ms`)
      })
    ).pipe(failWith("send", o.peer))
).pipe(
  Command.withDescription(
    "Send one notification (NAME, MSG) to the node PEER (a `tent serve` host:port); exit 0 once it is acknowledged."
  )
)
