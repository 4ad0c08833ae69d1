/**
 * RC rules of SoftVerbs that had no test able to fail without them: 24-bit PSN wraparound, the sequence NAK, per-peer
 * drop of incoming packets, SEND_WITH_IMM, duplicate READ re-execution, the completion channel's arm-once notification
 * and packets to a QP in RESET.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import {
  ackTimeoutMs,
  QpAttrMask as M,
  Mtu,
  QpState,
  Rc,
  SoftVerbs,
  WcFlags,
  WcOpcode,
  WcStatus,
  WrOpcode
} from "../src/index.js"
import { drain, makePair, openSide, pollN, recvWr, type Side, sendWr, sleep, waitFor } from "./support.js"

/** Connects `x`'s QP to `y`'s and back, each sending from the PSN given. */
const connectPair = (x: Side, psnX: number, y: Side, psnY: number, params: Partial<Rc.RcParams> = {}) =>
  Effect.gen(function* () {
    const p = { ...Rc.defaultParams, ...params }
    yield* Rc.connect(x.qp, psnX, { gid: yield* y.ctx.queryGid(1, 0), qpNum: y.qp.qpNum, psn: psnY }, p)
    yield* Rc.connect(y.qp, psnY, { gid: yield* x.ctx.queryGid(1, 0), qpNum: x.qp.qpNum, psn: psnX }, p)
  })

/** A byte pattern that differs per message and per position. */
const fillPattern = (buf: Buffer, at: number, len: number, seed: number) => {
  for (let k = 0; k < len; k++) buf[at + k] = (seed * 131 + k * 7 + (k >> 8)) & 0xff
}

describe("SoftVerbs rules that must fail without their code", () => {
  it.scopedLive("24-bit PSN wraparound: SENDs, WRITEs and READs started near 0xFFFFFF cross 0, in order, once", () =>
    Effect.gen(function* () {
      // path_mtu 256: every message of more than 256 bytes takes several PSNs, so the wrap falls inside messages.
      const { a, b } = yield* makePair({ connect: false })
      const psnA = 0xffffff - 40
      const psnB = 0xffffff - 5
      yield* connectPair(a, psnA, b, psnB, { pathMtu: Mtu.MTU_256 })
      const n = 60
      const lenOf = (i: number) => 1 + ((i * 389) % 900)
      let psns = 0
      for (let i = 0; i < n; i++) b.qp.postRecv(recvWr(b, i, i * 1024, 1024))
      for (let i = 0; i < n; i++) {
        fillPattern(a.buf, i * 1024, lenOf(i), i)
        expect(a.qp.postSend(sendWr(a, i, i * 1024, lenOf(i)))).toBe(0)
        psns += Math.ceil(lenOf(i) / 256)
      }
      // The SENDs take more PSNs than were left before 0xFFFFFF: a's PSNs wrapped.
      expect(psnA + psns).toBeGreaterThan(0xffffff + 1)
      const got = yield* pollN(b.cq, n, 20_000)
      expect(got.map((w) => w.wrId)).toEqual(Array.from({ length: n }, (_, i) => i))
      got.forEach((w, i) => {
        expect(w).toMatchObject({ status: WcStatus.SUCCESS, byteLen: lenOf(i) })
        expect(
          b.buf.subarray(i * 1024, i * 1024 + lenOf(i)).equals(a.buf.subarray(i * 1024, i * 1024 + lenOf(i)))
        ).toBe(true)
      })
      expect((yield* pollN(a.cq, n, 20_000)).every((w) => w.status === WcStatus.SUCCESS)).toBe(true)

      // b -> a across b's wrap: 4 WRITEs of 1000 bytes (4 PSNs each), then 4 READs of 1000 bytes (4 PSNs each).
      for (let i = 0; i < 4; i++) {
        fillPattern(b.buf, 200_000 + i * 1024, 1000, 100 + i)
        b.qp.postSend(
          sendWr(b, 100 + i, 200_000 + i * 1024, 1000, {
            opcode: WrOpcode.RDMA_WRITE,
            remoteAddr: a.mr.addr + 300_000 + i * 1024,
            rkey: a.mr.rkey
          })
        )
      }
      for (let i = 0; i < 4; i++) fillPattern(a.buf, 400_000 + i * 1024, 1000, 200 + i)
      for (let i = 0; i < 4; i++) {
        b.qp.postSend(
          sendWr(b, 200 + i, 500_000 + i * 1024, 1000, {
            opcode: WrOpcode.RDMA_READ,
            remoteAddr: a.mr.addr + 400_000 + i * 1024,
            rkey: a.mr.rkey
          })
        )
      }
      const done = yield* pollN(b.cq, 8, 20_000)
      expect(done.map((w) => [w.wrId, w.status])).toEqual([
        ...[100, 101, 102, 103].map((id) => [id, WcStatus.SUCCESS]),
        ...[200, 201, 202, 203].map((id) => [id, WcStatus.SUCCESS])
      ])
      for (let i = 0; i < 4; i++) {
        const w = i * 1024
        expect(a.buf.subarray(300_000 + w, 301_000 + w).equals(b.buf.subarray(200_000 + w, 201_000 + w))).toBe(true)
        expect(b.buf.subarray(500_000 + w, 501_000 + w).equals(a.buf.subarray(400_000 + w, 401_000 + w))).toBe(true)
      }
      // Nothing is delivered twice later, and both QPs are still usable.
      yield* sleep(50)
      expect(drain(b.cq)).toHaveLength(0)
      expect(drain(a.cq)).toHaveLength(0)
      expect([a.qp.state, b.qp.state]).toEqual([QpState.RTS, QpState.RTS])
      expect(a.device.counters.handlerErrors + b.device.counters.handlerErrors).toBe(0)
    })
  )

  it.scopedLive("24-bit PSN wraparound under 10% loss each way: 200 SENDs across 0 arrive once, in order", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ connect: false })
      // TENT's timeout 14 (67 ms) with retry_cnt 7: a loaded 2-core machine does not run the budget out.
      const psnA = 0xffffff - 100
      yield* connectPair(a, psnA, b, Rc.randomPsn(), { pathMtu: Mtu.MTU_1024, timeout: 14, retryCnt: 7 })
      const n = 200
      for (let i = 0; i < n; i++) b.qp.postRecv(recvWr(b, i, i * 2048, 2048))
      a.device.setFaults({ dropIn: 0.1, dropOut: 0.1 })
      for (let i = 0; i < n; i++) {
        const len = 4 + ((i * 577) % 1500)
        fillPattern(a.buf, i * 2048, len, i)
        a.buf.writeUInt32LE(i, i * 2048)
        expect(a.qp.postSend(sendWr(a, i, i * 2048, len))).toBe(0)
      }
      const got = yield* pollN(b.cq, n, 50_000)
      expect(got.map((w) => w.wrId)).toEqual(Array.from({ length: n }, (_, i) => i))
      for (const w of got) {
        const len = 4 + ((w.wrId * 577) % 1500)
        expect(w).toMatchObject({ status: WcStatus.SUCCESS, byteLen: len })
        const at = w.wrId * 2048
        expect(b.buf.subarray(at, at + len).equals(a.buf.subarray(at, at + len))).toBe(true)
      }
      const sends = yield* pollN(a.cq, n, 50_000)
      expect(sends.filter((w) => w.status === WcStatus.SUCCESS)).toHaveLength(n)
      a.device.setFaults({})
      yield* sleep(50)
      expect(drain(b.cq)).toHaveLength(0)
      // Loss happened and was repaired across the wrap.
      expect(a.device.counters.droppedFault).toBeGreaterThan(0)
      expect(a.device.counters.handlerErrors + b.device.counters.handlerErrors).toBe(0)
    })
  )

  it.scopedLive("sequence NAK: one lost packet is recovered long before the retransmit timer (timeout 22 = 17 s)", () =>
    Effect.gen(function* () {
      const timeout = 22
      const timerMs = ackTimeoutMs(timeout)
      const { a, b } = yield* makePair({ params: { timeout, retryCnt: 7 } })
      for (let i = 1; i <= 2; i++) b.qp.postRecv(recvWr(b, i, i * 64, 64))
      // Exactly one packet is lost: the first SEND, dropped on b's way in.
      b.device.setFaults({ dropIn: 1 })
      a.qp.postSend(sendWr(a, 1, 0, 16))
      expect(yield* waitFor(() => b.device.counters.droppedFault === 1)).toBe(true)
      b.device.setFaults({})
      const start = performance.now()
      a.qp.postSend(sendWr(a, 2, 0, 16))
      // The second SEND arrives out of sequence, b NAKs once, a goes back to the lost PSN: no timer is involved.
      const got = yield* pollN(b.cq, 2, timerMs / 4)
      const elapsed = performance.now() - start
      console.log(`sequence NAK recovery: ${elapsed.toFixed(1)} ms; the retransmit timer is ${timerMs.toFixed(0)} ms`)
      expect(got.map((w) => [w.wrId, w.status])).toEqual([
        [1, WcStatus.SUCCESS],
        [2, WcStatus.SUCCESS]
      ])
      expect(b.device.counters.seqNaksSent).toBe(1)
      expect(a.device.counters.retransmits).toBe(0)
      expect(elapsed).toBeLessThan(timerMs / 4)
      expect((yield* pollN(a.cq, 2)).map((w) => w.status)).toEqual([WcStatus.SUCCESS, WcStatus.SUCCESS])
    })
  )

  it.scopedLive("per-peer drop: setFaults(dropIn, peer) loses that peer's packets only, another peer's arrive", () =>
    Effect.gen(function* () {
      const { control, verbs } = yield* SoftVerbs.make({ devices: [{ name: "a" }, { name: "b" }, { name: "c" }] })
      const a = yield* openSide(verbs, control, "a", {})
      const ba = yield* openSide(verbs, control, "b", {})
      const c = yield* openSide(verbs, control, "c", {})
      const bc = yield* openSide(verbs, control, "b", {})
      // a's timeout 16 (268 ms) with retry_cnt 7: its first retransmit comes well after the checks below.
      yield* connectPair(a, Rc.randomPsn(), ba, Rc.randomPsn(), { timeout: 16, retryCnt: 7 })
      yield* connectPair(c, Rc.randomPsn(), bc, Rc.randomPsn(), { timeout: 16, retryCnt: 7 })
      const aAddress = yield* control.address("a")
      yield* control.setFaults("b", { dropIn: 1 }, aAddress)
      ba.qp.postRecv(recvWr(ba, 1, 0, 64))
      bc.qp.postRecv(recvWr(bc, 2, 0, 64))
      a.qp.postSend(sendWr(a, 10, 0, 8))
      c.qp.postSend(sendWr(c, 20, 0, 8))
      // c's SEND arrives on the same device while a's is dropped on its way in.
      expect((yield* pollN(bc.cq, 1))[0]).toMatchObject({ wrId: 2, status: WcStatus.SUCCESS })
      expect(yield* waitFor(() => ba.device.counters.droppedFault >= 1)).toBe(true)
      expect(drain(ba.cq)).toHaveLength(0)
      expect((yield* pollN(c.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
      // The rule is lifted: a's retransmit arrives.
      yield* control.setFaults("b", {}, aAddress)
      expect((yield* pollN(ba.cq, 1))[0]).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS })
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
      expect(a.device.counters.retransmits).toBeGreaterThan(0)
      expect(c.device.counters.retransmits).toBe(0)
    })
  )

  it.scopedLive("SEND_WITH_IMM: the immediate arrives in the RECV completion, WITH_IMM set, in host order", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ params: { pathMtu: Mtu.MTU_256 } })
      for (let i = 1; i <= 3; i++) b.qp.postRecv(recvWr(b, i, i * 2048, 2048))
      fillPattern(a.buf, 0, 1000, 3)
      // A 4-packet SEND with an immediate whose four bytes differ (a byte swap shows), an empty one, a plain SEND.
      a.qp.postSend(sendWr(a, 11, 0, 1000, { opcode: WrOpcode.SEND_WITH_IMM, immData: 0x01020384 }))
      a.qp.postSend(sendWr(a, 12, 0, 0, { opcode: WrOpcode.SEND_WITH_IMM, immData: 0xfedcba98 }))
      a.qp.postSend(sendWr(a, 13, 0, 10))
      const got = yield* pollN(b.cq, 3)
      expect(got[0]).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS, opcode: WcOpcode.RECV, byteLen: 1000 })
      expect(got[0]?.immData).toBe(0x01020384)
      expect((got[0]?.wcFlags ?? 0) & WcFlags.WITH_IMM).toBe(WcFlags.WITH_IMM)
      expect(b.buf.subarray(2048, 3048).equals(a.buf.subarray(0, 1000))).toBe(true)
      expect(got[1]).toMatchObject({ wrId: 2, status: WcStatus.SUCCESS, opcode: WcOpcode.RECV, byteLen: 0 })
      expect(got[1]?.immData).toBe(0xfedcba98)
      expect((got[1]?.wcFlags ?? 0) & WcFlags.WITH_IMM).toBe(WcFlags.WITH_IMM)
      expect(got[2]).toMatchObject({ wrId: 3, status: WcStatus.SUCCESS, byteLen: 10, immData: 0 })
      expect((got[2]?.wcFlags ?? 0) & WcFlags.WITH_IMM).toBe(0)
      const sent = yield* pollN(a.cq, 3)
      expect(sent.map((w) => [w.wrId, w.status, w.opcode])).toEqual([
        [11, WcStatus.SUCCESS, WcOpcode.SEND],
        [12, WcStatus.SUCCESS, WcOpcode.SEND],
        [13, WcStatus.SUCCESS, WcOpcode.SEND]
      ])
    })
  )

  it.scopedLive("a duplicate READ request is executed again and answered from the memory as it is now", () =>
    Effect.gen(function* () {
      // path_mtu 1024: a 3000-byte READ is answered in 3 packets. a's timeout 14 (67 ms) re-requests it.
      const { a, b } = yield* makePair({ params: { pathMtu: Mtu.MTU_1024 }, paramsA: { timeout: 14, retryCnt: 7 } })
      b.buf.fill(0x11, 0, 3000)
      a.buf.fill(0, 100_000, 103_000)
      // b executes the READ, and every response packet it sends is lost.
      b.device.setFaults({ dropOut: 1 })
      a.qp.postSend(sendWr(a, 1, 100_000, 3000, { opcode: WrOpcode.RDMA_READ, remoteAddr: b.mr.addr, rkey: b.mr.rkey }))
      expect(yield* waitFor(() => b.device.counters.droppedFault >= 3)).toBe(true)
      // The memory changes after the first execution; the re-executed READ must return the new bytes.
      b.buf.fill(0x22, 0, 3000)
      const duplicates = b.device.counters.duplicates
      b.device.setFaults({})
      const [wc] = yield* pollN(a.cq, 1)
      expect(wc).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS, opcode: WcOpcode.RDMA_READ, byteLen: 3000 })
      expect(a.buf.subarray(100_000, 103_000).every((x) => x === 0x22)).toBe(true)
      expect(b.device.counters.duplicates).toBeGreaterThan(duplicates)
      expect(a.device.counters.retransmits).toBeGreaterThan(0)
      expect([a.qp.state, b.qp.state]).toEqual([QpState.RTS, QpState.RTS])
    })
  )

  it.scopedLive("completion channel: req_notify_cq arms one event; no second event without re-arming", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair()
      let events = 0
      b.cq.setNotify(() => {
        events++
      })
      for (let i = 1; i <= 6; i++) b.qp.postRecv(recvWr(b, i, i * 64, 64))
      expect(b.cq.reqNotifyCq()).toBe(0)
      a.qp.postSend(sendWr(a, 1, 0, 8))
      expect(yield* waitFor(() => events >= 1)).toBe(true)
      // Two more completions while not armed: no event. a's send completions come after b acknowledged, so b's
      // RECV completions have been pushed by then; the sleep leaves room for any late delivery.
      a.qp.postSend(sendWr(a, 2, 0, 8))
      a.qp.postSend(sendWr(a, 3, 0, 8))
      expect(yield* pollN(a.cq, 3)).toHaveLength(3)
      yield* sleep(30)
      expect(events).toBe(1)
      expect(drain(b.cq).map((w) => w.wrId)).toEqual([1, 2, 3])
      // Re-armed: a burst of completions raises exactly one event.
      expect(b.cq.reqNotifyCq()).toBe(0)
      a.qp.postSend(sendWr(a, 4, 0, 8))
      a.qp.postSend(sendWr(a, 5, 0, 8))
      expect(yield* waitFor(() => events >= 2)).toBe(true)
      expect(yield* pollN(a.cq, 2)).toHaveLength(2)
      yield* sleep(30)
      expect(events).toBe(2)
      expect(drain(b.cq).map((w) => w.wrId)).toEqual([4, 5])
    })
  )

  it.scopedLive("a QP in RESET drops packets: no memory written, no completion, no response", () =>
    Effect.gen(function* () {
      // a's timeout 12 (16.8 ms) and retry_cnt 2: the budget runs out quickly against a silent QP.
      const { a, b } = yield* makePair({ paramsA: { timeout: 12, retryCnt: 2 } })
      b.buf.fill(0x33, 0, 8192)
      yield* b.qp.modifyQp({ qpState: QpState.RESET }, M.STATE)
      expect(b.qp.state).toBe(QpState.RESET)
      const c0 = { ...b.device.counters }
      a.buf.fill(0x44, 0, 4096)
      a.qp.postSend(sendWr(a, 1, 0, 4096, { opcode: WrOpcode.RDMA_WRITE, remoteAddr: b.mr.addr, rkey: b.mr.rkey }))
      a.qp.postSend(sendWr(a, 2, 0, 8))
      a.qp.postSend(sendWr(a, 3, 0, 64, { opcode: WrOpcode.RDMA_READ, remoteAddr: b.mr.addr + 4096, rkey: b.mr.rkey }))
      const wcs = yield* pollN(a.cq, 3, 10_000)
      expect(wcs.map((w) => w.status)).toEqual([WcStatus.RETRY_EXC_ERR, WcStatus.WR_FLUSH_ERR, WcStatus.WR_FLUSH_ERR])
      const c = b.device.counters
      expect(c.droppedState - c0.droppedState).toBeGreaterThanOrEqual(3)
      expect(c.txPackets).toBe(c0.txPackets)
      expect(b.buf.subarray(0, 8192).every((x) => x === 0x33)).toBe(true)
      expect(drain(b.cq)).toHaveLength(0)
      expect(b.qp.state).toBe(QpState.RESET)
    })
  )
})
