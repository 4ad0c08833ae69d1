import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { QpState, RNR_TIMER_MS, WcOpcode, WcStatus, WrOpcode } from "../src/index.js"
import { drain, makePair, pollN, recvWr, sendWr, waitFor } from "./support.js"

describe("SoftVerbs Receiver Not Ready (rule 4)", () => {
  it("the RNR timer table follows the IB encoding", () => {
    expect(RNR_TIMER_MS[12]).toBe(0.64)
    expect(RNR_TIMER_MS[18]).toBe(5.12)
    expect(RNR_TIMER_MS[0]).toBe(655.36)
    expect(RNR_TIMER_MS[31]).toBe(491.52)
    expect(RNR_TIMER_MS).toHaveLength(32)
  })

  it.scopedLive("a SEND with no RECV posted is NAKed RNR and retried until a RECV appears", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ params: { minRnrTimer: 12 } })
      a.buf.write("late receiver", 0)
      a.qp.postSend(sendWr(a, 1, 0, 13))
      expect(yield* waitFor(() => b.device.counters.rnrNaksSent > 0, 5000)).toBe(true)
      expect(a.qp.state).toBe(QpState.RTS)
      b.qp.postRecv(recvWr(b, 7, 0, 64))
      const [r] = yield* pollN(b.cq, 1)
      expect(r).toMatchObject({ wrId: 7, status: WcStatus.SUCCESS, byteLen: 13 })
      expect(b.buf.toString("utf8", 0, 13)).toBe("late receiver")
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
    })
  )

  it.scopedLive(
    "rnr_retry 3 is exhausted after 3 retries spaced by the responder's min_rnr_timer (29 = 245.76 ms), not longer",
    () =>
      Effect.gen(function* () {
        const T = RNR_TIMER_MS[29] as number
        const { a, b } = yield* makePair({ paramsA: { rnrRetry: 3 }, paramsB: { minRnrTimer: 29 } })
        const start = performance.now()
        a.qp.postSend(sendWr(a, 1, 0, 8))
        a.qp.postSend(sendWr(a, 2, 0, 8))
        const wcs = yield* pollN(a.cq, 2)
        const elapsed = performance.now() - start
        expect(wcs.map((w) => w.status)).toEqual([WcStatus.RNR_RETRY_EXC_ERR, WcStatus.WR_FLUSH_ERR])
        expect(b.device.counters.rnrNaksSent).toBe(4)
        expect(a.device.counters.rnrRetries).toBe(3)
        // Each retry waits the timer the NAK carried: not less, and (on average) not twice as long. A shorter entry of
        // the table, or a fixed wait such as 655 ms, lands outside; the 3 T of slack is for a loaded machine.
        expect(elapsed).toBeGreaterThanOrEqual(3 * T)
        expect(elapsed / 3).toBeLessThan(2 * T)
        expect(a.qp.state).toBe(QpState.ERR)
      })
  )

  it.scopedLive(
    "after an RNR NAK the requester probes with one packet, not its whole window; once RECVs appear all complete in order",
    () =>
      Effect.gen(function* () {
        const { a, b } = yield* makePair({ paramsB: { minRnrTimer: 1 } })
        const n = 32
        for (let i = 0; i < n; i++) a.qp.postSend(sendWr(a, i, 0, 8))
        expect(yield* waitFor(() => a.device.counters.rnrRetries >= 5, 5000)).toBe(true)
        const tx0 = a.device.counters.txPackets
        const r0 = a.device.counters.rnrRetries
        expect(yield* waitFor(() => a.device.counters.rnrRetries >= r0 + 50, 5000)).toBe(true)
        const perRetry = (a.device.counters.txPackets - tx0) / (a.device.counters.rnrRetries - r0)
        // The window resent on each retry was 32 packets here: one packet (and at most one stray) per retry.
        expect(perRetry).toBeLessThan(2)
        for (let i = 0; i < n; i++) b.qp.postRecv(recvWr(b, i, i * 64, 64))
        const recvs = yield* pollN(b.cq, n)
        expect(recvs.map((w) => w.wrId)).toEqual(Array.from({ length: n }, (_, i) => i))
        const sends = yield* pollN(a.cq, n)
        expect(sends.every((w) => w.status === WcStatus.SUCCESS)).toBe(true)
      })
  )

  it.scopedLive("rnr_retry 7 retries forever", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ paramsA: { rnrRetry: 7 }, paramsB: { minRnrTimer: 1 } })
      a.qp.postSend(sendWr(a, 1, 0, 8))
      // Well past any finite rnr_retry (at most 6), the QP still retries and stays in RTS.
      expect(yield* waitFor(() => a.device.counters.rnrRetries > 20, 5000)).toBe(true)
      expect(a.qp.state).toBe(QpState.RTS)
      expect(drain(a.cq)).toHaveLength(0)
      b.qp.postRecv(recvWr(b, 1, 0, 64))
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
    })
  )

  it.scopedLive("WRITE_WITH_IMM needs a RECV too: RNR, then delivery with the immediate", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ params: { minRnrTimer: 1 } })
      a.buf.write("imm payload", 0)
      a.qp.postSend(
        sendWr(a, 1, 0, 11, {
          opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
          remoteAddr: b.mr.addr + 5000,
          rkey: b.mr.rkey,
          immData: 42
        })
      )
      expect(yield* waitFor(() => b.device.counters.rnrNaksSent > 0, 5000)).toBe(true)
      b.qp.postRecv(recvWr(b, 9, 0, 0))
      const [r] = yield* pollN(b.cq, 1)
      expect(r).toMatchObject({ wrId: 9, opcode: WcOpcode.RECV_RDMA_WITH_IMM, immData: 42, byteLen: 11 })
      expect(b.buf.toString("utf8", 5000, 5011)).toBe("imm payload")
    })
  )
})
