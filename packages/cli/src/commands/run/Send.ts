/**
 * The body of `tent send` (loaded when the command runs), and `drained`, which `tent transfer` shares.
 *
 * @since 0.1.0
 */
import type { Diagnostics } from "@tent/core"
import { makeNotification } from "@tent/rpc"
import { Console, Effect } from "effect"
import { checkPeer, makeNode } from "../../Node.js"
import type { SendOptions } from "../../Options.js"
import { CliFailure, failWith } from "../../Render.js"

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
      // Waits for the receipt when the peer offers receipts (delivery receipts); otherwise until the notify SEND is
      // acknowledged, and says the delivery is not confirmed.
      const outcome = yield* Effect.either(engine.sendNotificationReceipted(o.peer, makeNotification(o.name, o.msg)))
      const ms = () => (performance.now() - t0).toFixed(1)
      if (outcome._tag === "Right") {
        yield* Console.log(`sent ${o.name} to ${o.peer}: receipted in ${ms()} ms`)
        return
      }
      const e = outcome.left
      if (e._tag !== "Undelivered") return yield* Effect.fail(e)
      if (e.reason !== "Unconfirmed") {
        return yield* Effect.fail(
          new CliFailure(`${o.name} was accepted but not delivered (${e.reason}): ${e.message}`)
        )
      }
      yield* drained(diagnostics, o.peer)
      yield* Console.log(
        `sent ${o.name} to ${o.peer} in ${ms()} ms (the peer offers no delivery receipts: its NIC acknowledged the send; delivery is not confirmed)`
      )
    })
  ).pipe(failWith("send", o.peer))
