import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { EventType, QpAttrMask as M, QpState, QpType, Rc, WcOpcode, WcStatus } from "../src/index.js"
import type { SoftCq } from "../src/soft/SoftCq.js"
import { collectEvents, drain, makePair, pollN, recvWr, sendWr, waitFor } from "./support.js"

/** Completions waiting in a SoftVerbs CQ. */
const depth = (cq: unknown): number => (cq as SoftCq).depth

describe("SoftVerbs ERR, RESET and CQ overflow (rules 5, 6, 8)", () => {
  it.scopedLive("moving to ERR flushes every outstanding send and receive, and every WR posted afterwards", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair()
      b.device.setFaults({ dropIn: 1 }) // nothing is acknowledged: the sends stay outstanding
      for (let i = 1; i <= 3; i++) a.qp.postSend(sendWr(a, i, 0, 8))
      for (let i = 10; i <= 12; i++) a.qp.postRecv(recvWr(a, i, 0, 64))
      yield* a.qp.modifyQp({ qpState: QpState.ERR }, M.STATE)
      const flushed = yield* pollN(a.cq, 6)
      expect(flushed.map((w) => [w.wrId, w.status])).toEqual([
        [1, WcStatus.WR_FLUSH_ERR],
        [2, WcStatus.WR_FLUSH_ERR],
        [3, WcStatus.WR_FLUSH_ERR],
        [10, WcStatus.WR_FLUSH_ERR],
        [11, WcStatus.WR_FLUSH_ERR],
        [12, WcStatus.WR_FLUSH_ERR]
      ])
      expect(flushed.slice(3).every((w) => w.opcode === WcOpcode.RECV)).toBe(true)
      // Posting while in ERR succeeds and completes with WR_FLUSH_ERR, even unsignaled.
      expect(a.qp.postSend(sendWr(a, 20, 0, 8, { sendFlags: 0 }))).toBe(0)
      expect(a.qp.postRecv(recvWr(a, 21, 0, 8))).toBe(0)
      const later = yield* pollN(a.cq, 2)
      expect(later.map((w) => [w.wrId, w.status])).toEqual([
        [20, WcStatus.WR_FLUSH_ERR],
        [21, WcStatus.WR_FLUSH_ERR]
      ])
    })
  )

  it.scopedLive("a QP in ERR drops packets without an ACK, so the peer's retry budget runs out", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ paramsA: { timeout: 10, retryCnt: 2 } })
      b.qp.postRecv(recvWr(b, 1, 0, 64))
      yield* b.qp.modifyQp({ qpState: QpState.ERR }, M.STATE)
      drain(b.cq)
      a.qp.postSend(sendWr(a, 1, 0, 8))
      const [wc] = yield* pollN(a.cq, 1)
      expect(wc?.status).toBe(WcStatus.RETRY_EXC_ERR)
      expect(b.device.counters.droppedState).toBe(3)
      expect(b.device.counters.txPackets).toBe(0)
      expect(drain(b.cq)).toHaveLength(0)
    })
  )

  it.scopedLive("RESET and destroy remove the QP's unpolled completions, and only its own", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair()
      // A second QP on b's CQ, so that the CQ holds completions of two QPs.
      const other = yield* b.pd.createQp({
        sendCq: b.cq,
        recvCq: b.cq,
        qpType: QpType.RC,
        cap: { maxSendWr: 8, maxRecvWr: 8, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 }
      })
      yield* Rc.toInit(other)
      other.postRecv(recvWr(b, 100, 0, 8))
      yield* other.modifyQp({ qpState: QpState.ERR }, M.STATE) // one flush completion of `other`
      for (let i = 1; i <= 3; i++) b.qp.postRecv(recvWr(b, i, i * 64, 64))
      for (let i = 1; i <= 3; i++) a.qp.postSend(sendWr(a, i, 0, 8))
      expect((yield* pollN(a.cq, 3)).map((w) => w.status)).toEqual([
        WcStatus.SUCCESS,
        WcStatus.SUCCESS,
        WcStatus.SUCCESS
      ])
      // b's CQ: 1 flush of `other` + 3 unpolled RECVs of b.qp. RESET b.qp: its 3 go away.
      expect(yield* waitFor(() => depth(b.cq) === 4, 5000)).toBe(true)
      yield* b.qp.modifyQp({ qpState: QpState.RESET }, M.STATE)
      const left = drain(b.cq)
      expect(left.map((w) => [w.wrId, w.qpNum])).toEqual([[100, other.qpNum]])
      // Destroy removes them too.
      const { a: a2, b: b2 } = yield* makePair()
      b2.qp.postRecv(recvWr(b2, 1, 0, 64))
      a2.qp.postSend(sendWr(a2, 1, 0, 8))
      yield* pollN(a2.cq, 1)
      yield* b2.qp.destroy
      expect(drain(b2.cq)).toHaveLength(0)
    })
  )

  it.scopedLive("a QP destroyed right after a RECV completes still acknowledges it: the sender sees SUCCESS", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ params: { timeout: 10, retryCnt: 2 } })
      b.qp.postRecv(recvWr(b, 1, 0, 64))
      a.qp.postSend(sendWr(a, 1, 0, 8))
      expect((yield* pollN(b.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
      yield* b.qp.destroy
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
    })
  )

  it.scopedLive("a QP moved to ERR right after a RECV completes still acknowledges it", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ params: { timeout: 10, retryCnt: 2 } })
      b.qp.postRecv(recvWr(b, 1, 0, 64))
      a.qp.postSend(sendWr(a, 1, 0, 8))
      expect((yield* pollN(b.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
      yield* b.qp.modifyQp({ qpState: QpState.ERR }, M.STATE)
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
    })
  )

  it.scopedLive("a CQ that overflows raises CQ_ERR once and loses no completion", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ cqe: 4 })
      const events = yield* collectEvents(a.ctx)
      for (let i = 0; i < 10; i++) b.qp.postRecv(recvWr(b, i, i * 8, 8))
      for (let i = 0; i < 10; i++) a.qp.postSend(sendWr(a, i, 0, 8))
      // Nothing is polled until all 10 completions are queued on each side (4 fit): both CQs outgrow their size.
      expect(yield* waitFor(() => depth(a.cq) >= 10 && depth(b.cq) >= 10, 5000)).toBe(true)
      const got = drain(a.cq)
      expect(got.map((w) => w.wrId)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
      expect(yield* waitFor(() => events.length >= 1)).toBe(true)
      const [event] = events
      expect(event?.eventType).toBe(EventType.CQ_ERR)
      expect(event?.cq).toBe(a.cq)
      expect(drain(b.cq)).toHaveLength(10)
    })
  )
})
