import { describe, expect, it } from "@effect/vitest"
import { RpcAgent, RpcConfig, SegmentRangeInvalid, TransportFailure } from "@tent/rpc"
import { Effect } from "effect"
import { InvalidRequest } from "../src/Errors.js"
import * as Tasks from "../src/internal/Tasks.js"
import { payload } from "./fixtures/engine.js"
import type { Peer } from "./fixtures/pair.js"
import * as Pair from "./fixtures/pair.js"

const MiB = 1 << 20
const noRdma = { transports: { rdma: { enable: false } }, rpc: { request_timeout_ms: 3000 } }

const { request, sha } = Pair

/** A peer engine without RDMA, and an engine in this process with `json` config. */
const withEngines = <A, E>(json: unknown, body: (engine: Pair.TestEngine, peer: Peer) => Effect.Effect<A, E>) =>
  Pair.withEngines({ json, peerJson: noRdma }, body)

describe("TCP transfers (two processes)", () => {
  it.live(
    "WRITE and READ move the right bytes, sizes not a multiple of the slice size; the bound notification arrives",
    () =>
      withEngines(noRdma, (engine, peer) =>
        Effect.gen(function* () {
          expect(engine.rdma).toBeUndefined()
          const remote = yield* request<{ addr: number }>(peer, { cmd: "register", size: 6 * MiB })
          yield* request(peer, { cmd: "fill", seed: 11 })
          const local = Buffer.alloc(6 * MiB)
          for (let i = 0; i < local.length; i++) local[i] = (i * 5 + 1) & 0xff
          const mem = yield* engine.registerSegment(local)
          const target = yield* engine.openSegment(peer.ready.segment)

          const len = 2 * MiB + 12_345
          const batch = yield* engine.allocateBatch
          yield* engine.submitTransfer(
            batch,
            [{ opcode: "WRITE", source: mem.addr + 1000, target, targetOffset: remote.addr + 333, length: len }],
            payload("tcpw", 0)
          )
          expect(yield* engine.waitTransfer(batch, 20_000)).toMatchObject({
            status: "COMPLETED",
            transferredBytes: len
          })
          const digest = yield* request<{ sha: string }>(peer, { cmd: "digest", offset: 333, length: len })
          expect(digest.sha).toBe(sha(local.subarray(1000, 1000 + len)))
          // the bytes around the written range are the peer's own pattern still
          const around = Buffer.alloc(333)
          for (let i = 0; i < 333; i++) around[i] = (i * 13 + 11) & 0xff
          expect((yield* request<{ sha: string }>(peer, { cmd: "digest", offset: 0, length: 333 })).sha).toBe(
            sha(around)
          )

          // the transfer-bound notification, over TCP's Notify (bounded wait)
          let got = { count: 0, corrupt: 0 }
          for (const deadline = Date.now() + 20_000; got.count === 0 && Date.now() < deadline; ) {
            got = yield* request<{ count: number; corrupt: number }>(peer, { cmd: "received", prefix: "tcpw" })
            if (got.count === 0) yield* Effect.sleep(50)
          }
          expect(got).toMatchObject({ count: 1, corrupt: 0 })

          // READ 1 MiB + 777 from the peer's pattern past the written range, two requests in one batch
          const rlen = MiB + 777
          const roff = 4 * MiB + 5
          const b2 = yield* engine.allocateBatch
          yield* engine.submitTransfer(b2, [
            { opcode: "READ", source: mem.addr + 17, target, targetOffset: remote.addr + roff, length: rlen },
            { opcode: "READ", source: mem.addr + 5 * MiB, target, targetOffset: remote.addr + roff, length: 100 }
          ])
          expect(yield* engine.waitTransfer(b2, 20_000)).toMatchObject({
            status: "COMPLETED",
            tasks: 2,
            transferredBytes: rlen + 100
          })
          const peerDigest = yield* request<{ sha: string }>(peer, { cmd: "digest", offset: roff, length: rlen })
          expect(sha(local.subarray(17, 17 + rlen))).toBe(peerDigest.sha)
          const small = yield* request<{ sha: string }>(peer, { cmd: "digest", offset: roff, length: 100 })
          expect(sha(local.subarray(5 * MiB, 5 * MiB + 100))).toBe(small.sha)
          // one SendData / RecvData per slice (64 KiB, the short tail merged)
          const slices = Tasks.sliceLengths(len, 65536).length + Tasks.sliceLengths(rlen, 65536).length + 1
          expect(slices).toBe(32 + 16 + 1)
          expect(engine.tcp?.counters.dataOk).toBe(slices)
          expect(engine.tcp?.counters.dataFailed).toBe(0)
        })
      ),
    Pair.testTimeout()
  )

  it.live(
    "TENT's rule picks TCP for a TCP-only buffer even with RDMA here; out-of-range requests fail typed, memory untouched",
    () =>
      withEngines({}, (engine, peer) =>
        Effect.gen(function* () {
          expect(engine.rdma).toBeDefined() // this engine has RDMA; the peer's buffer is registered with TCP only
          const remote = yield* request<{ addr: number }>(peer, { cmd: "register", size: 256 * 1024 })
          yield* request(peer, { cmd: "fill", seed: 3 })
          const before = yield* request<{ sha: string }>(peer, { cmd: "digest" })
          const local = Buffer.alloc(256 * 1024, 0x5a)
          const mem = yield* engine.registerSegment(local)
          const target = yield* engine.openSegment(peer.ready.segment)

          // the engine refuses a range outside the peer's buffers before sending anything
          const batch = yield* engine.allocateBatch
          const oob = yield* Effect.flip(
            engine.submitTransfer(batch, [
              { opcode: "WRITE", source: mem.addr, target, targetOffset: remote.addr + 256 * 1024 - 10, length: 20 }
            ])
          )
          expect(oob).toBeInstanceOf(InvalidRequest)

          // the peer's server refuses it too, when asked directly (a stale or forged descriptor)
          const agent = yield* RpcAgent.make.pipe(Effect.provide(RpcConfig.layer({ request_timeout_ms: 3000 })))
          const address = peer.ready.segment
          for (const [addr, len] of [
            [remote.addr + 256 * 1024 - 10, 20],
            [remote.addr - 4096, 16],
            [1, 1]
          ] as const) {
            expect(yield* Effect.flip(agent.sendData(address, addr, Buffer.alloc(len, 0xff)))).toBeInstanceOf(
              SegmentRangeInvalid
            )
            expect(yield* Effect.flip(agent.recvData(address, addr, len))).toBeInstanceOf(SegmentRangeInvalid)
          }
          expect((yield* request<{ sha: string }>(peer, { cmd: "digest" })).sha).toBe(before.sha)

          // in range, the same engine writes over TCP (not RDMA: the peer has no device)
          const b2 = yield* engine.allocateBatch
          yield* engine.submitTransfer(b2, [
            { opcode: "WRITE", source: mem.addr + 7, target, targetOffset: remote.addr + 9, length: 100_001 }
          ])
          expect((yield* engine.waitTransfer(b2, 20_000)).status).toBe("COMPLETED")
          const after = yield* request<{ sha: string }>(peer, { cmd: "digest", offset: 9, length: 100_001 })
          expect(after.sha).toBe(sha(local.subarray(7, 7 + 100_001)))
          expect(engine.tcp?.counters.dataOk).toBeGreaterThan(0)
        }).pipe(Effect.scoped)
      ),
    Pair.testTimeout()
  )

  it.live(
    "a killed peer fails the batch with a TransportFailure after the TCP retries, no notification",
    () =>
      withEngines(
        { ...noRdma, transports: { rdma: { enable: false }, tcp: { retry_base_delay_ms: 50 } } },
        (engine, peer) =>
          Effect.gen(function* () {
            const remote = yield* request<{ addr: number }>(peer, { cmd: "register", size: MiB })
            const mem = yield* engine.registerSegment(Buffer.alloc(MiB, 1))
            const target = yield* engine.openSegment(peer.ready.segment)
            const ok = yield* engine.allocateBatch
            yield* engine.submitTransfer(ok, [
              { opcode: "WRITE", source: mem.addr, target, targetOffset: remote.addr, length: 1000 }
            ])
            expect((yield* engine.waitTransfer(ok, 20_000)).status).toBe("COMPLETED")

            peer.signal("SIGKILL")
            // gone (its sockets closed by the kernel) before the transfers start; bounded
            yield* Effect.promise(
              () =>
                new Promise<void>((resolve) => {
                  if (peer.process.exitCode !== null || peer.process.signalCode !== null) return resolve()
                  const timer = setTimeout(resolve, 20_000)
                  peer.process.once("exit", () => {
                    clearTimeout(timer)
                    resolve()
                  })
                })
            )
            for (const opcode of ["WRITE", "READ"] as const) {
              const batch = yield* engine.allocateBatch
              const t0 = performance.now()
              yield* engine.submitTransfer(
                batch,
                [{ opcode, source: mem.addr, target, targetOffset: remote.addr + 10, length: 300_000 }],
                payload("dead", 0)
              )
              const status = yield* engine.waitTransfer(batch, 20_000)
              expect(status).toMatchObject({ status: "FAILED", failedTasks: 1 })
              expect(status.error).toBeInstanceOf(TransportFailure)
              expect(status.error).toMatchObject({ reason: expect.stringMatching(/Refused|Closed/) })
              // three attempts, 50 + 100 ms apart, each refused at once: before the 3 s request timeout of one
              expect(performance.now() - t0).toBeLessThan(3000)
            }
            expect(engine.tcp?.counters.dataFailed).toBeGreaterThan(0)
            expect(engine.tcp?.counters.sent).toBe(0) // a failed batch never notifies
          })
      ),
    Pair.testTimeout()
  )
})
