/**
 * `transports/rdma/notify/shared_recv`: every notify QP of a device takes its receives from one shared receive queue
 * (an SRQ) of the device, so an endpoint holds no receive slot of its own: an idle endpoint costs no receive memory,
 * whatever the number of peers. The device's ring posts `shared_recv_slots` and doubles under a burst (RNR NAKs pace
 * the senders meanwhile); every slot goes back to the queue, whether its receive was delivered or flushed by a QP that
 * failed.
 */
import { describe, expect, it } from "@effect/vitest"
import { makeNotification } from "@tent/rpc"
import { SendFlags, WrOpcode } from "@tent/verbs"
import { Effect } from "effect"
import type { RdmaDevice } from "../src/internal/rdma/RdmaContext.js"
import type { RdmaEndpoint } from "../src/internal/rdma/RdmaEndpoint.js"
import { pollerTurnLate, type Side, twoTransports } from "./fixtures/endpoints.js"

const KiB = 1024
const shared = (slots: number, window?: number) => ({
  transports: {
    rdma: {
      notify: {
        lazy_slots: true,
        shared_recv: true,
        shared_recv_slots: slots,
        ...(window === undefined ? {} : { slots: window })
      }
    }
  }
})

/** B's endpoints on its first device (one per A device that connected to it). */
const endpointsOn = (device: RdmaDevice): Array<RdmaEndpoint> => Array.from(device.store.active.values())

/** Connects each of A's devices to B's first NIC: two endpoints on B's first device, both receiving into its SRQ. */
const connectBoth = (A: Side) =>
  Effect.forEach(A.devices, (d) => A.getEndpoint(d as RdmaDevice, { server: "B", address: "B" }, "mlx0"), {
    discard: true
  })

/** Two transports whose devices share receives (`slots` posted), each of A's devices connected to B's first NIC. */
const sharedPair = (slots: number, window?: number) =>
  Effect.gen(function* () {
    const { A, B } = yield* twoTransports(undefined, { config: shared(slots, window) })
    yield* connectBoth(A)
    const [a0, a1] = A.devices as ReadonlyArray<RdmaDevice>
    if (a0 === undefined || a1 === undefined) return yield* Effect.dieMessage("two devices expected")
    return { A, B, deviceB: B.devices[0] as RdmaDevice, a0 }
  })

/** RECVs posted in the device's SRQ (SoftVerbs' record of it: its queue's depth). */
const posted = (device: RdmaDevice) =>
  (device.sharedRecv?.srq as unknown as { readonly queue: { readonly depth: number } } | undefined)?.queue.depth

const waitUntil = (check: () => boolean, ms = 30_000) =>
  Effect.gen(function* () {
    const deadline = Date.now() + ms
    while (!check() && Date.now() < deadline) yield* Effect.sleep("20 millis")
    return check()
  })

/**
 * `per` notifications from each of A's two devices to B, alternately in runs of `run` (sends leave from the first
 * enabled device): both endpoints' sends are in flight together, into B's one queue. Then every one arrived, in order
 * per device.
 */
const burstFromBoth = (
  pair: { readonly A: Side; readonly B: Side; readonly a0: RdmaDevice },
  per: number,
  run: number
) =>
  Effect.gen(function* () {
    const { A, B, a0 } = pair
    for (let r = 0; r < (2 * per) / run; r++) {
      const from = r % 2
      a0.enabled = from === 0
      for (let i = 0; i < run; i++) {
        const k = Math.floor(r / 2) * run + i
        yield* A.sendNotification("B", makeNotification(`d${from}-${k}`, "x"))
      }
    }
    a0.enabled = true
    expect(yield* waitUntil(() => B.counters.received >= 2 * per)).toBe(true)
    const names = B.inbox.drain().map((n) => new TextDecoder().decode(n.name))
    for (const from of [0, 1]) {
      expect(names.filter((n) => n.startsWith(`d${from}-`))).toEqual(
        Array.from({ length: per }, (_, k) => `d${from}-${k}`)
      )
    }
  })

describe("notify receives shared per device (shared_recv)", () => {
  it.scopedLive("an idle endpoint holds no receive slot: the device's ring is all the receive memory, once", () =>
    Effect.gen(function* () {
      const { deviceB } = yield* sharedPair(256)
      const eps = endpointsOn(deviceB)
      expect(eps.length).toBe(2)
      for (const ep of eps) {
        expect(ep.connected).toBe(true)
        expect({
          recv: ep.notify.recvCapacity,
          send: ep.notify.sendCapacity,
          bytes: ep.notify.registeredBytes
        }).toEqual({ recv: 0, send: 0, bytes: 0 })
      }
      expect(deviceB.sharedRecv?.registeredBytes).toBe(256 * 64 * KiB)
      expect(posted(deviceB)).toBe(256)
      // The same endpoints with receive slots of their own (lazy): one 64 KiB slot each (the negative control).
      const own = yield* twoTransports(undefined, {
        config: { transports: { rdma: { notify: { lazy_slots: true, shared_recv: false } } } }
      })
      yield* connectBoth(own.A)
      const ownB = own.B.devices[0] as RdmaDevice
      expect(ownB.sharedRecv === undefined).toBe(true)
      expect(endpointsOn(ownB).map((ep) => ep.notify.registeredBytes)).toEqual([64 * KiB, 64 * KiB])
    })
  )

  it.scopedLive(
    "two endpoints' bursts into a shared queue of 2, the poller a turn late: every one delivered in order, the queue grown, every slot back",
    () =>
      Effect.gen(function* () {
        const pair = yield* sharedPair(2)
        const { B, deviceB } = pair
        pollerTurnLate(B)
        const per = 1000
        yield* burstFromBoth(pair, per, 50)
        expect(B.counters).toMatchObject({ received: 2 * per, malformed: 0, notifyErrors: 0, duplicates: 0 })
        const ring = deviceB.sharedRecv?.ring.capacity ?? 0
        console.log(`shared receive queue, two senders' bursts, the poller a turn late: the ring grew 2 → ${ring}`)
        expect(ring).toBeGreaterThanOrEqual(16)
        expect(ring).toBeLessThanOrEqual(4096)
        // Every slot is posted again once the burst is handled.
        expect(yield* waitUntil(() => posted(deviceB) === ring, 5_000)).toBe(true)
        // Each endpoint still holds no receive slot of its own.
        expect(endpointsOn(deviceB).map((ep) => ep.notify.recvCapacity)).toEqual([0, 0])
      }),
    60_000
  )

  it.scopedLive(
    "bursts into a consumer slower than the senders: the queue grows to the senders' windows and no further",
    () =>
      Effect.gen(function* () {
        // Windows of 64 (`notify/slots`), two endpoints on B's device: a ring of at most 128. The senders' windows free as
        // B's NIC takes each SEND, not as its poller does: without the bound the ring grew to 1024 here.
        const pair = yield* sharedPair(2, 64)
        const { B, deviceB } = pair
        pollerTurnLate(B)
        yield* burstFromBoth(pair, 1000, 100)
        const ring = deviceB.sharedRecv?.ring.capacity ?? 0
        console.log(
          `two senders' windows of 64 into a shared queue of 2, the poller a turn late: the ring grew 2 → ${ring}`
        )
        // Grown (the limit event works), to the two windows (128) at most: what did not fit waited at the senders.
        expect(ring).toBeGreaterThan(2)
        expect(ring).toBeLessThanOrEqual(128)
        expect(yield* waitUntil(() => posted(deviceB) === ring, 5_000)).toBe(true)
      }),
    60_000
  )

  it.scopedLive(
    "a notify QP forced to ERR while its peer sends: the queue stays whole, the other endpoint carries on",
    () =>
      Effect.gen(function* () {
        const { A, B, deviceB, a0 } = yield* sharedPair(4)
        // 200 from A's first device (within its window: a sender on a dead channel waits for slots, as TENT's);
        // B's endpoint of it is forced to ERR while they arrive.
        const victim = endpointsOn(deviceB).find((ep) => ep.peerNicPath.endsWith("@mlx0"))
        if (victim === undefined) return yield* Effect.dieMessage("no endpoint from A's mlx0")
        const qpNum = victim.notifyQpNum
        for (let i = 0; i < 200; i++) {
          yield* A.sendNotification("B", makeNotification(`v${i}`, "x"))
          if (i === 100) {
            yield* Effect.sleep("100 millis")
            yield* B.control.forceQpError("mlx0", qpNum)
          }
        }
        yield* Effect.sleep("300 millis")
        // Then 500 from A's second device into the same queue.
        a0.enabled = false
        for (let i = 0; i < 500; i++) yield* A.sendNotification("B", makeNotification(`w${i}`, "x"))
        a0.enabled = true
        const names: Array<string> = []
        const text = new TextDecoder()
        const all = () => {
          for (const n of B.inbox.drain()) names.push(text.decode(n.name))
          return names.filter((n) => n.startsWith("w")).length >= 500
        }
        expect(yield* waitUntil(all)).toBe(true)
        expect(names.filter((n) => n.startsWith("w"))).toEqual(Array.from({ length: 500 }, (_, i) => `w${i}`))
        // What came before the failure, in order (what was sent after it is lost: these are TENT's policies).
        expect(names.filter((n) => n.startsWith("v")).slice(0, 101)).toEqual(
          Array.from({ length: 101 }, (_, i) => `v${i}`)
        )
        const ring = deviceB.sharedRecv?.ring.capacity ?? 0
        expect(yield* waitUntil(() => posted(deviceB) === ring, 5_000)).toBe(true)
        console.log(
          `a notify QP forced to ERR while its peer sends: ${B.counters.received} delivered, ${B.counters.flushed + B.counters.notifyErrors} failed receives; ${posted(deviceB)} of ${ring} shared slots posted`
        )
      })
  )

  it.scopedLive(
    "a stopped poller (the application frozen, the NIC live) leaves the queue as it is; resumed, it grows",
    () =>
      Effect.gen(function* () {
        const { A, B, deviceB } = yield* sharedPair(4)
        B.poller.pause(true)
        // 200 posted (within the window): 4 land, the rest are RNR-NAKed and retried by A's NIC.
        for (let i = 0; i < 200; i++) yield* A.sendNotification("B", makeNotification(`f${i}`, "x"))
        expect(yield* waitUntil(() => posted(deviceB) === 0, 5_000)).toBe(true)
        yield* Effect.sleep("300 millis")
        // The limit was reached, but nothing registers more memory for what nobody takes.
        expect(deviceB.sharedRecv?.ring.capacity).toBe(4)
        B.poller.pause(false)
        expect(yield* waitUntil(() => B.counters.received >= 200)).toBe(true)
        const names = B.inbox.drain().map((n) => new TextDecoder().decode(n.name))
        expect(names).toEqual(Array.from({ length: 200 }, (_, i) => `f${i}`))
        expect(deviceB.sharedRecv?.ring.capacity).toBeGreaterThan(4)
      }),
    60_000
  )

  it.scopedLive(
    "a peer's WRITE with immediate into a notify QP gives the slot it took back: the queue stays whole",
    () =>
      Effect.gen(function* () {
        const { A, B, deviceB, a0 } = yield* sharedPair(4)
        const hostile = [...a0.store.active.values()][0]?.notify.qp
        if (hostile === undefined) return yield* Effect.dieMessage("no notify QP from A's mlx0")
        // 40 zero-byte WRITEs with immediate on A's notify QP: each takes one of B's shared RECVs (none is a SEND).
        for (let i = 0; i < 40; i++) {
          const wr = { wrId: 2 ** 40 + i, opcode: WrOpcode.RDMA_WRITE_WITH_IMM, sendFlags: SendFlags.SIGNALED }
          expect(hostile.postSend({ ...wr, sgList: [], numSge: 0, immData: i, remoteAddr: 0, rkey: 0 })).toBe(0)
          if (i % 4 === 3) yield* Effect.sleep("5 millis")
        }
        // Every slot posted again (the ring may have grown under them: each took a slot before the poller ran).
        const whole = () => posted(deviceB) === deviceB.sharedRecv?.ring.capacity
        expect(yield* waitUntil(() => whole() && B.counters.flushed + B.counters.notifyErrors === 0, 5_000)).toBe(true)
        console.log(
          `40 WRITEs with immediate into B's notify QP: ${posted(deviceB)} of ${deviceB.sharedRecv?.ring.capacity} shared slots posted`
        )
        // The queue serves the other endpoint as before.
        a0.enabled = false
        for (let i = 0; i < 100; i++) yield* A.sendNotification("B", makeNotification(`h${i}`, "x"))
        a0.enabled = true
        expect(yield* waitUntil(() => B.counters.received >= 100)).toBe(true)
        expect(posted(deviceB)).toBe(deviceB.sharedRecv?.ring.capacity)
      }),
    60_000
  )
})
