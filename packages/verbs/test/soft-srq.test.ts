/**
 * SoftVerbs shared receive queues (`ibv_create_srq`, rule 12): QPs created with an SRQ take their RECVs from it in
 * posting order, each message whole in the RECV its first packet took, even when several QPs' multi-packet messages
 * interleave on the wire; an empty SRQ RNR-NAKs as an empty receive queue does; posting to such a QP, destroying an SRQ
 * still in use and an SRQ of another PD are refused; the armed limit raises `SRQ_LIMIT_REACHED` once; a QP that fails
 * leaves the shared RECVs to the others.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import {
  Errno,
  EventType,
  QpState,
  QpType,
  type RecvWr,
  type SharedReceiveQueue,
  WcOpcode,
  WcStatus
} from "../src/index.js"
import {
  collectEvents,
  connectSides,
  makePair,
  type PairOptions,
  pollN,
  type Side,
  sendWr,
  sleep,
  waitFor
} from "./support.js"

const SLOT = 16 * 1024
/** 10 KiB: three packets at the 4096-byte MTU, so two QPs' messages interleave packet by packet. */
const MESSAGE = 10 * 1024

const cap = { maxSendWr: 64, maxRecvWr: 1, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 }

/** Receive slot `k` of `side`'s buffer, in the upper half (the lower half holds what is sent). */
const srqWr = (side: Side, k: number): RecvWr => ({
  wrId: 100 + k,
  sgList: [{ addr: side.mr.addr + (1 << 19) + k * SLOT, length: SLOT, lkey: side.mr.lkey }]
})

/** A pair `a`/`b` plus `qps` more QP pairs whose `b` ends share one SRQ of `b`'s PD (`maxWr` deep). */
const srqSetup = (qps: number, maxWr = 64, options: PairOptions = {}) =>
  Effect.gen(function* () {
    const pair = yield* makePair(options)
    const { a, b } = pair
    const createSrq = b.pd.createSrq
    if (createSrq === undefined) return yield* Effect.fail(new Error("SoftVerbs has no createSrq"))
    const srq = yield* createSrq({ maxWr, maxSge: 1 })
    const senders: Array<Side> = []
    const receivers: Array<Side> = []
    for (let i = 0; i < qps; i++) {
      const sq = yield* a.pd.createQp({ sendCq: a.cq, recvCq: a.cq, qpType: QpType.RC, cap })
      const rq = yield* b.pd.createQp({ sendCq: b.cq, recvCq: b.cq, qpType: QpType.RC, cap, srq })
      const s = { ...a, qp: sq }
      const r = { ...b, qp: rq }
      yield* connectSides(s, r)
      senders.push(s)
      receivers.push(r)
    }
    return { ...pair, srq, senders, receivers }
  })

/** Message `i` of QP `q`: its bytes name both. */
const fill = (side: Side, q: number, i: number, at: number) => {
  const text = `qp ${q} message ${i} `
  for (let o = 0; o < MESSAGE; o += text.length) side.buf.write(text, at + o, Math.min(text.length, MESSAGE - o))
  return side.buf.toString("latin1", at, at + MESSAGE)
}

describe("SoftVerbs shared receive queues (rule 12)", () => {
  it.scopedLive("QPs take RECVs from their SRQ in order; interleaved multi-packet messages each land whole", () =>
    Effect.gen(function* () {
      // The sender's socket buffers hold one packet: each of its QPs sends one packet per ACK, so the two QPs'
      // packets alternate on the wire (the receiver's are as large as usual: nothing is dropped).
      const { a, b, srq, senders, receivers } = yield* srqSetup(2, 64, { deviceA: { socketBufferBytes: 6000 } })
      expect(a.device.windowFor(4096)).toBe(1)
      const per = 3
      for (let k = 0; k < 2 * per; k++) expect(srq.postRecv(srqWr(b, k))).toBe(0)
      const sent = new Map<string, string>()
      // One turn: QP 0's and QP 1's messages alternate, every one three packets.
      for (let i = 0; i < per; i++) {
        for (let q = 0; q < 2; q++) {
          const s = senders[q] as Side
          const at = (q * per + i) * MESSAGE
          sent.set(`${q}/${i}`, fill(s, q, i, at))
          expect(s.qp.postSend(sendWr(s, q * per + i, at, MESSAGE))).toBe(0)
        }
      }
      const recvs = yield* pollN(b.cq, 2 * per, 10_000)
      expect(recvs.length).toBe(2 * per)
      expect(recvs.every((w) => w.status === WcStatus.SUCCESS && w.opcode === WcOpcode.RECV)).toBe(true)
      expect(recvs.every((w) => w.byteLen === MESSAGE)).toBe(true)
      // Every RECV taken once.
      expect(recvs.map((w) => w.wrId).sort((x, y) => x - y)).toEqual([100, 101, 102, 103, 104, 105])
      // Per QP, its messages in order, each whole in the RECV its completion names.
      for (let q = 0; q < 2; q++) {
        const qpNum = (receivers[q] as Side).qp.qpNum
        const got = recvs
          .filter((w) => w.qpNum === qpNum)
          .map((w) =>
            b.buf.toString("latin1", (1 << 19) + (w.wrId - 100) * SLOT, (1 << 19) + (w.wrId - 100) * SLOT + MESSAGE)
          )
        expect(got.length).toBe(per)
        for (const [i, text] of got.entries()) expect(text === sent.get(`${q}/${i}`), `QP ${q} message ${i}`).toBe(true)
      }
    })
  )

  it.scopedLive("an empty SRQ RNR-NAKs the SEND, and the RECV posted later takes it", () =>
    Effect.gen(function* () {
      const { b, srq, senders } = yield* srqSetup(1)
      const s = senders[0] as Side
      fill(s, 0, 0, 0)
      expect(s.qp.postSend(sendWr(s, 1, 0, MESSAGE))).toBe(0)
      expect(yield* waitFor(() => b.device.counters.rnrNaksSent > 0, 5000)).toBe(true)
      expect(yield* pollN(b.cq, 1, 50)).toEqual([])
      expect(srq.postRecv(srqWr(b, 0))).toBe(0)
      const [recv] = yield* pollN(b.cq, 1, 10_000)
      expect(recv?.status).toBe(WcStatus.SUCCESS)
      expect(recv?.wrId).toBe(100)
      expect((yield* pollN(s.cq, 1, 10_000))[0]?.status).toBe(WcStatus.SUCCESS)
    })
  )

  it.scopedLive("refuses a post to the QP, an SRQ of another PD, a destroy while in use; the limit fires once", () =>
    Effect.gen(function* () {
      const { a, b, srq, senders, receivers } = yield* srqSetup(1, 8)
      const r = receivers[0] as Side
      expect(r.qp.postRecv(srqWr(b, 0))).toBe(Errno.EINVAL)
      const other = yield* Effect.either(
        a.pd.createQp({ sendCq: a.cq, recvCq: a.cq, qpType: QpType.RC, cap, srq: srq as SharedReceiveQueue })
      )
      expect(other._tag === "Left" && other.left.errno).toBe(Errno.EINVAL)
      const busy = yield* Effect.either(srq.destroy)
      expect(busy._tag === "Left" && busy.left.errno).toBe(Errno.EBUSY)
      // max_wr 8: the ninth post is ENOMEM, as a full receive queue's.
      const codes = Array.from({ length: 9 }, (_, k) => srq.postRecv(srqWr(b, k)))
      expect(codes).toEqual([0, 0, 0, 0, 0, 0, 0, 0, Errno.ENOMEM])
      expect(yield* Effect.either(srq.armLimit(9))).toMatchObject({ _tag: "Left" })
      const events = yield* collectEvents(b.ctx)
      yield* srq.armLimit(7)
      const s = senders[0] as Side
      for (let i = 0; i < 3; i++) expect(s.qp.postSend(sendWr(s, i, 0, 64))).toBe(0)
      expect((yield* pollN(b.cq, 3, 10_000)).length).toBe(3)
      yield* sleep(20)
      // 8 posted, limit 7: the first RECV taken leaves 7 (not fewer), the second 6: one event, then disarmed.
      expect(events.filter((e) => e.eventType === EventType.SRQ_LIMIT_REACHED).length).toBe(1)
    })
  )

  it.scopedLive("a QP that fails leaves the SRQ's RECVs to the others", () =>
    Effect.gen(function* () {
      const { b, srq, senders, receivers } = yield* srqSetup(2)
      for (let k = 0; k < 4; k++) expect(srq.postRecv(srqWr(b, k))).toBe(0)
      yield* (receivers[0] as Side).qp.modifyQp({ qpState: QpState.ERR }, 1 << 0)
      expect(yield* pollN(b.cq, 1, 50)).toEqual([])
      const s = senders[1] as Side
      for (let i = 0; i < 4; i++) expect(s.qp.postSend(sendWr(s, i, 0, 64))).toBe(0)
      const recvs = yield* pollN(b.cq, 4, 10_000)
      expect(recvs.map((w) => [w.status, w.wrId, w.qpNum])).toEqual(
        [100, 101, 102, 103].map((id) => [WcStatus.SUCCESS, id, (receivers[1] as Side).qp.qpNum])
      )
    })
  )
})
