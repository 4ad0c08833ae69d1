/**
 * RFC PR 7 between two RDMA transports on SoftVerbs: A posts a burst to B, B's notify QP is forced to ERR with the
 * burst in flight; A's first failed completion disables its channel (PR 1) and hands the pending table over; the
 * resend walks the NIC pairs (the disabled pair refuses, the next one takes them) with each entry's first stamp, and
 * B's window (PR 6) delivers each notification once. Negative controls: the legacy resend (no pending table) loses
 * what was in flight; a peer at `notify_proto` 0 gets nothing resent (it could not drop a copy).
 */
import { describe, expect, it } from "@effect/vitest"
import { RailHealth } from "@tent/health"
import { makeNotification, notificationText } from "@tent/rpc"
import { Effect, Queue } from "effect"
import { Dedup, NotifyQpParams, QpRetirement, Resend } from "../src/index.js"
import type { RdmaDevice } from "../src/internal/rdma/RdmaContext.js"
import { type Side, twoTransports } from "./fixtures/endpoints.js"

const BURST = 200

/** The paths a resend can take, over transport `A` (no TCP, no control plane here: each fails). */
const pathsOf = (A: Side): Resend.ResendPaths => ({
  nicPairs: () =>
    Effect.succeed(A.devices.flatMap((d) => ["mlx0", "mlx1"].map((peerNic) => ({ localNic: d.name, peerNic })))),
  viaNicPair: (localNic, peerNic, segment, n, stamp) =>
    A.sendVia(A.devices.find((d) => d.name === localNic) as RdmaDevice, segment, peerNic, n, stamp),
  viaTcp: () => Effect.fail(new Error("no TCP transport here")),
  viaControlPlane: () => Effect.fail(new Error("no control plane here"))
})

/** A's burst to B, B's notify QP to ERR with it in flight, then A's hand-over resent; what B got, by name. */
const burstThenError = (options: { readonly resend: Resend.ResendShape; readonly peer: Dedup.DedupShape }) =>
  Effect.gen(function* () {
    const sides = yield* twoTransports(undefined, {
      retirement: QpRetirement.series,
      notifyParams: NotifyQpParams.fromEndpoint,
      resend: options.resend,
      dedup: { A: Dedup.makeSeries(), B: options.peer }
    })
    const { A, B } = sides
    const mlx0 = A.devices[0] as RdmaDevice
    yield* A.sendVia(mlx0, "B", "mlx0", makeNotification("warm", ""), undefined)
    const [epB] = (B.devices[0] as RdmaDevice).store.active.values()
    const qpNum = epB?.notifyQpNum ?? 0
    expect(qpNum).toBeGreaterThan(0)
    for (let i = 0; i < BURST; i++) {
      yield* A.sendVia(mlx0, "B", "mlx0", makeNotification(`n${i}`, ""), undefined)
      if (i === 20) yield* B.control.forceQpError("mlx0", qpNum)
    }
    // the hand-over: A's channel disabled at its first failed completion (PR 2's budget: about half a second)
    const channel = yield* Effect.timeout(Queue.take(A.retiring), "20 seconds").pipe(Effect.option)
    if (channel._tag === "Some") yield* options.resend.onRetire(channel.value, pathsOf(A))
    // bounded: wait until B has everything, or nothing new for a second and 50 turns of this loop (each a turn of
    // the event loop that runs both pollers: after a stall of this process, a second of wall time alone may have
    // passed with no pass of a poller at all)
    let seen = -1
    const deadline = Date.now() + 20_000
    let quiet = Date.now()
    let quietTurns = 0
    const got: Array<string> = []
    while (Date.now() < deadline && (Date.now() - quiet < 1000 || quietTurns < 50) && got.length < BURST + 1) {
      for (const n of B.inbox.drain()) got.push(notificationText(n).name)
      if (got.length !== seen) {
        seen = got.length
        quiet = Date.now()
        quietTurns = 0
      } else quietTurns++
      yield* Effect.sleep("20 millis")
    }
    for (const n of B.inbox.drain()) got.push(notificationText(n).name)
    return { got, handedOver: channel._tag === "Some" ? channel.value.pending.length : 0 }
  })

const expected = ["warm", ...Array.from({ length: BURST }, (_, i) => `n${i}`)]
const counts = (names: ReadonlyArray<string>) => {
  const m = new Map<string, number>()
  for (const n of names) m.set(n, (m.get(n) ?? 0) + 1)
  return m
}

// Above the sum of a test's bounded waits: the hand-over (20 s) and what B receives (20 s).
describe("Resend (RFC PR 7): what a dead notify QP had in flight is resent on another NIC pair", {
  timeout: 90_000
}, () => {
  it.scopedLive("series: every notification arrives once", () =>
    Effect.gen(function* () {
      const rails = yield* RailHealth.make()
      const resend = Resend.makeSeries(rails)
      const { got, handedOver } = yield* burstThenError({ resend, peer: Dedup.makeSeries() })
      console.log(`PR 7: handed over ${handedOver}, ${JSON.stringify(resend.counters)}`)
      expect(handedOver).toBeGreaterThan(0)
      expect(resend.counters?.viaNicPair).toBe(handedOver)
      expect(resend.counters?.failed).toBe(0)
      expect(new Set(got)).toEqual(new Set(expected))
      expect([...counts(got).values()].every((c) => c === 1)).toBe(true)
    })
  )

  it.scopedLive("negative control: the legacy resend loses what was in flight", () =>
    Effect.gen(function* () {
      const { got } = yield* burstThenError({ resend: Resend.legacy, peer: Dedup.makeSeries() })
      expect(got.length).toBeLessThan(expected.length)
    })
  )

  it.scopedLive("a peer at notify_proto 0 (cannot drop a copy) gets nothing resent", () =>
    Effect.gen(function* () {
      const rails = yield* RailHealth.make()
      const resend = Resend.makeSeries(rails)
      const { got, handedOver } = yield* burstThenError({ resend, peer: Dedup.legacy })
      expect(handedOver).toBeGreaterThan(0)
      expect(resend.counters?.notResendable).toBe(handedOver)
      expect(resend.counters?.viaNicPair).toBe(0)
      expect(got.length).toBeLessThan(expected.length)
    })
  )
})
