/**
 * Cumulative ACKs after a go-back-N. A retransmit timeout rewinds to the oldest unacknowledged PSN and resends a
 * recovery window; an ACK that then arrives may cover WRs not resent yet: they arrived, so they complete and
 * transmission resumes after them. An ACK never completes a READ (a READ completes only with its response data): an
 * ACK (or a sequence NAK) past an outstanding READ says its responses were lost, and the requester goes back to the
 * READ at once (rxe's `COMPST_ERROR_RETRY`).
 */
import * as dgram from "node:dgram"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import {
  AccessFlags,
  Mtu,
  QpState,
  QpType,
  Rc,
  SendFlags,
  SoftVerbs,
  WcOpcode,
  WcStatus,
  WrOpcode
} from "../src/index.js"
import { softGid } from "../src/soft/Address.js"
import { Flag, HDR, Nak, Off, Op, writeHeader } from "../src/soft/Packet.js"
import { drain, makePair, pollN, recvWr, sendWr, waitFor } from "./support.js"

const PEER_QPN = 0x4243

/**
 * A SoftVerbs requester QP connected to a raw UDP socket on 127.0.0.1 that plays the responder: it records every
 * request the QP sends and answers only with what the test sends.
 */
const rawResponder = (timeout: number) =>
  Effect.gen(function* () {
    const { control, verbs } = yield* SoftVerbs.make({ devices: [{ name: "q" }] })
    const ctx = yield* verbs.openDevice("q")
    const device = yield* control.device("q")
    const pd = yield* ctx.allocPd
    const cq = yield* ctx.createCq(64)
    const qp = yield* pd.createQp({
      sendCq: cq,
      recvCq: cq,
      qpType: QpType.RC,
      cap: { maxSendWr: 16, maxRecvWr: 16, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 }
    })
    const buf = Buffer.alloc(8192)
    const mr = yield* pd.regMr(buf, AccessFlags.LOCAL_WRITE)
    const sock = yield* Effect.acquireRelease(
      Effect.promise(
        () =>
          new Promise<dgram.Socket>((resolve) => {
            const s = dgram.createSocket("udp4")
            s.bind(0, "127.0.0.1", () => resolve(s))
          })
      ),
      (s) => Effect.promise(() => new Promise<void>((r) => s.close(() => r())))
    )
    const requests: Array<{ op: number; psn: number }> = []
    sock.on("message", (m: Buffer) => {
      if (m[Off.op] !== Op.ACK && m[Off.op] !== Op.NAK)
        requests.push({ op: m[Off.op] as number, psn: m.readUInt32LE(Off.psn) })
    })
    const gid = softGid("127.0.0.1", sock.address().port)
    const params = { ...Rc.defaultParams, pathMtu: Mtu.MTU_256, timeout, retryCnt: 7 }
    yield* Rc.connect(qp, 0, { gid, qpNum: PEER_QPN, psn: 0 }, params)
    const port = Number((yield* control.address("q")).split(":")[1])
    /** Sends one datagram to the QP and waits until the device has taken it. */
    const deliver = (
      op: number,
      flags: number,
      psn: number,
      ack: number,
      payload: Buffer,
      msgLen: number,
      offset: number
    ) =>
      Effect.gen(function* () {
        const d = Buffer.alloc(HDR + payload.length)
        payload.copy(d, HDR)
        writeHeader(d, op, flags, 0, qp.qpNum, PEER_QPN, psn, ack, 0, 0, msgLen, 0, offset, payload.length)
        const target = device.counters.rxPackets + 1
        sock.send(d, port, "127.0.0.1")
        expect(yield* waitFor(() => device.counters.rxPackets >= target)).toBe(true)
      })
    const readResponse = (psn: number, payload: Buffer, msgLen: number, offset: number) =>
      deliver(Op.READ_RESP, Flag.FIRST | Flag.LAST, psn, 0, payload, msgLen, offset)
    const ack = (psn: number) => deliver(Op.ACK, Flag.ACK_VALID, 0, psn, Buffer.alloc(0), 0, 0)
    const nak = (syndrome: number, psn: number) =>
      Effect.gen(function* () {
        const d = Buffer.alloc(HDR)
        writeHeader(d, Op.NAK, Flag.ACK_VALID, syndrome, qp.qpNum, PEER_QPN, psn, psn - 1, 0, 0, 0, 0, 0, 0)
        const target = device.counters.rxPackets + 1
        sock.send(d, port, "127.0.0.1")
        expect(yield* waitFor(() => device.counters.rxPackets >= target)).toBe(true)
      })
    const send = (wrId: number, at: number, length: number) =>
      qp.postSend({
        wrId,
        opcode: WrOpcode.SEND,
        sendFlags: SendFlags.SIGNALED,
        sgList: [{ addr: mr.addr + at, length, lkey: mr.lkey }]
      })
    const read = (wrId: number, at: number, length: number) =>
      qp.postSend({
        wrId,
        opcode: WrOpcode.RDMA_READ,
        sendFlags: SendFlags.SIGNALED,
        sgList: [{ addr: mr.addr + at, length, lkey: mr.lkey }],
        remoteAddr: 0x10000,
        rkey: 0x77
      })
    return { qp, cq, buf, device, requests, readResponse, ack, nak, send, read }
  })

describe("SoftVerbs requester: ACKs after a go-back-N", () => {
  it.scopedLive("an ACK covering WRs not yet resent after a timeout completes them: 20 SENDs, 20 SUCCESS", () =>
    Effect.gen(function* () {
      // timeout 12 = 16.8 ms; b's ACKs are delayed 30 ms, so a times out, rewinds and resends 16 of the 20 SENDs
      // before the ACK for all 20 arrives. On a loaded host the event loop may stall past the ACK's arrival, which then
      // lands before the timeout is confirmed (no go-back): such an attempt still must complete all 20, and up to 3
      // attempts are made until one went back.
      let wentBack = 0
      for (let attempt = 1; attempt <= 3 && wentBack === 0; attempt++) {
        yield* Effect.scoped(
          Effect.gen(function* () {
            const { a, b } = yield* makePair({ params: { timeout: 12, retryCnt: 7 } })
            for (let i = 0; i < 20; i++) expect(b.qp.postRecv(recvWr(b, i, i * 64, 64))).toBe(0)
            b.device.setFaults({ delayMs: 30 })
            for (let i = 0; i < 20; i++) expect(a.qp.postSend(sendWr(a, i, 0, 8))).toBe(0)
            const wcs = yield* pollN(a.cq, 20, 10_000)
            expect(wcs.map((w) => ({ wrId: w.wrId, status: w.status }))).toEqual(
              Array.from({ length: 20 }, (_, i) => ({ wrId: i, status: WcStatus.SUCCESS }))
            )
            expect(yield* pollN(b.cq, 20, 10_000)).toHaveLength(20)
            wentBack = a.device.counters.retransmits
            console.log(`attempt ${attempt}: ${wentBack} retransmit timeouts`)
          })
        )
      }
      expect(wentBack).toBeGreaterThan(0)
    })
  )

  it.scopedLive(
    "an ACK past an outstanding READ completes the WRs before it, not the READ; the READ is asked again",
    () =>
      Effect.gen(function* () {
        const { qp, cq, buf, device, requests, readResponse, ack, send, read } = yield* rawResponder(20)
        expect(send(1, 0, 64)).toBe(0)
        expect(read(2, 1024, 64)).toBe(0)
        expect(send(3, 0, 64)).toBe(0)
        expect(yield* waitFor(() => requests.length >= 3)).toBe(true)
        yield* ack(2)
        expect(drain(cq).map((w) => ({ wrId: w.wrId, status: w.status }))).toEqual([
          { wrId: 1, status: WcStatus.SUCCESS }
        ])
        // Went back to the READ at once (the ACK timeout here is 4.3 s): the READ and the SEND after it go again.
        expect(yield* waitFor(() => requests.length >= 5, 2000)).toBe(true)
        expect(requests.slice(3)).toEqual([
          { op: Op.READ_REQ, psn: 1 },
          { op: Op.SEND, psn: 2 }
        ])
        expect(device.counters.retransmits).toBe(0)
        yield* readResponse(1, Buffer.alloc(64, 3), 64, 0)
        yield* ack(2)
        expect(drain(cq).map((w) => ({ wrId: w.wrId, status: w.status, opcode: w.opcode }))).toEqual([
          { wrId: 2, status: WcStatus.SUCCESS, opcode: WcOpcode.RDMA_READ },
          { wrId: 3, status: WcStatus.SUCCESS, opcode: WcOpcode.SEND }
        ])
        expect(buf.subarray(1024, 1024 + 64).every((x) => x === 3)).toBe(true)
        expect(qp.state).toBe(QpState.RTS)
      })
  )

  it.scopedLive("a sequence NAK past an outstanding READ goes back to the READ, not to the NAKed PSN", () =>
    Effect.gen(function* () {
      const { qp, cq, buf, device, requests, readResponse, ack, nak, send, read } = yield* rawResponder(20)
      expect(send(1, 0, 64)).toBe(0)
      expect(read(2, 1024, 64)).toBe(0)
      expect(send(3, 0, 64)).toBe(0)
      expect(yield* waitFor(() => requests.length >= 3)).toBe(true)
      // The responder expects PSN 2: it executed the READ at 1, whose response was lost.
      yield* nak(Nak.SEQ, 2)
      expect(drain(cq).map((w) => ({ wrId: w.wrId, status: w.status }))).toEqual([
        { wrId: 1, status: WcStatus.SUCCESS }
      ])
      expect(yield* waitFor(() => requests.length >= 5, 2000)).toBe(true)
      expect(requests.slice(3)).toEqual([
        { op: Op.READ_REQ, psn: 1 },
        { op: Op.SEND, psn: 2 }
      ])
      expect(device.counters.retransmits).toBe(0)
      yield* readResponse(1, Buffer.alloc(64, 4), 64, 0)
      yield* ack(2)
      expect(drain(cq).map((w) => ({ wrId: w.wrId, status: w.status }))).toEqual([
        { wrId: 2, status: WcStatus.SUCCESS },
        { wrId: 3, status: WcStatus.SUCCESS }
      ])
      expect(buf.subarray(1024, 1024 + 64).every((x) => x === 4)).toBe(true)
      expect(qp.state).toBe(QpState.RTS)
    })
  )
})
