import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Errno, EventType, QpAttrMask as M, QpState, type QueuePair, Rc, RdmaError } from "../src/index.js"
import { collectEvents, makePair, pollN, recvWr, sendWr, waitFor } from "./support.js"

const errnoOf = (qp: QueuePair, attr: Parameters<QueuePair["modifyQp"]>[0], mask: number) =>
  qp.modifyQp(attr, mask).pipe(
    Effect.as(0),
    Effect.catchAll((e) => Effect.succeed(e instanceof RdmaError ? e.errno : -1))
  )

const initAttr = { qpState: QpState.INIT, pkeyIndex: 0, portNum: 1, qpAccessFlags: 7 }
const initMask = M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS

describe("SoftVerbs QP state machine (rule 1)", () => {
  it.scopedLive("walks RESET -> INIT -> RTR -> RTS with the required masks, and queryQp reports it", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ connect: false })
      expect(a.qp.state).toBe(QpState.RESET)
      yield* Rc.toInit(a.qp)
      expect(a.qp.state).toBe(QpState.INIT)
      const gid = yield* b.ctx.queryGid(1, 0)
      yield* Rc.toRtr(a.qp, { gid, qpNum: b.qp.qpNum, psn: 77 }, { ...Rc.defaultParams, minRnrTimer: 18 })
      yield* Rc.toRts(a.qp, 1234, { ...Rc.defaultParams, timeout: 17, retryCnt: 5 })
      const q = yield* a.qp.queryQp(0)
      expect(q).toMatchObject({ qpState: QpState.RTS, rqPsn: 77, sqPsn: 1234, destQpNum: b.qp.qpNum })
      expect(q).toMatchObject({ minRnrTimer: 18, timeout: 17, retryCnt: 5, rnrRetry: 7, pathMtu: 5 })
    })
  )

  it.scopedLive("a transition missing any one required attribute fails EINVAL and changes nothing", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ connect: false })
      const gid = yield* b.ctx.queryGid(1, 0)
      const rtr = {
        qpState: QpState.RTR,
        pathMtu: 5 as const,
        destQpNum: b.qp.qpNum,
        rqPsn: 1,
        maxDestRdAtomic: 1,
        minRnrTimer: 12,
        ahAttr: { isGlobal: 1, grh: { dgid: gid } }
      }
      const rts = { qpState: QpState.RTS, sqPsn: 1, timeout: 14, retryCnt: 7, rnrRetry: 7, maxRdAtomic: 1 }
      const steps = [
        { attr: initAttr, required: M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS, from: QpState.RESET },
        {
          attr: rtr,
          required: M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER,
          from: QpState.INIT
        },
        {
          attr: rts,
          required: M.SQ_PSN | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.MAX_QP_RD_ATOMIC,
          from: QpState.RTR
        }
      ]
      let checked = 0
      for (const step of steps) {
        for (let bit = 1; bit <= M.DEST_QPN; bit <<= 1) {
          if ((step.required & bit) === 0) continue
          const before = yield* a.qp.queryQp(0)
          expect(yield* errnoOf(a.qp, step.attr, (M.STATE | step.required) & ~bit)).toBe(Errno.EINVAL)
          expect(yield* a.qp.queryQp(0)).toEqual(before)
          expect(a.qp.state).toBe(step.from)
          checked++
        }
        expect(yield* errnoOf(a.qp, step.attr, M.STATE | step.required)).toBe(0)
      }
      expect(checked).toBe(14)
      expect(a.qp.state).toBe(QpState.RTS)
    })
  )

  it.scopedLive("illegal transitions, unaccepted attributes and bad values fail EINVAL and change nothing", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ connect: false })
      // RESET cannot jump to RTR or RTS, or accept a path MTU.
      expect(yield* errnoOf(a.qp, { qpState: QpState.RTR }, M.STATE)).toBe(Errno.EINVAL)
      expect(yield* errnoOf(a.qp, { qpState: QpState.RTS }, M.STATE)).toBe(Errno.EINVAL)
      expect(yield* errnoOf(a.qp, { ...initAttr, pathMtu: 5 }, initMask | M.PATH_MTU)).toBe(Errno.EINVAL)
      expect(a.qp.state).toBe(QpState.RESET)
      yield* Rc.toInit(a.qp)
      // INIT cannot go straight to RTS, nor back to... SQD.
      expect(yield* errnoOf(a.qp, { qpState: QpState.RTS }, M.STATE)).toBe(Errno.EINVAL)
      expect(yield* errnoOf(a.qp, { qpState: QpState.SQD }, M.STATE)).toBe(Errno.EINVAL)
      // A value out of range: the whole modify is refused.
      const gid = yield* b.ctx.queryGid(1, 0)
      const rtr = { gid, qpNum: b.qp.qpNum, psn: 5 }
      const bad = yield* Rc.toRtr(a.qp, rtr, { ...Rc.defaultParams, minRnrTimer: 32 }).pipe(Effect.flip)
      expect(bad).toBeInstanceOf(RdmaError)
      expect(bad.errno).toBe(Errno.EINVAL)
      expect(bad.message).toContain("min_rnr_timer")
      expect(a.qp.state).toBe(QpState.INIT)
      // A destination GID that is not a SoftVerbs port.
      const badGid = yield* Rc.toRtr(a.qp, { ...rtr, gid: new Uint8Array(16).fill(0xfe) }).pipe(Effect.flip)
      expect(badGid.message).toContain("dgid")
      yield* Rc.toRtr(a.qp, rtr)
      expect(yield* errnoOf(a.qp, { qpState: QpState.INIT }, M.STATE)).toBe(Errno.EINVAL)
      const rts = yield* Rc.toRts(a.qp, 1, { ...Rc.defaultParams, retryCnt: 8 }).pipe(Effect.flip)
      expect(rts.message).toContain("retry_cnt")
      expect(a.qp.state).toBe(QpState.RTR)
      yield* Rc.toRts(a.qp, 1)
      // CUR_STATE must match the real state.
      expect(yield* errnoOf(a.qp, { curQpState: QpState.RTR, minRnrTimer: 3 }, M.CUR_STATE | M.MIN_RNR_TIMER)).toBe(
        Errno.EINVAL
      )
      // RTS -> RTS with an optional attribute is fine; RTS -> RTR is not.
      expect(yield* errnoOf(a.qp, { minRnrTimer: 3 }, M.MIN_RNR_TIMER)).toBe(0)
      expect((yield* a.qp.queryQp(0)).minRnrTimer).toBe(3)
      expect(yield* errnoOf(a.qp, { qpState: QpState.RTR }, M.STATE)).toBe(Errno.EINVAL)
      // ERR and RESET are reachable from anywhere; ERR cannot go back to RTS.
      expect(yield* errnoOf(a.qp, { qpState: QpState.ERR }, M.STATE)).toBe(0)
      expect(yield* errnoOf(a.qp, { qpState: QpState.RTS }, M.STATE)).toBe(Errno.EINVAL)
      expect(a.qp.state).toBe(QpState.ERR)
      expect(yield* errnoOf(a.qp, { qpState: QpState.RESET }, M.STATE)).toBe(0)
      expect(a.qp.state).toBe(QpState.RESET)
      // SQE exists as a state but RC never enters it by a modify.
      expect(yield* errnoOf(a.qp, { qpState: QpState.SQE }, M.STATE)).toBe(Errno.EINVAL)
    })
  )

  it.scopedLive("posting sends before RTS fails EINVAL; receives are accepted from INIT on", () =>
    Effect.gen(function* () {
      const { a } = yield* makePair({ connect: false })
      expect(a.qp.postRecv(recvWr(a, 1, 0, 64))).toBe(Errno.EINVAL)
      expect(a.qp.postSend(sendWr(a, 1, 0, 64))).toBe(Errno.EINVAL)
      yield* Rc.toInit(a.qp)
      expect(a.qp.postSend(sendWr(a, 1, 0, 64))).toBe(Errno.EINVAL)
      expect(a.qp.badSendWr?.wrId).toBe(1)
      expect(a.qp.postRecv(recvWr(a, 2, 0, 64))).toBe(0)
    })
  )

  it.scopedLive("RTS -> SQD stops new sends, reports SQ_DRAINED, and SQD -> RTS resumes them", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair()
      const events = yield* collectEvents(a.ctx)
      for (let i = 0; i < 4; i++) b.qp.postRecv(recvWr(b, i, i * 64, 64))
      a.qp.postSend(sendWr(a, 1, 0, 8))
      yield* a.qp.modifyQp({ qpState: QpState.SQD, enSqdAsyncNotify: 1 }, M.STATE | M.EN_SQD_ASYNC_NOTIFY)
      expect(a.qp.state).toBe(QpState.SQD)
      expect(a.qp.postSend(sendWr(a, 2, 0, 8))).toBe(0)
      const first = yield* pollN(a.cq, 1)
      expect(first.map((w) => w.wrId)).toEqual([1])
      yield* waitFor(() => events.length >= 1)
      expect(events.map((e) => e.eventType)).toEqual([EventType.SQ_DRAINED])
      // WR 2 is held while the QP is in SQD.
      expect(yield* pollN(b.cq, 2, 100)).toHaveLength(1)
      yield* a.qp.modifyQp({ qpState: QpState.RTS }, M.STATE)
      expect((yield* pollN(a.cq, 1)).map((w) => w.wrId)).toEqual([2])
    })
  )
})
