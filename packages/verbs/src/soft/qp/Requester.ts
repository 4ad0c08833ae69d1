/**
 * The requester side of a SoftVerbs RC QP (rdma_rxe's `rxe_req.c` and `rxe_comp.c`).
 *
 * Work requests are kept in typed-array rings; PSNs are assigned when a WR is posted; packets go out in order under a
 * window sized to the receiver's socket buffer; the last packet of each message asks for an ACK. ACKs are cumulative.
 * One lazy timer per QP retransmits from the oldest unacknowledged PSN (go-back-N) after a whole
 * `4.096 µs × 2^timeout` without progress; after `retry_cnt` such retries the oldest WR completes `RETRY_EXC_ERR` and
 * the QP goes to ERR. An RNR NAK makes the requester wait the responder's `min_rnr_timer` and retry, at most
 * `rnr_retry` times (7 = forever), then `RNR_RETRY_EXC_ERR`.
 */
import { EventType, QpState, RNR_RETRY_INFINITE, RNR_TIMER_MS, WcStatus, WrOpcode } from "../../Constants.js"
import type { SendWr } from "../../Verbs.js"
import { Flag, HDR, Nak, Op, unwrapPsn, writeHeader } from "../Packet.js"
import type { SoftQp } from "../SoftQp.js"
import { postOneSend, wcOpcodeOf } from "./SendQueue.js"
import { gather, scatter } from "./Sge.js"

/**
 * Maximum packets in flight per QP, whatever the socket buffers: 512 × (56 + 4096) bytes fit a 4 MiB receive buffer.
 * A device whose kernel granted less sizes its QPs' windows to that (`SoftDevice.windowFor`).
 */
export const WINDOW = 512
/**
 * After a timeout or a sequence NAK the requester resends at most this many packets before an ACK arrives: a
 * single-threaded receiver reads about 32 datagrams per event-loop turn, and resending a whole window into it each time
 * only adds loss and queues the resent packets behind stale ones.
 */
const RECOVERY_WINDOW = 16
/** A long message asks for an ACK every this many packets (and where the window closes), so the window keeps moving. */
const ACK_EVERY = 64

const now = () => performance.now()

// ---------------------------------------------------------------------------------------------------------------------
// Posting (hot path)
// ---------------------------------------------------------------------------------------------------------------------

/** `ibv_post_send`: queues the chain up to the first bad WR (left in `badSendWr`), then transmits in RTS. */
export const postSend = (qp: SoftQp, wr: SendWr): number => {
  let w: SendWr | null | undefined = wr
  let err = 0
  while (w) {
    err = postOneSend(qp, w)
    if (err !== 0) break
    w = w.next
  }
  qp.badSendWr = err === 0 ? null : (w ?? null)
  if (qp.state === QpState.RTS) pump(qp)
  return err
}

// ---------------------------------------------------------------------------------------------------------------------
// Transmission
// ---------------------------------------------------------------------------------------------------------------------

const outstanding = (qp: SoftQp): boolean => qp.head !== qp.txIdx || qp.txPkt !== 0

/** Transmits what the window allows. */
export const pump = (qp: SoftQp): void => {
  if (qp.rnrWaiting) return
  const limit = qp.state === QpState.SQD ? qp.sqdLimit : qp.tail
  if (qp.txIdx < limit && !outstanding(qp)) qp.lastProgress = now()
  while (qp.txIdx < limit) {
    const s = qp.txIdx % qp.sqRing
    const npkts = qp.wqNpkts[s] as number
    const isRead = qp.wqOpcode[s] === WrOpcode.RDMA_READ
    // A READ (re-)requested after a go-back starts at its first missing response; one fully read needs no request.
    if (isRead && qp.txPkt < (qp.wqReadGot[s] as number)) qp.txPkt = qp.wqReadGot[s] as number
    if (qp.txPkt < npkts) {
      const psn = (qp.wqFirstPsn[s] as number) + qp.txPkt
      // A READ is held back by the window where it starts, not where a re-request resumes it: the responses it already
      // has are not in flight (a resumed READ past the window would otherwise never be asked for again).
      if ((isRead ? (qp.wqFirstPsn[s] as number) : psn) - qp.acked > qp.cwnd) break
      if (!transmitPacket(qp, s, qp.txPkt, psn)) return
      qp.txPkt = isRead ? npkts : qp.txPkt + 1
    }
    if (qp.txPkt >= npkts) {
      qp.txIdx++
      qp.txPkt = 0
    }
  }
  if (outstanding(qp)) armRetry(qp)
}

/** Builds and sends packet `pkt` of WQE slot `s`; false if the local SGEs were bad (the QP is then in ERR). */
const transmitPacket = (qp: SoftQp, s: number, pkt: number, psn: number): boolean => {
  const op = qp.wqOpcode[s] as number
  const len = qp.wqLen[s] as number
  const npkts = qp.wqNpkts[s] as number
  const buf = qp.device.slot()
  let flags = 0
  let plen = 0
  let wireOp: number
  const off = pkt * qp.mtu
  if (op === WrOpcode.RDMA_READ) {
    // A READ request names the whole message (base address and length) and, in `offset`, where its responses start:
    // 0 at first, the first missing response's offset when it is re-requested.
    wireOp = Op.READ_REQ
    flags = Flag.FIRST | Flag.LAST | Flag.ACK_REQ
  } else {
    wireOp = op === WrOpcode.SEND || op === WrOpcode.SEND_WITH_IMM ? Op.SEND : Op.WRITE
    plen = Math.min(qp.mtu, len - off)
    if (plen > 0 && !gather(qp, s, off, plen, buf)) {
      fail(qp, s, WcStatus.LOC_PROT_ERR)
      return false
    }
    if (pkt === 0) flags |= Flag.FIRST
    if (pkt === npkts - 1) {
      flags |= Flag.LAST | Flag.ACK_REQ
      if (op === WrOpcode.SEND_WITH_IMM || op === WrOpcode.RDMA_WRITE_WITH_IMM) flags |= Flag.IMM
    } else if (pkt % ACK_EVERY === ACK_EVERY - 1 || psn - qp.acked >= qp.cwnd) {
      // The last packet the window lets out asks for an ACK too: a window that closes inside a message (after a
      // timeout or a NAK cut it to 16) would otherwise wait for the retransmit timer to move again.
      flags |= Flag.ACK_REQ
    }
  }
  let ack = 0
  if (qp.state !== QpState.ERR) {
    flags |= Flag.ACK_VALID
    ack = qp.ePsn - 1
    qp.ackPending = false
    qp.rxSinceAck = 0
  }
  writeHeader(
    buf,
    wireOp,
    flags,
    0,
    qp.destQpNum,
    qp.qpNum,
    psn,
    ack,
    qp.wqImm[s] as number,
    qp.wqRkey[s] as number,
    len,
    qp.wqRaddr[s] as number,
    off,
    plen,
    qp.txTokenLo,
    qp.txTokenHi
  )
  qp.device.transmit(buf, HDR + plen, qp.peerHost, qp.peerPort)
  return true
}

/** Go-back-N: the next packet to transmit becomes `psn`. */
const rewind = (qp: SoftQp, psn: number): void => {
  for (let i = qp.head; i < qp.tail; i++) {
    const s = i % qp.sqRing
    const first = qp.wqFirstPsn[s] as number
    const npkts = qp.wqNpkts[s] as number
    if (psn < first + npkts) {
      qp.txIdx = i
      // A READ is re-requested from its first missing response (`pump` starts it there), not whole; anything else is
      // resent from `psn`.
      qp.txPkt = qp.wqOpcode[s] === WrOpcode.RDMA_READ ? 0 : Math.max(0, psn - first)
      return
    }
  }
  qp.txIdx = qp.tail
  qp.txPkt = 0
}

// ---------------------------------------------------------------------------------------------------------------------
// Acknowledgements and completions
// ---------------------------------------------------------------------------------------------------------------------

/**
 * Raises the cumulative ACK to `ack`, never past a READ whose responses are missing (a READ completes only with its
 * data); true on progress or when it went back. An ACK that covers such a READ's PSNs says the responder executed it
 * and its responses were lost: the requester goes back to the READ's first missing response (rxe's
 * `COMPST_ERROR_RETRY`), once per PSN until the next timeout. The scan runs to the tail: after a go-back the READ may
 * lie beyond `txIdx`, not yet asked for again.
 */
const advance = (qp: SoftQp, ack: number): boolean => {
  let limit = ack
  let wentBack = false
  if (qp.readsOutstanding > 0) {
    for (let i = qp.head; i < qp.tail; i++) {
      const s = i % qp.sqRing
      const first = qp.wqFirstPsn[s] as number
      if (first > limit) break
      const got = qp.wqReadGot[s] as number
      if (qp.wqOpcode[s] === WrOpcode.RDMA_READ && got !== qp.wqNpkts[s]) {
        limit = first - 1
        const requested = i < qp.txIdx || (i === qp.txIdx && qp.txPkt > 0)
        if (requested && qp.readGapPsn !== first + got) {
          qp.readGapPsn = first + got
          qp.device.counters.readRerequests++
          rewind(qp, first + got)
          wentBack = true
        }
        break
      }
    }
  }
  if (limit <= qp.acked) return wentBack
  qp.acked = limit
  // After a go-back-N the ACK may cover packets not yet resent: they arrived, so transmission resumes after them.
  if (qp.txIdx < qp.tail && (qp.wqFirstPsn[qp.txIdx % qp.sqRing] as number) + qp.txPkt <= limit) rewind(qp, limit + 1)
  if (qp.cwnd < qp.maxWindow) qp.cwnd = Math.min(qp.maxWindow, qp.cwnd * 2)
  qp.retries = 0
  qp.rnrRetries = 0
  qp.lastProgress = now()
  completeFromHead(qp)
  return true
}

/** Completes, in order, every WQE at the head that is fully acknowledged (or, for a READ, fully read). */
export const completeFromHead = (qp: SoftQp): void => {
  while (qp.head < qp.tail) {
    const s = qp.head % qp.sqRing
    const op = qp.wqOpcode[s] as number
    if (op === WrOpcode.RDMA_READ) {
      if (qp.wqReadGot[s] !== qp.wqNpkts[s]) break
      qp.readsOutstanding--
      // Its last response acknowledges everything up to it (the window counts from `acked`).
      const last = (qp.wqFirstPsn[s] as number) + (qp.wqNpkts[s] as number) - 1
      if (last > qp.acked) qp.acked = last
    } else if ((qp.wqFirstPsn[s] as number) + (qp.wqNpkts[s] as number) - 1 > qp.acked) {
      break
    }
    if (qp.wqSignaled[s] === 1) {
      const byteLen = op === WrOpcode.RDMA_READ ? (qp.wqLen[s] as number) : 0
      qp.sendCq.push(qp.wqWrId[s] as number, WcStatus.SUCCESS, wcOpcodeOf(op), byteLen, 0, qp.qpNum, 0, 0)
    }
    qp.head++
  }
  // A READ completed by its last response may not have been passed by the transmitter yet (after a go-back).
  if (qp.txIdx < qp.head) {
    qp.txIdx = qp.head
    qp.txPkt = 0
  }
  if (qp.state === QpState.SQD && qp.head >= qp.sqdLimit && qp.enSqdAsyncNotify !== 0) {
    qp.enSqdAsyncNotify = 0
    qp.device.raise({ eventType: EventType.SQ_DRAINED, qpNum: qp.qpNum, detail: "send queue drained" })
  }
}

/** A cumulative ACK (alone or carried by a request) for the PSN `wireAck`. */
export const onAck = (qp: SoftQp, wireAck: number): void => {
  if (qp.state !== QpState.RTS && qp.state !== QpState.SQD) return
  const ack = unwrapPsn(wireAck, qp.acked + 1)
  if (ack >= qp.psnNext) {
    qp.device.counters.protocolErrors++
    return
  }
  if (advance(qp, ack)) pump(qp)
}

/** A NAK: go back (sequence), wait and go back (RNR), or fail the oldest WR. */
export const onNak = (qp: SoftQp, syndrome: number, wirePsn: number, rnrTimer: number): void => {
  if (qp.state !== QpState.RTS && qp.state !== QpState.SQD) return
  const psn = unwrapPsn(wirePsn, qp.acked + 1)
  if (psn <= qp.acked || psn >= qp.psnNext) return // stale or bogus
  // The NAK acknowledges everything before `psn`, except a READ whose responses are missing: `acked` stops before it
  // and `advance` goes back to that READ (once per missing PSN until the next timeout, as for an ACK); going back
  // starts there then, not at `psn`, so the READ is asked for again.
  const gapBefore = qp.readGapPsn
  advance(qp, psn - 1)
  const from = qp.readGapPsn !== gapBefore ? qp.acked + 1 : psn
  switch (syndrome) {
    case Nak.SEQ:
      // Go back, but resend at most RECOVERY_WINDOW packets before the next ACK, as after a timeout: the rest of a
      // full window resent at once would queue behind the stale packets still in the receiver's socket.
      qp.cwnd = Math.min(RECOVERY_WINDOW, qp.maxWindow)
      rewind(qp, from)
      pump(qp)
      return
    case Nak.RNR: {
      qp.rnrRetries++
      if (qp.rnrRetry !== RNR_RETRY_INFINITE && qp.rnrRetries > qp.rnrRetry) {
        fail(qp, qp.head % qp.sqRing, WcStatus.RNR_RETRY_EXC_ERR)
        return
      }
      qp.device.counters.rnrRetries++
      // The responder had no RECV for the message at `from`, and drops every later packet until that one is taken:
      // probe with one packet, not the whole window again (an application that stopped reposting would otherwise
      // cost its peers a window of packets per retry); the ACK that follows doubles the window back.
      qp.cwnd = 1
      rewind(qp, from)
      qp.rnrWaiting = true
      qp.lastProgress = now()
      const delay = RNR_TIMER_MS[rnrTimer & 31] as number
      if (qp.rnrTimer === undefined) {
        qp.rnrTimer = setTimeout(qp.onRnrTimer, delay)
        qp.rnrTimer.unref()
      } else {
        clearTimeout(qp.rnrTimer)
        qp.rnrTimer = setTimeout(qp.onRnrTimer, delay)
        qp.rnrTimer.unref()
      }
      return
    }
    case Nak.ACCESS:
      fail(qp, qp.head % qp.sqRing, WcStatus.REM_ACCESS_ERR)
      return
    default:
      fail(qp, qp.head % qp.sqRing, WcStatus.REM_INV_REQ_ERR)
  }
}

/** The RNR wait is over: transmit again from where the NAK rewound to. */
export const onRnrTimer = (qp: SoftQp): void => {
  qp.device.run(() => {
    if (!qp.rnrWaiting) return
    qp.rnrWaiting = false
    qp.lastProgress = now()
    if (qp.state === QpState.RTS || qp.state === QpState.SQD) pump(qp)
  })
}

/** A READ response packet: scattered into the READ's local SGEs in order; duplicates are counted and dropped. */
export const onReadResp = (qp: SoftQp, msg: Buffer, wirePsn: number, plen: number, offset: number): void => {
  if (qp.state !== QpState.RTS && qp.state !== QpState.SQD) return
  const psn = unwrapPsn(wirePsn, qp.acked + 1)
  for (let i = qp.head; i < qp.txIdx || (i === qp.txIdx && qp.txPkt > 0); i++) {
    const s = i % qp.sqRing
    const first = qp.wqFirstPsn[s] as number
    const npkts = qp.wqNpkts[s] as number
    if (psn < first) return
    const isRead = qp.wqOpcode[s] === WrOpcode.RDMA_READ
    const got = qp.wqReadGot[s] as number
    if (psn >= first + npkts) {
      // Responses come in order: one past an older READ whose responses are missing says they were lost.
      if (isRead && got !== npkts) {
        reRequestRead(qp, s, got, first)
        return
      }
      continue
    }
    if (!isRead) {
      qp.device.counters.protocolErrors++
      return
    }
    if (psn !== first + got) {
      if (psn > first + got) reRequestRead(qp, s, got, first)
      else qp.device.counters.duplicates++
      return
    }
    // A READ response implicitly acknowledges every older request (IBA 9.7.5.1.3): those complete first, so a
    // response that cannot be scattered fails the READ at the head, after them.
    advance(qp, first - 1)
    const base = s * qp.maxSge // READ response bytes go to WQE `s`'s local SGEs (which need LOCAL_WRITE)
    if (
      plen > 0 &&
      !scatter(qp, qp.wqSgeAddr, qp.wqSgeLen, qp.wqSgeLkey, base, qp.wqNumSge[s] as number, offset, msg, plen)
    ) {
      fail(qp, s, WcStatus.LOC_PROT_ERR)
      return
    }
    qp.wqReadGot[s] = got + 1
    if (got + 1 === npkts) advance(qp, first + npkts - 1)
    // Forward progress: a response in sequence resets the retry count, as an ACK does (IB).
    qp.retries = 0
    qp.lastProgress = now()
    completeFromHead(qp)
    pump(qp)
    return
  }
}

/**
 * A gap in READ `s`'s responses: the one at `first + got` was lost. Ask again from it now (as a sequence NAK would
 * make the requester do) instead of waiting for the timer: once per request sent for that PSN.
 */
const reRequestRead = (qp: SoftQp, s: number, got: number, first: number): void => {
  if (qp.readGapPsn === first + got) {
    qp.device.counters.duplicates++
    return
  }
  qp.readGapPsn = first + got
  qp.device.counters.readRerequests++
  transmitPacket(qp, s, got, first + got)
}

// ---------------------------------------------------------------------------------------------------------------------
// Retry timer
// ---------------------------------------------------------------------------------------------------------------------

/**
 * Arms the retry timer for a whole timeout, or for `left` ms (what remains of the timeout since the last progress).
 * The common case re-arms the one timer with `refresh()`; a timer of another length is made anew (rare).
 */
const armRetry = (qp: SoftQp, left = qp.timeoutMs): void => {
  if (qp.retryArmed || qp.timeoutMs === 0 || qp.destroyed) return
  qp.retryArmed = true
  const ms = Math.max(1, Math.ceil(left))
  if (qp.retryTimer !== undefined && qp.retryTimerMs === ms) {
    qp.retryTimer.refresh()
    return
  }
  if (qp.retryTimer !== undefined) clearTimeout(qp.retryTimer)
  qp.retryTimer = setTimeout(qp.onRetryTimer, ms)
  qp.retryTimer.unref()
  qp.retryTimerMs = ms
}

/** True when the requester has waited a whole ACK timeout without progress. */
const timedOut = (qp: SoftQp): boolean =>
  (qp.state === QpState.RTS || qp.state === QpState.SQD) &&
  outstanding(qp) &&
  !qp.rnrWaiting &&
  now() - qp.lastProgress >= qp.timeoutMs - 0.5

/** The retry timer fired: re-arm if there was progress, else confirm the timeout after this turn's I/O. */
export const onRetryTimer = (qp: SoftQp): void => {
  qp.retryArmed = false
  if ((qp.state !== QpState.RTS && qp.state !== QpState.SQD) || !outstanding(qp)) return
  if (!timedOut(qp)) {
    // Progress since the timer was armed, or a timer Node fired a little early: wait what is left of the timeout
    // from the last progress (not a whole new one: the local ACK timeout runs from the last progress, as on a NIC).
    armRetry(qp, Math.min(qp.timeoutMs, qp.timeoutMs - (now() - qp.lastProgress)))
    return
  }
  // The deadline has passed, however late this timer fired (a NIC's timer does not wait for a busy host): the retry
  // counts, so detecting a dead peer does not stretch with event-loop lag. What the lag may hide is ACKs already
  // waiting in the socket: timers run before I/O in an event-loop turn, so look again after the I/O phase.
  qp.retryArmed = true
  setImmediate(qp.onRetryConfirm)
}

/** Still no progress after the I/O phase: retransmit from the oldest unacknowledged PSN, or fail past `retry_cnt`. */
export const onRetryConfirm = (qp: SoftQp): void => {
  qp.retryArmed = false
  if (!timedOut(qp)) {
    if (outstanding(qp) && !qp.destroyed) armRetry(qp)
    return
  }
  qp.device.run(() => {
    qp.retries++
    if (qp.retries > qp.retryCnt) {
      fail(qp, qp.head % qp.sqRing, WcStatus.RETRY_EXC_ERR)
      return
    }
    qp.device.counters.retransmits++
    qp.readGapPsn = -1
    qp.cwnd = Math.min(RECOVERY_WINDOW, qp.maxWindow)
    qp.lastProgress = now()
    rewind(qp, qp.acked + 1)
    pump(qp)
    armRetry(qp)
  })
}

/** Stops the retry and RNR timers. */
export const stopTimers = (qp: SoftQp): void => {
  if (qp.retryTimer !== undefined) clearTimeout(qp.retryTimer)
  qp.retryTimer = undefined
  qp.retryArmed = false
  if (qp.rnrTimer !== undefined) clearTimeout(qp.rnrTimer)
  qp.rnrTimer = undefined
  qp.rnrWaiting = false
}

// ---------------------------------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------------------------------

/**
 * Completes WQE `s` with `status` and moves the QP to ERR. Completions stay in order, each WR once: the WRs older than
 * `s` (still unacknowledged) complete WR_FLUSH_ERR before it, the younger ones in the flush after it.
 */
const fail = (qp: SoftQp, s: number, status: number): void => {
  for (let guard = qp.tail - qp.head; guard > 0; guard--) {
    const h = qp.head % qp.sqRing
    const op = qp.wqOpcode[h] as number
    qp.sendCq.push(
      qp.wqWrId[h] as number,
      h === s ? status : WcStatus.WR_FLUSH_ERR,
      wcOpcodeOf(op),
      0,
      0,
      qp.qpNum,
      0,
      0
    )
    if (op === WrOpcode.RDMA_READ) qp.readsOutstanding--
    qp.head++
    if (h === s) break
  }
  qp.enterError()
}
