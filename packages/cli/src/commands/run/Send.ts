/**
 * The body of `tent send` (loaded when the command runs), and `drained`, which `tent transfer` shares.
 *
 * @since 0.1.0
 */
import type { Diagnostics } from "@tent/core"
import { makeNotification } from "@tent/rpc"
import { Console, Effect } from "effect"
import { checkPeer, makeNode } from "../../Node.js"
import { CliFailure, failWith } from "../../Render.js"
import type { SendOptions } from "../Send.js"

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

export const run = (o: SendOptions) =>
  Effect.scoped(
    Effect.gen(function* () {
      yield* checkPeer(o, o.peer)
      const { engine, diagnostics } = yield* makeNode(o)
      const t0 = performance.now()
      yield* engine.sendNotification(o.peer, makeNotification(o.name, o.msg))
      yield* drained(diagnostics, o.peer)
      yield* Console.log(`sent ${o.name} to ${o.peer} in ${(performance.now() - t0).toFixed(1)} ms`)
    })
  ).pipe(failWith("send", o.peer))
