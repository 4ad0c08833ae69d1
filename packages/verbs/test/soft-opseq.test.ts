/**
 * IB's opcode sequence at the responder (IBA 9.8.3; rxe's `check_op_seq`): inside a SEND message only its MIDDLE or
 * LAST packets may come, inside an RDMA WRITE only its own; a request that starts a new message inside an open one is
 * NAKed Invalid Request and the responder QP goes to ERR. The peer is a plain UDP socket the QP is connected to, so
 * the test sends exactly the packets a broken or hostile requester would.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { AccessFlags, type AsyncEvent, EventType, Mtu, QpState, Rc, WcOpcode, WcStatus } from "../src/index.js"
import { Flag, HDR, Nak, Off, Op, writeHeader } from "../src/soft/Packet.js"
import { rawQp } from "./fixtures/raw-responder.js"
import { drain, waitFor } from "./support.js"

const PEER_QPN = 0x4242
const RQ_PSN = 1000

/** A SoftVerbs QP connected to a raw UDP socket on 127.0.0.1, which records what the QP sends it. */
const rawPeerAndQp = Effect.gen(function* () {
  const { device, cq, qp, buf, mr, sock, gid, inject } = yield* rawQp(
    AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ
  )
  const received: Array<Buffer> = []
  sock.on("message", (m: Buffer) => received.push(Buffer.from(m)))
  const events: Array<AsyncEvent> = []
  yield* Effect.acquireRelease(
    Effect.sync(() => device.subscribe((e) => events.push(e))),
    (unsubscribe) => Effect.sync(unsubscribe)
  )
  yield* Rc.connect(qp, 0, { gid, qpNum: PEER_QPN, psn: RQ_PSN }, { ...Rc.defaultParams, pathMtu: Mtu.MTU_256 })
  /** Sends one request packet (payload of `plen` bytes of `fill`) and waits until the device has taken it. */
  const send = (op: number, flags: number, psn: number, plen: number, more: { imm?: number; msgLen?: number } = {}) =>
    Effect.gen(function* () {
      const d = Buffer.alloc(HDR + plen, 0x5a)
      const msgLen = more.msgLen ?? plen
      writeHeader(d, op, flags, 0, qp.qpNum, PEER_QPN, psn, 0, more.imm ?? 0, mr.rkey, msgLen, mr.addr, 0, plen)
      yield* inject(d)
    })
  const naks = () => received.filter((m) => m[Off.op] === Op.NAK)
  return { qp, cq, mr, buf, device, events, send, naks }
})

describe("SoftVerbs responder: IB's opcode sequence", () => {
  it.scopedLive("a WRITE_WITH_IMM inside an open SEND is NAKed Invalid Request and does not take the SEND's RECV", () =>
    Effect.gen(function* () {
      const { qp, cq, mr, buf, device, events, send, naks } = yield* rawPeerAndQp
      for (const wrId of [1, 2]) {
        qp.postRecv({ wrId, sgList: [{ addr: mr.addr + wrId * 1024, length: 1024, lkey: mr.lkey }] })
      }
      yield* send(Op.SEND, Flag.FIRST, RQ_PSN, 256, { msgLen: 512 })
      yield* send(Op.WRITE, Flag.FIRST | Flag.LAST | Flag.IMM | Flag.ACK_REQ, RQ_PSN + 1, 0, { imm: 7 })
      yield* send(Op.SEND, Flag.LAST | Flag.ACK_REQ, RQ_PSN + 2, 256, { msgLen: 512 })
      expect(yield* waitFor(() => naks().length >= 1)).toBe(true)
      const nak = naks()[0] as Buffer
      expect({ syndrome: nak[Off.syndrome], psn: nak.readUInt32LE(Off.psn) }).toEqual({
        syndrome: Nak.INVALID,
        psn: RQ_PSN + 1
      })
      expect(qp.state).toBe(QpState.ERR)
      // The open RECV completes in error (rxe: the responder's class C error), the next is flushed; nothing else.
      const wcs = drain(cq)
      expect(wcs.map((w) => ({ wrId: w.wrId, status: w.status, opcode: w.opcode }))).toEqual([
        { wrId: 1, status: WcStatus.REM_INV_REQ_ERR, opcode: WcOpcode.RECV },
        { wrId: 2, status: WcStatus.WR_FLUSH_ERR, opcode: WcOpcode.RECV }
      ])
      expect(events.filter((e) => e.eventType === EventType.QP_REQ_ERR).length).toBe(1)
      // The SEND's second half went nowhere: RECV 2's buffer is untouched.
      expect(buf.subarray(2048, 3072).every((x) => x === 0)).toBe(true)
      expect(device.counters.handlerErrors).toBe(0)
    })
  )

  it.scopedLive("a new message inside an open WRITE, and a MIDDLE outside any message, are refused the same way", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<{ name: string; second: [op: number, flags: number]; opensWrite: boolean }> = [
        {
          name: "SEND ONLY inside a WRITE",
          second: [Op.SEND, Flag.FIRST | Flag.LAST | Flag.ACK_REQ],
          opensWrite: true
        },
        { name: "READ inside a WRITE", second: [Op.READ_REQ, Flag.FIRST | Flag.LAST | Flag.ACK_REQ], opensWrite: true },
        { name: "WRITE FIRST inside a WRITE", second: [Op.WRITE, Flag.FIRST], opensWrite: true },
        { name: "WRITE MIDDLE outside a message", second: [Op.WRITE, 0], opensWrite: false },
        { name: "SEND LAST outside a message", second: [Op.SEND, Flag.LAST | Flag.ACK_REQ], opensWrite: false }
      ]
      for (const c of cases) {
        yield* Effect.scoped(check(c))
      }
    })
  )
})

const check = (c: { name: string; second: [op: number, flags: number]; opensWrite: boolean }) =>
  Effect.gen(function* () {
    const { qp, cq, mr, buf, send, naks } = yield* rawPeerAndQp
    qp.postRecv({ wrId: 9, sgList: [{ addr: mr.addr + 4096, length: 1024, lkey: mr.lkey }] })
    let psn = RQ_PSN
    if (c.opensWrite) yield* send(Op.WRITE, Flag.FIRST, psn++, 256, { msgLen: 512 })
    yield* send(c.second[0], c.second[1], psn, c.second[0] === Op.READ_REQ ? 0 : 256, { msgLen: 512 })
    expect(yield* waitFor(() => naks().length >= 1), c.name).toBe(true)
    const nak = naks()[0] as Buffer
    expect({ syndrome: nak[Off.syndrome], psn: nak.readUInt32LE(Off.psn) }, c.name).toEqual({
      syndrome: Nak.INVALID,
      psn
    })
    expect(qp.state, c.name).toBe(QpState.ERR)
    expect(
      drain(cq).map((w) => w.status),
      c.name
    ).toEqual([WcStatus.WR_FLUSH_ERR])
    // Only the opening WRITE's 256 bytes landed.
    expect(
      buf.subarray(256, 4096).every((x) => x === 0),
      c.name
    ).toBe(true)
  })
