/**
 * SoftVerbs work queues grow with use: a QP's send and receive rings are made at its first post, `INITIAL_RING` slots,
 * and double when a post finds them full, up to the QP's max_send_wr / max_recv_wr (past which a post is ENOMEM, as
 * before). An idle endpoint of the engine holds two QPs, so this is most of what an idle endpoint costs.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Errno, SendFlags, WcOpcode, WcStatus } from "../src/index.js"
import { INITIAL_RING } from "../src/soft/RecvQueue.js"
import { SoftDevice } from "../src/soft/SoftDevice.js"
import type { SoftQp } from "../src/soft/SoftQp.js"
import { makePair, pollN, recvWr, sendWr } from "./support.js"

const rings = (qp: unknown) => {
  const q = qp as SoftQp
  return { sq: q.sqRing, rq: q.rq.ring }
}

/** Message `i`: 40 bytes that name it. */
const message = (i: number) => `message ${String(i).padStart(6, "0")} ${"x".repeat(25)}`

describe("SoftVerbs work queues (rule 8)", () => {
  it.scopedLive("start small and grow on demand, wrapped live WQEs and RECVs moved in order to their new slots", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ maxWr: 1024 })
      // Nothing posted yet: no ring at all (the shared empty one); the first post makes INITIAL_RING slots.
      expect(rings(a.qp)).toEqual({ sq: 0, rq: 0 })
      expect([(a.qp as SoftQp).wqWrId.length, (a.qp as SoftQp).rq.wrId.length]).toEqual([0, 0])
      // Move the heads off slot 0, so the rings wrap when they grow.
      const first = 5
      for (let i = 0; i < first; i++) b.qp.postRecv(recvWr(b, i, i * 64, 64))
      for (let i = 0; i < first; i++) {
        a.buf.write(message(i), i * 64)
        expect(a.qp.postSend(sendWr(a, i, i * 64, 40))).toBe(0)
      }
      yield* pollN(b.cq, first)
      yield* pollN(a.cq, first)
      expect([rings(a.qp).sq, rings(b.qp).rq]).toEqual([INITIAL_RING, INITIAL_RING])
      // 300 of each at once: both rings grow from 8 through 16, 32, … to 512, each time with live entries wrapped.
      const n = 300
      for (let i = first; i < first + n; i++) expect(b.qp.postRecv(recvWr(b, i, i * 64, 64))).toBe(0)
      for (let i = first; i < first + n; i++) {
        a.buf.write(message(i), i * 64)
        // every third inline: the inline bytes move with their WQE
        const inline = i % 3 === 0 ? { sendFlags: SendFlags.SIGNALED | SendFlags.INLINE } : {}
        expect(a.qp.postSend(sendWr(a, i, i * 64, 40, inline))).toBe(0)
      }
      expect(rings(a.qp).sq).toBe(512)
      expect(rings(b.qp).rq).toBe(512)
      const recvs = yield* pollN(b.cq, n, 20_000)
      const sends = yield* pollN(a.cq, n, 20_000)
      expect(recvs.map((w) => w.wrId)).toEqual(Array.from({ length: n }, (_, k) => first + k))
      expect(sends.map((w) => w.wrId)).toEqual(Array.from({ length: n }, (_, k) => first + k))
      expect(recvs.every((w) => w.status === WcStatus.SUCCESS && w.opcode === WcOpcode.RECV && w.byteLen === 40)).toBe(
        true
      )
      expect(sends.every((w) => w.status === WcStatus.SUCCESS)).toBe(true)
      // each message landed in the RECV posted for it
      const wrong: Array<number> = []
      for (let i = first; i < first + n; i++)
        if (b.buf.toString("utf8", i * 64, i * 64 + 40) !== message(i)) wrong.push(i)
      expect(wrong).toEqual([])
    })
  )

  it.scopedLive("still refuse a post past max_send_wr / max_recv_wr with ENOMEM", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ maxWr: 20 })
      const codes = Array.from({ length: 21 }, (_, i) => b.qp.postRecv(recvWr(b, i, i * 64, 64)))
      expect(codes.slice(0, 20).every((c) => c === 0)).toBe(true)
      expect(codes[20]).toBe(Errno.ENOMEM)
      expect(rings(b.qp).rq).toBe(20)
      // posted in one turn, before any ACK can come back
      const sent = Array.from({ length: 21 }, (_, i) => a.qp.postSend(sendWr(a, i, 0, 8)))
      expect(sent.slice(0, 20).every((c) => c === 0)).toBe(true)
      expect(sent[20]).toBe(Errno.ENOMEM)
      expect(rings(a.qp).sq).toBe(20)
      expect((yield* pollN(a.cq, 20)).every((w) => w.status === WcStatus.SUCCESS)).toBe(true)
    })
  )

  it.scopedLive(
    "a device's own memory (its send slots) stays under 1 MiB (red at the former 2048 slots: 8.5 MiB)",
    () =>
      Effect.gen(function* () {
        // A process may host hundreds of devices (the engine's scale bench: 165 engines, one device each): 16 of them.
        // The slots' reuse (each message intact after the ring wraps) is the first test's: 305 messages, 64 slots.
        const n = 16
        const before = process.memoryUsage().arrayBuffers
        const devices = yield* Effect.promise(() =>
          Promise.all(Array.from({ length: n }, (_, i) => SoftDevice.open({ name: `mem${i}` })))
        )
        const perDevice = (process.memoryUsage().arrayBuffers - before) / n
        yield* Effect.promise(() => Promise.all(devices.map((d) => d.close())))
        expect(perDevice).toBeLessThan(1024 * 1024)
      })
  )
})
