/**
 * The notification queues are bounded (`notification/max_queued_bytes`): while nothing consumes, what they hold
 * stays within the bound, and what does not fit is never lost in silence — a receipted notification is not admitted
 * (no receipt owed, its stamp's window untouched), so its sender sends it again and it is delivered once after the
 * consumer starts; a control-plane `Notify` is refused (`NotificationRefused`, `INBOX_FULL`); an unstamped RDMA one is
 * dropped and counted. Engines in this process over SoftVerbs and the real control plane.
 *
 * Negative control: the same traffic with the bound lifted queues past it.
 */
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, type Notification, NotificationRefused, notificationText } from "@tent/rpc"
import { Effect, Either, Metric } from "effect"
import { Series } from "../src/index.js"
import { agent, guarded } from "./fixtures/hostile.js"
import { receive, until } from "./fixtures/policies.js"

const BOUND = 32 * 1024
const COUNT = 200
/** A notification of 4 + 1000 bytes (name + msg). */
const note = (i: number): Notification => makeNotification(`n${String(i).padStart(3, "0")}`, "x".repeat(1000))
const names = (ns: ReadonlyArray<Notification>) => ns.map((n) => notificationText(n).name)

/** The registry's `tent_notify_refused_total{reason="inbox_full"}`. */
const inboxFullMetric = (): number => {
  for (const pair of Metric.unsafeSnapshot()) {
    const key = pair.metricKey
    if (key.name === "tent_notify_refused_total" && key.tags.some((t) => t.value === "inbox_full")) {
      return Number((pair.metricState as { readonly count?: number }).count ?? 0)
    }
  }
  return 0
}

/** Samples `bytes()` every 5 ms for `ms`; the largest value seen. */
const peakOver = (bytes: () => number, ms: number) =>
  Effect.gen(function* () {
    let peak = bytes()
    const end = Date.now() + ms
    while (Date.now() < end) {
      yield* Effect.sleep("5 millis")
      peak = Math.max(peak, bytes())
    }
    return peak
  })

describe("the notification queues are bounded (notification/max_queued_bytes)", { timeout: 120_000 }, () => {
  for (const bounded of [true, false]) {
    it.scopedLive(
      bounded
        ? "receipts: with no consumer the queues stay within the bound, overflow counted; once it starts, every notification is delivered once"
        : "negative control, bound lifted: the same notifications queue past it",
      () =>
        Effect.gen(function* () {
          const c = yield* guarded({ notification: { max_queued_bytes: bounded ? BOUND : 1 << 30 } })
          const a = yield* guarded({ notification: { receipt_resend_ms: 200 } })
          const metricBefore = inboxFullMetric()
          let peak = 0
          for (let i = 0; i < COUNT; i++) {
            yield* a.engine.sendNotification(c.engine.segmentName, note(i))
            peak = Math.max(peak, c.delivery.queuedBytes)
          }
          // Nothing consumes for a while: the RDMA copies arrive, the ledger sends the rest again over the control plane.
          peak = Math.max(peak, yield* peakOver(() => c.delivery.queuedBytes, 1500))
          if (!bounded) {
            console.log(`inbox bound lifted: peak ${peak} B queued (the bound under test: ${BOUND} B)`)
            expect(peak).toBeGreaterThan(BOUND)
            expect(c.delivery.counters.inboxFull).toBe(0)
            return
          }
          expect(peak).toBeLessThanOrEqual(BOUND)
          expect(c.delivery.counters.inboxFull).toBeGreaterThan(0)
          expect(inboxFullMetric() - metricBefore).toBe(c.delivery.counters.inboxFull)
          const refused = c.delivery.counters.inboxFull
          const t0 = Date.now()
          const got = names(yield* receive(c.engine, COUNT, 60_000))
          expect(got.length).toBe(COUNT)
          expect(new Set(got).size).toBe(COUNT)
          expect((yield* receive(c.engine, 1, 1000)).length).toBe(0) // none twice
          yield* until(() => a.ledger.counters.unreceipted === 0)
          expect(a.ledger.counters.unreceipted).toBe(0)
          expect(a.ledger.counters.undeliveredTotal).toBe(0)
          console.log(
            `inbox bound ${BOUND} B, no consumer: peak ${peak} B queued, ${refused} not admitted; after the consumer ` +
              `started: ${got.length} delivered once each in ${Date.now() - t0} ms, ${a.ledger.counters.resent} resent`
          )
        })
    )
  }

  it.scopedLive(
    "an unstamped RDMA notification that does not fit is dropped and counted (TENT's frames, no receipts)",
    () =>
      Effect.gen(function* () {
        const c = yield* guarded({ notification: { max_queued_bytes: BOUND } }, Series.legacy)
        const a = yield* guarded({}, Series.legacy)
        for (let i = 0; i < COUNT; i++) yield* a.engine.sendNotification(c.engine.segmentName, note(i))
        const peak = yield* peakOver(() => c.delivery.queuedBytes, 1000)
        expect(peak).toBeLessThanOrEqual(BOUND)
        const got = names(yield* c.engine.receiveNotifications)
        expect(got.length).toBeGreaterThan(0)
        expect(got.length + c.delivery.counters.inboxFull).toBe(COUNT)
      })
  )

  it.scopedLive(
    "a Notify that does not fit is refused with NotificationRefused (INBOX_FULL), and taken once there is room",
    () =>
      Effect.gen(function* () {
        const c = yield* guarded({ notification: { max_queued_bytes: 1500 } })
        const caller = yield* agent("any", null)
        const to = c.engine.segmentName
        const first = yield* Effect.either(caller.notify(to, note(1)))
        expect(first).toMatchObject({ _tag: "Right" })
        const refused = yield* Effect.either(caller.notify(to, note(2)))
        expect(Either.isLeft(refused) && refused.left instanceof NotificationRefused).toBe(true)
        expect(Either.isLeft(refused) ? refused.left.message : "").toMatch(/^INBOX_FULL/)
        expect(Either.isLeft(refused) && "reason" in refused.left ? refused.left.reason : "").toBe("InboxFull")
        expect(names(yield* c.engine.receiveNotifications)).toEqual(["n001"])
        expect(Either.isRight(yield* Effect.either(caller.notify(to, note(2))))).toBe(true)
        expect(names(yield* c.engine.receiveNotifications)).toEqual(["n002"])
      })
  )
})
