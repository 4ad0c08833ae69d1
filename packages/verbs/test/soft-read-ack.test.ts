/**
 * A READ response implicitly acknowledges every older request (IBA 9.7.5.1.3; rxe's completer): the older WRs
 * complete before the READ, and a response the requester cannot use fails the READ, not another WR, each WR exactly
 * once and in order. Responses come in order: one for a younger READ while an older READ's are missing says those were
 * lost, and the older READ is asked for again (nothing is scattered ahead of it). The responder is a raw UDP socket, so
 * the test sends exactly the responses it means.
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
import { Flag, HDR, Off, Op, writeHeader } from "../src/soft/Packet.js"
import { drain, waitFor } from "./support.js"

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
    return { qp, cq, buf, device, requests, readResponse, ack, send, read }
  })

describe("SoftVerbs requester: READ responses and the WRs before them", () => {
  it.scopedLive(
    "a READ response that cannot be scattered: the older SEND completes, then the READ LOC_PROT_ERR, once",
    () =>
      Effect.gen(function* () {
        const { qp, cq, requests, readResponse, send, read } = yield* rawResponder(20)
        expect(send(1, 0, 64)).toBe(0)
        expect(read(2, 1024, 100)).toBe(0)
        expect(send(3, 0, 64)).toBe(0)
        expect(yield* waitFor(() => requests.length >= 3)).toBe(true)
        expect(requests.map((r) => r.psn)).toEqual([0, 1, 2])
        // A response at the READ's PSN whose offset lies beyond the READ's 100-byte buffer (the header claims a long
        // message, so it is well formed): the local SGE cannot take it.
        yield* readResponse(1, Buffer.alloc(100, 1), 4096, 2048)
        expect(qp.state).toBe(QpState.ERR)
        expect(drain(cq).map((w) => ({ wrId: w.wrId, status: w.status }))).toEqual([
          { wrId: 1, status: WcStatus.SUCCESS },
          { wrId: 2, status: WcStatus.LOC_PROT_ERR },
          { wrId: 3, status: WcStatus.WR_FLUSH_ERR }
        ])
      })
  )

  it.scopedLive("a response for a younger READ while an older READ's is missing: the older READ is asked again", () =>
    Effect.gen(function* () {
      const { qp, cq, buf, device, requests, readResponse, read } = yield* rawResponder(20)
      expect(read(1, 1024, 64)).toBe(0)
      expect(read(2, 2048, 64)).toBe(0)
      expect(yield* waitFor(() => requests.length >= 2)).toBe(true)
      yield* readResponse(1, Buffer.alloc(64, 2), 64, 0)
      // Not scattered ahead of READ 1, and READ 1 is requested again at once (the ACK timeout here is 4.3 s).
      expect(yield* waitFor(() => requests.length >= 3, 2000)).toBe(true)
      expect(requests[2]).toEqual({ op: Op.READ_REQ, psn: 0 })
      expect(device.counters.retransmits).toBe(0)
      expect(buf.subarray(2048, 2048 + 64).every((x) => x === 0)).toBe(true)
      expect(drain(cq)).toEqual([])
      yield* readResponse(0, Buffer.alloc(64, 1), 64, 0)
      yield* readResponse(1, Buffer.alloc(64, 2), 64, 0)
      expect(drain(cq).map((w) => ({ wrId: w.wrId, status: w.status, opcode: w.opcode }))).toEqual([
        { wrId: 1, status: WcStatus.SUCCESS, opcode: WcOpcode.RDMA_READ },
        { wrId: 2, status: WcStatus.SUCCESS, opcode: WcOpcode.RDMA_READ }
      ])
      expect(buf.subarray(1024, 1024 + 64).every((x) => x === 1)).toBe(true)
      expect(buf.subarray(2048, 2048 + 64).every((x) => x === 2)).toBe(true)
      expect(qp.state).toBe(QpState.RTS)
    })
  )
})
