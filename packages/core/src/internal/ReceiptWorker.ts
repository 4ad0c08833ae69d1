/**
 * The receipts' worker: one ticker fiber for the engine (never a timer per notification; parked while no entry is
 * live, woken by the next `accept`, so an idle engine does no receipt work) that ends overdue entries as
 * `Undelivered{Timeout}` and, per destination, sends again over the control plane's `Notify` every entry that has not
 * been sent yet (accepted while the notify QP could not take it) or has waited `notification/receipt_resend_ms`
 * without a receipt — with its first stamp, so the receiver's admission delivers it at most once. A `Notify` reply is
 * the receipt; a refusal for a stale incarnation ends the old incarnation's entries as `PeerRestarted` (a refusal
 * from the incarnation it was stamped for — full queues — leaves it for the next tick); a peer that
 * does not answer (the `PeerHealth` seam then fails calls at once) keeps every entry for the next tick, until its
 * deadline. One destination's sends run in one fiber at a time; destinations do not wait for each other.
 */
import { DescriptorCache } from "@tent/rpc"
import { Effect, Either, FiberSet, type Scope } from "effect"
import { holdActive } from "./HeldRecord.js"
import { type Destination, EngineReceipts, type Entry, parseIncarnation } from "./Ledger.js"
import { parked } from "./Parked.js"
import { EngineAgent } from "./Services.js"
import { notifyRpc } from "./TcpTransport.js"

/** The first entry of `d` due to be sent now, if any. */
const firstDue = (d: Destination, now: number, resendAfterMs: number): Entry | undefined => {
  const es = d.entries
  for (let i = d.head; i < es.length; i++) {
    const e = es[i] as Entry
    // A held record (transfer-bound, on the data QPs) waits for its markers; unheld only after its fallback.
    if (!e.done && (e.sentAt < 0 || now - e.sentAt >= resendAfterMs) && !holdActive(e.n)) return e
  }
  return undefined
}

/** Starts the worker in the scope (nothing when receipts are off). */
export const start: Effect.Effect<
  void,
  never,
  Scope.Scope | EngineReceipts | EngineAgent | DescriptorCache.DescriptorCache
> = Effect.gen(function* () {
  const ledger = yield* EngineReceipts
  if (!ledger.enabled) return
  const agent = yield* EngineAgent
  const cache = yield* DescriptorCache.DescriptorCache
  const { resendAfterMs } = ledger.settings
  const fork = yield* FiberSet.makeRuntime<never, void, never>()

  const sendDue = (d: Destination): Effect.Effect<void> =>
    Effect.gen(function* () {
      for (let guard = 0; guard < 1_000_000; guard++) {
        const e = firstDue(d, ledger.clock(), resendAfterMs)
        if (e === undefined) return
        e.sentAt = ledger.clock()
        const r = yield* Effect.either(
          notifyRpc(agent, cache, d.segment, { ...e.n, stamp: { session: e.session, seq: e.seq, epoch: e.epoch } })
        )
        if (Either.isRight(r)) {
          ledger.counters.resent++
          ledger.receipted(d, e)
          continue
        }
        const err = r.left
        if (err._tag === "NotificationRefused") {
          const incarnation = parseIncarnation(err.incarnation)
          // Refused for its queues or its session, or by the incarnation it was stamped for (an older peer says
          // full queues that way): not a restart; the next tick retries.
          if (err.reason !== "StaleIncarnation" || (incarnation !== 0n && incarnation === e.epoch)) return
          ledger.onIncarnation(d.segment, incarnation)
          if (!e.done) ledger.fail(d, e, "PeerRestarted", err.message)
          continue
        }
        if (err._tag === "NotificationTooLarge") {
          ledger.fail(d, e, "Rejected", `the peer ${d.segment} refused it: ${err.message}`)
          continue
        }
        // No answer (or no descriptor): the entries stay; the next tick tries again, until their deadline.
        return
      }
    })

  const run = (d: Destination): void => {
    if (d.busy || d.live === 0) return
    d.busy = true
    fork(
      Effect.ensuring(
        sendDue(d),
        Effect.sync(() => {
          d.busy = false
        })
      )
    )
  }
  ledger.kick = run

  const tick = Math.max(10, Math.min(100, Math.floor(resendAfterMs / 2)))
  // While no entry is live the ticker is parked (an idle engine wakes for nothing); the next `accept` wakes it.
  const ticker = parked(
    tick,
    Effect.sync(() => {
      const now = ledger.clock()
      ledger.expire(now)
      for (const d of ledger.destinations.values()) {
        if (d.live > 0 && !d.busy && firstDue(d, now, resendAfterMs) !== undefined) run(d)
      }
    }),
    () => {
      for (const d of ledger.destinations.values()) if (d.live > 0) return false
      // Parked in the same synchronous step that found nothing live: an `accept` after it finds `wake` set.
      ledger.wake = ticker.wake
      return true
    },
    true
  )
  yield* Effect.forkScoped(ticker.loop)
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      ledger.kick = () => {}
      ledger.wake = undefined
    })
  )
})
