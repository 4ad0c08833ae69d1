/**
 * The responder side of a SoftVerbs RC QP (rdma_rxe's `rxe_resp.c`) and its receive queue.
 *
 * In-order delivery exactly once. A duplicate (a retransmit after a lost ACK) is re-acknowledged and not delivered
 * again (a duplicate READ is re-executed, as IB does); a packet past the expected PSN gets one sequence NAK. A SEND (or
 * a WRITE_WITH_IMM) with no RECV posted gets an RNR NAK. Requests follow IB's opcode sequence (IBA 9.8.3, rxe's
 * `check_op_seq`): inside a SEND or WRITE message only its MIDDLE or LAST may come, outside one only a FIRST, ONLY or
 * READ; anything else is NAKed Invalid Request and the responder QP goes to ERR (the open RECV, if any, completes
 * `REM_INV_REQ_ERR`) with `IBV_EVENT_QP_REQ_ERR`; the requester's WR completes `REM_INV_REQ_ERR`. RDMA WRITE and READ are checked against the target MR's
 * rkey, bounds and access flags; a violation NAKs, leaves memory untouched and moves the responder QP to ERR with
 * `IBV_EVENT_QP_ACCESS_ERR`. With the device's `placementDelayMs`, a WRITE's payload lands after the delay and the
 * receive completions of the QP wait behind it (`Placement.ts`); the ACK does not wait.
 */
import { AccessFlags, Errno, EventType, QpState, WcFlags, WcOpcode, WcStatus } from "../../Constants.js"
import type { RecvWr } from "../../Verbs.js"
import type { SoftMr } from "../Memory.js"
import { Flag, HDR, Nak, Off, Op, unwrapPsn, writeHeader } from "../Packet.js"
import type { SoftQp } from "../SoftQp.js"
import { completeRecv, deferPlacement, landAll } from "./Placement.js"
import { scatter } from "./Sge.js"

// ---------------------------------------------------------------------------------------------------------------------
// Receive queue (hot path)
// ---------------------------------------------------------------------------------------------------------------------

/** `ibv_post_recv`: queues the chain up to the first bad WR (left in `badRecvWr`). */
export const postRecv = (qp: SoftQp, wr: RecvWr): number => {
  let w: RecvWr | null | undefined = wr
  let err = 0
  while (w) {
    err = postOneRecv(qp, w)
    if (err !== 0) break
    w = w.next
  }
  qp.badRecvWr = err === 0 ? null : (w ?? null)
  return err
}

const postOneRecv = (qp: SoftQp, w: RecvWr): number => {
  // A QP created with an SRQ takes its RECVs from it: posting to the QP is refused, as verbs does.
  if (qp.state === QpState.RESET || qp.destroyed || qp.shared) return Errno.EINVAL
  if (qp.state === QpState.ERR) {
    const numSge = w.numSge ?? w.sgList.length
    if (numSge > qp.rq.maxSge || numSge > w.sgList.length) return Errno.EINVAL
    qp.recvCq.push(w.wrId, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0, 0, qp.qpNum, 0, 0)
    return 0
  }
  return qp.rq.post(w)
}

/**
 * Completes the open RECV (if any) and every posted RECV of the QP's own queue with WR_FLUSH_ERR, in order, and
 * empties it. An SRQ's WQEs stay posted for its other QPs: only the RECV this QP had taken is flushed.
 */
export const flushRecvQueue = (qp: SoftQp): void => {
  if (qp.recvActive) qp.recvCq.push(qp.curWrId, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0, 0, qp.qpNum, 0, 0)
  qp.recvActive = false
  if (qp.shared) return
  const rq = qp.rq
  for (let i = rq.head; i < rq.tail; i++) {
    qp.recvCq.push(rq.wrId[i % rq.ring] as number, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0, 0, qp.qpNum, 0, 0)
  }
  rq.head = rq.tail
}

/** Takes the head RECV of the QP's queue as its open one (the caller checked there is one). */
const openRecv = (qp: SoftQp): void => {
  const rq = qp.rq
  const s = rq.head % rq.ring
  const n = rq.numSge[s] as number
  const base = s * rq.maxSge
  qp.curWrId = rq.wrId[s] as number
  qp.curNumSge = n
  if (qp.curSgeAddr.length === 0) {
    // The QP's first message: its open-receive scatter list is made now.
    qp.curSgeAddr = new Float64Array(rq.maxSge)
    qp.curSgeLen = new Uint32Array(rq.maxSge)
    qp.curSgeLkey = new Uint32Array(rq.maxSge)
  }
  for (let k = 0; k < n; k++) {
    qp.curSgeAddr[k] = rq.sgeAddr[base + k] as number
    qp.curSgeLen[k] = rq.sgeLen[base + k] as number
    qp.curSgeLkey[k] = rq.sgeLkey[base + k] as number
  }
  rq.take()
  qp.recvActive = true
  qp.recvOffset = 0
}

// ---------------------------------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------------------------------

/** A SEND, WRITE or READ request packet from the peer's requester. */
export const onRequest = (qp: SoftQp, msg: Buffer, op: number, flags: number): void => {
  const psn = unwrapPsn(msg.readUInt32LE(Off.psn), qp.ePsn)
  if (psn < qp.ePsn) {
    qp.device.counters.duplicates++
    if (op === Op.READ_REQ) {
      executeRead(qp, msg, psn, true)
    } else {
      qp.ackPending = true
      qp.device.queueAck(qp)
    }
    return
  }
  if (psn > qp.ePsn) {
    if (!qp.nakSeqSent) {
      qp.nakSeqSent = true
      qp.device.counters.seqNaksSent++
      sendNak(qp, Nak.SEQ, qp.ePsn, 0)
    }
    return
  }
  const inSequence = qp.recvActive
    ? op === Op.SEND && (flags & Flag.FIRST) === 0
    : qp.writeActive
      ? op === Op.WRITE && (flags & Flag.FIRST) === 0
      : op === Op.READ_REQ || (flags & Flag.FIRST) !== 0
  if (!inSequence) {
    invalidRequest(qp)
    return
  }
  const plen = msg.readUInt16LE(Off.payloadLen)
  if (op === Op.SEND) {
    if (!receiveSend(qp, msg, flags, plen)) return
  } else if (op === Op.WRITE) {
    if (!receiveWrite(qp, msg, flags, plen)) return
  } else {
    if (!executeRead(qp, msg, psn, false)) return
    return
  }
  qp.ePsn++
  qp.nakSeqSent = false
  qp.rxSinceAck++
  qp.rxThisTurn = true
  if ((flags & Flag.ACK_REQ) !== 0) {
    qp.ackPending = true
    qp.device.queueAck(qp)
  }
}

const receiveSend = (qp: SoftQp, msg: Buffer, flags: number, plen: number): boolean => {
  if ((flags & Flag.FIRST) !== 0) {
    if (qp.rq.head === qp.rq.tail) {
      qp.device.counters.rnrNaksSent++
      sendNak(qp, Nak.RNR, qp.ePsn, qp.minRnrTimer)
      return false
    }
    openRecv(qp)
  }
  if (plen > 0) {
    const n = qp.curNumSge
    let room = 0
    for (let k = 0; k < n; k++) room += qp.curSgeLen[k] as number
    const status =
      qp.recvOffset + plen > room
        ? WcStatus.LOC_LEN_ERR
        : scatter(qp, qp.curSgeAddr, qp.curSgeLen, qp.curSgeLkey, 0, n, qp.recvOffset, msg, plen)
          ? WcStatus.SUCCESS
          : WcStatus.LOC_PROT_ERR
    if (status !== WcStatus.SUCCESS) {
      // The responder's RECV fails, the requester is told its request was invalid, and both QPs end in ERR.
      completeRecv(qp, qp.curWrId, status, WcOpcode.RECV, 0, 0, qp.destQpNum, 0)
      qp.recvActive = false
      sendNak(qp, Nak.INVALID, qp.ePsn, 0)
      qp.enterError()
      return false
    }
  }
  qp.recvOffset += plen
  if ((flags & Flag.LAST) !== 0) {
    const withImm = (flags & Flag.IMM) !== 0
    completeRecv(
      qp,
      qp.curWrId,
      WcStatus.SUCCESS,
      WcOpcode.RECV,
      qp.recvOffset,
      withImm ? msg.readUInt32LE(Off.imm) : 0,
      qp.destQpNum,
      withImm ? WcFlags.WITH_IMM : 0
    )
    qp.recvActive = false
  }
  return true
}

/**
 * A request out of IB's opcode sequence (a new message inside an open one, or a MIDDLE/LAST outside one): NAK Invalid
 * Request; the open RECV completes `REM_INV_REQ_ERR` (as rxe's `do_class_ac_error`), the QP goes to ERR and the
 * device raises `IBV_EVENT_QP_REQ_ERR` (IBA 11.6.3.1, "Invalid Request Local Work Queue Error").
 */
const invalidRequest = (qp: SoftQp): void => {
  qp.device.counters.protocolErrors++
  if (qp.recvActive) {
    completeRecv(qp, qp.curWrId, WcStatus.REM_INV_REQ_ERR, WcOpcode.RECV, 0, 0, qp.destQpNum, 0)
    qp.recvActive = false
  }
  qp.writeActive = false
  sendNak(qp, Nak.INVALID, qp.ePsn, 0)
  qp.enterError()
  qp.device.raise({ eventType: EventType.QP_REQ_ERR, qpNum: qp.qpNum, detail: "request out of the opcode sequence" })
}

/** Checks a remote access of `[raddr, raddr + len)` with `rkey` needing `need`; the MR, or undefined. */
const checkRemote = (qp: SoftQp, rkey: number, raddr: number, len: number, need: number): SoftMr | undefined => {
  const mr = qp.device.lookupMr(rkey)
  if (
    mr === undefined ||
    mr.pdId !== qp.pdId ||
    (mr.access & need) === 0 ||
    (qp.accessFlags & need) === 0 ||
    raddr < mr.addr ||
    raddr + len > mr.addr + mr.length
  ) {
    return undefined
  }
  return mr
}

const accessViolation = (qp: SoftQp, detail: string): void => {
  qp.device.counters.accessNaksSent++
  sendNak(qp, Nak.ACCESS, qp.ePsn, 0)
  qp.enterError()
  qp.device.raise({ eventType: EventType.QP_ACCESS_ERR, qpNum: qp.qpNum, detail })
}

const receiveWrite = (qp: SoftQp, msg: Buffer, flags: number, plen: number): boolean => {
  const msgLen = msg.readUInt32LE(Off.msgLen)
  const raddr = msg.readDoubleLE(Off.raddr)
  const rkey = msg.readUInt32LE(Off.rkey)
  let mr: SoftMr | undefined
  if (msgLen > 0) {
    mr = checkRemote(qp, rkey, raddr, msgLen, AccessFlags.REMOTE_WRITE)
    if (mr === undefined) {
      accessViolation(qp, `RDMA WRITE of ${msgLen} bytes at 0x${raddr.toString(16)} with rkey 0x${rkey.toString(16)}`)
      return false
    }
  }
  const withImm = (flags & Flag.IMM) !== 0 && (flags & Flag.LAST) !== 0
  if (withImm && qp.rq.head === qp.rq.tail) {
    qp.device.counters.rnrNaksSent++
    sendNak(qp, Nak.RNR, qp.ePsn, qp.minRnrTimer)
    return false
  }
  qp.writeActive = (flags & Flag.LAST) === 0
  if (mr !== undefined && plen > 0) {
    const at = raddr - mr.addr + msg.readUInt32LE(Off.offset)
    if (qp.placementDelayMs === 0) msg.copy(mr.buffer, at, HDR, HDR + plen)
    else deferPlacement(qp, mr.buffer, at, msg, plen)
  }
  if (withImm) {
    const rq = qp.rq
    completeRecv(
      qp,
      rq.wrId[rq.head % rq.ring] as number,
      WcStatus.SUCCESS,
      WcOpcode.RECV_RDMA_WITH_IMM,
      msgLen,
      msg.readUInt32LE(Off.imm),
      qp.destQpNum,
      WcFlags.WITH_IMM
    )
    rq.take()
  }
  return true
}

/**
 * Answers a READ request at `psn` with its response packets; `duplicate` re-executes an old one. A request whose
 * `offset` is not 0 is the requester asking again from its first missing response: `psn` is that response's PSN, so
 * the READ began `offset / mtu` PSNs earlier, and only the responses from `offset` on are sent. A new READ starts at 0.
 */
const executeRead = (qp: SoftQp, msg: Buffer, psn: number, duplicate: boolean): boolean => {
  // A READ returns memory as the QP's earlier WRITEs left it: their payloads land first.
  landAll(qp, true)
  const msgLen = msg.readUInt32LE(Off.msgLen)
  const raddr = msg.readDoubleLE(Off.raddr)
  const rkey = msg.readUInt32LE(Off.rkey)
  const offset = msg.readUInt32LE(Off.offset)
  const npkts = msgLen === 0 ? 1 : Math.ceil(msgLen / qp.mtu)
  const start = offset / qp.mtu
  if (start !== 0 && (!duplicate || !Number.isInteger(start) || start >= npkts)) {
    // A resumed READ that names no response of a READ already executed: not a request this requester could send.
    qp.device.counters.protocolErrors++
    return false
  }
  const first = psn - start
  if (duplicate && first + npkts > qp.ePsn) return false // overlaps what is not yet executed: ignore
  let mr: SoftMr | undefined
  if (msgLen > 0) {
    mr = checkRemote(qp, rkey, raddr, msgLen, AccessFlags.REMOTE_READ)
    if (mr === undefined) {
      if (!duplicate) {
        accessViolation(qp, `RDMA READ of ${msgLen} bytes at 0x${raddr.toString(16)} with rkey 0x${rkey.toString(16)}`)
      }
      return false
    }
  }
  for (let k = start; k < npkts; k++) {
    const off = k * qp.mtu
    const plen = Math.min(qp.mtu, msgLen - off)
    const buf = qp.device.slot()
    if (mr !== undefined && plen > 0) {
      const from = raddr - mr.addr + off
      mr.buffer.copy(buf, HDR, from, from + plen)
    }
    let flags = 0
    if (k === 0) flags |= Flag.FIRST
    if (k === npkts - 1) flags |= Flag.LAST
    writeHeader(
      buf,
      Op.READ_RESP,
      flags,
      0,
      qp.destQpNum,
      qp.qpNum,
      first + k,
      0,
      0,
      0,
      msgLen,
      0,
      off,
      plen,
      qp.txTokenLo,
      qp.txTokenHi
    )
    qp.device.transmit(buf, HDR + plen, qp.peerHost, qp.peerPort)
  }
  if (!duplicate) {
    qp.ePsn += npkts
    qp.nakSeqSent = false
  }
  return true
}

// ---------------------------------------------------------------------------------------------------------------------
// ACK and NAK
// ---------------------------------------------------------------------------------------------------------------------

const sendNak = (qp: SoftQp, syndrome: number, psn: number, imm: number): void => {
  const buf = qp.device.slot()
  writeHeader(
    buf,
    Op.NAK,
    Flag.ACK_VALID,
    syndrome,
    qp.destQpNum,
    qp.qpNum,
    psn,
    psn - 1,
    imm,
    0,
    0,
    0,
    0,
    0,
    qp.txTokenLo,
    qp.txTokenHi
  )
  qp.ackPending = false
  qp.device.transmit(buf, HDR, qp.peerHost, qp.peerPort)
}

/** Sends the owed coalesced ACK (the device calls this once per event-loop turn). */
export const sendAck = (qp: SoftQp): void => {
  if (!qp.ackPending) return
  qp.ackPending = false
  qp.rxSinceAck = 0
  if (qp.state === QpState.ERR || qp.state === QpState.RESET || qp.state === QpState.INIT) return
  const buf = qp.device.slot()
  writeHeader(
    buf,
    Op.ACK,
    Flag.ACK_VALID,
    0,
    qp.destQpNum,
    qp.qpNum,
    0,
    qp.ePsn - 1,
    0,
    0,
    0,
    0,
    0,
    0,
    qp.txTokenLo,
    qp.txTokenHi
  )
  qp.device.transmit(buf, HDR, qp.peerHost, qp.peerPort)
}
