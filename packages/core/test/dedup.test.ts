/**
 * RFC PR 6 through the notify QP and the delivery point: `Dedup.makeSeries` advertises `notify_proto` 1, frames
 * notifications to a peer that advertised it as `CtrlFrame` v1 stamped `(session, seq)`, sends TENT's raw bytes to a
 * peer at 0, and admits every received notification through one per-sender-session window, so a copy is dropped
 * whichever transport carried it. Negative controls: the same runs with the receiver's admission swapped for the
 * legacy twin's (`admit: () => true`) deliver the copy.
 */
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, type Notification, notificationText } from "@tent/rpc"
import { Effect } from "effect"
import { CtrlFrame, Dedup } from "../src/index.js"
import * as Delivery from "../src/internal/Delivery.js"
import { NOTIFY_SLOT_BYTES } from "../src/internal/NotifyChannel.js"
import type { RdmaDevice } from "../src/internal/rdma/RdmaContext.js"
import { type Side, twoTransports } from "./fixtures/endpoints.js"
import { bySize, engine, openReceiver, rdmaOnly, receive, series } from "./fixtures/policies.js"

/**
 * Waits (at most 20 s of wall time) until `side`'s poller has taken all `frames` sent to it (delivered, dropped as
 * duplicates or as malformed) and its inbox holds `n`, then takes them: once every frame was polled, no copy can
 * still come, whatever the machine's load.
 */
const take = (side: Side, n: number, frames = n) =>
  Effect.gen(function* () {
    const polled = () => side.counters.received + side.counters.duplicates + side.counters.malformed
    const deadline = Date.now() + 20_000
    while ((polled() < frames || side.inbox.size < n) && Date.now() < deadline) yield* Effect.sleep("10 millis")
    return side.inbox.drain()
  })

const texts = (ns: ReadonlyArray<Notification>) => ns.map((n) => notificationText(n).name)

/** The legacy twin's admission on the series' framing: decodes typed frames, delivers every copy. */
const admitAll = (): Dedup.DedupShape => ({ ...Dedup.makeSeries(), admit: () => true })

describe("Dedup (RFC PR 6) on the notify QP", () => {
  it.scopedLive("series to series: typed frames; the same stamp sent twice is delivered once", () =>
    Effect.gen(function* () {
      const A = Dedup.makeSeries()
      const B = Dedup.makeSeries()
      const sides = yield* twoTransports(undefined, { dedup: { A, B } })
      const mlx0 = sides.A.devices[0] as RdmaDevice
      yield* sides.A.sendVia(mlx0, "B", "mlx0", makeNotification("first", "x"), undefined)
      const stamp = A.stamp(1)
      expect(stamp).toBeDefined()
      const n = makeNotification("resent", "x")
      yield* sides.A.sendVia(mlx0, "B", "mlx0", n, stamp)
      // the copy crosses another NIC pair (a new endpoint), as PR 7's resend would send it
      yield* sides.A.sendVia(sides.A.devices[1] as RdmaDevice, "B", "mlx1", n, stamp)
      expect(texts(yield* take(sides.B, 2, 3))).toEqual(["first", "resent"])
      expect(B.counters).toMatchObject({ accepted: 2, duplicates: 1, sessions: 1, unstamped: 0 })
      expect(sides.B.counters.malformed).toBe(0)
    })
  )

  for (const [twin, B] of [
    ["the legacy twin (Dedup.legacy) at the receiver", () => Dedup.legacy],
    ["the series' framing with the legacy admission", admitAll]
  ] as const) {
    it.scopedLive(`negative control: with ${twin} the copy is delivered`, () =>
      Effect.gen(function* () {
        const A = Dedup.makeSeries()
        const sides = yield* twoTransports(undefined, { dedup: { A, B: B() } })
        const stamp = A.stamp(1)
        const n = makeNotification("resent", "x")
        yield* sides.A.sendVia(sides.A.devices[0] as RdmaDevice, "B", "mlx0", n, stamp)
        yield* sides.A.sendVia(sides.A.devices[1] as RdmaDevice, "B", "mlx1", n, stamp)
        expect(texts(yield* take(sides.B, 2))).toEqual(["resent", "resent"])
      })
    )
  }

  it.scopedLive("series to a legacy peer (notify_proto 0) and back: raw frames, unstamped, all delivered", () =>
    Effect.gen(function* () {
      const A = Dedup.makeSeries()
      // B is TENT `main`; what its notify QP received is captured as it decodes each payload
      const captured: Array<Buffer> = []
      const B: Dedup.DedupShape = {
        ...Dedup.legacy,
        decode: (buf, offset, len, out) => {
          captured.push(Buffer.from(buf.subarray(offset, offset + len)))
          return Dedup.legacy.decode(buf, offset, len, out)
        }
      }
      const sides = yield* twoTransports(undefined, { dedup: { A, B } })
      const mlx0 = sides.A.devices[0] as RdmaDevice
      const sent = Array.from({ length: 5 }, (_, i) => makeNotification(`a${i}`, new Uint8Array([i, 0, 255])))
      for (const n of sent) yield* sides.A.sendVia(mlx0, "B", "mlx0", n, undefined)
      expect(texts(yield* take(sides.B, 5))).toEqual(["a0", "a1", "a2", "a3", "a4"])
      expect(sides.B.counters.malformed).toBe(0)
      // byte for byte what a TENT `main` sender puts in the slot
      const legacyBytes = sent.map((n) => {
        const buf = Buffer.alloc(NOTIFY_SLOT_BYTES)
        return Buffer.from(buf.subarray(0, Dedup.legacy.encode(buf, 0, n, undefined, 0)))
      })
      expect(captured).toEqual(legacyBytes)
      const back = sides.B.devices[0] as RdmaDevice
      for (let i = 0; i < 3; i++) yield* sides.B.sendVia(back, "A", "mlx0", makeNotification(`b${i}`, "y"), undefined)
      expect(texts(yield* take(sides.A, 3))).toEqual(["b0", "b1", "b2"])
      expect(A.counters).toMatchObject({ unstamped: 3, accepted: 0 })
    })
  )
})

describe("Dedup.makeSeries framing", () => {
  it("to a peer at notify_proto 0: no stamp, and the bytes are TENT's raw frame exactly", () => {
    const series = Dedup.makeSeries()
    expect(series.notifyProto).toBe(1)
    expect(series.stamp(0)).toBeUndefined()
    const n = makeNotification("name", new Uint8Array([0, 1, 2, 255]))
    const a = Buffer.alloc(NOTIFY_SLOT_BYTES)
    const b = Buffer.alloc(NOTIFY_SLOT_BYTES)
    const la = series.encode(a, 0, n, undefined, 0)
    const lb = Dedup.legacy.encode(b, 0, n, undefined, 0)
    expect(la).toBe(lb)
    expect(a.subarray(0, la)).toEqual(b.subarray(0, lb))
  })

  it("to a peer at 1: a CtrlFrame v1 with this engine's session and a seq that grows by one", () => {
    const series = Dedup.makeSeries()
    const s1 = series.stamp(1)
    const s2 = series.stamp(1)
    expect(s1?.session).toBe(s2?.session)
    expect((s2?.seq ?? 0n) - (s1?.seq ?? 0n)).toBe(1n)
    expect(Dedup.makeSeries().stamp(1)?.session).not.toBe(s1?.session) // a new engine, a new session
    const buf = Buffer.alloc(NOTIFY_SLOT_BYTES)
    const len = series.encode(buf, 0, makeNotification("n", "m"), s1, 1)
    const frame = CtrlFrame.decode(buf.subarray(0, len))
    expect(frame).toMatchObject({ session: s1?.session, seq: s1?.seq })
    expect([buf.readUInt32LE(0), buf[4], buf[5]]).toEqual([CtrlFrame.MAGIC, 1, CtrlFrame.TYPE_NOTIFY_COMPAT])
    const out = new Dedup.DecodedFrame()
    expect(series.decode(buf, 0, len, out)).toBe(0)
    expect(out).toMatchObject({ stamped: true, session: s1?.session, seq: s1?.seq })
    // a raw frame after a typed one: decoded unstamped (the out object is reused)
    const rawLen = Dedup.legacy.encode(buf, 0, makeNotification(new Uint8Array([1]), new Uint8Array([2])), undefined, 0)
    expect(series.decode(buf, 0, rawLen, out)).toBe(0)
    expect(out.stamped).toBe(false)
    expect(series.maxPayload).toBe(CtrlFrame.MAX_PAYLOAD)
  })
})

describe("Dedup at the one delivery point: every transport passes the same window", () => {
  const frameOf = (series: Dedup.DedupShape, n: Notification, stamp: Dedup.Stamp) => {
    const buf = Buffer.alloc(NOTIFY_SLOT_BYTES)
    const len = series.encode(buf, 0, n, stamp, 1)
    const out = new Dedup.DecodedFrame()
    expect(series.decode(buf, 0, len, out)).toBe(0)
    return { buf, out }
  }

  it("a stamp delivered from the notify QP is dropped when a control-plane Notify carries it, and the other way", () => {
    const sender = Dedup.makeSeries()
    const receiver = Dedup.makeSeries()
    const delivery = new Delivery.Delivery(receiver)
    const n = makeNotification("n", "m")
    const s1 = sender.stamp(1) as Dedup.Stamp
    const f1 = frameOf(sender, n, s1)
    expect(delivery.fromFrame("rdma", "peer@mlx0", f1.buf, f1.out)).toBe(true)
    expect(delivery.fromNotify("rpc#1", { ...n, stamp: s1 })).toBe(false)
    const s2 = sender.stamp(1) as Dedup.Stamp
    expect(delivery.fromNotify("rpc#1", { ...n, stamp: s2 })).toBe(true)
    const f2 = frameOf(sender, n, s2)
    expect(delivery.fromFrame("rdma", "peer@mlx1", f2.buf, f2.out)).toBe(false)
    // unstamped notifications always pass
    expect(delivery.fromNotify("rpc#1", n)).toBe(true)
    expect(delivery.fromNotify("rpc#1", n)).toBe(true)
    expect(receiver.counters).toMatchObject({ accepted: 2, duplicates: 2, unstamped: 2 })
    expect(delivery.drain(["rdma", "tcp"]).length).toBe(4)
  })

  it("negative control: the legacy admission delivers both copies", () => {
    const sender = Dedup.makeSeries()
    const delivery = new Delivery.Delivery(admitAll())
    const n = makeNotification("n", "m")
    const s1 = sender.stamp(1) as Dedup.Stamp
    const f1 = frameOf(sender, n, s1)
    expect(delivery.fromFrame("rdma", "peer@mlx0", f1.buf, f1.out)).toBe(true)
    expect(delivery.fromNotify("rpc#1", { ...n, stamp: s1 })).toBe(true)
  })
})

describe("Dedup (RFC PR 6) over the control plane: a Notify to a peer that advertised notify_proto 1 is stamped", () => {
  const big = makeNotification("big", new Uint8Array(70_000).fill(7))
  const run = (rxDedup: Dedup.DedupShape) =>
    Effect.gen(function* () {
      const rx = yield* engine(rdmaOnly, series({ routing: openReceiver, dedup: rxDedup }))
      const tx = yield* engine(rdmaOnly, series({ routing: bySize(CtrlFrame.MAX_PAYLOAD), dedup: Dedup.makeSeries() }))
      // the first one over the notify QP: the bootstrap tells tx what rx speaks
      yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification("small", "x"))
      yield* tx.engine.sendNotification(rx.engine.segmentName, big)
      return { got: yield* receive(rx.engine, 2), counters: rxDedup.counters }
    })

  it.scopedLive("series to series: the Notify carries a stamp, and the window admits it", () =>
    Effect.gen(function* () {
      const { got, counters } = yield* run(Dedup.makeSeries())
      expect(texts(got).sort()).toEqual(["big", "small"])
      expect(got.find((n) => texts([n])[0] === "big")?.stamp).toBeDefined()
      expect(counters).toMatchObject({ accepted: 2, unstamped: 0 })
    })
  )

  it.scopedLive("series to a legacy peer (notify_proto 0): the Notify goes unstamped, TENT's bytes", () =>
    Effect.gen(function* () {
      const { got } = yield* run(Dedup.legacy)
      expect(texts(got).sort()).toEqual(["big", "small"])
      expect(got.every((n) => n.stamp === undefined)).toBe(true)
    })
  )
})
