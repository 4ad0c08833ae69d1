/**
 * TENT `main`'s notification faults, reproduced between two real processes under `Series.legacy`. Each test names
 * the RFC PR whose Layer will flip it; each must fail once that Layer replaces the legacy one.
 */
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, TransportFailure } from "@tent/rpc"
import { Effect, Fiber } from "effect"
import { payload } from "./fixtures/engine.js"
import type { Peer } from "./fixtures/pair.js"
import * as Pair from "./fixtures/pair.js"

interface Check {
  readonly count: number
  readonly distinct: number
  readonly outOfOrder: number
  readonly corrupt: number
}
interface Stats {
  readonly counters: Record<string, number>
  readonly endpoints: ReadonlyArray<{
    localNic: string
    peerNicPath: string
    notifyQpNum: number
    pending: number
    status: string
  }>
}

const withEngines = <A, E>(
  body: (engine: Pair.TestEngine, peer: Peer) => Effect.Effect<A, E>,
  json: unknown = {},
  peerJson: unknown = {}
) => Pair.withEngines({ json, peerJson }, body)
const { request } = Pair

const waitUntil = (check: Effect.Effect<boolean>, ms: number) =>
  Effect.gen(function* () {
    const deadline = Date.now() + ms
    while (Date.now() < deadline) {
      if (yield* check) return true
      yield* Effect.sleep("20 millis")
    }
    return yield* check
  })

describe("legacy faults (Series.legacy), two processes", () => {
  it.live(
    "[flipped by RFC PR 1, QpRetirement] retirement from a fiber other than the poller loses unpolled notifications as 'unknown QP'",
    () =>
      withEngines((engine, peer) =>
        Effect.gen(function* () {
          const rdma = engine.rdma as NonNullable<typeof engine.rdma>
          // Establish the endpoint (the peer bootstraps towards this engine's NIC 0).
          yield* request(peer, { cmd: "send", target: engine.segmentName, prefix: "warm", count: 1 })
          expect(
            yield* waitUntil(
              Effect.sync(() => rdma.counters.received === 1),
              5000
            )
          ).toBe(true)
          // Hold the notify poller between passes; 100 notifications arrive and complete on the wire, unpolled here.
          yield* rdma.pauseNotifyPoller(true)
          yield* request(peer, { cmd: "send", target: engine.segmentName, prefix: "r", count: 100 })
          const acked = yield* waitUntil(
            Effect.map(request<Stats>(peer, { cmd: "stats" }), (s) => s.endpoints.every((e) => e.pending === 0)),
            10_000
          )
          expect(acked).toBe(true)
          // This fiber retires the endpoint (as TENT's RPC handler, data worker or eviction would).
          const [ep] = yield* rdma.endpoints
          expect(ep).toBeDefined()
          expect(yield* rdma.retire(ep?.localNic as string, ep?.peerNicPath as string)).toBe(true)
          yield* rdma.pauseNotifyPoller(false)
          yield* waitUntil(
            Effect.sync(() => rdma.counters.unknownQp >= 100),
            5000
          )
          const got = (yield* engine.receiveNotifications).filter((n) => new TextDecoder().decode(n.name)[0] === "r")
          // Legacy: the QP number was unpublished before the QP went to ERR: every unpolled RECV is "unknown QP".
          expect(rdma.counters.unknownQp).toBe(100)
          expect(got.length).toBe(0)
        })
      ),
    60_000
  )

  it.live(
    "[flipped by RFC PR 7, Resend] the receiver's notify QP forced to ERR mid-stream loses the sends in flight",
    () =>
      withEngines((engine, peer) =>
        Effect.gen(function* () {
          const rdma = engine.rdma as NonNullable<typeof engine.rdma>
          // The sender keeps sending until it is interrupted, so the stream is still running when the QP fails
          // (a fixed count can be delivered whole before the fault lands).
          const sender = yield* Effect.fork(
            Effect.loop(0, {
              while: () => true,
              step: (i) => i + 1,
              body: (i) => engine.sendNotification(peer.ready.segment, payload("e", i)),
              discard: true
            })
          )
          const midway = yield* waitUntil(
            Effect.map(request<Check>(peer, { cmd: "received", prefix: "e" }), (c) => c.count >= 300),
            20_000
          )
          expect(midway).toBe(true)
          yield* request(peer, { cmd: "forceNotifyQpError" })
          // Let whatever was going to arrive arrive; the sender's window fills with sends that never complete.
          yield* Effect.sleep("1500 millis")
          const got = yield* request<Check>(peer, { cmd: "received", prefix: "e" })
          const posted = rdma.counters.sent
          expect(got.count).toBeLessThan(posted)
          expect(got.outOfOrder).toBe(0)
          // The legacy send window waits without a bound: 256 in flight, the sending fiber blocked.
          const [ep] = yield* rdma.endpoints
          expect(ep?.pending).toBe(256)
          expect(sender.unsafePoll()).toBeNull()
          yield* Fiber.interrupt(sender)
        })
      ),
    60_000
  )

  it.live(
    "[flipped by RFC PR 4, PeerHealth] a frozen peer blocks sendNotification for the whole bootstrap timeout, each call again",
    () =>
      withEngines(
        (engine, peer) =>
          Effect.gen(function* () {
            yield* engine.openSegment(peer.ready.segment)
            peer.signal("SIGSTOP")
            const times: Array<number> = []
            for (let k = 0; k < 2; k++) {
              const t0 = performance.now()
              const err = yield* Effect.flip(engine.sendNotification(peer.ready.segment, makeNotification("f", "x")))
              times.push(performance.now() - t0)
              expect(err).toBeInstanceOf(TransportFailure)
              expect(err).toMatchObject({ reason: "Timeout" })
            }
            peer.signal("SIGCONT")
            for (const t of times) {
              expect(t).toBeGreaterThanOrEqual(480)
              expect(t).toBeLessThan(1500)
            }
          }),
        { rpc: { bootstrap_timeout_ms: 500 } }
      ),
    60_000
  )

  it.live(
    "[flipped by RFC PR 5, DescriptorPolicy] a failed Notify drops the descriptor and refetches it from the same frozen peer",
    () =>
      withEngines(
        (engine, peer) =>
          Effect.gen(function* () {
            expect(engine.rdma).toBeUndefined()
            yield* engine.openSegment(peer.ready.segment)
            peer.signal("SIGSTOP")
            const t0 = performance.now()
            const err = yield* Effect.flip(engine.sendNotification(peer.ready.segment, makeNotification("d", "x")))
            const elapsed = performance.now() - t0
            peer.signal("SIGCONT")
            // Notify times out (400 ms), then the refetch (GetSegmentDesc, 900 ms) to the same address times out and
            // its error is what the caller sees.
            expect(err).toBeInstanceOf(TransportFailure)
            expect(err).toMatchObject({ reason: "Timeout", address: peer.ready.segment })
            expect(elapsed).toBeGreaterThanOrEqual(1250)
            expect(elapsed).toBeLessThan(2600)
          }),
        { transports: { rdma: { enable: false } }, rpc: { notify_timeout_ms: 400, request_timeout_ms: 900 } }
      ),
    60_000
  )

  it.live(
    "[flipped by RFC PR 3, NotificationRouting] a Notify that arrives over the control plane is queued by TCP but never drained while RDMA is installed",
    () =>
      withEngines(
        (engine, peer) =>
          Effect.gen(function* () {
            const reply = yield* request<{ failed: number }>(peer, {
              cmd: "send",
              target: engine.segmentName,
              prefix: "t",
              count: 10
            })
            expect(reply.failed).toBe(0)
            const tcp = engine.tcp as NonNullable<typeof engine.tcp>
            expect(
              yield* waitUntil(
                Effect.sync(() => tcp.counters.received === 10),
                5000
              )
            ).toBe(true)
            expect(yield* engine.receiveNotifications).toEqual([])
            expect(tcp.inbox.size).toBe(10)
          }),
        {},
        { transports: { rdma: { enable: false } } }
      ),
    60_000
  )
})
