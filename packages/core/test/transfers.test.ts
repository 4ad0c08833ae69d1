import { describe, expect, it } from "@effect/vitest"
import { RailHealth } from "@tent/health"
import { Effect } from "effect"
import * as Tasks from "../src/internal/Tasks.js"
import { payload } from "./fixtures/engine.js"
import type { Peer } from "./fixtures/pair.js"
import * as Pair from "./fixtures/pair.js"

const MiB = 1 << 20

const withEngines = <A, E>(
  body: (engine: Pair.TestEngine, peer: Peer, ctx: import("effect").Context.Context<unknown>) => Effect.Effect<A, E>,
  json: unknown = {}
) => Pair.withEngines({ json }, body)
const { request, sha } = Pair

describe("slices", () => {
  it("split at block_size, at most 64 per request, a tail under 25 % merged", () => {
    expect(Tasks.sliceLengths(65536 * 3, 65536)).toEqual([65536, 65536, 65536])
    expect(Tasks.sliceLengths(65536 * 2 + 100, 65536)).toEqual([65536, 65636])
    expect(Tasks.sliceLengths(65536 + 20000, 65536)).toEqual([65536, 20000])
    expect(Tasks.sliceLengths(100, 65536)).toEqual([100])
    expect(Tasks.sliceLengths(64 * MiB, 65536).length).toBe(64)
  })
})

describe("transfers (two processes)", () => {
  it.live(
    "WRITE and READ move the right bytes over both rails, sizes not a multiple of the slice size",
    () =>
      withEngines((engine, peer) =>
        Effect.gen(function* () {
          const remote = yield* request<{ addr: number }>(peer, { cmd: "register", size: 8 * MiB })
          yield* request(peer, { cmd: "fill", seed: 7 })
          const local = Buffer.alloc(8 * MiB)
          for (let i = 0; i < local.length; i++) local[i] = (i * 5 + 1) & 0xff
          const mem = yield* engine.registerSegment(local)
          const target = yield* engine.openSegment(peer.ready.segment)
          // WRITE 3 MiB + 12345 bytes at an odd offset.
          const len = 3 * MiB + 12345
          const batch = yield* engine.allocateBatch
          yield* engine.submitTransfer(batch, [
            { opcode: "WRITE", source: mem.addr + 1000, target, targetOffset: remote.addr + 333, length: len }
          ])
          const status = yield* engine.waitTransfer(batch, 30_000)
          expect(status).toMatchObject({ status: "COMPLETED", transferredBytes: len })
          const digest = yield* request<{ sha: string }>(peer, { cmd: "digest", offset: 333, length: len })
          expect(digest.sha).toBe(sha(local.subarray(1000, 1000 + len)))
          // READ 2 MiB + 777 bytes from the peer's region (its own pattern after the written range).
          const rlen = 2 * MiB + 777
          const roff = 4 * MiB + 5
          const b2 = yield* engine.allocateBatch
          yield* engine.submitTransfer(b2, [
            { opcode: "READ", source: mem.addr + 17, target, targetOffset: remote.addr + roff, length: rlen }
          ])
          expect((yield* engine.waitTransfer(b2, 30_000)).status).toBe("COMPLETED")
          const peerDigest = yield* request<{ sha: string }>(peer, { cmd: "digest", offset: roff, length: rlen })
          expect(sha(local.subarray(17, 17 + rlen))).toBe(peerDigest.sha)
          // Both local devices carried slices.
          const eps = yield* (engine.rdma as NonNullable<typeof engine.rdma>).endpoints
          expect(new Set(eps.map((e) => e.localNic))).toEqual(new Set(["mlx0", "mlx1"]))
        })
      ),
    Pair.testTimeout()
  )

  it.live(
    "a region the peer registers later is reached through its refetched descriptor, with that region's rkeys",
    () =>
      withEngines(
        (engine, peer) =>
          Effect.gen(function* () {
            const local = Buffer.alloc(MiB)
            for (let i = 0; i < local.length; i++) local[i] = (i * 11 + 3) & 0xff
            const mem = yield* engine.registerSegment(local)
            const write = (targetOffset: number, length: number) =>
              Effect.gen(function* () {
                const target = yield* engine.openSegment(peer.ready.segment)
                const batch = yield* engine.allocateBatch
                yield* engine.submitTransfer(batch, [
                  { opcode: "WRITE", source: mem.addr, target, targetOffset, length }
                ])
                return yield* engine.waitTransfer(batch, 30_000)
              })
            const first = yield* request<{ addr: number }>(peer, { cmd: "register", size: MiB })
            expect((yield* write(first.addr, 256 * 1024)).status).toBe("COMPLETED")
            // The descriptor cached by that WRITE does not hold the second region: the engine drops it, fetches the
            // new one, and the slices to the second region carry its own rkeys (the peer's digest reads that region).
            const second = yield* request<{ addr: number }>(peer, { cmd: "register", size: 2 * MiB })
            expect(second.addr).not.toBe(first.addr)
            const status = yield* write(second.addr + 4096, 768 * 1024)
            expect(status).toMatchObject({ status: "COMPLETED", transferredBytes: 768 * 1024 })
            const digest = yield* request<{ sha: string }>(peer, { cmd: "digest", offset: 4096, length: 768 * 1024 })
            expect(digest.sha).toBe(sha(local.subarray(0, 768 * 1024)))
          }),
        // Over RDMA only: a slice sent with the first region's rkeys would fail, not be carried over TCP instead.
        { max_failover_attempts: 0 }
      ),
    Pair.testTimeout()
  )

  it.live(
    "a rail whose port goes down is paused and its slices are rerouted",
    () =>
      withEngines((engine, peer, ctx) =>
        Effect.gen(function* () {
          const rails = ctx.unsafeMap.get(RailHealth.RailHealth.key) as RailHealth.RailHealthShape
          const remote = yield* request<{ addr: number }>(peer, { cmd: "register", size: 4 * MiB })
          const local = Buffer.alloc(4 * MiB)
          for (let i = 0; i < local.length; i++) local[i] = (i * 3 + 9) & 0xff
          const mem = yield* engine.registerSegment(local)
          const target = yield* engine.openSegment(peer.ready.segment)
          // Warm both rails, then take the peer's mlx1 port down.
          const warm = yield* engine.allocateBatch
          yield* engine.submitTransfer(warm, [
            { opcode: "WRITE", source: mem.addr, target, targetOffset: remote.addr, length: 256 * 1024 }
          ])
          expect((yield* engine.waitTransfer(warm, 20_000)).status).toBe("COMPLETED")
          yield* request(peer, { cmd: "portState", device: "mlx1", up: false })
          const batch = yield* engine.allocateBatch
          yield* engine.submitTransfer(batch, [
            { opcode: "WRITE", source: mem.addr, target, targetOffset: remote.addr, length: 4 * MiB }
          ])
          const status = yield* engine.waitTransfer(batch, 40_000)
          expect(status.status).toBe("COMPLETED")
          const digest = yield* request<{ sha: string }>(peer, { cmd: "digest", offset: 0, length: 4 * MiB })
          expect(digest.sha).toBe(sha(local))
          const snap = yield* rails.snapshot
          const paused = snap.filter((r) => r.paused)
          expect(paused.length).toBeGreaterThan(0)
          expect(paused.every((r) => r.remote.endsWith("/mlx1"))).toBe(true)
        })
      ),
    Pair.testTimeout(90_000)
  )

  it.live(
    "2000 transfer-bound notifications arrive once each batch completes, in order and byte-exact",
    () =>
      withEngines((engine, peer) =>
        Effect.gen(function* () {
          const remote = yield* request<{ addr: number }>(peer, { cmd: "register", size: MiB })
          const local = Buffer.alloc(MiB, 1)
          const mem = yield* engine.registerSegment(local)
          const target = yield* engine.openSegment(peer.ready.segment)
          for (let i = 0; i < 2000; i++) {
            const batch = yield* engine.allocateBatch
            yield* engine.submitTransfer(
              batch,
              [
                { opcode: "WRITE", source: mem.addr, target, targetOffset: remote.addr + (i % 16) * 4096, length: 4096 }
              ],
              payload("b", i)
            )
            expect((yield* engine.waitTransfer(batch, 20_000)).status).toBe("COMPLETED")
            yield* engine.freeBatch(batch)
          }
          let got = { count: 0 }
          const deadline = Date.now() + 20_000
          while (got.count < 2000 && Date.now() < deadline) {
            yield* Effect.sleep("50 millis")
            got = yield* request<{ count: number }>(peer, { cmd: "received", prefix: "b" })
          }
          expect(got).toEqual({ count: 2000, distinct: 2000, outOfOrder: 0, corrupt: 0, duplicates: 0 })
        })
      ),
    Pair.testTimeout(90_000)
  )
})
