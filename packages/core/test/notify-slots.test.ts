/**
 * `transports/rdma/notify/*` (RFC open question 3): TENT allocates 256 × 64 KiB of notify slots each way per endpoint
 * at construction; with `lazy_slots` an idle endpoint holds one receive slot, send slots come with the first send and
 * both rings grow with demand (RNR NAKs pace the sender meanwhile). Slot size is a key; a peer with smaller slots is
 * never sent a frame it cannot take.
 */
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, NotificationTooLarge } from "@tent/rpc"
import { Effect, Layer } from "effect"
import { type Diagnostics, EngineConfig } from "../src/index.js"
import type { RdmaDevice } from "../src/internal/rdma/RdmaContext.js"
import { pollerTurnLate, twoTransports } from "./fixtures/endpoints.js"
import { type check, payload, tentSlots } from "./fixtures/engine.js"
import * as Pair from "./fixtures/pair.js"

const KiB = 1024
/** Lazy slots with receive rings of each endpoint's own (`shared_recv` off: `test/shared-recv.test.ts` has it on). */
const lazy = { transports: { rdma: { notify: { lazy_slots: true, shared_recv: false } } } }

type Check = ReturnType<typeof check>
interface Stats {
  readonly counters: { readonly notifyErrors: number; readonly received: number }
  readonly endpoints: ReadonlyArray<Diagnostics.EndpointInfo>
}

const read = (json: unknown) =>
  Layer.build(EngineConfig.layer({ json })).pipe(
    Effect.map((ctx) => ctx.unsafeMap.get(EngineConfig.EngineConfig.key) as EngineConfig.EngineSettings),
    Effect.scoped
  )

/** Waits (at most `ms`) until the peer has received `count` notifications with `prefix`; returns its check. */
const receivedBy = (peer: Pair.Peer, prefix: string, count: number, ms = 30_000) =>
  Effect.gen(function* () {
    const deadline = Date.now() + ms
    let got = yield* Pair.request<Check>(peer, { cmd: "received", prefix })
    while (got.count < count && Date.now() < deadline) {
      yield* Effect.sleep("50 millis")
      got = yield* Pair.request<Check>(peer, { cmd: "received", prefix })
    }
    return got
  })

/** Connects both rails' endpoints with one WRITE (no notification): endpoints whose notify channels are idle. */
const connectByWrite = (engine: Pair.TestEngine, peer: Pair.Peer) =>
  Effect.gen(function* () {
    const remote = yield* Pair.request<{ addr: number }>(peer, { cmd: "register", size: 256 * KiB })
    const mem = yield* engine.registerSegment(Buffer.alloc(256 * KiB, 7))
    const target = yield* engine.openSegment(peer.ready.segment)
    const batch = yield* engine.allocateBatch
    yield* engine.submitTransfer(batch, [
      { opcode: "WRITE", source: mem.addr, target, targetOffset: remote.addr, length: 256 * KiB }
    ])
    expect((yield* engine.waitTransfer(batch, 30_000)).status).toBe("COMPLETED")
  })

describe("notify slots: TENT's allocation, lazy slots, slot size", () => {
  it.effect("keys: TENT's defaults, the lazy ring's start, wrong values fail naming the key", () =>
    Effect.gen(function* () {
      const imm = {
        transferBound: "notify_qp",
        immRecvs: 64,
        sharedRecv: false,
        sharedRecvSlots: 256,
        sharedRecvMaxSlots: 4096
      }
      // The default: lazy send slots, receives shared per device.
      expect((yield* read({})).notify).toEqual({
        lazy: true,
        slots: 256,
        slotBytes: 65536,
        initialRecvSlots: 1,
        ...imm,
        sharedRecv: true
      })
      expect((yield* read(tentSlots)).notify).toEqual({
        lazy: false,
        slots: 256,
        slotBytes: 65536,
        initialRecvSlots: 256,
        ...imm
      })
      // transfer_bound: one of two words; imm_recvs: 1..65536.
      expect(
        yield* Effect.map(Effect.flip(read({ transports: { rdma: { notify: { transfer_bound: "imm" } } } })), String)
      ).toContain("transfer_bound")
      expect(
        yield* Effect.map(Effect.flip(read({ transports: { rdma: { notify: { imm_recvs: 0 } } } })), String)
      ).toContain("imm_recvs")
      const bad = (notify: unknown) =>
        Effect.map(Effect.flip(read({ transports: { rdma: { notify } } })), (e) => String(e))
      expect(yield* bad({ slot_bytes: 100 })).toContain("slot_bytes")
      expect(yield* bad({ slot_bytes: 65537 })).toContain("slot_bytes")
      expect(yield* bad({ slots: 0 })).toContain("transports/rdma/notify/slots")
      const tooMany = yield* bad({ lazy_slots: true, slots: 16, initial_recv_slots: 32 })
      expect(tooMany).toContain("initial_recv_slots")
      expect(tooMany).toContain("at most transports/rdma/notify/slots (16)")
      expect(yield* bad({ lazy_slots: "yes" })).toContain("lazy_slots")
      const sharedTooMany = yield* bad({ shared_recv: true, shared_recv_slots: 64, shared_recv_max_slots: 32 })
      expect(sharedTooMany).toContain("transports.rdma.notify.shared_recv_slots")
      expect(sharedTooMany).toContain("at most transports/rdma/notify/shared_recv_max_slots (32)")
    })
  )

  it.live(
    "lazy: an idle endpoint holds ≤ 64 KiB; a 2000 burst to it arrives complete, in order and byte-exact as the rings grow",
    () =>
      Pair.withEngines({ json: lazy, peerJson: lazy }, (engine, peer) =>
        Effect.gen(function* () {
          const rdma = engine.rdma as NonNullable<Pair.TestEngine["rdma"]>
          yield* connectByWrite(engine, peer)
          const idle = yield* rdma.endpoints
          const peerIdle = (yield* Pair.request<Stats>(peer, { cmd: "stats" })).endpoints
          // Both rails, both sides: connected notify channels with one receive slot posted and no send slot.
          expect(idle.length).toBe(2)
          expect(peerIdle.length).toBe(2)
          for (const ep of [...idle, ...peerIdle]) {
            expect(ep).toMatchObject({ connected: true, notifySlots: { send: 0, recv: 1 }, notifyBytes: 64 * KiB })
          }
          // 2000 back to back into a ring of one receive slot: RNR NAKs pace this side while the peer's ring grows.
          const start = performance.now()
          for (let i = 0; i < 2000; i++) yield* engine.sendNotification(peer.ready.segment, payload("b", i))
          expect(yield* receivedBy(peer, "b", 2000)).toEqual({
            count: 2000,
            distinct: 2000,
            outOfOrder: 0,
            corrupt: 0,
            duplicates: 0
          })
          const stats = yield* Pair.request<Stats>(peer, { cmd: "stats" })
          expect(stats.counters.notifyErrors).toBe(0)
          expect(rdma.counters.notifyErrors).toBe(0)
          const sender = (yield* rdma.endpoints).find((e) => e.notifySlots.send > 0)
          const receiver = stats.endpoints.find((e) => e.notifySlots.recv > 1)
          console.log(
            `lazy slots, 2000 back to back into a fresh ring: all in by ${(performance.now() - start).toFixed(0)} ms; the receive ring grew 1 → ${receiver?.notifySlots.recv}, the send ring 0 → ${sender?.notifySlots.send}`
          )
          // The rings grew with the demand, and no further than their depth. The send ring: a window of up to 256 in
          // flight. The receive ring: the peer's poller runs as each datagram is handled, so each receive is reposted
          // before the next datagram is read, and a ring of two keeps pace with one sender (1 → 2 measured); the
          // doubling under a poller that trails its NIC is the next test.
          expect(sender?.notifySlots.send).toBeGreaterThan(1)
          expect(sender?.notifySlots.send).toBeLessThanOrEqual(256)
          expect(receiver?.notifySlots.recv).toBeGreaterThanOrEqual(2)
          expect(receiver?.notifySlots.recv).toBeLessThanOrEqual(256)
          // The other rail's endpoints carried no notification: still idle.
          const quiet = stats.endpoints.filter((e) => e !== receiver)
          expect(quiet.map((e) => e.notifyBytes)).toEqual([64 * KiB])
        })
      ),
    Pair.testTimeout()
  )

  it.scopedLive(
    "lazy, the receiver's poller a turn behind its NIC: a 2000 burst doubles its receive ring drain after drain (1 → ≥ 64, ≤ 256), all delivered in order",
    () =>
      Effect.gen(function* () {
        const { A, B } = yield* twoTransports(undefined, { config: lazy })
        yield* A.getEndpoint(A.devices[0] as RdmaDevice, { server: "B", address: "B" }, "mlx0")
        const deviceB = B.devices[0] as RdmaDevice
        const [receiver] = deviceB.store.active.values()
        expect(receiver?.notify.recvCapacity).toBe(1)
        // The receives of the datagrams read in one turn complete before the pass reposts any, and a drain that saw
        // more than half the ring complete doubles it.
        pollerTurnLate(B)
        for (let i = 0; i < 2000; i++) yield* A.sendNotification("B", makeNotification(`g${i}`, "x"))
        const deadline = Date.now() + 30_000
        while (B.counters.received < 2000 && Date.now() < deadline) yield* Effect.sleep("20 millis")
        const text = new TextDecoder()
        expect(B.inbox.drain().map((n) => text.decode(n.name))).toEqual(Array.from({ length: 2000 }, (_, i) => `g${i}`))
        console.log(
          `lazy slots, the receiver's poller a turn late: the receive ring grew 1 → ${receiver?.notify.recvCapacity}`
        )
        expect(receiver?.notify.recvCapacity).toBeGreaterThanOrEqual(64)
        expect(receiver?.notify.recvCapacity).toBeLessThanOrEqual(256)
      }),
    60_000
  )

  it.live(
    "TENT's allocation: every endpoint holds 256 × 64 KiB each way from its construction",
    () =>
      Pair.withEngines({ json: tentSlots, peerJson: tentSlots }, (engine, peer) =>
        Effect.gen(function* () {
          yield* connectByWrite(engine, peer)
          const eps = yield* (engine.rdma as NonNullable<Pair.TestEngine["rdma"]>).endpoints
          expect(eps.length).toBe(2)
          for (const ep of eps) {
            expect(ep).toMatchObject({ notifySlots: { send: 256, recv: 256 }, notifyBytes: 32 * KiB * KiB })
          }
        })
      ),
    Pair.testTimeout()
  )

  it.live(
    "a peer with 1 KiB slots is never sent a larger frame: the sender refuses it (NotificationTooLarge), the QP lives",
    () =>
      Pair.withEngines({ peerJson: { transports: { rdma: { notify: { slot_bytes: 1024 } } } } }, (engine, peer) =>
        Effect.gen(function* () {
          const rdma = engine.rdma as NonNullable<Pair.TestEngine["rdma"]>
          const segment = peer.ready.segment
          yield* engine.sendNotification(segment, makeNotification("small", new Uint8Array(500)))
          // 1024 bytes of slot: 8 of lengths and 1016 of name and message (raw frames: this engine is legacy).
          const over = makeNotification("x", new Uint8Array(1016))
          const err = yield* Effect.flip(engine.sendNotification(segment, over))
          expect(err).toBeInstanceOf(NotificationTooLarge)
          expect(err).toMatchObject({ size: 1017, max: 1016 })
          yield* engine.sendNotification(segment, makeNotification("x", new Uint8Array(1015)))
          for (let i = 0; i < 50; i++) {
            yield* engine.sendNotification(segment, makeNotification(`after${i}`, new Uint8Array(900)))
          }
          const deadline = Date.now() + 20_000
          let stats = yield* Pair.request<Stats>(peer, { cmd: "stats" })
          while (stats.counters.received < 52 && Date.now() < deadline) {
            yield* Effect.sleep("50 millis")
            stats = yield* Pair.request<Stats>(peer, { cmd: "stats" })
          }
          expect(stats.counters).toMatchObject({ received: 52, notifyErrors: 0 })
          expect(rdma.counters.notifyErrors).toBe(0)
          expect((yield* rdma.endpoints).every((e) => e.connected)).toBe(true)
        })
      ),
    Pair.testTimeout()
  )
})
