import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { ackTimeoutMs, Mtu, QpState, WcStatus } from "../src/index.js"
import { drain, makePair, pollN, recvWr, sendWr, sleep, waitFor } from "./support.js"

describe("SoftVerbs reliability (rules 2 and 3)", () => {
  for (const mtu of [Mtu.MTU_256, Mtu.MTU_512, Mtu.MTU_1024, Mtu.MTU_2048, Mtu.MTU_4096]) {
    const bytes = 128 << mtu
    it.scopedLive(`a 10000-byte SEND is segmented at path_mtu ${bytes} and arrives intact`, () =>
      Effect.gen(function* () {
        // A retransmit timer of 4.3 s (timeout 20): the packets counted are the segmentation, not a timer that fired
        // while a loaded machine kept this process from its ACKs.
        const { a, b } = yield* makePair({ params: { pathMtu: mtu, timeout: 20 } })
        for (let i = 0; i < 10_000; i++) a.buf[i] = (i * 31 + mtu) & 0xff
        b.qp.postRecv(recvWr(b, 1, 0, 20_000))
        const before = a.device.counters.txPackets
        const retransmits = a.device.counters.retransmits
        a.qp.postSend(sendWr(a, 1, 0, 10_000))
        const [wc] = yield* pollN(b.cq, 1)
        expect(wc).toMatchObject({ status: WcStatus.SUCCESS, byteLen: 10_000 })
        expect(b.buf.subarray(0, 10_000).equals(a.buf.subarray(0, 10_000))).toBe(true)
        expect(a.device.counters.retransmits - retransmits).toBe(0)
        expect(a.device.counters.txPackets - before).toBe(Math.ceil(10_000 / bytes))
      })
    )
  }

  it.scopedLive("with 20% loss each way, 300 messages arrive exactly once, in order, intact", () =>
    Effect.gen(function* () {
      // TENT's timeout 14 (67 ms): shorter ones run out of retries when a loaded 2-core machine starves a process.
      const { a, b } = yield* makePair({ params: { timeout: 14, retryCnt: 7, pathMtu: Mtu.MTU_1024 } })
      const n = 300
      for (let i = 0; i < n; i++) b.qp.postRecv(recvWr(b, i, i * 3000, 3000))
      a.device.setFaults({ dropOut: 0.2, dropIn: 0.2 })
      for (let i = 0; i < n; i++) {
        const len = 1 + ((i * 977) % 2999)
        a.buf.fill(i & 0xff, i * 3000, i * 3000 + len)
        a.buf.writeUInt32LE(i, i * 3000)
        expect(a.qp.postSend(sendWr(a, i, i * 3000, Math.max(4, len)))).toBe(0)
      }
      const got = yield* pollN(b.cq, n, 60_000)
      expect(got).toHaveLength(n)
      got.forEach((wc, i) => {
        expect(wc.status).toBe(WcStatus.SUCCESS)
        expect(wc.wrId).toBe(i)
        expect(b.buf.readUInt32LE(i * 3000)).toBe(i)
        const len = Math.max(4, 1 + ((i * 977) % 2999))
        expect(wc.byteLen).toBe(len)
        expect(b.buf.subarray(i * 3000 + 4, i * 3000 + len).every((x) => x === (i & 0xff))).toBe(true)
      })
      const sends = yield* pollN(a.cq, n, 60_000)
      expect(sends.every((wc) => wc.status === WcStatus.SUCCESS)).toBe(true)
      expect(a.device.counters.retransmits).toBeGreaterThan(0)
      // Nothing more arrives later: no message was delivered twice.
      yield* sleep(50)
      expect(drain(b.cq)).toHaveLength(0)
      expect(a.device.counters.handlerErrors + b.device.counters.handlerErrors).toBe(0)
    })
  )

  it.scopedLive("a retransmit after a lost ACK is re-acknowledged, never re-delivered", () =>
    Effect.gen(function* () {
      // timeout 14 = 67 ms: about two retransmits in the 150 ms without ACKs, well inside retry_cnt 7 (537 ms).
      const { a, b } = yield* makePair({ params: { timeout: 14, retryCnt: 7 } })
      for (let i = 0; i < 4; i++) b.qp.postRecv(recvWr(b, i, i * 64, 64))
      // b receives everything but every ACK it sends is lost, so a retransmits.
      b.device.setFaults({ dropOut: 1 })
      a.qp.postSend(sendWr(a, 1, 0, 32))
      expect(yield* pollN(b.cq, 1)).toHaveLength(1)
      // a's timer (67 ms) resends; b sees a duplicate, answers it (lost too), and does not deliver it again.
      expect(yield* waitFor(() => b.device.counters.duplicates > 0, 5000)).toBe(true)
      b.device.setFaults({})
      const [sent] = yield* pollN(a.cq, 1)
      expect(sent?.status).toBe(WcStatus.SUCCESS)
      yield* sleep(20)
      expect(drain(b.cq)).toHaveLength(0)
    })
  )

  it.scopedLive("a silent peer exhausts retry_cnt: RETRY_EXC_ERR after the budget, the rest flush, QP in ERR", () =>
    Effect.gen(function* () {
      // timeout 12 = 16.8 ms; retry_cnt 3: four timeouts in all.
      const { a, b } = yield* makePair({ params: { timeout: 12, retryCnt: 3 } })
      b.device.setFaults({ dropIn: 1 })
      const start = performance.now()
      for (let i = 1; i <= 3; i++) a.qp.postSend(sendWr(a, i, 0, 16))
      const wcs = yield* pollN(a.cq, 3, 10_000)
      const elapsed = performance.now() - start
      expect(wcs.map((w) => w.status)).toEqual([WcStatus.RETRY_EXC_ERR, WcStatus.WR_FLUSH_ERR, WcStatus.WR_FLUSH_ERR])
      expect(wcs.map((w) => w.wrId)).toEqual([1, 2, 3])
      expect(a.device.counters.retransmits).toBe(3)
      expect(elapsed).toBeGreaterThanOrEqual(4 * ackTimeoutMs(12) - 2)
      expect(a.qp.state).toBe(QpState.ERR)
    })
  )

  it.scopedLive("timeout 0 means no retransmit timer: a lost packet waits forever instead of failing", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ params: { timeout: 0, retryCnt: 0 } })
      b.device.setFaults({ dropIn: 1 })
      a.qp.postSend(sendWr(a, 1, 0, 16))
      expect(yield* pollN(a.cq, 1, 200)).toHaveLength(0)
      expect(a.qp.state).toBe(QpState.RTS)
      expect(a.device.counters.retransmits).toBe(0)
    })
  )

  it.scopedLive("a window of 2000 unsignaled WRITEs and one signaled SEND completes in order", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ maxWr: 4096, cqe: 8192 })
      b.qp.postRecv(recvWr(b, 99, 0, 64))
      for (let i = 0; i < 2000; i++) {
        a.buf.writeUInt32LE(i, i * 4)
        const rc = a.qp.postSend(
          sendWr(a, i, i * 4, 4, { opcode: 0, sendFlags: 0, remoteAddr: b.mr.addr + 100_000 + i * 4, rkey: b.mr.rkey })
        )
        expect(rc).toBe(0)
      }
      a.qp.postSend(sendWr(a, 5000, 0, 4))
      const [done] = yield* pollN(a.cq, 1)
      expect(done?.wrId).toBe(5000)
      expect(drain(a.cq)).toHaveLength(0)
      for (let i = 0; i < 2000; i++) expect(b.buf.readUInt32LE(100_000 + i * 4)).toBe(i)
    })
  )
})
