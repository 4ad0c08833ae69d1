/**
 * A stamp's session belongs to the segment that sends it (`Dedup.claim`): a peer that has seen A's stamps cannot send
 * C one with A's session and seq 2^64 − 1 and so make A's later notifications to C look old. The delivery point binds
 * each session to the first sender segment that uses it — over RDMA the segment of the endpoint's peer NIC path, over
 * the control plane the segment an authenticated connection proved — whichever transport carries it (the RFC's
 * fallback sends one session's notifications over both).
 *
 * Negative control: the same with the binding swapped out (a `Dedup` without `claim`): A's later notifications are
 * dropped as too old.
 */
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, type Notification, NotificationRefused, notificationText } from "@tent/rpc"
import { Effect, Either, Layer } from "effect"
import { Dedup, Series } from "../src/index.js"
import { Delivery } from "../src/internal/Delivery.js"
import { SessionTable } from "../src/internal/ReplayWindow.js"
import { agent, guarded, withSecret } from "./fixtures/hostile.js"
import { receive } from "./fixtures/policies.js"

const MAX_SEQ = 2n ** 64n - 1n
const A_SESSION = 0x0123_4567_89ab_cdefn
const names = (ns: ReadonlyArray<Notification>) => ns.map((n) => notificationText(n).name)

/** Hands `d` the notification `name` stamped `(session, seq)` as a frame on the notify QP from the NIC path `from`. */
const frameFrom = (d: Delivery, dedup: Dedup.DedupShape, from: string, name: string, session: bigint, seq: bigint) => {
  const buf = Buffer.alloc(256)
  const len = dedup.encode(buf, 0, makeNotification(name, "m"), { session, seq }, 1)
  const frame = new Dedup.DecodedFrame()
  expect(dedup.decode(buf, 0, len, frame)).toBe(0)
  return d.fromFrame("rdma", from, buf, frame)
}

describe("a stamp's session belongs to the segment that sends it", () => {
  for (const bound of [true, false]) {
    it(`${bound ? "bound" : "negative control, binding swapped out"}: a forged stamp with A's session and seq 2^64-1 from B ${bound ? "is refused; A's later notifications arrive once each" : "makes A's later notifications too old"}`, () => {
      const series = Dedup.makeSeries()
      const dedup = bound ? series : { ...series, claim: undefined }
      const d = new Delivery(dedup)
      // A's first notifications, over RDMA from two of its NICs and over the control plane (authenticated as A).
      expect(frameFrom(d, dedup, "a:1@mlx0", "a1", A_SESSION, 1n)).toBe(true)
      expect(frameFrom(d, dedup, "a:1@mlx1", "a2", A_SESSION, 2n)).toBe(true)
      expect(d.fromNotify("a:1", { ...makeNotification("a3", "m"), stamp: { session: A_SESSION, seq: 3n } })).toBe(true)
      // B forges: over RDMA from its own endpoint, and over the control plane authenticated as itself.
      const overRdma = frameFrom(d, dedup, "b:2@mlx0", "forged", A_SESSION, MAX_SEQ)
      const overRpc = d.fromNotify("b:2", {
        ...makeNotification("forged", "m"),
        stamp: { session: A_SESSION, seq: 9n }
      })
      // A goes on, over both transports.
      const later = [
        frameFrom(d, dedup, "a:1@mlx0", "a4", A_SESSION, 4n),
        d.fromNotify("a:1", { ...makeNotification("a5", "m"), stamp: { session: A_SESSION, seq: 5n } }),
        frameFrom(d, dedup, "a:1@mlx1", "a6", A_SESSION, 6n),
        frameFrom(d, dedup, "a:1@mlx1", "a6", A_SESSION, 6n) // a copy: dropped
      ]
      const got = names(d.drain(["rdma", "tcp"]))
      if (bound) {
        expect([overRdma, overRpc]).toEqual([false, false])
        expect(later).toEqual([true, true, true, false])
        expect(got.sort()).toEqual(["a1", "a2", "a3", "a4", "a5", "a6"])
        expect(series.counters?.foreign).toBe(2)
      } else {
        expect(overRdma).toBe(true)
        expect(later.filter((x) => x).length).toBeLessThan(3)
        expect(got).toContain("forged")
      }
    })
  }

  it("a refused stamp moves nothing: no window, no binding; an unknown sender (rpc#N) neither binds nor is checked", () => {
    const table = new SessionTable()
    expect(table.claim(7n, "a:1@mlx0", 3)).toBe(true)
    expect(table.admit(7n, 10n)).toBe(true)
    expect(table.claim(7n, "b:2", 3)).toBe(false)
    expect(table.ownerOf(7n)).toBe("a:1")
    expect(table.admit(7n, 9n)).toBe(true) // the window did not move past 10
    // A prefix of the owner's name, or a longer name that starts with it, is another segment.
    expect(table.claim(7n, "a:12@mlx0", 4)).toBe(false)
    expect(table.claim(7n, "a:", 2)).toBe(false)
    expect(table.claim(7n, "a:1", 3)).toBe(true)
    // A connection that proved an empty name names no segment.
    expect(table.claim(8n, "", 0)).toBe(false)
    const d = new Delivery(Dedup.makeSeries())
    expect(d.fromNotify("rpc#4", { ...makeNotification("x", "m"), stamp: { session: 9n, seq: 1n } })).toBe(true)
    expect(d.fromNotify("c:3", { ...makeNotification("y", "m"), stamp: { session: 9n, seq: 2n } })).toBe(true)
    expect(d.fromNotify("d:4", { ...makeNotification("z", "m"), stamp: { session: 9n, seq: 3n } })).toBe(false)
  })

  it("the binding lives as long as the session's window: bounded by dedup_max_sessions, forgotten with it", () => {
    const table = new SessionTable({ maxSessions: 4 })
    for (let s = 1n; s <= 100n; s++) expect(table.claim(s, `p${s}:1`, `p${s}:1`.length)).toBe(true)
    expect(table.counters.sessions).toBe(4)
    expect(table.ownerOf(1n)).toBeUndefined()
    expect(table.ownerOf(100n)).toBe("p100:1")
  })
})

describe("engines with the control plane's secret (x-tent-peer), receipts on", { timeout: 120_000 }, () => {
  for (const bound of [true, false]) {
    it.scopedLive(
      `${bound ? "A's session is bound to A" : "negative control, binding swapped out"}: after B's forged stamp (seq 2^64-1) A's later notifications over RDMA and the control plane ${bound ? "arrive once each" : "do not arrive"}`,
      () =>
        Effect.gen(function* () {
          const noBinding = Layer.succeed(Dedup.Dedup, { ...Dedup.makeSeries(), claim: undefined })
          const c = yield* guarded(withSecret({}), bound ? Series.all : Layer.merge(Series.all, noBinding))
          const a = yield* guarded(withSecret({ notification: { receipt_resend_ms: 200 } }))
          const cName = c.engine.segmentName
          for (let i = 0; i < 5; i++) yield* a.engine.sendNotification(cName, makeNotification(`a${i}`, "m"))
          expect(names(yield* receive(c.engine, 5))).toEqual(["a0", "a1", "a2", "a3", "a4"])
          // B has seen A's stamps; it proves the secret under its own name and sends C one with A's session.
          const b = yield* agent("b.example:1")
          const forged = yield* Effect.either(
            b.notify(cName, {
              ...makeNotification("forged", "m"),
              stamp: { session: a.ledger.session as bigint, seq: MAX_SEQ, epoch: c.ledger.incarnation }
            })
          )
          // A goes on: 5 over its notify QP, then 5 over the control plane (its notify channel disabled: the fallback).
          for (let i = 5; i < 10; i++) yield* a.engine.sendNotification(cName, makeNotification(`a${i}`, "m"))
          yield* a.diag.disableNotify(cName)
          for (let i = 10; i < 15; i++) yield* a.engine.sendNotification(cName, makeNotification(`a${i}`, "m"))
          const got = names(yield* receive(c.engine, 10, bound ? 20_000 : 3000))
          if (bound) {
            expect(got).toEqual(Array.from({ length: 10 }, (_, i) => `a${i + 5}`))
            expect((yield* receive(c.engine, 1, 500)).length).toBe(0) // and none twice
            expect(a.ledger.counters.undeliveredTotal).toBe(0)
            expect(Either.isLeft(forged) && forged.left instanceof NotificationRefused).toBe(true)
            expect(String(Either.isLeft(forged) ? forged.left.message : "")).toMatch(/^FOREIGN_SESSION/)
          } else {
            expect(Either.isRight(forged)).toBe(true)
            expect(got.filter((n) => n.startsWith("a"))).toEqual([])
          }
        })
    )
  }
})
