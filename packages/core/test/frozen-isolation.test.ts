/**
 * "k of N frozen": a frozen peer must cost the healthy ones nothing — no shared worker, poller, lock or timer that its
 * timeouts hold. TENT's transfer workers bootstrap a peer's endpoint on the worker itself (`Workers::getEndpoint`), so a
 * frozen peer — its host (`SIGSTOP`) or its application (NICs live: the kernel completes the TCP handshake, nothing
 * answers) — holds the worker for the whole bootstrap timeout, and a transfer (and its notification)
 * to a healthy peer queued behind it waits that timeout out. `Series.all` (PR 4's `PeerHealth`, `bootstrapOnWorker`
 * false) bootstraps off the worker; the negative control swaps `PeerHealth` for its legacy twin.
 *
 * One worker makes the sharing certain (TENT's default is 6: then the 7th frozen peer does it).
 */
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, type Notification } from "@tent/rpc"
import { Context, Effect, Fiber, Layer } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { PeerHealth, Series, TransferEngine } from "../src/index.js"
import { engineLayer } from "./fixtures/engine.js"
import * as Pair from "./fixtures/pair.js"

/** The frozen peer's bootstrap timeout: what a healthy peer's transfer would wait out behind it. */
const BOOTSTRAP_TIMEOUT_MS = 3000
const LENGTH = 64 * 1024

const nameOf = (n: Notification) => new TextDecoder().decode(n.name)

/**
 * Freezes the peer process (its host, or its application), starts a WRITE to it (its endpoint not yet made: the bootstrap goes unanswered),
 * then a WRITE with a notification to a healthy peer never connected before (it needs a bootstrap too). Returns when
 * the healthy peer has the notification: how long that took, and whether the frozen peer's transfer was still
 * waiting then.
 */
/** How the peer is frozen: its host (`SIGSTOP`, its SoftVerbs NICs too) or its application (NICs live). */
type Face = "host" | "application"

const run = (series: Layer.Layer<Series.Policies, ConfigError>, face: Face) =>
  Pair.withEngines(
    {
      json: {
        rpc: { bootstrap_timeout_ms: BOOTSTRAP_TIMEOUT_MS },
        transports: { rdma: { workers: { num_workers: 1 } } }
      },
      series
    },
    (engine, frozen) =>
      Effect.scoped(
        Effect.gen(function* () {
          const healthyCtx = yield* Layer.build(engineLayer({}, undefined, Series.all))
          const healthy = Context.get(healthyCtx, TransferEngine.TransferEngine)
          const src = yield* engine.registerSegment(Buffer.alloc(LENGTH, 0x5a))
          const dst = yield* healthy.registerSegment(Buffer.alloc(LENGTH))
          const far = yield* Pair.request<{ addr: number }>(frozen, { cmd: "register", size: LENGTH })
          // Both descriptors fetched while everyone answers: what follows needs only bootstraps.
          const toFrozen = yield* engine.openSegment(frozen.ready.segment)
          const toHealthy = yield* engine.openSegment(healthy.segmentName)
          if (face === "host") {
            yield* Effect.addFinalizer(() => Effect.sync(() => frozen.signal("SIGCONT")))
            frozen.signal("SIGSTOP")
          } else {
            yield* Effect.addFinalizer(() => Effect.ignore(Pair.request(frozen, { cmd: "freeze", frozen: false })))
            yield* Pair.request(frozen, { cmd: "freeze", frozen: true })
          }
          const t0 = performance.now()
          const write = (target: number, offset: number) =>
            ({ opcode: "WRITE", source: src.addr, target, targetOffset: offset, length: LENGTH }) as const
          const frozenBatch = yield* engine.allocateBatch
          yield* engine.submitTransfer(frozenBatch, [write(toFrozen, far.addr)])
          const frozenDone = yield* Effect.fork(
            Effect.tap(engine.waitTransfer(frozenBatch, 60_000), () => Effect.sync(() => performance.now() - t0))
          )
          // The worker has taken the frozen peer's slice (and, with TENT's worker, is waiting on its bootstrap).
          yield* Effect.sleep("200 millis")
          const healthyBatch = yield* engine.allocateBatch
          yield* engine.submitTransfer(healthyBatch, [write(toHealthy, dst.addr)], makeNotification("healthy", "done"))
          let got: Array<Notification> = []
          const deadline = performance.now() + 30_000
          while (got.length === 0 && performance.now() < deadline) {
            got = (yield* healthy.receiveNotifications).filter((n) => nameOf(n) === "healthy")
            if (got.length === 0) yield* Effect.sleep("5 millis")
          }
          const healthyMs = performance.now() - t0
          const frozenStillWaiting = frozenDone.unsafePoll() === null
          yield* Fiber.interrupt(frozenDone)
          const status = yield* engine.waitTransfer(healthyBatch, 20_000)
          return {
            healthyMs,
            frozenStillWaiting,
            notified: got.length,
            healthyStatus: status.status,
            written: dst.buffer.every((b) => b === 0x5a)
          }
        })
      )
  )

describe("k of N frozen: a frozen peer holds nothing the healthy ones wait on", () => {
  for (const face of ["host", "application"] as const) {
    const frozen = face === "host" ? "a frozen host (SIGSTOP)" : "a frozen application (NICs live)"
    it.live(
      `Series.all: a healthy peer's transfer and notification go through while ${frozen}'s bootstrap is still waiting on the only worker's slice`,
      () =>
        Effect.gen(function* () {
          const r = yield* run(Series.all, face)
          console.log(`[k frozen, ${face}] Series.all: the healthy peer notified after ${r.healthyMs.toFixed(0)} ms`)
          expect(r).toMatchObject({ notified: 1, healthyStatus: "COMPLETED", written: true, frozenStillWaiting: true })
          // the rule is about time: before the frozen peer's timeout (loosely: the whole of it on a loaded machine)
          expect(r.healthyMs).toBeLessThan(BOOTSTRAP_TIMEOUT_MS)
        }),
      Pair.testTimeout()
    )

    it.live(
      `negative control, PeerHealth's legacy twin (TENT's worker), ${frozen}: the healthy peer waits out the frozen peer's bootstrap timeout`,
      () =>
        Effect.gen(function* () {
          const r = yield* run(Layer.merge(Series.all, PeerHealth.layerLegacy), face)
          console.log(
            `[k frozen, ${face}] PeerHealth legacy: the healthy peer notified after ${r.healthyMs.toFixed(0)} ms`
          )
          expect(r).toMatchObject({ notified: 1, healthyStatus: "COMPLETED", written: true })
          // not before the frozen peer's bootstrap gave up (the timer may fire late; never early)
          expect(r.healthyMs).toBeGreaterThanOrEqual(BOOTSTRAP_TIMEOUT_MS - 50)
        }),
      Pair.testTimeout()
    )
  }
})
