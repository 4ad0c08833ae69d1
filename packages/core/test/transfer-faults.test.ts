import { describe, expect, it } from "@effect/vitest"
import { SoftVerbs } from "@tent/verbs"
import { Effect } from "effect"
import type { Child } from "./fixtures/child.js"
import type { Peer } from "./fixtures/pair.js"
import * as Pair from "./fixtures/pair.js"

const KiB = 1024

const withEngines = <A, E>(
  json: unknown,
  body: (engine: Pair.TestEngine, peer: Peer, control: SoftVerbs.SoftVerbsControlShape) => Effect.Effect<A, E>
) =>
  Pair.withEngines({ json }, (engine, peer, ctx) =>
    body(engine, peer, ctx.unsafeMap.get(SoftVerbs.SoftVerbsControl.key) as SoftVerbs.SoftVerbsControlShape)
  )
const { request, sha } = Pair

/** Registers 1 MiB on both sides (the local one patterned) and opens the peer's segment. */
const setUp = (engine: Pair.TestEngine, peer: Child<{ segment: string }>) =>
  Effect.gen(function* () {
    const remote = yield* request<{ addr: number }>(peer, { cmd: "register", size: 1024 * KiB })
    const local = Buffer.alloc(1024 * KiB)
    for (let i = 0; i < local.length; i++) local[i] = (i * 7 + 3) & 0xff
    const mem = yield* engine.registerSegment(local)
    const target = yield* engine.openSegment(peer.ready.segment)
    return { remote, local, mem, target }
  })

/** Takes both local ports down and waits (bounded) until the engine has seen it. */
const portsDown = (engine: Pair.TestEngine, control: SoftVerbs.SoftVerbsControlShape) =>
  Effect.gen(function* () {
    yield* control.setPortState("mlx0", false)
    yield* control.setPortState("mlx1", false)
    const deadline = Date.now() + 20_000
    while (engine.rdma?.devices.some((d) => d.enabled) && Date.now() < deadline) yield* Effect.sleep(10)
    expect(engine.rdma?.devices.every((d) => !d.enabled)).toBe(true)
  })

describe("transfer faults (two processes)", () => {
  it.live(
    "a slice in flight past max_timeout_ns fails its task with TransferTimeout and retires its endpoint",
    () =>
      withEngines(
        {
          // 300 ms software timeout; the RC ACK timeout (4.096 µs × 2^20 ≈ 4.3 s) is far longer, so only the
          // software timeout can end the slice. No TCP here, so nothing fails over.
          transports: { rdma: { max_timeout_ns: 300_000_000, endpoint: { send_timeout: 20 } }, tcp: { enable: false } }
        },
        (engine, peer) =>
          Effect.gen(function* () {
            const { remote, mem, target } = yield* setUp(engine, peer)
            const warm = yield* engine.allocateBatch
            yield* engine.submitTransfer(warm, [
              { opcode: "WRITE", source: mem.addr, target, targetOffset: remote.addr, length: 256 * KiB }
            ])
            expect((yield* engine.waitTransfer(warm, 20_000)).status).toBe("COMPLETED")
            const before = yield* (engine.rdma as NonNullable<typeof engine.rdma>).endpoints
            expect(before.filter((e) => e.status === "READY").length).toBeGreaterThan(0)

            peer.signal("SIGSTOP")
            const batch = yield* engine.allocateBatch
            const t0 = performance.now()
            yield* engine.submitTransfer(batch, [
              { opcode: "WRITE", source: mem.addr, target, targetOffset: remote.addr, length: 64 * KiB }
            ])
            const status = yield* engine.waitTransfer(batch, 20_000)
            const elapsed = performance.now() - t0
            peer.signal("SIGCONT")
            expect(status.status).toBe("FAILED")
            expect(status.error?._tag).toBe("TransferTimeout")
            expect(elapsed).toBeGreaterThanOrEqual(300)
            // ended by the software timeout, before the RC ACK timeout (≈ 4.3 s) could
            expect(elapsed).toBeLessThan(4_300)
            // The endpoint that carried the slice was retired (TENT's disableEndpoint); give the completion fiber a
            // moment, bounded (in wall time).
            let ready = before.length
            for (const deadline = Date.now() + 20_000; ready === before.length && Date.now() < deadline; ) {
              yield* Effect.sleep(10)
              const eps = yield* (engine.rdma as NonNullable<typeof engine.rdma>).endpoints
              ready = eps.filter((e) => e.status === "READY").length
            }
            expect(ready).toBeLessThan(before.length)
          })
      ),
    Pair.testTimeout()
  )

  it.live(
    "a task that fails over RDMA is resubmitted on TCP when polled, and the bytes arrive",
    () =>
      withEngines({}, (engine, peer, control) =>
        Effect.gen(function* () {
          const { remote, local, mem, target } = yield* setUp(engine, peer)
          yield* portsDown(engine, control)
          const batch = yield* engine.allocateBatch
          yield* engine.submitTransfer(batch, [
            { opcode: "WRITE", source: mem.addr + 100, target, targetOffset: remote.addr + 7, length: 300 * KiB }
          ])
          const status = yield* engine.waitTransfer(batch, 20_000)
          expect(status).toMatchObject({ status: "COMPLETED", transferredBytes: 300 * KiB })
          expect(engine.tcp?.counters.dataOk ?? 0).toBeGreaterThan(0)
          const digest = yield* request<{ sha: string }>(peer, { cmd: "digest", offset: 7, length: 300 * KiB })
          expect(digest.sha).toBe(sha(local.subarray(100, 100 + 300 * KiB)))
        })
      ),
    Pair.testTimeout()
  )

  // The controls: the same fault with failover turned off, either way, leaves the task FAILED over RDMA.
  for (const [why, json] of [
    ["max_failover_attempts 0", { max_failover_attempts: 0 }],
    ["enable_auto_failover_on_poll false", { enable_auto_failover_on_poll: false }]
  ] as const) {
    it.live(
      `with ${why} the same task stays FAILED (no path over RDMA), TCP untouched`,
      () =>
        withEngines(json, (engine, peer, control) =>
          Effect.gen(function* () {
            const { remote, mem, target } = yield* setUp(engine, peer)
            yield* portsDown(engine, control)
            const batch = yield* engine.allocateBatch
            yield* engine.submitTransfer(batch, [
              { opcode: "WRITE", source: mem.addr, target, targetOffset: remote.addr, length: 64 * KiB }
            ])
            const status = yield* engine.waitTransfer(batch, 20_000)
            expect(status.status).toBe("FAILED")
            expect(status.error?._tag).toBe("RdmaTransferFailed")
            expect(engine.tcp?.counters.dataOk ?? 0).toBe(0)
          })
        ),
      Pair.testTimeout()
    )
  }
})
