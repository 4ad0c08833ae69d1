/**
 * The state machine of a SoftVerbs RC QP (rdma_rxe's `rxe_qp.c`): which transitions are legal with which attribute
 * masks, value checks, applying a modify, RESET, ERR (flushing both queues), destroy and query.
 */
import { ackTimeoutMs, Errno, QpAttrMask as M, Mtu, mtuToBytes, QpState } from "../../Constants.js"
import type { QpAttr } from "../../Verbs.js"
import { softAddressOfGid } from "../Address.js"
import type { SoftQp } from "../SoftQp.js"
import { landAll } from "./Placement.js"
import { completeFromHead, pump, stopTimers } from "./Requester.js"
import { flushRecvQueue, sendAck } from "./Responder.js"
import { flushSendQueue } from "./SendQueue.js"

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

/** `ibv_modify_qp`: validates everything first, then applies; a failure changes nothing. */
export const modify = (qp: SoftQp, attr: QpAttr, mask: number): ModifyFailure | undefined => {
  if (qp.destroyed) return { errno: Errno.EINVAL, message: "the QP is destroyed" }
  const cur = qp.state
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
  const bad = checkValues(attr, rest)
  if (bad !== undefined) return { errno: Errno.EINVAL, message: bad }
  apply(qp, attr, rest)
  moveTo(qp, cur, next)
  return undefined
}

const checkValues = (attr: QpAttr, mask: number): string | undefined => {
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

const apply = (qp: SoftQp, attr: QpAttr, mask: number): void => {
  if (mask & M.PATH_MTU) {
    qp.pathMtu = attr.pathMtu as Mtu
    qp.mtu = mtuToBytes(qp.pathMtu)
  }
  if (mask & M.TIMEOUT) {
    qp.timeout = attr.timeout as number
    qp.timeoutMs = ackTimeoutMs(qp.timeout)
  }
  if (mask & M.RETRY_CNT) qp.retryCnt = attr.retryCnt as number
  if (mask & M.RNR_RETRY) qp.rnrRetry = attr.rnrRetry as number
  if (mask & M.MIN_RNR_TIMER) qp.minRnrTimer = attr.minRnrTimer as number
  if (mask & M.RQ_PSN) qp.rqPsn = attr.rqPsn as number
  if (mask & M.SQ_PSN) qp.sqPsn = attr.sqPsn as number
  if (mask & M.DEST_QPN) qp.destQpNum = attr.destQpNum as number
  if (mask & M.PORT) qp.portNum = attr.portNum as number
  if (mask & M.PKEY_INDEX) qp.pkeyIndex = attr.pkeyIndex as number
  if (mask & M.ACCESS_FLAGS) qp.accessFlags = attr.qpAccessFlags as number
  if (mask & M.MAX_QP_RD_ATOMIC) qp.maxRdAtomic = attr.maxRdAtomic as number
  if (mask & M.MAX_DEST_RD_ATOMIC) qp.maxDestRdAtomic = attr.maxDestRdAtomic as number
  if (mask & M.EN_SQD_ASYNC_NOTIFY) qp.enSqdAsyncNotify = attr.enSqdAsyncNotify ?? 0
  if (mask & M.AV) {
    qp.ahAttr = attr.ahAttr
    const peer = softAddressOfGid(attr.ahAttr?.grh?.dgid)
    if (peer !== undefined) {
      qp.peerHost = peer.host
      qp.peerPort = peer.port
    }
  }
}

const moveTo = (qp: SoftQp, cur: QpState, next: QpState): void => {
  // A NIC acknowledges what it received within microseconds; SoftVerbs may still owe a coalesced ACK. Send it
  // before the QP stops answering, or the peer retries what was delivered until its budget runs out.
  if (next === QpState.RESET || next === QpState.ERR) sendAck(qp)
  if (next === QpState.RESET) {
    reset(qp)
    return
  }
  if (next === QpState.ERR) {
    enterError(qp)
    return
  }
  if (cur === QpState.INIT && next === QpState.RTR) {
    qp.ePsn = qp.rqPsn
    qp.nakSeqSent = false
    qp.recvActive = false
    qp.writeActive = false
  }
  if (cur === QpState.RTR && next === QpState.RTS) {
    qp.maxWindow = qp.device.windowFor(qp.mtu)
    qp.cwnd = qp.maxWindow
    qp.psnNext = qp.sqPsn
    qp.acked = qp.sqPsn - 1
    qp.head = qp.tail = qp.txIdx = 0
    qp.txPkt = 0
  }
  qp.state = next
  if (next === QpState.SQD && cur !== QpState.SQD) {
    qp.sqdLimit = qp.tail
    completeFromHead(qp)
  }
  if (next === QpState.RTS && cur === QpState.SQD) pump(qp)
}

/** Moves to ERR: every outstanding WR completes WR_FLUSH_ERR, in order, send queue first. */
export const enterError = (qp: SoftQp): void => {
  // WRITE payloads already acknowledged still land, and the completions held behind them precede the flush.
  landAll(qp, true)
  qp.state = QpState.ERR
  stopTimers(qp)
  flushSendQueue(qp)
  flushRecvQueue(qp)
  qp.ackPending = false
}

/**
 * RESET: forgets every WR and removes the QP's unpolled completions from its CQs. WRITE payloads already acknowledged
 * land first; the completions held behind them go with the other unpolled ones.
 */
export const reset = (qp: SoftQp): void => {
  landAll(qp, false)
  stopTimers(qp)
  qp.state = QpState.RESET
  qp.head = qp.tail = qp.txIdx = qp.txPkt = 0
  if (!qp.shared) qp.rq.clear()
  qp.readsOutstanding = 0
  qp.recvActive = false
  qp.writeActive = false
  qp.ackPending = false
  qp.retries = 0
  qp.rnrRetries = 0
  qp.sendCq.removeQp(qp.qpNum)
  if (qp.recvCq !== qp.sendCq) qp.recvCq.removeQp(qp.qpNum)
}

/** Destroys the QP (as RESET, then unusable). */
export const destroyNow = (qp: SoftQp): void => {
  if (qp.destroyed) return
  sendAck(qp)
  reset(qp)
  qp.destroyed = true
}

/** `ibv_query_qp`: the current attributes (the mask is accepted for symmetry; all fields are returned). */
export const query = (qp: SoftQp): QpAttr & { readonly qpState: QpState } => ({
  qpState: qp.state,
  curQpState: qp.state,
  pathMtu: qp.pathMtu,
  rqPsn: qp.rqPsn,
  sqPsn: qp.sqPsn,
  destQpNum: qp.destQpNum,
  qpAccessFlags: qp.accessFlags,
  cap: qp.cap,
  ...(qp.ahAttr !== undefined ? { ahAttr: qp.ahAttr } : {}),
  pkeyIndex: qp.pkeyIndex,
  enSqdAsyncNotify: qp.enSqdAsyncNotify,
  sqDraining: qp.state === QpState.SQD && qp.head < qp.sqdLimit ? 1 : 0,
  maxRdAtomic: qp.maxRdAtomic,
  maxDestRdAtomic: qp.maxDestRdAtomic,
  minRnrTimer: qp.minRnrTimer,
  portNum: qp.portNum,
  timeout: qp.timeout,
  retryCnt: qp.retryCnt,
  rnrRetry: qp.rnrRetry
})
