/**
 * Delivery receipts (`Series.Receipts`): every notification `sendNotification` accepted for a peer that offers them
 * ends receipted or as an `Undelivered` event. The ledger's rules on their own, then two engines in this process
 * (receipted, acks paced), then a peer in a child process that restarts (`PeerRestarted`) or freezes (`Timeout`).
 * Negative controls: the same tests with the RFC's seven alone (`Series.rfc`, the receipts' legacy twin) go red —
 * there the freeze and the restart lose accepted notifications with no word to the sender.
 */
import { createServer } from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { RailHealth } from "@tent/health"
import { makeNotification, type Notification } from "@tent/rpc"
import { Context, Effect, Layer, Stream } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { Diagnostics, Receipts, Resend, Series, TransferEngine } from "../src/index.js"
import { EngineReceipts, Ledger } from "../src/internal/Ledger.js"
import { fixture, spawnChild } from "./fixtures/child.js"
import { engineLayer, payload } from "./fixtures/engine.js"
import { PEER_READY_MS, request } from "./fixtures/pair.js"
import { until } from "./fixtures/policies.js"

const n = (i: number): Notification => makeNotification(`k${i}`, "m")

describe("the ledger", () => {
  const ledger = (settings: Partial<Omit<Receipts.ReceiptsShape, "enabled" | "incarnation">> = {}) => {
    let now = 0
    const l = new Ledger({ ...Receipts.make(settings) }, 7n, undefined, () => now)
    const at = (t: number): void => {
      now = t
    }
    return { l, at }
  }

  it("draws dense seqs per destination, for the destination's incarnation, and a cumulative ack receipts them", () => {
    const { l } = ledger()
    l.onIncarnation("B", 42n)
    const s1 = l.accept("B", n(1), true)
    const s2 = l.accept("B", n(2), true)
    const c1 = l.accept("C", n(3), true)
    expect([s1?.seq, s2?.seq, c1?.seq]).toEqual([1n, 2n, 1n])
    expect(s1?.epoch).toBe(42n)
    l.onAck("B", 7n, 42n, 1n)
    expect(l.destination("B").live).toBe(1)
    l.onAck("B", 8n, 42n, 2n) // another session's ack: ignored
    l.onAck("B", 7n, 41n, 2n) // another incarnation's ack: ignored
    expect(l.counters.acksStale).toBe(2)
    l.onAck("B", 7n, 42n, 2n)
    expect(l.destination("B").live).toBe(0)
    expect(l.counters.receipted).toBe(2)
  })

  it("gives back a stamp whose post failed at once, so no gap is left in the seqs", () => {
    const { l } = ledger()
    l.onIncarnation("B", 1n)
    l.accept("B", n(1), true)
    const s2 = l.accept("B", n(2), true)
    l.rollback("B", s2 as never)
    expect(l.accept("B", n(3), true)?.seq).toBe(2n)
  })

  it("ends what a restarted peer's old incarnation held as PeerRestarted, at once, and starts its seqs over", () => {
    const { l } = ledger()
    const got: Array<Receipts.Undelivered> = []
    l.onUndelivered((u) => got.push(u))
    l.onIncarnation("B", 1n)
    for (let i = 0; i < 5; i++) l.accept("B", n(i), true)
    l.onAck("B", 7n, 1n, 2n)
    l.onIncarnation("B", 2n)
    expect(got.map((u) => u.reason)).toEqual(["PeerRestarted", "PeerRestarted", "PeerRestarted"])
    expect(got.map((u) => u.stamp?.seq)).toEqual([3n, 4n, 5n])
    expect(l.counters.undeliveredTotal).toBe(3)
    expect(l.counters.unreceipted).toBe(0)
    expect(l.accept("B", n(9), true)).toMatchObject({ session: 7n, seq: 1n, epoch: 2n })
  })

  it("ends an entry as Timeout once its deadline passed, not before", () => {
    const { l, at } = ledger({ deliveryTimeoutMs: 1000 })
    l.onIncarnation("B", 1n)
    at(0)
    l.accept("B", n(1), true)
    at(500)
    l.accept("B", n(2), true)
    expect(l.expire(999)).toBe(0)
    expect(l.expire(1000)).toBe(1)
    expect(l.expire(1499)).toBe(0)
    expect(l.expire(1500)).toBe(1)
    expect(l.counters.undelivered.Timeout).toBe(2)
  })

  it("refuses to accept past notification/max_unreceipted", () => {
    const { l } = ledger({ maxUnreceipted: 2 })
    l.onIncarnation("B", 1n)
    expect(l.accept("B", n(1), true)).toBeDefined()
    expect(l.accept("B", n(2), true)).toBeDefined()
    expect(l.accept("B", n(3), true)).toBeUndefined()
  })

  it("receiver: the cumulative ack is the highest seq below which every seq was admitted", () => {
    const { l } = ledger()
    for (const s of [1n, 2n, 4n, 5n]) l.admitted(9n, s)
    expect(l.prefix(9n)).toBe(2n)
    expect(l.delivered(9n, 4n)).toBe(true)
    expect(l.delivered(9n, 3n)).toBe(false)
    l.admitted(9n, 3n)
    expect(l.prefix(9n)).toBe(5n)
    expect(l.epochState(l.incarnation)).toBe(Ledger.THIS)
    expect(l.epochState(0n)).toBe(Ledger.NO_EPOCH)
    expect(l.epochState(l.incarnation + 1n)).toBe(Ledger.OTHER)
    const lo = Number(l.incarnation & 0xffffffffn)
    const hi = Number(l.incarnation >> 32n)
    expect(l.epochStateWords(lo, hi)).toBe(Ledger.THIS)
    expect(l.epochStateWords(0, 0)).toBe(Ledger.NO_EPOCH)
    expect(l.epochStateWords(lo ^ 1, hi)).toBe(Ledger.OTHER)
  })
})

/** An engine in this process with `series`. */
const inProcess = (json: unknown, series: Layer.Layer<Series.Policies, ConfigError>) =>
  Effect.map(Layer.build(engineLayer(json, undefined, series)), (ctx) => ({
    engine: Context.get(ctx, TransferEngine.TransferEngine),
    diag: Context.get(ctx, Diagnostics.Diagnostics)
  }))

describe("two engines in this process", () => {
  it.scopedLive("a notification the peer refuses is Rejected (red with Series.rfc: the call fails instead)", () =>
    Effect.gen(function* () {
      const a = yield* inProcess({}, Series.all)
      const b = yield* inProcess({ rpc: { max_notify_bytes: 100_000 } }, Series.all)
      yield* a.engine.sendNotification(b.engine.segmentName, n(0))
      // Larger than a notify slot: the ledger's worker carries it with a Notify, which the peer refuses.
      const big = makeNotification("big", new Uint8Array(150_000))
      const r = yield* Effect.flip(a.engine.sendNotificationReceipted(b.engine.segmentName, big))
      expect(r._tag).toBe("Undelivered")
      expect((r as Receipts.Undelivered).reason).toBe("Rejected")
      expect(a.diag.counters.receipts?.undelivered.Rejected).toBe(1)
    })
  )

  it.scopedLive("every notification is receipted; acks are paced (red with Series.rfc: no receipts)", () =>
    Effect.gen(function* () {
      const a = yield* inProcess({}, Series.all)
      const b = yield* inProcess({}, Series.all)
      const total = 2000
      for (let i = 0; i < total; i++) yield* a.engine.sendNotification(b.engine.segmentName, payload("r", i))
      const ra = a.diag.counters.receipts
      expect(ra, "the sender keeps a ledger").toBeDefined()
      yield* until(() => (ra?.receipted ?? 0) >= total)
      expect(ra?.accepted).toBe(total)
      expect(ra?.receipted).toBe(total)
      // Those larger than a slot went over the control plane, by the ledger's worker.
      expect((a.diag.counters.rdma?.sent ?? 0) + (ra?.resent ?? 0)).toBe(total)
      const acks = b.diag.counters.receipts?.acksSent ?? 0
      expect(acks).toBeGreaterThan(0)
      // A one-way stream is acknowledged every 32 notifications or 1 ms: far fewer acks than notifications.
      expect(acks).toBeLessThan(total / 4)
      expect(b.diag.counters.rdma?.malformed).toBe(0)
      expect(a.diag.counters.rdma?.malformed).toBe(0)
    })
  )

  it.scopedLive(
    "a receipt owed rides the next notification to that peer: a ping-pong sends no CTRL_ACK of its own (red without notify_ack_carry)",
    () =>
      Effect.gen(function* () {
        // A pings, B echoes from its subscriber; each with its own policies.
        const pingPong = (seriesA: Layer.Layer<Series.Policies, ConfigError>, seriesB = seriesA) =>
          Effect.gen(function* () {
            const a = yield* inProcess({}, seriesA)
            const b = yield* inProcess({}, seriesB)
            // Both endpoints connected first (the echo must post at once, from the handler).
            yield* a.engine.sendNotification(b.engine.segmentName, n(-1))
            yield* b.engine.sendNotification(a.engine.segmentName, n(-2))
            const got = (e: typeof a) => e.diag.counters.rdma?.received ?? 0
            expect(yield* until(() => got(a) >= 1 && got(b) >= 1, 5_000)).toBe(true)
            yield* b.engine.subscribe((m) => {
              if (!b.engine.trySendNotification(a.engine.segmentName, m)) throw new Error("echo not posted at once")
            })
            let echoes = 0
            yield* a.engine.subscribe(() => {
              echoes++
            })
            const rounds = 200
            for (let i = 0; i < rounds; i++) {
              yield* a.engine.sendNotification(b.engine.segmentName, n(i))
              const want = i + 1
              yield* until(() => echoes >= want, 5_000)
              expect(echoes).toBe(want)
            }
            const [ra, rb] = [a.diag.counters.receipts, b.diag.counters.receipts]
            yield* until(() => ra?.receipted === rounds + 1 && rb?.receipted === rounds + 1)
            expect({ a: ra?.receipted, b: rb?.receipted }).toEqual({ a: rounds + 1, b: rounds + 1 })
            expect(a.diag.counters.rdma?.malformed).toBe(0)
            expect(b.diag.counters.rdma?.malformed).toBe(0)
            return { a: ra, b: rb }
          })
        const carried = yield* pingPong(Series.all)
        console.log(
          `200 ping-pongs: B sent ${carried.b?.acksSent} acks (${carried.b?.acksCarried} carried by its echoes), ` +
            `A ${carried.a?.acksSent} (${carried.a?.acksCarried} carried by its pings)`
        )
        // Each echo, sent from B's subscriber, carries B's ack of its ping. (A's ack of an echo goes alone: its next
        // ping leaves after this loop's 20 ms poll, later than the 1 ms an ack waits.)
        expect(carried.b?.acksCarried).toBeGreaterThanOrEqual(190)
        // The control: A's receipts are never carried (as before 0.4.0), so A does not offer `notify_ack_carry` and B,
        // which would carry, sends every ack alone.
        const noCarry = Layer.merge(Series.all, Layer.succeed(Receipts.Receipts, Receipts.make({ carryAcks: false })))
        const alone = yield* pingPong(noCarry, Series.all)
        expect(alone.b?.acksCarried).toBe(0)
        expect(alone.b?.acksSent).toBeGreaterThanOrEqual(150)
      }),
    60_000
  )

  it.scopedLive(
    "an idle engine's receipt ticker parks; the next notification wakes it, and an unreceipted one is still resent",
    () =>
      Effect.gen(function* () {
        const ctx = yield* Layer.build(engineLayer({ notification: { receipt_resend_ms: 200 } }, undefined, Series.all))
        const a = {
          engine: Context.get(ctx, TransferEngine.TransferEngine),
          diag: Context.get(ctx, Diagnostics.Diagnostics)
        }
        const ledger = Context.unsafeGet(ctx, EngineReceipts)
        const b = yield* inProcess({}, Series.all)
        yield* a.engine.sendNotification(b.engine.segmentName, n(0))
        const ra = a.diag.counters.receipts
        yield* until(() => (ra?.receipted ?? 0) >= 1)
        // Nothing live: within a tick or two (100 ms each) the ticker parks, and an idle engine wakes for nothing.
        yield* until(() => ledger.parked, 2_000)
        expect(ledger.parked).toBe(true)
        // B's poller stopped: n(1) lands in B's NIC and is not acknowledged. Its accept wakes the ticker, which sends
        // it again over the control plane after 200 ms; that reply is its receipt.
        yield* b.diag.pauseNotifyPoller(true)
        yield* a.engine.sendNotification(b.engine.segmentName, n(1))
        expect(ledger.parked).toBe(false)
        yield* until(() => (ra?.receipted ?? 0) >= 2, 10_000)
        expect(ra?.receipted).toBe(2)
        expect(ra?.resent).toBeGreaterThanOrEqual(1)
        yield* b.diag.pauseNotifyPoller(false)
      })
  )

  it.scopedLive(
    "sendNotificationReceipted succeeds once receipted; to a peer without receipts it fails Unconfirmed",
    () =>
      Effect.gen(function* () {
        const a = yield* inProcess({}, Series.all)
        const b = yield* inProcess({}, Series.all)
        const c = yield* inProcess({}, Series.rfc)
        yield* a.engine.sendNotification(b.engine.segmentName, n(0))
        yield* a.engine.sendNotificationReceipted(b.engine.segmentName, n(1))
        yield* a.engine.sendNotification(c.engine.segmentName, n(2))
        const r = yield* Effect.flip(a.engine.sendNotificationReceipted(c.engine.segmentName, n(3)))
        expect(r._tag).toBe("Undelivered")
        expect((r as Receipts.Undelivered).reason).toBe("Unconfirmed")
        // c got both: it was sent, just not confirmed.
        expect(yield* Effect.promise(() => waitCount(c.engine, 2))).toBe(2)
      })
  )
})

const waitCount = async (e: TransferEngine.TransferEngineShape, want: number, ms = 20_000): Promise<number> => {
  let got = 0
  const deadline = Date.now() + ms
  while (got < want && Date.now() < deadline) {
    got += (await Effect.runPromise(e.receiveNotifications)).length
    if (got < want) await new Promise((r) => setTimeout(r, 20))
  }
  return got
}

/** A free TCP port on 127.0.0.1 (the restarted peer binds the same one). */
const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = createServer()
    s.once("error", reject)
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })

/** Short control-plane timeouts so a frozen or dead peer shows within a test's time. */
const fastFaults = {
  rpc: { notify_timeout_ms: 1500, request_timeout_ms: 1500, connect_timeout_ms: 1500, bootstrap_timeout_ms: 1500 },
  notification: { receipt_resend_ms: 300 }
}

type ArmName = "all" | "rfc"
const armOf = (name: ArmName) => (name === "all" ? Series.all : Series.rfc)

/**
 * The sender's view of one fault: calls that returned ok, the receipts and `Undelivered` events, and what every
 * incarnation of the receiver admitted (by name).
 */
const outcome = (
  ok: number,
  a: { diag: Diagnostics.DiagnosticsShape },
  events: ReadonlyArray<Receipts.Undelivered>
) => {
  const r = a.diag.counters.receipts
  return { ok, receipted: r?.receipted ?? 0, undelivered: events.length, reasons: events.map((u) => u.reason) }
}

describe("the RDMA path comes back", () => {
  it.scopedLive(
    "a disabled notify channel is rebuilt at the next send and notifications return to RDMA (red with Series.rfc: they stay on TCP)",
    () =>
      Effect.gen(function* () {
        const a = yield* inProcess({}, Series.all)
        const b = yield* inProcess({}, Series.all)
        const to = b.engine.segmentName
        for (let i = 0; i < 50; i++) yield* a.engine.sendNotification(to, payload("p", i))
        expect(yield* a.diag.disableNotify(to)).toBeGreaterThan(0)
        const sentBefore = a.diag.counters.rdma?.sent ?? 0
        for (let i = 50; i < 250; i++) yield* a.engine.sendNotification(to, payload("p", i))
        expect(yield* Effect.promise(() => waitCount(b.engine, 250))).toBe(250)
        expect(a.diag.counters.rdma?.rebuilt).toBeGreaterThanOrEqual(1)
        // at most a few went another way while the channel was rebuilt
        expect((a.diag.counters.rdma?.sent ?? 0) - sentBefore).toBeGreaterThanOrEqual(180)
      })
  )

  it.scopedLive(
    "what the disabled channel had in flight goes first on the rebuilt one, at once (red without: it waits out receipt_resend_ms)",
    () =>
      Effect.gen(function* () {
        // The ledger's own resend is a minute away: within this test only the rebuilt channel can carry what was lost.
        const a = yield* inProcess(
          { notification: { receipt_resend_ms: 60_000, delivery_timeout_ms: 120_000 } },
          Series.all
        )
        const b = yield* inProcess({}, Series.all)
        const to = b.engine.segmentName
        yield* a.engine.sendNotification(to, payload("q", 0))
        expect(yield* Effect.promise(() => waitCount(b.engine, 1))).toBe(1)
        // A burst, and the channel disabled in the same turn of the event loop: its QP is reset at the next send
        // (the rebuild) with SENDs of the burst not yet on the wire.
        for (let i = 1; i < 200; i++) yield* a.engine.sendNotification(to, payload("q", i))
        const unreceipted = a.diag.counters.receipts?.unreceipted ?? 0
        expect(yield* a.diag.disableNotify(to)).toBeGreaterThan(0)
        for (let i = 200; i < 250; i++) yield* a.engine.sendNotification(to, payload("q", i))
        // Without it, what the reset QP never sent (most of the burst) waits out the ledger's minute: 10 s is far
        // short of that, and far more than the rebuilt channel takes.
        expect(yield* Effect.promise(() => waitCount(b.engine, 249, 10_000))).toBe(249)
        const r = a.diag.counters.receipts
        yield* until(() => (r?.receipted ?? 0) >= 250, 10_000)
        expect(r?.receipted).toBe(250)
        expect(unreceipted, "the burst was in flight when the channel was disabled").toBeGreaterThan(0)
        expect(a.diag.counters.rdma?.rebuiltResent).toBeGreaterThanOrEqual(1)
        // Each once: the copies the peer had already are dropped by its ack table.
        expect((yield* b.engine.receiveNotifications).length).toBe(0)
      })
  )
})

describe("the reasons of the RFC's resend, reported (peers without receipts)", () => {
  const channel = (pending: ReadonlyArray<Resend.PendingNotification>): Resend.RetiringChannel => ({
    segment: "C",
    localNic: "mlx0",
    peerNicPath: "C@mlx0",
    cause: "disable",
    pending
  })
  const failing: Resend.ResendPaths = {
    nicPairs: () => Effect.succeed([{ localNic: "mlx0", peerNic: "mlx0" }]),
    viaNicPair: () => Effect.fail("down"),
    viaTcp: () => Effect.fail("down"),
    viaControlPlane: () => Effect.fail("down")
  }
  const given = (resend: Resend.ResendShape) =>
    Effect.gen(function* () {
      const l = new Ledger(Receipts.make(), 7n, undefined)
      const got: Array<Receipts.UndeliveredReason> = []
      l.onUndelivered((u) => got.push(u.reason))
      const paths: Resend.ResendPaths = {
        ...failing,
        giveUp: (segment, p, reason) => l.reportGiveUp(segment, p.notification, p.stamp, reason)
      }
      yield* resend.onRetire(
        channel([
          { notification: n(1), stamp: { session: 7n, seq: 1n }, peerProto: 1 },
          { notification: n(2), stamp: undefined, peerProto: 0 }
        ]),
        paths
      )
      return got
    })

  it.effect(
    "a stamped entry no path took is Unconfirmed, an unstamped one NotResendable (red with Resend.legacy)",
    () =>
      Effect.gen(function* () {
        const resend = Resend.makeSeries(yield* RailHealth.make())
        expect(yield* given(resend)).toEqual(["Unconfirmed", "NotResendable"])
      })
  )

  it.effect("the legacy resend gives nothing up, and says nothing (the negative control's outcome)", () =>
    Effect.gen(function* () {
      expect(yield* given(Resend.legacy)).toEqual([])
    })
  )
})

describe("a peer in another process", () => {
  it.scopedLive(
    "restarts on the same address: nothing for the old incarnation reaches the new one, and each is PeerRestarted (red with Series.rfc: lost in silence)",
    () => runRestart("all"),
    PEER_READY_MS * 2 + 90_000
  )

  it.scopedLive(
    "host frozen past the delivery timeout: each unreceipted notification becomes Timeout, no call blocks (red with Series.rfc)",
    () => runFreeze("all"),
    PEER_READY_MS + 90_000
  )
})

/** The receiver restarts while 30 accepted notifications sit unpolled in its old process. */
export const runRestart = (arm: ArmName) =>
  Effect.gen(function* () {
    const port = yield* Effect.promise(freePort)
    const peerJson = JSON.stringify({ rpc_server_port: port, ...fastFaults })
    const first = yield* spawnChild<{ segment: string }>(fixture("engine-peer.ts"), [peerJson, "all"])
    const target = first.ready.segment
    const a = yield* inProcess(
      // The deadline is within the wait below, so every accepted notification has ended when the counts are taken.
      { ...fastFaults, notification: { ...fastFaults.notification, delivery_timeout_ms: 15_000 } },
      armOf(arm)
    )
    const events: Array<Receipts.Undelivered> = []
    yield* a.engine.onUndelivered((u) => events.push(u))
    let ok = 0
    for (let i = 0; i < 20; i++)
      if ((yield* Effect.either(a.engine.sendNotification(target, payload("a", i))))._tag === "Right") ok++
    // The old process stops polling: what it gets now stays in its completion queue, never delivered.
    yield* request(first, { cmd: "pause", paused: true })
    for (let i = 0; i < 30; i++)
      if ((yield* Effect.either(a.engine.sendNotification(target, payload("b", i))))._tag === "Right") ok++
    first.signal("SIGKILL")
    yield* Effect.sleep("300 millis")
    const second = yield* spawnChild<{ segment: string }>(fixture("engine-peer.ts"), [peerJson, "all"])
    expect(second.ready.segment).toBe(target)
    let slowest = 0
    for (let i = 0; i < 10; i++) {
      const t0 = performance.now()
      if ((yield* Effect.either(a.engine.sendNotification(target, payload("c", i))))._tag === "Right") ok++
      slowest = Math.max(slowest, performance.now() - t0)
      yield* Effect.sleep("50 millis")
    }
    const r = a.diag.counters.receipts
    yield* until(() => r !== undefined && r.receipted + events.length >= ok, 40_000)
    const seen = yield* request<{ count: number; distinct: number; duplicates: number }>(second, {
      cmd: "received",
      prefix: "b"
    })
    const got = outcome(ok, a, events)
    expect(seen.count, "nothing stamped for the old incarnation is delivered to the new one").toBe(0)
    const text = new TextDecoder()
    const unpolled = events.filter((u) => text.decode(u.name).startsWith("b"))
    expect(unpolled.length, "every notification the old process took unpolled is reported").toBe(30)
    expect(unpolled.every((u) => u.reason === "PeerRestarted")).toBe(true)
    // Those sent around the restart end PeerRestarted (stamped before the new incarnation was known) or, at worst,
    // Timeout: never in silence.
    expect(got.reasons.every((x) => x === "PeerRestarted" || x === "Timeout")).toBe(true)
    expect(got.receipted + got.undelivered, "silent = ok - receipted - undelivered = 0").toBe(ok)
    // Upper bound with a wide margin: the call returns once accepted (the rule: never a control-plane timeout).
    expect(slowest).toBeLessThan(5000)
  })

/** The receiver's host freezes (SIGSTOP, its soft NICs too) for longer than the delivery timeout. */
export const runFreeze = (arm: ArmName) =>
  Effect.gen(function* () {
    const peer = yield* spawnChild<{ segment: string }>(fixture("engine-peer.ts"), [JSON.stringify(fastFaults), "all"])
    const target = peer.ready.segment
    const timeoutMs = 4000
    const a = yield* inProcess(
      { ...fastFaults, notification: { ...fastFaults.notification, delivery_timeout_ms: timeoutMs } },
      armOf(arm)
    )
    const events: Array<Receipts.Undelivered> = []
    yield* a.engine.onUndelivered((u) => events.push(u))
    const stream = yield* Stream.runCollect(Stream.take(a.engine.undelivered, 1)).pipe(Effect.fork)
    let ok = 0
    for (let i = 0; i < 10; i++)
      if ((yield* Effect.either(a.engine.sendNotification(target, payload("w", i))))._tag === "Right") ok++
    const r = a.diag.counters.receipts
    yield* until(() => r !== undefined && r.receipted >= 10)
    peer.signal("SIGSTOP")
    const frozenAt = performance.now()
    let slowest = 0
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now()
      if ((yield* Effect.either(a.engine.sendNotification(target, payload("f", i))))._tag === "Right") ok++
      slowest = Math.max(slowest, performance.now() - t0)
      yield* Effect.sleep("50 millis")
    }
    yield* until(() => r !== undefined && r.receipted + events.length >= ok, 30_000)
    const lastAt = performance.now()
    peer.signal("SIGCONT")
    const got = outcome(ok, a, events)
    expect(got.undelivered, "the frozen host's notifications are reported").toBeGreaterThan(0)
    expect(got.reasons.every((x) => x === "Timeout")).toBe(true)
    expect(got.receipted + got.undelivered, "silent = ok - receipted - undelivered = 0").toBe(ok)
    // Not before the deadline (a lower bound: the rule says "not before").
    expect(lastAt - frozenAt).toBeGreaterThanOrEqual(timeoutMs)
    expect(slowest).toBeLessThan(5000)
    const first = yield* Effect.map(stream.await, (e) => e)
    expect(first._tag).toBe("Success")
  })
