/**
 * The seams are wide enough for their RFC PRs: each test puts a non-legacy policy through a seam the way its PR will,
 * and runs the same steps with the legacy Layer as the negative control. Engines here are in this process, over the
 * real control plane on 127.0.0.1; the RDMA transports of the last two tests are wired to each other in-process.
 */
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, type Notification, type RpcAgent, TransportFailure } from "@tent/rpc"
import { Duration, Effect, Queue } from "effect"
import { Dedup, NotificationRouting, PeerHealth, QpRetirement, type Resend } from "../src/index.js"
import { NOTIFY_SLOTS } from "../src/internal/NotifyChannel.js"
import type { RdmaDevice } from "../src/internal/rdma/RdmaContext.js"
import { type Side, twoTransports } from "./fixtures/endpoints.js"
import { tentSlots } from "./fixtures/engine.js"
import { bySize, engine, openReceiver, rdmaOnly, receive, series, tcpOnly, until } from "./fixtures/policies.js"

const text = (n: Notification) => new TextDecoder().decode(n.name)

describe("NotificationRouting: decided per notification, the control plane always offered last (RFC PR 3's seam)", () => {
  const big = makeNotification("big", new Uint8Array(100_000).fill(7))

  it.scopedLive("an RDMA-only engine sends a notification larger than a slot over the control plane's Notify", () =>
    Effect.gen(function* () {
      const rx = yield* engine(rdmaOnly, series({ routing: openReceiver }))
      const tx = yield* engine(rdmaOnly, series({ routing: bySize() }))
      yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification("small", "x"))
      yield* tx.engine.sendNotification(rx.engine.segmentName, big)
      const got = yield* receive(rx.engine, 2)
      expect(got.map(text).sort()).toEqual(["big", "small"])
      expect(got.find((n) => text(n) === "big")?.msg).toEqual(big.msg)
      expect(tx.diag.counters.rdma?.sent).toBe(1) // the small one went over the notify QP
    })
  )

  it.scopedLive("negative control: with the legacy routing the same send fails NotificationTooLarge", () =>
    Effect.gen(function* () {
      const rx = yield* engine(rdmaOnly, series({ routing: openReceiver }))
      const tx = yield* engine(rdmaOnly)
      const r = yield* Effect.either(tx.engine.sendNotification(rx.engine.segmentName, big))
      expect(r._tag === "Left" && r.left._tag).toBe("NotificationTooLarge")
    })
  )
})

describe("Dedup.admit: one admission at the one delivery point, for every transport (RFC PR 6's seam)", () => {
  /** One notification over the notify QP (an RDMA sender) and one over `Notify` (a TCP-only sender). */
  const twoWays = (dedup: Dedup.DedupShape) =>
    Effect.gen(function* () {
      const rx = yield* engine({}, series({ routing: openReceiver, dedup }))
      const viaRdma = yield* engine(rdmaOnly)
      const viaTcp = yield* engine(tcpOnly)
      yield* viaRdma.engine.sendNotification(rx.engine.segmentName, makeNotification("rdma", "1"))
      yield* viaTcp.engine.sendNotification(rx.engine.segmentName, makeNotification("tcp", "2"))
      const counters = rx.diag.counters
      const arrived = yield* until(
        () => (counters.rdma?.received ?? 0) + (counters.rdma?.duplicates ?? 0) === 1 && counters.tcp?.received === 1
      )
      expect(arrived).toBe(true)
      return { rx, got: yield* receive(rx.engine, 2, 500), viaRdma }
    })

  it.scopedLive(
    "a policy that refuses drops both, seeing each sender once: a NIC path and a control-plane caller",
    () =>
      Effect.gen(function* () {
        const senders: Array<string> = []
        const { rx, got, viaRdma } = yield* twoWays({
          ...Dedup.legacy,
          admit: (sender) => {
            senders.push(sender)
            return false
          }
        })
        expect(got).toEqual([])
        expect(rx.diag.counters.rdma?.duplicates).toBe(1)
        expect(senders.sort()).toEqual([`${viaRdma.engine.segmentName}@mlx0`, expect.stringMatching(/^rpc#\d+$/)])
      })
  )

  it.scopedLive("negative control: the legacy policy admits both", () =>
    Effect.gen(function* () {
      const { got } = yield* twoWays(Dedup.legacy)
      expect(got.map(text).sort()).toEqual(["rdma", "tcp"])
    })
  )
})

describe("PeerHealthPolicy.decorate: every control-plane call of the engine passes it (RFC PR 4's seam)", () => {
  /** The agent with each call recorded by name, and failing without a call when `refuse` holds. */
  const guard =
    (seen: Array<string>, refuse: boolean) =>
    (agent: RpcAgent.RpcAgentShape): RpcAgent.RpcAgentShape =>
      Object.fromEntries(
        Object.entries(agent).map(([name, f]) => [
          name,
          typeof f !== "function"
            ? f
            : (address: string, ...rest: Array<unknown>) => {
                seen.push(name)
                return refuse
                  ? Effect.fail(new TransportFailure({ address, reason: "Refused", message: "marked dead" }))
                  : (f as (...a: Array<unknown>) => unknown)(address, ...rest)
              }
        ])
      ) as unknown as RpcAgent.RpcAgentShape

  it.scopedLive("descriptor fetch, bootstrap, Notify and the TCP data calls all pass the decoration", () =>
    Effect.gen(function* () {
      const seen: Array<string> = []
      const rx = yield* engine({})
      const tx = yield* engine({}, series({ peerHealth: { ...PeerHealth.legacy, decorate: guard(seen, false) } }))
      yield* tx.engine.openSegment(rx.engine.segmentName)
      yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification("n", "over rdma"))
      const viaTcp = yield* engine(
        tcpOnly,
        series({ peerHealth: { ...PeerHealth.legacy, decorate: guard(seen, false) } })
      )
      yield* viaTcp.engine.sendNotification(rx.engine.segmentName, makeNotification("n", "over tcp"))
      const dst = yield* rx.engine.registerSegment(Buffer.alloc(4096))
      const src = yield* viaTcp.engine.registerSegment(Buffer.alloc(4096, 1))
      const batch = yield* viaTcp.engine.allocateBatch
      const write = { opcode: "WRITE", source: src.addr, target: rx.engine.segmentName, length: 4096 } as const
      yield* viaTcp.engine.submitTransfer(batch, [{ ...write, targetOffset: dst.addr }])
      expect((yield* viaTcp.engine.waitTransfer(batch, 10_000)).status).toBe("COMPLETED")
      expect(new Set(seen)).toEqual(new Set(["getSegmentDesc", "bootstrap", "notify", "sendData"]))
    })
  )

  it.scopedLive("a decoration that refuses fails openSegment at once with its TransportFailure; legacy succeeds", () =>
    Effect.gen(function* () {
      const rx = yield* engine({})
      const refused = yield* engine({}, series({ peerHealth: { ...PeerHealth.legacy, decorate: guard([], true) } }))
      const r = yield* Effect.either(refused.engine.openSegment(rx.engine.segmentName))
      expect(r._tag === "Left" && r.left.message).toContain("marked dead")
      const plain = yield* engine({})
      expect(yield* plain.engine.openSegment(rx.engine.segmentName)).toBeGreaterThan(0)
    })
  )
})

describe("QpRetirement.onNotifyError and the Resend trigger (RFC PRs 1 and 7's seams)", () => {
  const tracking: Resend.ResendShape = { track: true, onRetire: () => Effect.void }
  /** What moving A's notify QP to ERR flushes: the 5 sends and every posted receive (a READY endpoint: not quiet). */
  const flushes = 5 + NOTIFY_SLOTS

  /** A's endpoint to B with `count` notify sends posted that B never acknowledges (A's outgoing packets dropped). */
  const pendingSends = (A: Side, count: number) =>
    Effect.gen(function* () {
      const ep = yield* A.getEndpoint(A.devices[0] as RdmaDevice, { server: "B", address: "B" }, "mlx0")
      yield* A.control.setFaults("mlx0", { dropOut: 1 })
      for (let i = 0; i < count; i++) expect(ep.notify.postNotification(makeNotification(`n${i}`, "x"))).toBe(0)
      expect(ep.pending).toBe(count)
      return ep
    })

  it.scopedLive(
    "'disable': a failed notify completion frees its unit, disables the channel, hands its sends over",
    () =>
      Effect.gen(function* () {
        const { A } = yield* twoTransports(undefined, {
          retirement: { ...QpRetirement.legacy, onNotifyError: "disable" },
          resend: tracking,
          config: tentSlots
        })
        const ep = yield* pendingSends(A, 5)
        yield* A.control.forceQpError("mlx0", ep.notifyQpNum)
        // The first failed completion disables the channel; the flushes after it are quiet (a disabled notify QP is
        // "not ready" in the completion classifier).
        expect(yield* until(() => A.counters.notifyErrors + A.counters.flushed === flushes)).toBe(true)
        expect([A.counters.notifyErrors, A.counters.flushed]).toEqual([1, flushes - 1])
        expect([ep.pending, ep.connected, ep.status]).toEqual([0, false, "READY"])
        expect(A.counters.closedInFlight).toBe(5) // the five sends the disabled channel had in flight
        const channel = yield* Queue.take(A.retiring)
        expect(channel.cause).toBe("disable")
        expect(channel.pending.map((p) => text(p.notification))).toEqual(["n0", "n1", "n2", "n3", "n4"])
        expect(yield* Queue.size(A.retiring)).toBe(0)
      })
  )

  it.scopedLive(
    "negative control: under the legacy 'log' the units leak, the channel stays connected, nothing queued",
    () =>
      Effect.gen(function* () {
        const { A } = yield* twoTransports(undefined, { resend: tracking, config: tentSlots })
        const ep = yield* pendingSends(A, 5)
        yield* A.control.forceQpError("mlx0", ep.notifyQpNum)
        expect(yield* until(() => A.counters.notifyErrors === flushes)).toBe(true)
        expect([ep.pending, ep.connected]).toEqual([5, true])
        expect(yield* Queue.size(A.retiring)).toBe(0)
      })
  )

  it.scopedLive(
    "retirement hands a tracked channel's pending sends to the resend queue; untracked (legacy), nothing",
    () =>
      Effect.gen(function* () {
        const tracked = yield* twoTransports(undefined, { resend: tracking })
        yield* tracked.A.resetConnection(yield* pendingSends(tracked.A, 3))
        const channel = yield* Queue.take(tracked.A.retiring)
        expect([channel.cause, channel.peerNicPath, channel.pending.length]).toEqual(["retire", "B@mlx0", 3])
        const legacy = yield* twoTransports()
        yield* legacy.A.resetConnection(yield* pendingSends(legacy.A, 3))
        expect(yield* Queue.size(legacy.A.retiring)).toBe(0)
      })
  )
})

describe("PeerHealthPolicy.slotWait (RFC PR 4): the wait for a free notify send slot", () => {
  /** A's endpoint to B with the 256-send window full (A's packets dropped), then one more send: when does it end? */
  const fullWindow = (peerHealth: PeerHealth.PeerHealthPolicyShape) =>
    Effect.gen(function* () {
      const { A } = yield* twoTransports(undefined, { peerHealth })
      const ep = yield* A.getEndpoint(A.devices[0] as RdmaDevice, { server: "B", address: "B" }, "mlx0")
      yield* A.control.setFaults("mlx0", { dropOut: 1 })
      for (let i = 0; i < NOTIFY_SLOTS; i++) expect(ep.notify.postNotification(makeNotification(`n${i}`, "x"))).toBe(0)
      const t0 = performance.now()
      const r = yield* Effect.either(
        Effect.timeout(
          A.sendVia(A.devices[0] as RdmaDevice, "B", "mlx0", makeNotification("one more", "x"), undefined),
          "3 seconds"
        )
      )
      return { ms: performance.now() - t0, r }
    })

  it.scopedLive("[RFC PR 4] bounded at 1 s: EndpointUnavailable, which PR 3's fallback takes to the next sender", () =>
    Effect.gen(function* () {
      const { ms, r } = yield* fullWindow({ ...PeerHealth.legacy, slotWait: Duration.seconds(1) })
      expect(r._tag === "Left" && r.left._tag).toBe("EndpointUnavailable")
      expect(NotificationRouting.rpcFallback.fallback(r._tag === "Left" ? r.left : undefined)).toBe(true)
      expect(ms).toBeGreaterThanOrEqual(990)
      // ended by its own 1 s bound, before the test's 3 s timeout (which the legacy wait runs into: the control below)
      expect(ms).toBeLessThan(3000)
    })
  )

  it.scopedLive(
    "[RFC PR 4] a peer marked unreachable: no wait at all (the RFC's 'then 0 s'), the address consulted",
    () =>
      Effect.gen(function* () {
        const asked: Array<string> = []
        const { ms, r } = yield* fullWindow({
          ...PeerHealth.legacy,
          slotWait: Duration.seconds(1),
          unreachable: (address) => {
            asked.push(address)
            return true
          }
        })
        expect(r._tag === "Left" && r.left._tag).toBe("EndpointUnavailable")
        expect(r._tag === "Left" && r.left.message).toContain("marked unreachable")
        expect(asked).toContain("B")
        // no slot wait: sooner than the 1 s wait it would have had otherwise
        expect(ms).toBeLessThan(990)
      })
  )

  it.scopedLive("negative control: the legacy wait has no bound (still waiting at 3 s)", () =>
    Effect.gen(function* () {
      const { r } = yield* fullWindow(PeerHealth.legacy)
      expect(r._tag === "Left" && r.left._tag).toBe("TimeoutException")
    })
  )
})
