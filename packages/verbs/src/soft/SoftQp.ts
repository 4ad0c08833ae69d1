/**
 * A SoftVerbs reliable-connected queue pair: the InfiniBand RC rules over UDP.
 *
 * Requester: work requests are kept in typed-array rings; PSNs are assigned when a WR is posted; packets go out in
 * order under a window sized to the receiver's socket buffer; the last packet of each message asks for an ACK. ACKs
 * are cumulative. One lazy timer per QP retransmits from the oldest unacknowledged PSN (go-back-N) after a whole
 * `4.096 µs × 2^timeout` without progress; after `retry_cnt` such retries the oldest WR completes `RETRY_EXC_ERR`
 * and the QP goes to ERR. An RNR NAK makes the requester wait the responder's `min_rnr_timer` and retry, at most
 * `rnr_retry` times (7 = forever), then `RNR_RETRY_EXC_ERR`.
 *
 * Responder: in-order delivery exactly once. A duplicate (a retransmit after a lost ACK) is re-acknowledged and not
 * delivered again (a duplicate READ is re-executed, as IB does); a packet past the expected PSN gets one sequence
 * NAK. A SEND (or a WRITE_WITH_IMM) with no RECV posted gets an RNR NAK. RDMA WRITE and READ are checked against the
 * target MR's rkey, bounds and access flags; a violation NAKs, leaves memory untouched and moves the responder QP to
 * ERR with `IBV_EVENT_QP_ACCESS_ERR`.
 *
 * ACKs ride on the reverse-direction packets of the same QP pair when there are any, otherwise one coalesced ACK per
 * event-loop turn is sent (not RoCE wire behaviour, but the semantics are IB's). In ERR every outstanding and newly
 * posted WR completes `WR_FLUSH_ERR`, and packets for the QP are dropped without an ACK, so the peer's retry budget
 * runs out as it would against a dead NIC. RESET and destroy remove the QP's unpolled completions from its CQs.
 */
import type { Effect } from "effect"
import {
  AccessFlags,
  ackTimeoutMs,
  Errno,
  EventType,
  QpAttrMask as M,
  Mtu,
  mtuToBytes,
  QpState,
  RNR_RETRY_INFINITE,
  RNR_TIMER_MS,
  SendFlags,
  WcFlags,
  WcOpcode,
  WcStatus,
  WrOpcode
} from "../Constants.js"
import type { AhAttr, QpAttr, QpCap, QueuePair, RecvWr, SendWr } from "../Verbs.js"
import { softAddressOfGid } from "./Address.js"
import type { SoftMr } from "./Memory.js"
import { Flag, HDR, Nak, Off, Op, unwrapPsn, writeHeader } from "./Packet.js"
import type { SoftCq } from "./SoftCq.js"

/** What a QP needs from its device. */
export interface QpHost {
  readonly host: string
  readonly port: number
  /** A send slot (header + one MTU) that stays untouched until the datagram is handed to the kernel. */
  slot(): Buffer
  transmit(buf: Buffer, length: number, host: string, port: number): void
  lookupMr(key: number): SoftMr | undefined
  queueAck(qp: SoftQp): void
  raise(event: { readonly eventType: EventType; readonly qpNum: number; readonly detail: string }): void
  /** Runs `f` as a device handler: completion channel events are delivered when it returns. */
  run(f: () => void): void
  readonly counters: QpCounters
}

/** Per-device counters the QPs update. */
export interface QpCounters {
  retransmits: number
  rnrNaksSent: number
  rnrRetries: number
  seqNaksSent: number
  accessNaksSent: number
  duplicates: number
  droppedState: number
  foreignSource: number
  protocolErrors: number
}

/** Maximum packets in flight per QP: 512 × (48 + 4096) bytes stays inside a 4 MiB receive buffer. */
export const WINDOW = 512
/**
 * After a timeout the requester resends at most this many packets before an ACK arrives: a single-threaded receiver
 * reads about 32 datagrams per event-loop turn, and resending a whole window into it each timeout only adds loss.
 */
const RECOVERY_WINDOW = 16
/** A long message asks for an ACK every this many packets, so the window keeps moving. */
const ACK_EVERY = 64

const now = () => performance.now()

interface Transition {
  readonly required: number
  readonly optional: number
}

const t = (required: number, optional: number): Transition => ({ required, optional })

/** The legal RC transitions with their required and optional attribute masks (IBA 11.2.4.2; `ib_modify_qp_is_ok`). */
const TRANSITIONS: Record<string, Transition> = {
  [`${QpState.RESET}>${QpState.INIT}`]: t(M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS, 0),
  [`${QpState.INIT}>${QpState.INIT}`]: t(0, M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS),
  [`${QpState.INIT}>${QpState.RTR}`]: t(
    M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER,
    M.ALT_PATH | M.ACCESS_FLAGS | M.PKEY_INDEX
  ),
  [`${QpState.RTR}>${QpState.RTS}`]: t(
    M.SQ_PSN | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.MAX_QP_RD_ATOMIC,
    M.CUR_STATE | M.ALT_PATH | M.ACCESS_FLAGS | M.MIN_RNR_TIMER | M.PATH_MIG_STATE
  ),
  [`${QpState.RTS}>${QpState.RTS}`]: t(
    0,
    M.CUR_STATE | M.ACCESS_FLAGS | M.ALT_PATH | M.PATH_MIG_STATE | M.MIN_RNR_TIMER
  ),
  [`${QpState.RTS}>${QpState.SQD}`]: t(0, M.EN_SQD_ASYNC_NOTIFY),
  [`${QpState.SQD}>${QpState.RTS}`]: t(
    0,
    M.CUR_STATE | M.ACCESS_FLAGS | M.ALT_PATH | M.MIN_RNR_TIMER | M.PATH_MIG_STATE
  ),
  [`${QpState.SQD}>${QpState.SQD}`]: t(
    0,
    M.PKEY_INDEX |
      M.PORT |
      M.AV |
      M.ALT_PATH |
      M.ACCESS_FLAGS |
      M.MIN_RNR_TIMER |
      M.PATH_MIG_STATE |
      M.TIMEOUT |
      M.RETRY_CNT |
      M.RNR_RETRY |
      M.MAX_QP_RD_ATOMIC |
      M.MAX_DEST_RD_ATOMIC |
      M.CUR_STATE
  ),
  [`${QpState.SQE}>${QpState.RTS}`]: t(0, M.CUR_STATE | M.ACCESS_FLAGS)
}

const stateNames = ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"]
const maskNames = Object.entries(M)
const namesOf = (mask: number) =>
  maskNames
    .filter(([, bit]) => (mask & bit) !== 0)
    .map(([name]) => `IBV_QP_${name}`)
    .join(" | ")

/** Why a modify is refused: an errno and a message naming what is wrong. */
export interface ModifyFailure {
  readonly errno: number
  readonly message: string
}

const wcOpcodeOf = (op: number): number =>
  op === WrOpcode.RDMA_READ
    ? WcOpcode.RDMA_READ
    : op === WrOpcode.RDMA_WRITE || op === WrOpcode.RDMA_WRITE_WITH_IMM
      ? WcOpcode.RDMA_WRITE
      : WcOpcode.SEND

/** A SoftVerbs RC QP. The Effect-returning methods are filled in by the provider (they wrap the sync ones). */
export class SoftQp implements QueuePair {
  state: QpState = QpState.RESET
  badSendWr: SendWr | null = null
  badRecvWr: RecvWr | null = null
  declare modifyQp: QueuePair["modifyQp"]
  declare queryQp: QueuePair["queryQp"]
  declare destroy: Effect.Effect<void, never>

  // Attributes.
  private pathMtu: Mtu = Mtu.MTU_4096
  private mtu = 4096
  private destQpNum = 0
  private rqPsn = 0
  private sqPsn = 0
  private minRnrTimer = 0
  private timeout = 0
  private timeoutMs = 0
  private retryCnt = 0
  private rnrRetry = 0
  private maxRdAtomic = 0
  private maxDestRdAtomic = 0
  private accessFlags = 0
  private pkeyIndex = 0
  private portNum = 1
  private ahAttr: AhAttr | undefined
  private enSqdAsyncNotify = 0
  private peerHost = ""
  private peerPort = 0

  // Send queue: absolute indices, slot = index % sqCap.
  private readonly sqCap: number
  private readonly maxSge: number
  private readonly maxInline: number
  private readonly wqWrId: Float64Array
  private readonly wqOpcode: Uint8Array
  private readonly wqSignaled: Uint8Array
  private readonly wqInline: Uint8Array
  private readonly wqImm: Uint32Array
  private readonly wqRaddr: Float64Array
  private readonly wqRkey: Uint32Array
  private readonly wqLen: Float64Array
  private readonly wqFirstPsn: Float64Array
  private readonly wqNpkts: Uint32Array
  private readonly wqReadGot: Uint32Array
  private readonly wqNumSge: Uint8Array
  private readonly wqSgeAddr: Float64Array
  private readonly wqSgeLen: Uint32Array
  private readonly wqSgeLkey: Uint32Array
  private readonly inlineData: Buffer
  private head = 0
  private tail = 0
  private txIdx = 0
  private txPkt = 0
  private sqdLimit = 0
  private psnNext = 0
  private acked = -1
  private readsOutstanding = 0
  /** Packets allowed in flight: WINDOW, cut to RECOVERY_WINDOW by a timeout and doubled back on each ACK. */
  private cwnd = WINDOW

  // Receive queue.
  private readonly rqCap: number
  private readonly maxRecvSge: number
  private readonly rqWrId: Float64Array
  private readonly rqNumSge: Uint8Array
  private readonly rqSgeAddr: Float64Array
  private readonly rqSgeLen: Uint32Array
  private readonly rqSgeLkey: Uint32Array
  private rqHead = 0
  private rqTail = 0

  // Responder.
  private ePsn = 0
  private nakSeqSent = false
  /** An ACK is owed to the peer's requester (sent by the device once per event-loop turn unless piggybacked). */
  ackPending = false
  /** The device has this QP in its ACK queue for this turn. */
  ackQueued = false
  /** In-order requests accepted since the last ACK this QP sent (carried or coalesced). */
  rxSinceAck = 0
  /** A request was accepted during the current event-loop turn (more may follow: the ACK can wait a turn). */
  rxThisTurn = false
  private recvActive = false
  private recvOffset = 0

  // Timers.
  private retryTimer: ReturnType<typeof setTimeout> | undefined
  private retryArmed = false
  private armedAt = 0
  private lastProgress = 0
  private retries = 0
  private rnrRetries = 0
  private rnrWaiting = false
  private rnrTimer: ReturnType<typeof setTimeout> | undefined
  private destroyed = false

  constructor(
    readonly qpNum: number,
    private readonly device: QpHost,
    readonly pdId: number,
    readonly sendCq: SoftCq,
    readonly recvCq: SoftCq,
    readonly cap: QpCap,
    private readonly sqSigAll: boolean
  ) {
    this.sqCap = Math.max(1, cap.maxSendWr)
    this.maxSge = Math.max(1, cap.maxSendSge)
    this.maxInline = cap.maxInlineData
    const n = this.sqCap
    this.wqWrId = new Float64Array(n)
    this.wqOpcode = new Uint8Array(n)
    this.wqSignaled = new Uint8Array(n)
    this.wqInline = new Uint8Array(n)
    this.wqImm = new Uint32Array(n)
    this.wqRaddr = new Float64Array(n)
    this.wqRkey = new Uint32Array(n)
    this.wqLen = new Float64Array(n)
    this.wqFirstPsn = new Float64Array(n)
    this.wqNpkts = new Uint32Array(n)
    this.wqReadGot = new Uint32Array(n)
    this.wqNumSge = new Uint8Array(n)
    this.wqSgeAddr = new Float64Array(n * this.maxSge)
    this.wqSgeLen = new Uint32Array(n * this.maxSge)
    this.wqSgeLkey = new Uint32Array(n * this.maxSge)
    this.inlineData = Buffer.alloc(n * this.maxInline)
    this.rqCap = Math.max(1, cap.maxRecvWr)
    this.maxRecvSge = Math.max(1, cap.maxRecvSge)
    this.rqWrId = new Float64Array(this.rqCap)
    this.rqNumSge = new Uint8Array(this.rqCap)
    this.rqSgeAddr = new Float64Array(this.rqCap * this.maxRecvSge)
    this.rqSgeLen = new Uint32Array(this.rqCap * this.maxRecvSge)
    this.rqSgeLkey = new Uint32Array(this.rqCap * this.maxRecvSge)
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Posting (hot path)
  // ---------------------------------------------------------------------------------------------------------------

  postSend(wr: SendWr): number {
    let w: SendWr | null | undefined = wr
    let err = 0
    while (w) {
      err = this.postOneSend(w)
      if (err !== 0) break
      w = w.next
    }
    this.badSendWr = err === 0 ? null : (w ?? null)
    if (this.state === QpState.RTS) this.pump()
    return err
  }

  private postOneSend(w: SendWr): number {
    const state = this.state
    if (state === QpState.RESET || state === QpState.INIT || state === QpState.RTR || this.destroyed) {
      return Errno.EINVAL
    }
    const op = w.opcode
    if (op > WrOpcode.RDMA_READ) return Errno.EINVAL
    const numSge = w.numSge ?? w.sgList.length
    if (numSge > this.maxSge || numSge > w.sgList.length) return Errno.EINVAL
    const isInline = (w.sendFlags & SendFlags.INLINE) !== 0
    let len = 0
    for (let k = 0; k < numSge; k++) len += (w.sgList[k] as { length: number }).length
    if (isInline && (len > this.maxInline || op === WrOpcode.RDMA_READ)) return Errno.EINVAL
    const signaled = this.sqSigAll || (w.sendFlags & SendFlags.SIGNALED) !== 0
    if (state === QpState.ERR) {
      this.sendCq.push(w.wrId, WcStatus.WR_FLUSH_ERR, wcOpcodeOf(op), 0, 0, this.qpNum, 0, 0)
      return 0
    }
    if (this.tail - this.head >= this.sqCap) return Errno.ENOMEM
    const s = this.tail % this.sqCap
    if (isInline) {
      let pos = s * this.maxInline
      for (let k = 0; k < numSge; k++) {
        const sge = w.sgList[k] as { addr: number; length: number; lkey: number }
        const mr = this.device.lookupMr(sge.lkey)
        if (mr === undefined || sge.addr < mr.addr || sge.addr + sge.length > mr.addr + mr.length) return Errno.EINVAL
        const from = sge.addr - mr.addr
        mr.buffer.copy(this.inlineData, pos, from, from + sge.length)
        pos += sge.length
      }
    } else {
      const base = s * this.maxSge
      for (let k = 0; k < numSge; k++) {
        const sge = w.sgList[k] as { addr: number; length: number; lkey: number }
        this.wqSgeAddr[base + k] = sge.addr
        this.wqSgeLen[base + k] = sge.length
        this.wqSgeLkey[base + k] = sge.lkey
      }
    }
    const npkts = len === 0 ? 1 : Math.ceil(len / this.mtu)
    this.wqWrId[s] = w.wrId
    this.wqOpcode[s] = op
    this.wqSignaled[s] = signaled ? 1 : 0
    this.wqInline[s] = isInline ? 1 : 0
    this.wqImm[s] = w.immData ?? 0
    this.wqRaddr[s] = w.remoteAddr ?? 0
    this.wqRkey[s] = w.rkey ?? 0
    this.wqLen[s] = len
    this.wqNumSge[s] = numSge
    this.wqFirstPsn[s] = this.psnNext
    this.wqNpkts[s] = npkts
    this.wqReadGot[s] = 0
    if (op === WrOpcode.RDMA_READ) this.readsOutstanding++
    this.psnNext += npkts
    this.tail++
    return 0
  }

  postRecv(wr: RecvWr): number {
    let w: RecvWr | null | undefined = wr
    let err = 0
    while (w) {
      err = this.postOneRecv(w)
      if (err !== 0) break
      w = w.next
    }
    this.badRecvWr = err === 0 ? null : (w ?? null)
    return err
  }

  private postOneRecv(w: RecvWr): number {
    if (this.state === QpState.RESET || this.destroyed) return Errno.EINVAL
    const numSge = w.numSge ?? w.sgList.length
    if (numSge > this.maxRecvSge || numSge > w.sgList.length) return Errno.EINVAL
    if (this.state === QpState.ERR) {
      this.recvCq.push(w.wrId, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0, 0, this.qpNum, 0, 0)
      return 0
    }
    if (this.rqTail - this.rqHead >= this.rqCap) return Errno.ENOMEM
    const s = this.rqTail % this.rqCap
    const base = s * this.maxRecvSge
    for (let k = 0; k < numSge; k++) {
      const sge = w.sgList[k] as { addr: number; length: number; lkey: number }
      this.rqSgeAddr[base + k] = sge.addr
      this.rqSgeLen[base + k] = sge.length
      this.rqSgeLkey[base + k] = sge.lkey
    }
    this.rqWrId[s] = w.wrId
    this.rqNumSge[s] = numSge
    this.rqTail++
    return 0
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Requester
  // ---------------------------------------------------------------------------------------------------------------

  private get outstanding(): boolean {
    return this.head !== this.txIdx || this.txPkt !== 0
  }

  /** Transmits what the window allows. */
  private pump(): void {
    if (this.rnrWaiting) return
    const limit = this.state === QpState.SQD ? this.sqdLimit : this.tail
    if (this.txIdx < limit && !this.outstanding) this.lastProgress = now()
    while (this.txIdx < limit) {
      const s = this.txIdx % this.sqCap
      const psn = (this.wqFirstPsn[s] as number) + this.txPkt
      if (psn - this.acked > this.cwnd) break
      if (!this.transmitPacket(s, this.txPkt, psn)) return
      const npkts = this.wqNpkts[s] as number
      this.txPkt = this.wqOpcode[s] === WrOpcode.RDMA_READ ? npkts : this.txPkt + 1
      if (this.txPkt >= npkts) {
        this.txIdx++
        this.txPkt = 0
      }
    }
    if (this.outstanding) this.armRetry()
  }

  /** Builds and sends packet `pkt` of WQE slot `s`; false if the local SGEs were bad (the QP is then in ERR). */
  private transmitPacket(s: number, pkt: number, psn: number): boolean {
    const op = this.wqOpcode[s] as number
    const len = this.wqLen[s] as number
    const npkts = this.wqNpkts[s] as number
    const buf = this.device.slot()
    let flags = 0
    let plen = 0
    let wireOp: number
    const off = pkt * this.mtu
    if (op === WrOpcode.RDMA_READ) {
      wireOp = Op.READ_REQ
      flags = Flag.FIRST | Flag.LAST | Flag.ACK_REQ
    } else {
      wireOp = op === WrOpcode.SEND || op === WrOpcode.SEND_WITH_IMM ? Op.SEND : Op.WRITE
      plen = Math.min(this.mtu, len - off)
      if (plen > 0 && !this.gather(s, off, plen, buf)) {
        this.fail(s, WcStatus.LOC_PROT_ERR)
        return false
      }
      if (pkt === 0) flags |= Flag.FIRST
      if (pkt === npkts - 1) {
        flags |= Flag.LAST | Flag.ACK_REQ
        if (op === WrOpcode.SEND_WITH_IMM || op === WrOpcode.RDMA_WRITE_WITH_IMM) flags |= Flag.IMM
      } else if (pkt % ACK_EVERY === ACK_EVERY - 1) {
        flags |= Flag.ACK_REQ
      }
    }
    let ack = 0
    if (this.state !== QpState.ERR) {
      flags |= Flag.ACK_VALID
      ack = this.ePsn - 1
      this.ackPending = false
      this.rxSinceAck = 0
    }
    writeHeader(
      buf,
      wireOp,
      flags,
      0,
      this.destQpNum,
      this.qpNum,
      psn,
      ack,
      this.wqImm[s] as number,
      this.wqRkey[s] as number,
      len,
      this.wqRaddr[s] as number,
      off,
      plen
    )
    this.device.transmit(buf, HDR + plen, this.peerHost, this.peerPort)
    return true
  }

  /** Copies `plen` bytes at message offset `off` of WQE `s` into `dst` after the header. */
  private gather(s: number, off: number, plen: number, dst: Buffer): boolean {
    if (this.wqInline[s] === 1) {
      const from = s * this.maxInline + off
      this.inlineData.copy(dst, HDR, from, from + plen)
      return true
    }
    const base = s * this.maxSge
    const n = this.wqNumSge[s] as number
    let pos = off
    let remaining = plen
    let at = HDR
    for (let k = 0; k < n && remaining > 0; k++) {
      const sl = this.wqSgeLen[base + k] as number
      if (pos >= sl) {
        pos -= sl
        continue
      }
      const addr = this.wqSgeAddr[base + k] as number
      const mr = this.device.lookupMr(this.wqSgeLkey[base + k] as number)
      if (mr === undefined || mr.pdId !== this.pdId || addr < mr.addr || addr + sl > mr.addr + mr.length) return false
      const take = Math.min(sl - pos, remaining)
      const from = addr - mr.addr + pos
      mr.buffer.copy(dst, at, from, from + take)
      at += take
      remaining -= take
      pos = 0
    }
    return remaining === 0
  }

  /** Go-back-N: the next packet to transmit becomes `psn`. */
  private rewind(psn: number): void {
    for (let i = this.head; i < this.tail; i++) {
      const s = i % this.sqCap
      const first = this.wqFirstPsn[s] as number
      const npkts = this.wqNpkts[s] as number
      if (psn < first + npkts) {
        this.txIdx = i
        this.txPkt = this.wqOpcode[s] === WrOpcode.RDMA_READ ? 0 : Math.max(0, psn - first)
        return
      }
    }
    this.txIdx = this.tail
    this.txPkt = 0
  }

  /** Raises the cumulative ACK to `ack` (never past a READ whose responses are missing); true on progress. */
  private advance(ack: number): boolean {
    let limit = ack
    if (this.readsOutstanding > 0) {
      for (let i = this.head; i < this.txIdx || (i === this.txIdx && this.txPkt > 0); i++) {
        const s = i % this.sqCap
        const first = this.wqFirstPsn[s] as number
        if (first > limit) break
        if (this.wqOpcode[s] === WrOpcode.RDMA_READ && this.wqReadGot[s] !== this.wqNpkts[s]) {
          limit = Math.min(limit, first - 1)
          break
        }
      }
    }
    if (limit <= this.acked) return false
    this.acked = limit
    if (this.cwnd < WINDOW) this.cwnd = Math.min(WINDOW, this.cwnd * 2)
    this.retries = 0
    this.rnrRetries = 0
    this.lastProgress = now()
    this.completeFromHead()
    return true
  }

  /** Completes, in order, every WQE at the head that is fully acknowledged (or, for a READ, fully read). */
  private completeFromHead(): void {
    while (this.head < this.txIdx) {
      const s = this.head % this.sqCap
      const op = this.wqOpcode[s] as number
      if (op === WrOpcode.RDMA_READ) {
        if (this.wqReadGot[s] !== this.wqNpkts[s]) break
        this.readsOutstanding--
      } else if ((this.wqFirstPsn[s] as number) + (this.wqNpkts[s] as number) - 1 > this.acked) {
        break
      }
      if (this.wqSignaled[s] === 1) {
        const byteLen = op === WrOpcode.RDMA_READ ? (this.wqLen[s] as number) : 0
        this.sendCq.push(this.wqWrId[s] as number, WcStatus.SUCCESS, wcOpcodeOf(op), byteLen, 0, this.qpNum, 0, 0)
      }
      this.head++
    }
    if (this.state === QpState.SQD && this.head >= this.sqdLimit && this.enSqdAsyncNotify !== 0) {
      this.enSqdAsyncNotify = 0
      this.device.raise({ eventType: EventType.SQ_DRAINED, qpNum: this.qpNum, detail: "send queue drained" })
    }
  }

  private onAck(wireAck: number): void {
    if (this.state !== QpState.RTS && this.state !== QpState.SQD) return
    const ack = unwrapPsn(wireAck, this.acked + 1)
    if (ack >= this.psnNext) {
      this.device.counters.protocolErrors++
      return
    }
    if (this.advance(ack)) this.pump()
  }

  private onNak(syndrome: number, wirePsn: number, rnrTimer: number): void {
    if (this.state !== QpState.RTS && this.state !== QpState.SQD) return
    const psn = unwrapPsn(wirePsn, this.acked + 1)
    if (psn <= this.acked || psn >= this.psnNext) return // stale or bogus
    this.advance(psn - 1)
    if (psn <= this.acked) return // a READ before it is still incomplete: the timer will sort it out
    switch (syndrome) {
      case Nak.SEQ:
        this.rewind(psn)
        this.pump()
        return
      case Nak.RNR: {
        this.rnrRetries++
        if (this.rnrRetry !== RNR_RETRY_INFINITE && this.rnrRetries > this.rnrRetry) {
          this.fail(this.head % this.sqCap, WcStatus.RNR_RETRY_EXC_ERR)
          return
        }
        this.device.counters.rnrRetries++
        this.rewind(psn)
        this.rnrWaiting = true
        this.lastProgress = now()
        const delay = RNR_TIMER_MS[rnrTimer & 31] as number
        if (this.rnrTimer === undefined) {
          this.rnrTimer = setTimeout(this.onRnrTimer, delay)
          this.rnrTimer.unref()
        } else {
          clearTimeout(this.rnrTimer)
          this.rnrTimer = setTimeout(this.onRnrTimer, delay)
          this.rnrTimer.unref()
        }
        return
      }
      case Nak.ACCESS:
        this.fail(this.head % this.sqCap, WcStatus.REM_ACCESS_ERR)
        return
      default:
        this.fail(this.head % this.sqCap, WcStatus.REM_INV_REQ_ERR)
    }
  }

  private readonly onRnrTimer = (): void => {
    this.device.run(() => {
      if (!this.rnrWaiting) return
      this.rnrWaiting = false
      this.lastProgress = now()
      if (this.state === QpState.RTS || this.state === QpState.SQD) this.pump()
    })
  }

  private onReadResp(msg: Buffer, wirePsn: number, plen: number, offset: number): void {
    if (this.state !== QpState.RTS && this.state !== QpState.SQD) return
    const psn = unwrapPsn(wirePsn, this.acked + 1)
    for (let i = this.head; i < this.txIdx || (i === this.txIdx && this.txPkt > 0); i++) {
      const s = i % this.sqCap
      const first = this.wqFirstPsn[s] as number
      const npkts = this.wqNpkts[s] as number
      if (psn < first) return
      if (psn >= first + npkts) continue
      if (this.wqOpcode[s] !== WrOpcode.RDMA_READ) {
        this.device.counters.protocolErrors++
        return
      }
      const got = this.wqReadGot[s] as number
      if (psn !== first + got) {
        this.device.counters.duplicates++
        return
      }
      if (plen > 0 && !this.scatterSend(s, offset, msg, plen)) {
        this.fail(s, WcStatus.LOC_PROT_ERR)
        return
      }
      this.wqReadGot[s] = got + 1
      this.advance(got + 1 === npkts ? first + npkts - 1 : first - 1)
      this.lastProgress = now()
      this.completeFromHead()
      this.pump()
      return
    }
  }

  /** Scatters READ response bytes into WQE `s`'s local SGEs (which need LOCAL_WRITE). */
  private scatterSend(s: number, off: number, msg: Buffer, plen: number): boolean {
    const base = s * this.maxSge
    return this.scatter(this.wqSgeAddr, this.wqSgeLen, this.wqSgeLkey, base, this.wqNumSge[s] as number, off, msg, plen)
  }

  private scatter(
    addrs: Float64Array,
    lens: Uint32Array,
    lkeys: Uint32Array,
    base: number,
    n: number,
    off: number,
    msg: Buffer,
    plen: number
  ): boolean {
    let pos = off
    let remaining = plen
    let at = HDR
    for (let k = 0; k < n && remaining > 0; k++) {
      const sl = lens[base + k] as number
      if (pos >= sl) {
        pos -= sl
        continue
      }
      const addr = addrs[base + k] as number
      const mr = this.device.lookupMr(lkeys[base + k] as number)
      if (
        mr === undefined ||
        mr.pdId !== this.pdId ||
        (mr.access & AccessFlags.LOCAL_WRITE) === 0 ||
        addr < mr.addr ||
        addr + sl > mr.addr + mr.length
      ) {
        return false
      }
      const take = Math.min(sl - pos, remaining)
      msg.copy(mr.buffer, addr - mr.addr + pos, at, at + take)
      at += take
      remaining -= take
      pos = 0
    }
    return remaining === 0
  }

  private armRetry(): void {
    if (this.retryArmed || this.timeoutMs === 0 || this.destroyed) return
    this.retryArmed = true
    this.armedAt = now()
    if (this.retryTimer === undefined) {
      this.retryTimer = setTimeout(this.onRetryTimer, Math.max(1, this.timeoutMs))
      this.retryTimer.unref()
    } else {
      this.retryTimer.refresh()
    }
  }

  /** True when the requester has waited a whole ACK timeout without progress. */
  private get timedOut(): boolean {
    return (
      (this.state === QpState.RTS || this.state === QpState.SQD) &&
      this.outstanding &&
      !this.rnrWaiting &&
      now() - this.lastProgress >= this.timeoutMs - 0.5
    )
  }

  private readonly onRetryTimer = (): void => {
    this.retryArmed = false
    if ((this.state !== QpState.RTS && this.state !== QpState.SQD) || !this.outstanding) return
    if (!this.timedOut) {
      this.armRetry()
      return
    }
    // A timer that fires late by more than half a timeout means this process was busy (the event loop was blocked),
    // not that the network was silent: ACKs may be waiting in the socket. Start the wait again instead of retrying.
    const late = now() - this.armedAt - this.timeoutMs
    if (late > this.timeoutMs / 2 + 2) {
      this.lastProgress = now()
      this.armRetry()
      return
    }
    // Timers run before I/O in an event-loop turn: look again after the I/O phase.
    this.retryArmed = true
    setImmediate(this.onRetryConfirm)
  }

  private readonly onRetryConfirm = (): void => {
    this.retryArmed = false
    if (!this.timedOut) {
      if (this.outstanding && !this.destroyed) this.armRetry()
      return
    }
    this.device.run(() => {
      this.retries++
      if (this.retries > this.retryCnt) {
        this.fail(this.head % this.sqCap, WcStatus.RETRY_EXC_ERR)
        return
      }
      this.device.counters.retransmits++
      this.cwnd = RECOVERY_WINDOW
      this.lastProgress = now()
      this.rewind(this.acked + 1)
      this.pump()
      this.armRetry()
    })
  }

  /** Completes WQE `s` with `status` and moves the QP to ERR (flushing the rest). */
  private fail(s: number, status: number): void {
    const op = this.wqOpcode[s] as number
    this.sendCq.push(this.wqWrId[s] as number, status, wcOpcodeOf(op), 0, 0, this.qpNum, 0, 0)
    if (op === WrOpcode.RDMA_READ) this.readsOutstanding--
    this.head++
    this.enterError()
  }

  /** Moves to ERR: every outstanding WR completes WR_FLUSH_ERR, in order, send queue first. */
  enterError(): void {
    this.state = QpState.ERR
    this.stopTimers()
    for (let i = this.head; i < this.tail; i++) {
      const s = i % this.sqCap
      this.sendCq.push(
        this.wqWrId[s] as number,
        WcStatus.WR_FLUSH_ERR,
        wcOpcodeOf(this.wqOpcode[s] as number),
        0,
        0,
        this.qpNum,
        0,
        0
      )
    }
    this.head = this.tail
    this.txIdx = this.tail
    this.txPkt = 0
    this.readsOutstanding = 0
    for (let i = this.rqHead; i < this.rqTail; i++) {
      const s = i % this.rqCap
      this.recvCq.push(this.rqWrId[s] as number, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0, 0, this.qpNum, 0, 0)
    }
    this.rqHead = this.rqTail
    this.recvActive = false
    this.ackPending = false
  }

  private stopTimers(): void {
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer)
    this.retryTimer = undefined
    this.retryArmed = false
    if (this.rnrTimer !== undefined) clearTimeout(this.rnrTimer)
    this.rnrTimer = undefined
    this.rnrWaiting = false
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Receive path (called by the device for a well-formed datagram addressed to this QP)
  // ---------------------------------------------------------------------------------------------------------------

  onPacket(msg: Buffer, fromHost: string, fromPort: number): void {
    const state = this.state
    if (state === QpState.RESET || state === QpState.INIT || state === QpState.ERR || this.destroyed) {
      this.device.counters.droppedState++
      return
    }
    if (msg.readUInt32LE(Off.srcQpn) !== this.destQpNum || fromPort !== this.peerPort || fromHost !== this.peerHost) {
      this.device.counters.foreignSource++
      return
    }
    const op = msg[Off.op] as number
    const flags = msg[Off.flags] as number
    switch (op) {
      case Op.SEND:
      case Op.WRITE:
      case Op.READ_REQ:
        this.onRequest(msg, op, flags)
        if ((flags & Flag.ACK_VALID) !== 0 && this.state !== QpState.ERR) this.onAck(msg.readUInt32LE(Off.ack))
        return
      case Op.ACK:
        this.onAck(msg.readUInt32LE(Off.ack))
        return
      case Op.NAK:
        this.onNak(msg[Off.syndrome] as number, msg.readUInt32LE(Off.psn), msg.readUInt32LE(Off.imm))
        return
      case Op.READ_RESP:
        this.onReadResp(msg, msg.readUInt32LE(Off.psn), msg.readUInt16LE(Off.payloadLen), msg.readUInt32LE(Off.offset))
        return
    }
  }

  private onRequest(msg: Buffer, op: number, flags: number): void {
    const psn = unwrapPsn(msg.readUInt32LE(Off.psn), this.ePsn)
    if (psn < this.ePsn) {
      this.device.counters.duplicates++
      if (op === Op.READ_REQ) {
        this.executeRead(msg, psn, true)
      } else {
        this.ackPending = true
        this.device.queueAck(this)
      }
      return
    }
    if (psn > this.ePsn) {
      if (!this.nakSeqSent) {
        this.nakSeqSent = true
        this.device.counters.seqNaksSent++
        this.sendNak(Nak.SEQ, this.ePsn, 0)
      }
      return
    }
    const plen = msg.readUInt16LE(Off.payloadLen)
    if (op === Op.SEND) {
      if (!this.receiveSend(msg, flags, plen)) return
    } else if (op === Op.WRITE) {
      if (!this.receiveWrite(msg, flags, plen)) return
    } else {
      if (!this.executeRead(msg, psn, false)) return
      return
    }
    this.ePsn++
    this.nakSeqSent = false
    this.rxSinceAck++
    this.rxThisTurn = true
    if ((flags & Flag.ACK_REQ) !== 0) {
      this.ackPending = true
      this.device.queueAck(this)
    }
  }

  private receiveSend(msg: Buffer, flags: number, plen: number): boolean {
    if ((flags & Flag.FIRST) !== 0) {
      if (this.rqHead === this.rqTail) {
        this.device.counters.rnrNaksSent++
        this.sendNak(Nak.RNR, this.ePsn, this.minRnrTimer)
        return false
      }
      this.recvActive = true
      this.recvOffset = 0
    } else if (!this.recvActive) {
      this.device.counters.protocolErrors++
      this.sendNak(Nak.INVALID, this.ePsn, 0)
      return false
    }
    const s = this.rqHead % this.rqCap
    if (plen > 0) {
      const base = s * this.maxRecvSge
      const n = this.rqNumSge[s] as number
      let room = 0
      for (let k = 0; k < n; k++) room += this.rqSgeLen[base + k] as number
      const status =
        this.recvOffset + plen > room
          ? WcStatus.LOC_LEN_ERR
          : this.scatter(this.rqSgeAddr, this.rqSgeLen, this.rqSgeLkey, base, n, this.recvOffset, msg, plen)
            ? WcStatus.SUCCESS
            : WcStatus.LOC_PROT_ERR
      if (status !== WcStatus.SUCCESS) {
        // The responder's RECV fails, the requester is told its request was invalid, and both QPs end in ERR.
        this.recvCq.push(this.rqWrId[s] as number, status, WcOpcode.RECV, 0, 0, this.qpNum, this.destQpNum, 0)
        this.rqHead++
        this.recvActive = false
        this.sendNak(Nak.INVALID, this.ePsn, 0)
        this.enterError()
        return false
      }
    }
    this.recvOffset += plen
    if ((flags & Flag.LAST) !== 0) {
      const withImm = (flags & Flag.IMM) !== 0
      this.recvCq.push(
        this.rqWrId[s] as number,
        WcStatus.SUCCESS,
        WcOpcode.RECV,
        this.recvOffset,
        withImm ? msg.readUInt32LE(Off.imm) : 0,
        this.qpNum,
        this.destQpNum,
        withImm ? WcFlags.WITH_IMM : 0
      )
      this.rqHead++
      this.recvActive = false
    }
    return true
  }

  /** Checks a remote access of `[raddr, raddr + len)` with `rkey` needing `need`; the MR, or undefined. */
  private checkRemote(rkey: number, raddr: number, len: number, need: number): SoftMr | undefined {
    const mr = this.device.lookupMr(rkey)
    if (
      mr === undefined ||
      mr.pdId !== this.pdId ||
      (mr.access & need) === 0 ||
      (this.accessFlags & need) === 0 ||
      raddr < mr.addr ||
      raddr + len > mr.addr + mr.length
    ) {
      return undefined
    }
    return mr
  }

  private accessViolation(detail: string): void {
    this.device.counters.accessNaksSent++
    this.sendNak(Nak.ACCESS, this.ePsn, 0)
    this.enterError()
    this.device.raise({ eventType: EventType.QP_ACCESS_ERR, qpNum: this.qpNum, detail })
  }

  private receiveWrite(msg: Buffer, flags: number, plen: number): boolean {
    const msgLen = msg.readUInt32LE(Off.msgLen)
    const raddr = msg.readDoubleLE(Off.raddr)
    const rkey = msg.readUInt32LE(Off.rkey)
    let mr: SoftMr | undefined
    if (msgLen > 0) {
      mr = this.checkRemote(rkey, raddr, msgLen, AccessFlags.REMOTE_WRITE)
      if (mr === undefined) {
        this.accessViolation(
          `RDMA WRITE of ${msgLen} bytes at 0x${raddr.toString(16)} with rkey 0x${rkey.toString(16)}`
        )
        return false
      }
    }
    const withImm = (flags & Flag.IMM) !== 0 && (flags & Flag.LAST) !== 0
    if (withImm && this.rqHead === this.rqTail) {
      this.device.counters.rnrNaksSent++
      this.sendNak(Nak.RNR, this.ePsn, this.minRnrTimer)
      return false
    }
    if (mr !== undefined && plen > 0) {
      msg.copy(mr.buffer, raddr - mr.addr + msg.readUInt32LE(Off.offset), HDR, HDR + plen)
    }
    if (withImm) {
      const s = this.rqHead % this.rqCap
      this.recvCq.push(
        this.rqWrId[s] as number,
        WcStatus.SUCCESS,
        WcOpcode.RECV_RDMA_WITH_IMM,
        msgLen,
        msg.readUInt32LE(Off.imm),
        this.qpNum,
        this.destQpNum,
        WcFlags.WITH_IMM
      )
      this.rqHead++
    }
    return true
  }

  /** Answers a READ request at `psn` with its response packets; `duplicate` re-executes an old one. */
  private executeRead(msg: Buffer, psn: number, duplicate: boolean): boolean {
    const msgLen = msg.readUInt32LE(Off.msgLen)
    const raddr = msg.readDoubleLE(Off.raddr)
    const rkey = msg.readUInt32LE(Off.rkey)
    const npkts = msgLen === 0 ? 1 : Math.ceil(msgLen / this.mtu)
    if (duplicate && psn + npkts > this.ePsn) return false // overlaps what is not yet executed: ignore
    let mr: SoftMr | undefined
    if (msgLen > 0) {
      mr = this.checkRemote(rkey, raddr, msgLen, AccessFlags.REMOTE_READ)
      if (mr === undefined) {
        if (!duplicate) {
          this.accessViolation(
            `RDMA READ of ${msgLen} bytes at 0x${raddr.toString(16)} with rkey 0x${rkey.toString(16)}`
          )
        }
        return false
      }
    }
    for (let k = 0; k < npkts; k++) {
      const off = k * this.mtu
      const plen = Math.min(this.mtu, msgLen - off)
      const buf = this.device.slot()
      if (mr !== undefined && plen > 0) {
        const from = raddr - mr.addr + off
        mr.buffer.copy(buf, HDR, from, from + plen)
      }
      let flags = 0
      if (k === 0) flags |= Flag.FIRST
      if (k === npkts - 1) flags |= Flag.LAST
      writeHeader(buf, Op.READ_RESP, flags, 0, this.destQpNum, this.qpNum, psn + k, 0, 0, 0, msgLen, 0, off, plen)
      this.device.transmit(buf, HDR + plen, this.peerHost, this.peerPort)
    }
    if (!duplicate) {
      this.ePsn += npkts
      this.nakSeqSent = false
    }
    return true
  }

  private sendNak(syndrome: number, psn: number, imm: number): void {
    const buf = this.device.slot()
    writeHeader(buf, Op.NAK, Flag.ACK_VALID, syndrome, this.destQpNum, this.qpNum, psn, psn - 1, imm, 0, 0, 0, 0, 0)
    this.ackPending = false
    this.device.transmit(buf, HDR, this.peerHost, this.peerPort)
  }

  /** Sends the owed coalesced ACK (the device calls this once per event-loop turn). */
  sendAck(): void {
    if (!this.ackPending) return
    this.ackPending = false
    this.rxSinceAck = 0
    if (this.state === QpState.ERR || this.state === QpState.RESET || this.state === QpState.INIT) return
    const buf = this.device.slot()
    writeHeader(buf, Op.ACK, Flag.ACK_VALID, 0, this.destQpNum, this.qpNum, 0, this.ePsn - 1, 0, 0, 0, 0, 0, 0)
    this.device.transmit(buf, HDR, this.peerHost, this.peerPort)
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Control path
  // ---------------------------------------------------------------------------------------------------------------

  /** `ibv_modify_qp`: validates everything first, then applies; a failure changes nothing. */
  modify(attr: QpAttr, mask: number): ModifyFailure | undefined {
    if (this.destroyed) return { errno: Errno.EINVAL, message: "the QP is destroyed" }
    const cur = this.state
    const next = (mask & M.STATE) !== 0 ? attr.qpState : cur
    if (next === undefined || next < 0 || next > QpState.ERR) {
      return { errno: Errno.EINVAL, message: "IBV_QP_STATE is set but qpState is missing or not a QP state" }
    }
    if ((mask & M.CUR_STATE) !== 0 && attr.curQpState !== cur) {
      return {
        errno: Errno.EINVAL,
        message: `IBV_QP_CUR_STATE says ${stateNames[attr.curQpState ?? -1] ?? "?"} but the QP is in ${stateNames[cur]}`
      }
    }
    const rest = mask & ~M.STATE
    let transition: Transition | undefined
    if (next === QpState.RESET || next === QpState.ERR) transition = t(0, M.CUR_STATE)
    else transition = TRANSITIONS[`${cur}>${next}`]
    if (transition === undefined) {
      return {
        errno: Errno.EINVAL,
        message: `illegal RC QP transition ${stateNames[cur]} -> ${stateNames[next]}`
      }
    }
    const missing = transition.required & ~rest
    if (missing !== 0) {
      return {
        errno: Errno.EINVAL,
        message: `${stateNames[cur]} -> ${stateNames[next]} requires ${namesOf(missing)}`
      }
    }
    const extra = rest & ~(transition.required | transition.optional)
    if (extra !== 0) {
      return {
        errno: Errno.EINVAL,
        message: `${stateNames[cur]} -> ${stateNames[next]} does not accept ${namesOf(extra)}`
      }
    }
    const bad = this.checkValues(attr, rest)
    if (bad !== undefined) return { errno: Errno.EINVAL, message: bad }
    this.apply(attr, rest)
    this.moveTo(cur, next)
    return undefined
  }

  private checkValues(attr: QpAttr, mask: number): string | undefined {
    const range = (bit: number, name: string, value: number | undefined, lo: number, hi: number) =>
      (mask & bit) !== 0 && (value === undefined || !Number.isInteger(value) || value < lo || value > hi)
        ? `${name} must be an integer in ${lo}..${hi} (got ${value})`
        : undefined
    const peer = (mask & M.AV) !== 0 ? softAddressOfGid(attr.ahAttr?.grh?.dgid) : undefined
    return (
      range(M.PATH_MTU, "path_mtu", attr.pathMtu, Mtu.MTU_256, Mtu.MTU_4096) ??
      range(M.TIMEOUT, "timeout", attr.timeout, 0, 31) ??
      range(M.RETRY_CNT, "retry_cnt", attr.retryCnt, 0, 7) ??
      range(M.RNR_RETRY, "rnr_retry", attr.rnrRetry, 0, 7) ??
      range(M.MIN_RNR_TIMER, "min_rnr_timer", attr.minRnrTimer, 0, 31) ??
      range(M.RQ_PSN, "rq_psn", attr.rqPsn, 0, 0xffffff) ??
      range(M.SQ_PSN, "sq_psn", attr.sqPsn, 0, 0xffffff) ??
      range(M.DEST_QPN, "dest_qp_num", attr.destQpNum, 1, 0xffffff) ??
      range(M.PORT, "port_num", attr.portNum, 1, 1) ??
      range(M.PKEY_INDEX, "pkey_index", attr.pkeyIndex, 0, 0) ??
      range(M.ACCESS_FLAGS, "qp_access_flags", attr.qpAccessFlags, 0, 0xffff) ??
      range(M.MAX_QP_RD_ATOMIC, "max_rd_atomic", attr.maxRdAtomic, 0, 16) ??
      range(M.MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic", attr.maxDestRdAtomic, 0, 16) ??
      ((mask & M.AV) !== 0 && peer === undefined
        ? "ah_attr.grh.dgid must be the GID of a SoftVerbs port (GID 0 of the peer device, is_global = 1)"
        : undefined)
    )
  }

  private apply(attr: QpAttr, mask: number): void {
    if (mask & M.PATH_MTU) {
      this.pathMtu = attr.pathMtu as Mtu
      this.mtu = mtuToBytes(this.pathMtu)
    }
    if (mask & M.TIMEOUT) {
      this.timeout = attr.timeout as number
      this.timeoutMs = ackTimeoutMs(this.timeout)
    }
    if (mask & M.RETRY_CNT) this.retryCnt = attr.retryCnt as number
    if (mask & M.RNR_RETRY) this.rnrRetry = attr.rnrRetry as number
    if (mask & M.MIN_RNR_TIMER) this.minRnrTimer = attr.minRnrTimer as number
    if (mask & M.RQ_PSN) this.rqPsn = attr.rqPsn as number
    if (mask & M.SQ_PSN) this.sqPsn = attr.sqPsn as number
    if (mask & M.DEST_QPN) this.destQpNum = attr.destQpNum as number
    if (mask & M.PORT) this.portNum = attr.portNum as number
    if (mask & M.PKEY_INDEX) this.pkeyIndex = attr.pkeyIndex as number
    if (mask & M.ACCESS_FLAGS) this.accessFlags = attr.qpAccessFlags as number
    if (mask & M.MAX_QP_RD_ATOMIC) this.maxRdAtomic = attr.maxRdAtomic as number
    if (mask & M.MAX_DEST_RD_ATOMIC) this.maxDestRdAtomic = attr.maxDestRdAtomic as number
    if (mask & M.EN_SQD_ASYNC_NOTIFY) this.enSqdAsyncNotify = attr.enSqdAsyncNotify ?? 0
    if (mask & M.AV) {
      this.ahAttr = attr.ahAttr
      const peer = softAddressOfGid(attr.ahAttr?.grh?.dgid)
      if (peer !== undefined) {
        this.peerHost = peer.host
        this.peerPort = peer.port
      }
    }
  }

  private moveTo(cur: QpState, next: QpState): void {
    // A NIC acknowledges what it received within microseconds; SoftVerbs may still owe a coalesced ACK. Send it
    // before the QP stops answering, or the peer retries what was delivered until its budget runs out.
    if (next === QpState.RESET || next === QpState.ERR) this.sendAck()
    if (next === QpState.RESET) {
      this.reset()
      return
    }
    if (next === QpState.ERR) {
      this.enterError()
      return
    }
    if (cur === QpState.INIT && next === QpState.RTR) {
      this.ePsn = this.rqPsn
      this.nakSeqSent = false
      this.recvActive = false
    }
    if (cur === QpState.RTR && next === QpState.RTS) {
      this.psnNext = this.sqPsn
      this.acked = this.sqPsn - 1
      this.head = this.tail = this.txIdx = 0
      this.txPkt = 0
    }
    this.state = next
    if (next === QpState.SQD && cur !== QpState.SQD) {
      this.sqdLimit = this.tail
      this.completeFromHead()
    }
    if (next === QpState.RTS && cur === QpState.SQD) this.pump()
  }

  /** RESET: forgets every WR and removes the QP's unpolled completions from its CQs. */
  reset(): void {
    this.stopTimers()
    this.state = QpState.RESET
    this.head = this.tail = this.txIdx = this.txPkt = 0
    this.rqHead = this.rqTail = 0
    this.readsOutstanding = 0
    this.recvActive = false
    this.ackPending = false
    this.retries = 0
    this.rnrRetries = 0
    this.sendCq.removeQp(this.qpNum)
    if (this.recvCq !== this.sendCq) this.recvCq.removeQp(this.qpNum)
  }

  /** Destroys the QP (as RESET, then unusable). */
  destroyNow(): void {
    if (this.destroyed) return
    this.sendAck()
    this.reset()
    this.destroyed = true
  }

  /** `ibv_query_qp`: the current attributes (the mask is accepted for symmetry; all fields are returned). */
  query(): QpAttr & { readonly qpState: QpState } {
    return {
      qpState: this.state,
      curQpState: this.state,
      pathMtu: this.pathMtu,
      rqPsn: this.rqPsn,
      sqPsn: this.sqPsn,
      destQpNum: this.destQpNum,
      qpAccessFlags: this.accessFlags,
      cap: this.cap,
      ...(this.ahAttr !== undefined ? { ahAttr: this.ahAttr } : {}),
      pkeyIndex: this.pkeyIndex,
      enSqdAsyncNotify: this.enSqdAsyncNotify,
      sqDraining: this.state === QpState.SQD && this.head < this.sqdLimit ? 1 : 0,
      maxRdAtomic: this.maxRdAtomic,
      maxDestRdAtomic: this.maxDestRdAtomic,
      minRnrTimer: this.minRnrTimer,
      portNum: this.portNum,
      timeout: this.timeout,
      retryCnt: this.retryCnt,
      rnrRetry: this.rnrRetry
    }
  }

  /** Unacknowledged send WRs and posted receives, for diagnostics and tests. */
  get queueDepths(): { readonly send: number; readonly recv: number } {
    return { send: this.tail - this.head, recv: this.rqTail - this.rqHead }
  }
}
