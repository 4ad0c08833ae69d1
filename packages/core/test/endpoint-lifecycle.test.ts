/**
 * Endpoint lifecycle (TENT `tent_endpoint_lifecycle_test`) on SoftVerbs QPs: `finishDestroy` and its 30 s forced
 * destroy (driven by `TestClock`), the `QpRetirement` seam's notify-QP wait, `accept` of a peer that came back with new
 * QPs, and simultaneous open — two RDMA transports, then two engines, bootstrapping towards each other at once.
 */
import { describe, expect, it } from "@effect/vitest"
import { type BootstrapDesc, BootstrapRejected, makeNotification, type Notification, TransportFailure } from "@tent/rpc"
import { SoftVerbs } from "@tent/verbs"
import { Deferred, Effect, Layer, TestClock } from "effect"
import { QpRetirement, TransferEngine } from "../src/index.js"
import type { RdmaDevice } from "../src/internal/rdma/RdmaContext.js"
import * as RdmaEndpoint from "../src/internal/rdma/RdmaEndpoint.js"
import * as RdmaTransport from "../src/internal/rdma/RdmaTransport.js"
import {
  bareEndpoint,
  type Deliver,
  makeHost,
  openDevice,
  type Side,
  settings,
  twoTransports
} from "./fixtures/endpoints.js"
import { engineLayer, tentSlots } from "./fixtures/engine.js"

/** Two endpoints on two SoftVerbs devices, `a` (server A) and `b` (server B), connected through `a.connect`. */
const connectedPair = (retirement: QpRetirement.QpRetirementShape = QpRetirement.legacy) =>
  Effect.gen(function* () {
    const engine = yield* settings()
    const clock = yield* Effect.clock
    const { verbs } = yield* SoftVerbs.make({ devices: [{ name: "a" }, { name: "b" }] })
    const devA = yield* openDevice(verbs, "a", engine)
    const devB = yield* openDevice(verbs, "b", engine)
    const a = new RdmaEndpoint.RdmaEndpoint(
      makeHost(engine, clock, yield* Effect.scope, { localServer: "A", retirement }),
      devA,
      "B@b",
      "B"
    )
    const b = new RdmaEndpoint.RdmaEndpoint(
      makeHost(engine, clock, yield* Effect.scope, { localServer: "B", retirement }),
      devB,
      "A@a",
      "A"
    )
    yield* Effect.addFinalizer(() => Effect.zipRight(a.deconstruct, b.deconstruct))
    yield* a.lock.withPermits(1)(a.construct)
    yield* b.lock.withPermits(1)(b.construct)
    yield* a.connect((desc) => b.accept(desc))
    expect([a.status, b.status, a.connected, b.connected]).toEqual(["READY", "READY", true, true])
    return { a, b }
  })

const qpNums = (ep: RdmaEndpoint.RdmaEndpoint) => ep.dataQps.map((q) => q.qpNum)

/** An endpoint in a line (a failed `toBe` on the object itself would print its 32 MiB of notify buffers). */
const show = (ep: RdmaEndpoint.RdmaEndpoint | undefined) =>
  ep === undefined ? "none" : `${ep.localNicPath} -> ${ep.peerNicPath} ${ep.status} data QPs ${qpNums(ep).join(",")}`

/** `actual` is the very endpoint `expected`. */
const expectSame = (actual: RdmaEndpoint.RdmaEndpoint | undefined, expected: RdmaEndpoint.RdmaEndpoint) => {
  if (actual !== expected) expect(show(actual)).toBe(`${show(expected)} (that object)`)
}

const text = (n: Notification) => new TextDecoder().decode(n.name)

/** Polls `cond` every 20 ms until it holds or `ms` pass; returns whether it held. */
const waitUntil = (cond: () => boolean, ms: number) =>
  Effect.gen(function* () {
    const deadline = Date.now() + ms
    while (!cond()) {
      if (Date.now() > deadline) return false
      yield* Effect.sleep("20 millis")
    }
    return true
  })

/** Polls `cond` every 10 ms of wall time (not the test clock, which a `TestClock` test never moves) until it holds or `ms` pass. */
const realTimeUntil = (cond: () => boolean, ms: number) =>
  Effect.promise(async () => {
    const deadline = Date.now() + ms
    while (!cond() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
  })

/** Sends one notification each way and waits (at most 20 s of wall time) until both arrived. */
const notifyBothWays = (a: Side, b: Side, tag: string) =>
  Effect.gen(function* () {
    yield* a.sendNotification("B", makeNotification(`${tag}:A->B`, "x"))
    yield* b.sendNotification("A", makeNotification(`${tag}:B->A`, "y"))
    const atA: Array<string> = []
    const atB: Array<string> = []
    const arrived = yield* waitUntil(() => {
      for (const n of a.inbox.drain()) atA.push(text(n))
      for (const n of b.inbox.drain()) atB.push(text(n))
      return atA.length > 0 && atB.length > 0
    }, 20_000)
    expect(arrived).toBe(true)
    expect(atA).toEqual([`${tag}:B->A`])
    expect(atB).toEqual([`${tag}:A->B`])
  })

/** The one endpoint of device `mlx0` of `t`, after checking it is the only one and nothing was retired. */
const onlyEndpoint = (t: RdmaTransport.RdmaTransportShape) => {
  const store = (t.devices[0] as RdmaDevice).store
  expect(store.size).toBe(1)
  expect(store.waiting.size).toBe(0)
  expect(store.evictions).toBe(0)
  expect((t.devices[1] as RdmaDevice).store.size).toBe(0)
  return [...store.active.values()][0] as RdmaEndpoint.RdmaEndpoint
}

/** Both ends READY and connected crosswise: each one's peer QP list is the other's data QPs. */
const expectCrosswise = (epA: RdmaEndpoint.RdmaEndpoint, epB: RdmaEndpoint.RdmaEndpoint) => {
  expect([epA.status, epB.status]).toEqual(["READY", "READY"])
  expect([epA.connected, epB.connected]).toEqual([true, true])
  expect(epA.peerQpNums).toEqual(qpNums(epB))
  expect(epB.peerQpNums).toEqual(qpNums(epA))
}

/** A `Deliver` that holds each side's `Bootstrap` until both were issued, so neither reaches its peer first. */
const bothInFlight = Effect.gen(function* () {
  const both = yield* Deferred.make<void>()
  let issued = 0
  const gate = Effect.suspend(() => {
    issued++
    return issued === 2 ? Deferred.succeed(both, undefined) : Effect.void
  }).pipe(Effect.zipRight(Deferred.await(both)))
  return { gate, issued: () => issued }
})

describe("finishDestroy", () => {
  it.scoped("FinishDestroyRejectsNonRetiringEndpoint: false for an UNINIT and a READY endpoint, state unchanged", () =>
    Effect.gen(function* () {
      const bare = bareEndpoint(makeHost(yield* settings(), yield* Effect.clock), "p@0")
      expect(yield* bare.finishDestroy).toBe(false)
      expect(bare.status).toBe("UNINIT")
      const { a } = yield* connectedPair()
      expect(yield* a.finishDestroy).toBe(false)
      expect(a.status).toBe("READY")
    })
  )

  it.scoped(
    "waits while a data QP has work requests outstanding; forced after FINISH_DESTROY_TIMEOUT_MS (TestClock)",
    () =>
      Effect.gen(function* () {
        const { a } = yield* connectedPair()
        // Stands in for data WRs posted on lane 0 whose completions the data poller has not seen (TENT wr_depth_list_).
        a.wrDepth[0] = 1
        yield* a.retire
        expect(a.status).toBe("DESTROYING")
        expect(yield* a.finishDestroy).toBe(false)
        yield* TestClock.adjust(RdmaEndpoint.FINISH_DESTROY_TIMEOUT_MS - 1)
        expect(yield* a.finishDestroy).toBe(false)
        expect(a.status).toBe("DESTROYING")
        expect(a.notifyQpNum).not.toBe(0)
        yield* TestClock.adjust(1)
        expect(yield* a.finishDestroy).toBe(true)
        expect(a.status).toBe("DESTROYED")
        expect(a.notifyQpNum).toBe(0)
      })
  )

  it.scoped("proceeds before the timeout once the outstanding data work requests drained", () =>
    Effect.gen(function* () {
      const { a } = yield* connectedPair()
      a.wrDepth[1] = 2
      yield* a.retire
      expect(yield* a.finishDestroy).toBe(false)
      a.wrDepth[1] = 0
      expect(yield* a.finishDestroy).toBe(true)
      expect(a.status).toBe("DESTROYED")
    })
  )

  it.scoped("FinishDestroyIsIdempotent: true again once DESTROYED, and deconstruct after it does nothing", () =>
    Effect.gen(function* () {
      const { b } = yield* connectedPair()
      yield* b.retire
      expect(yield* b.finishDestroy).toBe(true)
      expect(yield* b.finishDestroy).toBe(true)
      yield* b.deconstruct
      expect(b.status).toBe("DESTROYED")
      const bare = bareEndpoint(makeHost(yield* settings(), yield* Effect.clock), "p@0")
      bare.retireNoLock()
      expect(yield* bare.finishDestroy).toBe(true)
      expect(yield* bare.finishDestroy).toBe(true)
    })
  )

  it.scoped(
    "[legacy QpRetirement] destroys at once while notify sends are pending (destroyWaitsForNotifyQp false)",
    () =>
      Effect.gen(function* () {
        expect(QpRetirement.legacy.destroyWaitsForNotifyQp).toBe(false)
        const { a } = yield* connectedPair()
        expect(a.notify.postNotification(makeNotification("n", "pending"))).toBe(0)
        expect(a.pending).toBe(1)
        yield* a.retire
        expect(yield* a.finishDestroy).toBe(true)
        expect(a.status).toBe("DESTROYED")
      })
  )

  /** A's endpoint to B with `count` notify sends that B never acknowledges (A's outgoing packets dropped). */
  const sendsInFlight = (A: Side, count: number) =>
    Effect.gen(function* () {
      const ep = yield* A.getEndpoint(A.devices[0] as RdmaDevice, { server: "B", address: "B" }, "mlx0")
      yield* A.control.setFaults("mlx0", { dropOut: 1 })
      for (let i = 0; i < count; i++) expect(ep.notify.postNotification(makeNotification(`n${i}`, "x"))).toBe(0)
      expect([ep.pending, ep.notify.recvPosted]).toEqual([count, 256])
      return ep
    })

  it.scoped(
    "[RFC PR 1, Series.QpRetirement] destroy waits until the poller counted the notify QP's flushed sends and receives out, then proceeds (no 30 s)",
    () =>
      Effect.gen(function* () {
        const { A } = yield* twoTransports(undefined, { retirement: QpRetirement.series, config: tentSlots })
        const ep = yield* sendsInFlight(A, 5)
        yield* ep.retire // the QPs go to ERR: 5 sends and 256 receives flush into the notify CQ, unpolled yet
        expect(ep.status).toBe("DESTROYING")
        expect(yield* ep.finishDestroy).toBe(false)
        expect(A.poller).toBeDefined()
        // No hand call and no clock moved: the poller's next turns count every flush out (waited for in real time,
        // at most 10 s: on a loaded machine one turn may take longer than any fixed sleep).
        yield* realTimeUntil(() => ep.pending === 0 && ep.notify.recvPosted === 0, 10_000)
        expect([ep.pending, ep.notify.recvPosted]).toEqual([0, 0])
        expect(A.counters.flushed).toBe(5 + 256)
        expect(yield* ep.finishDestroy).toBe(true)
        expect(ep.status).toBe("DESTROYED")
      })
  )

  it.scoped(
    "[RFC PR 1] completions the poller never takes hold the destroy back only until the timeout (TestClock)",
    () =>
      Effect.gen(function* () {
        const { A } = yield* twoTransports(undefined, { retirement: QpRetirement.series, config: tentSlots })
        const ep = yield* sendsInFlight(A, 3)
        A.poller.pause(true)
        yield* ep.retire
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 50)))
        yield* TestClock.adjust(RdmaEndpoint.FINISH_DESTROY_TIMEOUT_MS - 1)
        expect(yield* ep.finishDestroy).toBe(false)
        expect(ep.pending).toBe(3)
        yield* TestClock.adjust(1)
        expect(yield* ep.finishDestroy).toBe(true)
        A.poller.pause(false)
      })
  )

  it.scoped(
    "negative control [legacy QpRetirement]: destroy proceeds at once with the notify QP's completions still unpolled in its CQ",
    () =>
      Effect.gen(function* () {
        const { A } = yield* twoTransports(undefined, { config: tentSlots })
        const ep = yield* sendsInFlight(A, 5)
        yield* ep.retire
        expect(yield* ep.finishDestroy).toBe(true)
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 50)))
        // Destroyed before its flushes were polled: destroying the QP took its 261 unpolled completions with it (as
        // mlx5 cleans a destroyed QP's CQEs), so none ever reached the poller and the 5 units were never freed.
        expect(ep.pending).toBe(5)
        expect(A.counters.flushed + A.counters.notifyErrors + A.counters.unknownQp).toBe(0)
      })
  )
})

describe("accept", () => {
  it.scoped("is idempotent for the same peer QPs; BootstrapWithNewPeerQpsRetiresEstablishedEndpoint", () =>
    Effect.gen(function* () {
      const { a, b } = yield* connectedPair()
      const again = a.localDesc("B@b")
      const reply = yield* b.accept(again)
      expect(reply.qp_num).toEqual(qpNums(b))
      expect(b.status).toBe("READY")
      const fresh: BootstrapDesc = { ...again, qp_num: again.qp_num.map((q) => q + 1000) }
      const err = yield* Effect.flip(b.accept(fresh))
      expect(err).toBeInstanceOf(BootstrapRejected)
      expect(err.message).toBe("Endpoint retired for reconnection from peer")
      expect(b.status).toBe("DESTROYING")
      expect(b.connected).toBe(false)
    })
  )

  it.scopedLive(
    "a peer that comes back with a new endpoint: its first bootstrap retires ours and is refused, its retry connects",
    () =>
      Effect.gen(function* () {
        const { A, B } = yield* twoTransports()
        const devA = A.devices[0] as RdmaDevice
        const devB = B.devices[0] as RdmaDevice
        const old = yield* A.getEndpoint(devA, { server: "B", address: "B" }, "mlx0")
        const oldPeer = onlyEndpoint(B)
        expectCrosswise(old, oldPeer)
        yield* A.resetConnection(old)
        expect(devA.store.waiting.has(old)).toBe(true)
        const refused = yield* Effect.either(A.getEndpoint(devA, { server: "B", address: "B" }, "mlx0"))
        expect(refused._tag === "Left" ? refused.left : show(refused.right)).toMatchObject({
          _tag: "BootstrapRejected",
          message: "Endpoint retired for reconnection from peer"
        })
        expect(oldPeer.status).toBe("DESTROYING")
        expect(devB.store.waiting.has(oldPeer)).toBe(true)
        expect(devB.store.size).toBe(0)
        const next = yield* A.getEndpoint(devA, { server: "B", address: "B" }, "mlx0")
        const nextPeer = devB.store.active.get("A@mlx0") as RdmaEndpoint.RdmaEndpoint
        expect(nextPeer !== oldPeer).toBe(true)
        expectCrosswise(next, nextPeer)
        yield* notifyBothWays(A, B, "after")
      }).pipe(Effect.timeout("45 seconds"))
  )
})

describe("the transport's reclaim pass", () => {
  it.scopedLive(
    "sleeps while nothing is retired and wakes for a retired endpoint: destroyed by the pass about 1 s later",
    () =>
      Effect.gen(function* () {
        const { A } = yield* twoTransports()
        const devA = A.devices[0] as RdmaDevice
        const ep = yield* A.getEndpoint(devA, { server: "B", address: "B" }, "mlx0")
        // idle past two of the pass's intervals first: the pass is parked, not gone
        yield* Effect.sleep("2500 millis")
        yield* A.resetConnection(ep)
        expect(devA.store.waiting.has(ep)).toBe(true)
        const t0 = Date.now()
        while (devA.store.waiting.has(ep) && Date.now() - t0 < 10_000) yield* Effect.sleep("50 millis")
        expect(devA.store.waiting.has(ep)).toBe(false)
        expect(ep.status).toBe("DESTROYED")
      }).pipe(Effect.timeout("30 seconds"))
  )
})

describe("simultaneous open", () => {
  it.scopedLive("the RDMA transport's stores are SIEVE stores of endpoint_store_cap", () =>
    Effect.gen(function* () {
      const { A } = yield* twoTransports()
      for (const d of A.devices) {
        expect(d.store.policy).toBe("sieve")
        expect(d.store.capacity).toBe(65536)
      }
    })
  )

  it.scopedLive(
    "two transports bootstrap towards each other at once: one READY endpoint per NIC pair, crosswise, notifications both ways",
    () =>
      Effect.gen(function* () {
        const { gate, issued } = yield* bothInFlight
        const { A, B } = yield* twoTransports((_from, _desc, call) => Effect.zipRight(gate, call))
        const [epA, epB] = yield* Effect.all(
          [
            A.getEndpoint(A.devices[0] as RdmaDevice, { server: "B", address: "B" }, "mlx0"),
            B.getEndpoint(B.devices[0] as RdmaDevice, { server: "A", address: "A" }, "mlx0")
          ],
          { concurrency: 2 }
        )
        expect(issued()).toBe(2)
        expectSame(onlyEndpoint(A), epA)
        expectSame(onlyEndpoint(B), epB)
        expectCrosswise(epA, epB)
        yield* notifyBothWays(A, B, "simultaneous")
        expect([A.counters.unknownQp, B.counters.unknownQp]).toEqual([0, 0])
      }).pipe(Effect.timeout("45 seconds"))
  )

  it.scopedLive(
    "connect succeeds when its bootstrap call fails after the peer's simultaneous bootstrap set the endpoint up",
    () =>
      Effect.gen(function* () {
        const { gate } = yield* bothInFlight
        const aSetUp = yield* Deferred.make<void>()
        // Both calls reach their peer; B's sets A's endpoint up (passive), A's reply is lost after B accepted it.
        const deliver: Deliver = (from, _desc, call) =>
          Effect.zipRight(
            gate,
            from === "B"
              ? Effect.zipLeft(call, Deferred.succeed(aSetUp, undefined))
              : call.pipe(
                  Effect.zipRight(Deferred.await(aSetUp)),
                  Effect.zipRight(
                    Effect.fail(new TransportFailure({ address: "B", reason: "Timeout", message: "reply lost" }))
                  )
                )
          )
        const { A, B } = yield* twoTransports(deliver)
        const [epA, epB] = yield* Effect.all(
          [
            A.getEndpoint(A.devices[0] as RdmaDevice, { server: "B", address: "B" }, "mlx0"),
            B.getEndpoint(B.devices[0] as RdmaDevice, { server: "A", address: "A" }, "mlx0")
          ],
          { concurrency: 2 }
        )
        expectSame(onlyEndpoint(A), epA)
        expectSame(onlyEndpoint(B), epB)
        expectCrosswise(epA, epB)
        yield* notifyBothWays(A, B, "lost-reply")
      }).pipe(Effect.timeout("45 seconds"))
  )

  it.scopedLive(
    "two engines over the real control plane (127.0.0.1) notify each other at once: one endpoint pair, both ways",
    () =>
      Effect.gen(function* () {
        const build = Effect.map(Layer.build(engineLayer()), (ctx) => ({
          engine: ctx.unsafeMap.get(TransferEngine.TransferEngine.key) as TransferEngine.TransferEngineShape,
          // The engine's RDMA transport, an internal service of its Layer.
          rdma: ctx.unsafeMap.get(RdmaTransport.RdmaTransport.key) as RdmaTransport.RdmaTransportShape
        }))
        const { engine: e1, rdma: r1 } = yield* build
        const { engine: e2, rdma: r2 } = yield* build
        yield* e1.openSegment(e2.segmentName)
        yield* e2.openSegment(e1.segmentName)
        yield* Effect.all(
          [
            e1.sendNotification(e2.segmentName, makeNotification("1->2", "first")),
            e2.sendNotification(e1.segmentName, makeNotification("2->1", "first"))
          ],
          { concurrency: 2 }
        )
        const ep1 = onlyEndpoint(r1)
        const ep2 = onlyEndpoint(r2)
        expectCrosswise(ep1, ep2)
        expect(ep1.peerNicPath).toBe(`${e2.segmentName}@mlx0`)
        expect(ep2.peerNicPath).toBe(`${e1.segmentName}@mlx0`)
        for (let i = 0; i < 10; i++) {
          yield* e1.sendNotification(e2.segmentName, makeNotification(`1->2 #${i}`, "more"))
          yield* e2.sendNotification(e1.segmentName, makeNotification(`2->1 #${i}`, "more"))
        }
        const at1: Array<string> = []
        const at2: Array<string> = []
        const arrived = yield* waitUntil(() => {
          for (const n of Effect.runSync(e1.receiveNotifications)) at1.push(text(n))
          for (const n of Effect.runSync(e2.receiveNotifications)) at2.push(text(n))
          return at1.length >= 11 && at2.length >= 11
        }, 20_000)
        expect(arrived).toBe(true)
        expect(at1).toEqual(["2->1", ...Array.from({ length: 10 }, (_, i) => `2->1 #${i}`)])
        expect(at2).toEqual(["1->2", ...Array.from({ length: 10 }, (_, i) => `1->2 #${i}`)])
        // Still one endpoint per side afterwards.
        expectSame(onlyEndpoint(r1), ep1)
        expectSame(onlyEndpoint(r2), ep2)
      }).pipe(Effect.timeout("50 seconds"))
  )
})
