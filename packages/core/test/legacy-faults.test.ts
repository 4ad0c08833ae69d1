/**
 * TENT `main`'s notification faults, reproduced between two real processes under `Series.legacy`, each test naming
 * the RFC PR whose Layer flips it; beside each built PR, the same steps under that PR's Layer (`Series.QpRetirement`,
 * `Series.RpcFallback`, `Series.PeerHealth`, `Series.DescriptorPolicy`), for which the legacy test is the negative
 * control. PR 7's (the receiver's notify QP forced to ERR loses the sends in flight) still waits for its Layer.
 */
import { describe, expect, it } from "@effect/vitest"
import { RailHealth } from "@tent/health"
import { makeNotification, TransportFailure } from "@tent/rpc"
import { Context, Effect, Fiber, Layer } from "effect"
import { Diagnostics, NotificationRouting, PeerHealth, Series } from "../src/index.js"
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

/** A two-process test's vitest timeout: the peer's start and the test's own bounded waits. */
const TWO_PROCESS_TEST_MS = Pair.testTimeout()

const waitUntil = (check: Effect.Effect<boolean>, ms: number) =>
  Effect.gen(function* () {
    const deadline = Date.now() + ms
    while (Date.now() < deadline) {
      if (yield* check) return true
      yield* Effect.sleep("20 millis")
    }
    return yield* check
  })

describe("TENT main's faults and the RFC PR that fixes each, two processes", () => {
  /**
   * The peer sends 100 notifications that complete on the wire while this engine's notify poller is held; then this
   * fiber retires the endpoint (as TENT's RPC handler, data worker or eviction would) and the poller resumes.
   */
  const retireWithUnpolled = (engine: Pair.TestEngine, peer: Peer) =>
    Effect.gen(function* () {
      const rdma = engine.rdma as NonNullable<typeof engine.rdma>
      // Establish the endpoint (the peer bootstraps towards this engine's NIC 0).
      const warm = yield* request<{ failed: number }>(peer, {
        cmd: "send",
        target: engine.segmentName,
        prefix: "warm",
        count: 1
      })
      expect(warm.failed).toBe(0)
      expect(
        yield* waitUntil(
          Effect.sync(() => rdma.counters.received === 1),
          20_000
        )
      ).toBe(true)
      yield* rdma.pauseNotifyPoller(true)
      const sent = yield* request<{ failed: number }>(peer, {
        cmd: "send",
        target: engine.segmentName,
        prefix: "r",
        count: 100
      })
      expect(sent.failed).toBe(0)
      const acked = yield* waitUntil(
        Effect.map(request<Stats>(peer, { cmd: "stats" }), (s) => s.endpoints.every((e) => e.pending === 0)),
        20_000
      )
      expect(acked).toBe(true)
      const [ep] = yield* rdma.endpoints
      expect(ep).toBeDefined()
      expect(yield* rdma.retire(ep?.localNic as string, ep?.peerNicPath as string)).toBe(true)
      yield* rdma.pauseNotifyPoller(false)
      yield* waitUntil(
        Effect.sync(() => rdma.counters.unknownQp + rdma.counters.received >= 101),
        20_000
      )
      const got = (yield* engine.receiveNotifications).filter((n) => new TextDecoder().decode(n.name)[0] === "r")
      return { unknownQp: rdma.counters.unknownQp, got: got.length }
    })

  it.live(
    "[flipped by RFC PR 1, QpRetirement] retirement from a fiber other than the poller loses unpolled notifications as 'unknown QP'",
    () =>
      withEngines((engine, peer) =>
        Effect.map(retireWithUnpolled(engine, peer), (r) => {
          // Legacy: the QP number was unpublished before the QP went to ERR: every unpolled RECV is "unknown QP".
          expect(r).toEqual({ unknownQp: 100, got: 0 })
        })
      ),
    TWO_PROCESS_TEST_MS
  )

  it.live(
    "[RFC PR 1, Series.QpRetirement] the same retirement loses nothing: the notify QP stays published until deconstruct (control: the test above)",
    () =>
      Pair.withEngines({ series: Layer.merge(Series.legacy, Series.QpRetirement) }, (engine, peer) =>
        Effect.map(retireWithUnpolled(engine, peer), (r) => {
          expect(r).toEqual({ unknownQp: 0, got: 100 })
        })
      ),
    TWO_PROCESS_TEST_MS
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
          // The sender's window fills with sends that never complete (bounded wait, in wall time): then whatever was
          // going to arrive has arrived.
          yield* waitUntil(
            Effect.map(rdma.endpoints, ([e]) => e?.pending === 256),
            20_000
          )
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
    TWO_PROCESS_TEST_MS
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
            // each call waits out the whole bootstrap timeout (the rule is this lower bound; how late a loaded
            // machine fires the timer is not)
            for (const t of times) expect(t).toBeGreaterThanOrEqual(480)
          }),
        { rpc: { bootstrap_timeout_ms: 500 } }
      ),
    TWO_PROCESS_TEST_MS
  )

  it.live(
    "[RFC PR 4, Series.PeerHealth] the same frozen peer: one bootstrap timeout, then the next call fails at once; after SIGCONT the prober clears the mark and a send gets through within about a second (control: the test above)",
    () =>
      Pair.withEngines(
        {
          json: { rpc: { bootstrap_timeout_ms: 500, probe_timeout_ms: 500 } },
          series: Layer.merge(Series.legacy, Series.PeerHealth)
        },
        (engine, peer, ctx) =>
          Effect.gen(function* () {
            const diag = Context.get(ctx as Context.Context<Diagnostics.Diagnostics>, Diagnostics.Diagnostics)
            yield* engine.openSegment(peer.ready.segment)
            peer.signal("SIGSTOP")
            const calls: Array<{ ms: number; error: unknown }> = []
            for (let k = 0; k < 2; k++) {
              const t0 = performance.now()
              const error = yield* Effect.flip(engine.sendNotification(peer.ready.segment, makeNotification("f", "x")))
              calls.push({ ms: performance.now() - t0, error })
            }
            const resumed = performance.now()
            peer.signal("SIGCONT")
            // The first waits the timeout and marks the peer; the second is refused by the record without a call.
            expect(calls[0]?.error).toMatchObject({ _tag: "TransportFailure", reason: "Timeout" })
            expect(calls[0]?.ms).toBeGreaterThanOrEqual(480)
            expect(calls[1]?.error).toMatchObject({
              _tag: "TransportFailure",
              message: expect.stringMatching(/PeerHealth/)
            })
            expect(calls[1]?.ms).toBeLessThan(480) // no call: sooner than the 500 ms timeout a call would wait out
            expect(diag.counters.peerHealth?.fastFailures).toBeGreaterThanOrEqual(1)
            // Recovery: sends fail fast until the prober's Probe is answered (probe interval 1 s), then get through.
            let through = -1
            while (through < 0 && performance.now() - resumed < 20_000) {
              const r = yield* Effect.either(engine.sendNotification(peer.ready.segment, makeNotification("r", "x")))
              if (r._tag === "Right") through = performance.now() - resumed
              else yield* Effect.sleep("20 millis")
            }
            console.log(`[RFC PR 4] a send got through ${through.toFixed(0)} ms after SIGCONT (RFC: 705-805 ms)`)
            expect(through).toBeGreaterThanOrEqual(0)
            // a probe interval (1 s) and a bootstrap, loosely: a few intervals on a loaded machine
            expect(through).toBeLessThan(5000)
            expect(diag.counters.peerHealth?.probeSuccesses).toBeGreaterThanOrEqual(1)
          })
      ),
    TWO_PROCESS_TEST_MS
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
            // two timeouts one after the other (the rule is this lower bound)
            expect(elapsed).toBeGreaterThanOrEqual(1250)
          }),
        { transports: { rdma: { enable: false } }, rpc: { notify_timeout_ms: 400, request_timeout_ms: 900 } }
      ),
    TWO_PROCESS_TEST_MS
  )

  // A Notify of 400 ms against the frozen peer; the refetch (GetSegmentDesc) may take 2 s.
  const pr5Config = {
    transports: { rdma: { enable: false } },
    rpc: { notify_timeout_ms: 400, request_timeout_ms: 2000 }
  }
  /** One `Notify` to a peer frozen for `frozenMs`; the call's time and error, and what the peer received (prefix d). */
  const notifyFrozen = (engine: Pair.TestEngine, peer: Peer, frozenMs: number) =>
    Effect.gen(function* () {
      yield* engine.openSegment(peer.ready.segment)
      peer.signal("SIGSTOP")
      const thaw = setTimeout(() => peer.signal("SIGCONT"), frozenMs)
      const t0 = performance.now()
      const r = yield* Effect.either(engine.sendNotification(peer.ready.segment, payload("d", 0)))
      const ms = performance.now() - t0
      yield* Effect.sleep(Math.max(0, frozenMs - ms))
      clearTimeout(thaw)
      peer.signal("SIGCONT")
      // The resumed peer handles what it had received (bounded wait, in wall time); then a copy, if one were coming,
      // has half a second to land.
      const received = () => request<Check & { duplicates: number }>(peer, { cmd: "received", prefix: "d" })
      yield* waitUntil(
        Effect.map(received(), (c) => c.count >= 1),
        20_000
      )
      yield* Effect.sleep("500 millis")
      const got = yield* received()
      return { ms, error: r._tag === "Left" ? r.left : undefined, got }
    })

  it.live(
    "[flipped by RFC PR 5, DescriptorPolicy] a Notify that timed out runs again after the refetch: the peer, resumed meanwhile, receives it twice",
    () =>
      withEngines(
        (engine, peer) =>
          Effect.map(notifyFrozen(engine, peer, 700), (r) => {
            // Notify timed out at 400 ms; the refetch reached the peer once it resumed (700 ms) and the call ran again.
            expect(r.error).toBeUndefined()
            expect(r.got.count).toBe(2)
            expect(r.got.duplicates).toBe(1)
          }),
        pr5Config,
        { transports: { rdma: { enable: false } } } // the peer drains what Notify brings
      ),
    TWO_PROCESS_TEST_MS
  )

  it.live(
    "[RFC PR 5, Series.DescriptorPolicy] the same Notify fails with its own timeout, keeps the descriptor and is delivered once (control: the test above)",
    () =>
      Pair.withEngines(
        {
          json: pr5Config,
          peerJson: { transports: { rdma: { enable: false } } },
          series: Layer.merge(Series.legacy, Series.DescriptorPolicy)
        },
        (engine, peer) =>
          Effect.map(notifyFrozen(engine, peer, 700), (r) => {
            expect(r.error).toMatchObject({ _tag: "TransportFailure", reason: "Timeout" })
            expect(r.ms).toBeGreaterThanOrEqual(380)
            // One Notify timeout, no refetch: a refetch reaches the peer once it resumes and the call runs again and
            // succeeds (the test above), so the Timeout is the proof, not how soon it came.
            expect(r.got.count).toBe(1) // the request the frozen peer had received is handled when it resumes
            expect(r.got.duplicates).toBe(0)
          })
      ),
    TWO_PROCESS_TEST_MS
  )

  /** A 4 KiB WRITE to the frozen peer over RDMA only; what RailHealth holds for this engine's pairs after it fails. */
  const frozenWriteRails = (engine: Pair.TestEngine, peer: Peer, ctx: Context.Context<unknown>) =>
    Effect.gen(function* () {
      const src = yield* engine.registerSegment(Buffer.alloc(4096, 1))
      const dst = yield* request<{ addr: number }>(peer, { cmd: "register", size: 4096 })
      yield* engine.openSegment(peer.ready.segment)
      peer.signal("SIGSTOP")
      const batch = yield* engine.allocateBatch
      const submitted = yield* Effect.either(
        engine.submitTransfer(batch, [
          { opcode: "WRITE", source: src.addr, target: peer.ready.segment, targetOffset: dst.addr, length: 4096 }
        ])
      )
      const status = submitted._tag === "Right" ? (yield* engine.waitTransfer(batch, 20_000)).status : "submit failed"
      peer.signal("SIGCONT")
      console.log(`frozen WRITE: ${status}${submitted._tag === "Left" ? ` (${submitted.left.message})` : ""}`)
      expect(status).toBe("FAILED")
      const rails = yield* Context.get(ctx as Context.Context<RailHealth.RailHealth>, RailHealth.RailHealth).snapshot
      return rails.reduce((n, r) => n + r.errors, 0)
    })
  const railConfig = {
    transports: { tcp: { enable: false }, rdma: { workers: { max_retry_count: 2 } } },
    rpc: { bootstrap_timeout_ms: 300, request_timeout_ms: 300 }
  }

  it.live(
    "[flipped by RFC PR 4, PeerHealth] a slice whose bootstrap the frozen peer never answered is charged to its NIC pair in RailHealth",
    () =>
      Pair.withEngines({ json: railConfig }, (engine, peer, ctx) =>
        Effect.map(frozenWriteRails(engine, peer, ctx), (errors) => expect(errors).toBeGreaterThan(0))
      ),
    TWO_PROCESS_TEST_MS
  )

  it.live(
    "[RFC PR 4] with chargeUnansweredBootstrap false the same slice charges no pair (control: the test above)",
    () =>
      Pair.withEngines(
        {
          json: railConfig,
          series: Layer.merge(
            Series.legacy,
            Layer.succeed(PeerHealth.PeerHealthPolicy, { ...PeerHealth.legacy, chargeUnansweredBootstrap: false })
          )
        },
        (engine, peer, ctx) => Effect.map(frozenWriteRails(engine, peer, ctx), (errors) => expect(errors).toBe(0))
      ),
    TWO_PROCESS_TEST_MS
  )

  const probeConfig = { rpc: { request_timeout_ms: 400 } }
  /** `probePeerAlive` (TENT `probePeerAliveByID`) against the frozen peer: its time, how late a timer of one request timeout fired, and its error. */
  const probeFrozen = (engine: Pair.TestEngine, peer: Peer) =>
    Effect.gen(function* () {
      yield* engine.openSegment(peer.ready.segment)
      peer.signal("SIGSTOP")
      // a plain timer of one request timeout, armed with the probe: how late this machine fires a timer
      let fired = Number.NaN
      const t0 = performance.now()
      const timer = setTimeout(() => {
        fired = performance.now()
      }, probeConfig.rpc.request_timeout_ms)
      const r = yield* Effect.either(engine.probePeerAlive(peer.ready.segment))
      const ms = performance.now() - t0
      clearTimeout(timer)
      peer.signal("SIGCONT")
      const timerLate = Number.isNaN(fired) ? 0 : fired - t0 - probeConfig.rpc.request_timeout_ms
      return { ms, timerLate, error: r._tag === "Left" ? r.left : undefined }
    })

  it.live(
    "[flipped by RFC PR 5, DescriptorPolicy] a failed Probe refetches the descriptor from the frozen peer and probes again: two timeouts",
    () =>
      withEngines(
        (engine, peer) =>
          Effect.map(probeFrozen(engine, peer), (r) => {
            expect(r.error).toMatchObject({ _tag: "TransportFailure", reason: "Timeout" })
            expect(r.ms).toBeGreaterThanOrEqual(780) // Probe 400 ms, then GetSegmentDesc 400 ms
          }),
        probeConfig
      ),
    TWO_PROCESS_TEST_MS
  )

  it.live(
    "[RFC PR 5, Series.DescriptorPolicy] the same Probe fails with its own timeout, once (control: the test above)",
    () =>
      Pair.withEngines(
        { json: probeConfig, series: Layer.merge(Series.legacy, Series.DescriptorPolicy) },
        (engine, peer) =>
          Effect.map(probeFrozen(engine, peer), (r) => {
            expect(r.error).toMatchObject({ _tag: "TransportFailure", reason: "Timeout" })
            expect(r.ms).toBeGreaterThanOrEqual(380)
            // less than the two timeouts of the test above, beyond how late a plain timer fired meanwhile
            expect(r.ms - r.timerLate).toBeLessThan(780)
          })
      ),
    TWO_PROCESS_TEST_MS
  )

  /** The peer (TCP only: its notifications go as control-plane `Notify`s) sends `count`; what this engine drains. */
  const notifyInto = (engine: Pair.TestEngine, peer: Peer, count: number) =>
    Effect.gen(function* () {
      const reply = yield* request<{ failed: number }>(peer, {
        cmd: "send",
        target: engine.segmentName,
        prefix: "t",
        count
      })
      expect(reply.failed).toBe(0) // the sender saw every call succeed
      // The peer's calls returned: each Notify was answered, so whatever this engine kept is queued by now.
      const got: Array<string> = []
      for (let i = 0; i < 3; i++) {
        for (const n of yield* engine.receiveNotifications) got.push(new TextDecoder().decode(n.name))
        yield* Effect.sleep("20 millis")
      }
      return got
    })
  const tcpOnly = { transports: { rdma: { enable: false } } }
  const rdmaOnly = { transports: { tcp: { enable: false } } }
  const withPr3 = Layer.merge(Series.legacy, Series.RpcFallback)

  it.live(
    "[flipped by RFC PR 3, NotificationRouting] a Notify that arrives over the control plane is queued by TCP but never drained while RDMA is installed",
    () =>
      Pair.withEngines({ peerJson: tcpOnly }, (engine, peer) =>
        Effect.gen(function* () {
          expect(yield* notifyInto(engine, peer, 10)).toEqual([])
          const tcp = engine.tcp as NonNullable<typeof engine.tcp>
          expect(tcp.counters.received).toBe(10)
          expect(tcp.inbox.size).toBe(10)
        })
      ),
    TWO_PROCESS_TEST_MS
  )

  it.live(
    "[flipped by RFC PR 3, NotificationRouting] an RDMA-only receiver answers 2000 Notifys with success and keeps 0 of them",
    () =>
      Pair.withEngines({ json: rdmaOnly, peerJson: tcpOnly }, (engine, peer) =>
        Effect.map(notifyInto(engine, peer, 2000), (got) => expect(got.length).toBe(0))
      ),
    TWO_PROCESS_TEST_MS
  )

  it.live(
    "[RFC PR 3, Series.RpcFallback] every queue is drained and an RDMA-only engine takes Notify: 10 of 10 with TCP installed, 2000 of 2000 without (controls: the two tests above)",
    () =>
      Effect.gen(function* () {
        const withTcp = yield* Pair.withEngines({ peerJson: tcpOnly, series: withPr3 }, (engine, peer) =>
          notifyInto(engine, peer, 10)
        )
        expect(withTcp).toEqual(Array.from({ length: 10 }, (_, i) => `t${i}`))
        const without = yield* Pair.withEngines(
          { json: rdmaOnly, peerJson: tcpOnly, series: withPr3 },
          (engine, peer) => notifyInto(engine, peer, 2000)
        )
        expect(without).toEqual(Array.from({ length: 2000 }, (_, i) => `t${i}`))
      }),
    2 * TWO_PROCESS_TEST_MS
  )

  /** An error's tag, reason and message: what a mismatch prints (printing the error itself overflowed the stack). */
  const summary = (e: unknown) => {
    const f = e as { _tag?: unknown; reason?: unknown; message?: unknown }
    return { _tag: f?._tag, reason: f?.reason, message: String(f?.message) }
  }
  /** Two `sendNotification`s to a frozen peer whose descriptor is cached: each call's time and error. */
  const frozenSends = (engine: Pair.TestEngine, peer: Peer) =>
    Effect.gen(function* () {
      yield* engine.openSegment(peer.ready.segment)
      peer.signal("SIGSTOP")
      const out: Array<{ ms: number; error: unknown }> = []
      for (let k = 0; k < 2; k++) {
        const t0 = performance.now()
        const error = yield* Effect.flip(engine.sendNotification(peer.ready.segment, makeNotification("f", "x")))
        out.push({ ms: performance.now() - t0, error })
      }
      peer.signal("SIGCONT")
      return out
    })
  // A bootstrap timeout of 500 ms, a Notify timeout of 3 s: a second (fallback) call would show as ≥ 3.5 s (the
  // legacy descriptor refetch after a failed Notify is bounded by the 500 ms request timeout).
  const frozenConfig = { rpc: { bootstrap_timeout_ms: 500, notify_timeout_ms: 3000, request_timeout_ms: 500 } }

  it.live(
    "[RFC PR 3, Series.RpcFallback] a bootstrap that failed because the control plane did not answer is not retried over it: one timeout per call",
    () =>
      Pair.withEngines({ json: frozenConfig, series: withPr3 }, (engine, peer) =>
        Effect.map(frozenSends(engine, peer), (calls) => {
          for (const c of calls) {
            expect(summary(c.error)).toMatchObject({ _tag: "TransportFailure", reason: "Timeout" })
            expect(c.ms).toBeGreaterThanOrEqual(480)
            // not also the 3 s Notify timeout of a fallback over the control plane (the control below: ≥ 3.4 s)
            expect(c.ms).toBeLessThan(3400)
          }
        })
      ),
    TWO_PROCESS_TEST_MS
  )

  it.live(
    "negative control: a routing that also falls back after a TransportFailure pays more timeouts per call",
    () =>
      Pair.withEngines(
        {
          json: frozenConfig,
          series: Layer.merge(
            Series.legacy,
            Layer.succeed(NotificationRouting.NotificationRouting, {
              ...NotificationRouting.rpcFallback,
              fallback: () => true
            })
          )
        },
        (engine, peer) =>
          Effect.map(frozenSends(engine, peer), (calls) => {
            // The first call: the bootstrap timeout, then the Notify timeout over TCP (and the legacy refetch after
            // it); the descriptor is gone after that, so the second call pays a 500 ms fetch for each of its three
            // senders. Either way more than the one timeout the series arm pays.
            const [first, second] = calls
            expect(first?.ms).toBeGreaterThanOrEqual(3400)
            expect(second?.ms).toBeGreaterThanOrEqual(1400)
          })
      ),
    TWO_PROCESS_TEST_MS
  )
})
