/**
 * A SoftVerbs reliable-connected queue pair: the InfiniBand RC rules over UDP.
 *
 * Split the way Linux's rdma_rxe splits a QP: this class is the QP record (attributes, the send and receive rings,
 * the responder's and the timers' state) and the `QueuePair` face; the logic lives in module functions over the
 * record: `qp/QpState.ts` (state machine, attribute checks, modify/reset/ERR/query), `qp/Requester.ts` (send queue,
 * transmission, ACK/NAK handling, retry and RNR timers, READ responses) and `qp/Responder.ts` (incoming SEND, WRITE
 * and READ, remote access checks, ACK/NAK generation, receive queue).
 *
 * ACKs ride on the reverse-direction packets of the same QP pair when there are any, otherwise one coalesced ACK per
 * event-loop turn is sent (not RoCE wire behaviour, but the semantics are IB's). In ERR every outstanding and newly
 * posted WR completes `WR_FLUSH_ERR`, and packets for the QP are dropped without an ACK, so the peer's retry budget
 * runs out as it would against a dead NIC. RESET and destroy remove the QP's unpolled completions from its CQs. With
 * the device's `placementDelayMs`, WRITE payloads land late and the QP's later receive completions wait for them
 * (`qp/Placement.ts`).
 */
import type { Effect } from "effect"
import { type EventType, Mtu, QpState } from "../Constants.js"
import type { AhAttr, QpAttr, QpCap, QueuePair, RecvWr, SendWr } from "../Verbs.js"
import type { SoftMr } from "./Memory.js"
import { Flag, Off, Op } from "./Packet.js"
import * as Placement from "./qp/Placement.js"
import * as State from "./qp/QpState.js"
import * as Requester from "./qp/Requester.js"
import * as Responder from "./qp/Responder.js"
import { EMPTY, INITIAL_RING, RecvQueue, type Ring, regrow } from "./RecvQueue.js"
import type { SoftCq } from "./SoftCq.js"

/** What a QP needs from its device. */
export interface QpHost {
  readonly host: string
  readonly port: number
  /** A send slot (header + one MTU) that stays untouched until the datagram is handed to the kernel. */
  slot(): Buffer
  transmit(buf: Buffer, length: number, host: string, port: number): void
  /** Packets in flight per QP at path MTU `mtu` that the device's socket buffers hold. */
  windowFor(mtu: number): number
  lookupMr(key: number): SoftMr | undefined
  queueAck(qp: SoftQp): void
  raise(event: { readonly eventType: EventType; readonly qpNum: number; readonly detail: string }): void
  /** Runs `f` as a device handler: completion channel events are delivered when it returns. */
  run(f: () => void): void
  readonly counters: QpCounters
  /** Milliseconds between accepting (and ACKing) an RDMA WRITE packet and its payload landing in memory (0: at once). */
  readonly placementDelayMs: number
}

/** Per-device counters the QPs update. */
export interface QpCounters {
  retransmits: number
  rnrNaksSent: number
  rnrRetries: number
  seqNaksSent: number
  /** READs re-requested from their first missing response because a later response arrived (no timer wait). */
  readRerequests: number
  accessNaksSent: number
  /** RDMA WRITE payloads placed after the device's `placementDelayMs` rather than as they arrived. */
  placementsDelayed: number
  duplicates: number
  droppedState: number
  foreignSource: number
  /** Datagrams from the connected peer's address and QP whose token was not the one the QP requires: dropped. */
  badToken: number
  protocolErrors: number
}

/**
 * A SoftVerbs RC QP. The Effect-returning methods are filled in by the provider (they wrap the sync ones). The fields
 * below the public API are the QP record the `qp/` modules read and write; nothing outside `soft/` touches them.
 */
export class SoftQp implements QueuePair {
  state: QpState = QpState.RESET
  badSendWr: SendWr | null = null
  badRecvWr: RecvWr | null = null
  declare modifyQp: QueuePair["modifyQp"]
  declare queryQp: QueuePair["queryQp"]
  declare destroy: Effect.Effect<void, never>

  // Attributes.
  pathMtu: Mtu = Mtu.MTU_4096
  mtu = 4096
  destQpNum = 0
  rqPsn = 0
  sqPsn = 0
  minRnrTimer = 0
  timeout = 0
  timeoutMs = 0
  retryCnt = 0
  rnrRetry = 0
  maxRdAtomic = 0
  maxDestRdAtomic = 0
  accessFlags = 0
  pkeyIndex = 0
  portNum = 1
  ahAttr: AhAttr | undefined
  enSqdAsyncNotify = 0
  peerHost = ""
  peerPort = 0
  // The token (`SoftVerbs.setQpToken`), as 32-bit halves: what every datagram for this QP must carry when
  // `tokenCheck` is set (its token is not 0), and what every datagram it sends carries (the peer QP's token).
  tokenCheck = false
  rxTokenLo = 0
  rxTokenHi = 0
  txTokenLo = 0
  txTokenHi = 0

  // Send queue: absolute indices, slot = index % sqRing. The ring is made at the first post, INITIAL_RING slots (at most
  // `sqCap`, the QP's max_send_wr), and doubles when a post finds it full: a QP that never posted holds no ring at all,
  // and an idle one a few KiB, not max_send_wr × its WQE size.
  readonly sqCap: number
  sqRing = 0
  readonly maxSge: number
  readonly maxInline: number
  wqWrId: Float64Array = EMPTY.f64
  wqOpcode: Uint8Array = EMPTY.u8
  wqSignaled: Uint8Array = EMPTY.u8
  wqInline: Uint8Array = EMPTY.u8
  wqImm: Uint32Array = EMPTY.u32
  wqRaddr: Float64Array = EMPTY.f64
  wqRkey: Uint32Array = EMPTY.u32
  wqLen: Float64Array = EMPTY.f64
  wqFirstPsn: Float64Array = EMPTY.f64
  wqNpkts: Uint32Array = EMPTY.u32
  wqReadGot: Uint32Array = EMPTY.u32
  wqNumSge: Uint8Array = EMPTY.u8
  wqSgeAddr: Float64Array = EMPTY.f64
  wqSgeLen: Uint32Array = EMPTY.u32
  wqSgeLkey: Uint32Array = EMPTY.u32
  inlineData: Buffer = EMPTY.buf
  head = 0
  tail = 0
  txIdx = 0
  txPkt = 0
  sqdLimit = 0
  psnNext = 0
  acked = -1
  readsOutstanding = 0
  /** The READ response PSN last re-requested because a later response arrived first (-1: none since the timer). */
  readGapPsn = -1
  /** The most packets in flight: what the device's granted socket buffers hold at this path MTU (`windowFor`). */
  maxWindow: number
  /** Packets allowed in flight: `maxWindow`, cut to RECOVERY_WINDOW by a timeout and doubled back on each ACK. */
  cwnd: number

  // Receive queue: the QP's own (grown as the send queue's up to max_recv_wr), or the SRQ it was created with.
  readonly rq: RecvQueue
  /** Created with an SRQ: `postRecv` is refused and ERR or RESET leave the shared WQEs alone. */
  readonly shared: boolean
  // The open RECV (taken from `rq` when a SEND's first packet arrived): its id and scatter list.
  curWrId = 0
  curNumSge = 0
  curSgeAddr: Float64Array = EMPTY.f64
  curSgeLen: Uint32Array = EMPTY.u32
  curSgeLkey: Uint32Array = EMPTY.u32

  // Responder.
  ePsn = 0
  nakSeqSent = false
  /** An ACK is owed to the peer's requester (sent by the device once per event-loop turn unless piggybacked). */
  ackPending = false
  /** The device has this QP in its ACK queue for this turn. */
  ackQueued = false
  /** In-order requests accepted since the last ACK this QP sent (carried or coalesced). */
  rxSinceAck = 0
  /** A request was accepted during the current event-loop turn (more may follow: the ACK can wait a turn). */
  rxThisTurn = false
  /** A SEND message is open (its FIRST accepted, its LAST not yet): only its MIDDLE or LAST may come next. */
  recvActive = false
  recvOffset = 0
  /** An RDMA WRITE message is open: only its MIDDLE or LAST may come next. */
  writeActive = false

  // Delayed placement (`qp/Placement.ts`): WRITE payloads and the receive completions held behind them, in order.
  readonly placementDelayMs: number
  readonly placements: Array<Placement.Pending | undefined> = []
  placementHead = 0
  /** Entries in `placements` from `placementHead` on; 0 whenever `placementDelayMs` is 0. */
  placementsPending = 0
  placementTimer: ReturnType<typeof setTimeout> | undefined

  // Timers.
  retryTimer: ReturnType<typeof setTimeout> | undefined
  retryArmed = false
  /** The length the retry timer was made with (re-armed with `refresh()` while it stays the same). */
  retryTimerMs = 0
  lastProgress = 0
  retries = 0
  rnrRetries = 0
  rnrWaiting = false
  rnrTimer: ReturnType<typeof setTimeout> | undefined
  destroyed = false

  constructor(
    readonly qpNum: number,
    readonly device: QpHost,
    readonly pdId: number,
    readonly sendCq: SoftCq,
    readonly recvCq: SoftCq,
    readonly cap: QpCap,
    readonly sqSigAll: boolean,
    srq?: RecvQueue
  ) {
    this.sqCap = Math.max(1, cap.maxSendWr)
    this.maxSge = Math.max(1, cap.maxSendSge)
    this.maxInline = cap.maxInlineData
    this.shared = srq !== undefined
    this.rq = srq ?? new RecvQueue(Math.max(1, cap.maxRecvWr), Math.max(1, cap.maxRecvSge))
    this.maxWindow = device.windowFor(this.mtu)
    this.cwnd = this.maxWindow
    this.placementDelayMs = device.placementDelayMs
  }

  // The timer callbacks, bound once per QP.
  readonly onRnrTimer = (): void => Requester.onRnrTimer(this)
  readonly onRetryTimer = (): void => Requester.onRetryTimer(this)
  readonly onRetryConfirm = (): void => Requester.onRetryConfirm(this)
  readonly onPlacementTimer = (): void => Placement.onPlacementTimer(this)

  /**
   * Doubles the send ring (from nothing: INITIAL_RING slots), at most to `sqCap`; the live WQEs move to their new
   * slots. Called at the first post and when a post finds the ring full.
   */
  growSq(): void {
    const from = this.sqRing
    const to = Math.min(this.sqCap, Math.max(INITIAL_RING, from * 2))
    const move = <A extends Ring>(a: A, stride = 1): A => regrow(a, from, to, this.head, this.tail, stride)
    this.wqWrId = move(this.wqWrId)
    this.wqOpcode = move(this.wqOpcode)
    this.wqSignaled = move(this.wqSignaled)
    this.wqInline = move(this.wqInline)
    this.wqImm = move(this.wqImm)
    this.wqRaddr = move(this.wqRaddr)
    this.wqRkey = move(this.wqRkey)
    this.wqLen = move(this.wqLen)
    this.wqFirstPsn = move(this.wqFirstPsn)
    this.wqNpkts = move(this.wqNpkts)
    this.wqReadGot = move(this.wqReadGot)
    this.wqNumSge = move(this.wqNumSge)
    this.wqSgeAddr = move(this.wqSgeAddr, this.maxSge)
    this.wqSgeLen = move(this.wqSgeLen, this.maxSge)
    this.wqSgeLkey = move(this.wqSgeLkey, this.maxSge)
    this.inlineData = move(this.inlineData, this.maxInline)
    this.sqRing = to
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Data path (hot)
  // ---------------------------------------------------------------------------------------------------------------

  postSend(wr: SendWr): number {
    return Requester.postSend(this, wr)
  }

  postRecv(wr: RecvWr): number {
    return Responder.postRecv(this, wr)
  }

  /**
   * The receive path: the device calls this for a well-formed datagram addressed to this QP. It is dropped and counted
   * in RESET, INIT or ERR, from any source but the connected peer's address and QP, and without the QP's token.
   */
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
    if (
      this.tokenCheck &&
      (msg.readUInt32LE(Off.tokenLo) !== this.rxTokenLo || msg.readUInt32LE(Off.tokenHi) !== this.rxTokenHi)
    ) {
      this.device.counters.badToken++
      return
    }
    const op = msg[Off.op] as number
    const flags = msg[Off.flags] as number
    switch (op) {
      case Op.SEND:
      case Op.WRITE:
      case Op.READ_REQ:
        Responder.onRequest(this, msg, op, flags)
        if ((flags & Flag.ACK_VALID) !== 0 && this.state !== QpState.ERR)
          Requester.onAck(this, msg.readUInt32LE(Off.ack))
        return
      case Op.ACK:
        Requester.onAck(this, msg.readUInt32LE(Off.ack))
        return
      case Op.NAK:
        Requester.onNak(this, msg[Off.syndrome] as number, msg.readUInt32LE(Off.psn), msg.readUInt32LE(Off.imm))
        return
      case Op.READ_RESP:
        Requester.onReadResp(
          this,
          msg,
          msg.readUInt32LE(Off.psn),
          msg.readUInt16LE(Off.payloadLen),
          msg.readUInt32LE(Off.offset)
        )
        return
    }
  }

  /** Sends the owed coalesced ACK (the device calls this once per event-loop turn). */
  sendAck(): void {
    Responder.sendAck(this)
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Control path
  // ---------------------------------------------------------------------------------------------------------------

  /** `ibv_modify_qp`: validates everything first, then applies; a failure changes nothing. */
  modify(attr: QpAttr, mask: number): State.ModifyFailure | undefined {
    return State.modify(this, attr, mask)
  }

  /** Moves to ERR: every outstanding WR completes WR_FLUSH_ERR, in order, send queue first. */
  enterError(): void {
    State.enterError(this)
  }

  /** Destroys the QP (as RESET, then unusable). */
  destroyNow(): void {
    State.destroyNow(this)
  }

  /** `ibv_query_qp`: the current attributes (the mask is accepted for symmetry; all fields are returned). */
  query(): QpAttr & { readonly qpState: QpState } {
    return State.query(this)
  }

  /** Unacknowledged send WRs and posted receives, for diagnostics and tests. */
  get queueDepths(): { readonly send: number; readonly recv: number } {
    return { send: this.tail - this.head, recv: this.shared ? 0 : this.rq.depth }
  }
}
