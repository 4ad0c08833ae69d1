/**
 * Bringing an RC QP up, as `ibv_rc_pingpong` does: RESET → INIT → RTR → RTS with the attributes each step requires.
 * Works on any `Verbs` provider.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Effect } from "effect"
import { AccessFlags, QpAttrMask as M, Mtu, QpState, QpType } from "./Constants.js"
import type { DeviceNotFound, RdmaError } from "./Errors.js"
import type { CompletionQueue, DeviceContext, Gid, ProtectionDomain, QueuePair, VerbsShape } from "./Verbs.js"

/** What one side tells the other so that it can connect (TENT exchanges this in its bootstrap). */
export interface RcPeer {
  readonly gid: Gid
  readonly qpNum: number
  readonly psn: number
}

/** The RC parameters of a connection; defaults are TENT's `EndPointParams`. */
export interface RcParams {
  readonly pathMtu: Mtu
  readonly minRnrTimer: number
  readonly timeout: number
  readonly retryCnt: number
  readonly rnrRetry: number
  readonly maxRdAtomic: number
  readonly maxDestRdAtomic: number
  readonly accessFlags: number
  readonly sgidIndex: number
  readonly hopLimit: number
}

/** TENT's defaults: MTU 4096, min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7, 16 outstanding reads. */
export const defaultParams: RcParams = {
  pathMtu: Mtu.MTU_4096,
  minRnrTimer: 12,
  timeout: 14,
  retryCnt: 7,
  rnrRetry: 7,
  maxRdAtomic: 16,
  maxDestRdAtomic: 16,
  accessFlags: AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ,
  sgidIndex: 0,
  hopLimit: 64
}

/** RESET → INIT. */
export const toInit = (qp: QueuePair, params: RcParams = defaultParams): Effect.Effect<void, RdmaError> =>
  qp.modifyQp(
    { qpState: QpState.INIT, pkeyIndex: 0, portNum: 1, qpAccessFlags: params.accessFlags },
    M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS
  )

/** INIT → RTR towards `remote`. */
export const toRtr = (
  qp: QueuePair,
  remote: RcPeer,
  params: RcParams = defaultParams
): Effect.Effect<void, RdmaError> =>
  qp.modifyQp(
    {
      qpState: QpState.RTR,
      pathMtu: params.pathMtu,
      destQpNum: remote.qpNum,
      rqPsn: remote.psn,
      maxDestRdAtomic: params.maxDestRdAtomic,
      minRnrTimer: params.minRnrTimer,
      ahAttr: {
        isGlobal: 1,
        portNum: 1,
        grh: { dgid: remote.gid, sgidIndex: params.sgidIndex, hopLimit: params.hopLimit }
      }
    },
    M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER
  )

/** RTR → RTS, sending from `psn`. */
export const toRts = (qp: QueuePair, psn: number, params: RcParams = defaultParams): Effect.Effect<void, RdmaError> =>
  qp.modifyQp(
    {
      qpState: QpState.RTS,
      sqPsn: psn,
      timeout: params.timeout,
      retryCnt: params.retryCnt,
      rnrRetry: params.rnrRetry,
      maxRdAtomic: params.maxRdAtomic
    },
    M.STATE | M.SQ_PSN | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.MAX_QP_RD_ATOMIC
  )

/** RESET → INIT → RTR → RTS: `localPsn` is this side's send PSN, `remote.psn` the peer's. */
export const connect = (
  qp: QueuePair,
  localPsn: number,
  remote: RcPeer,
  params: RcParams = defaultParams
): Effect.Effect<void, RdmaError> =>
  Effect.zipRight(toInit(qp, params), Effect.zipRight(toRtr(qp, remote, params), toRts(qp, localPsn, params)))

/** A random 24-bit initial PSN, as `ibv_rc_pingpong` picks one. */
export const randomPsn = (): number => Math.floor(Math.random() * 0xffffff)

/** The sizes of the RC QP that `open` creates. */
export interface OpenOptions {
  /** Entries of the one CQ that serves both send and receive. */
  readonly cqe: number
  readonly maxSendWr: number
  readonly maxRecvWr: number
  /** Defaults to 0. */
  readonly maxInlineData?: number
}

/** Opens `deviceName` and creates a PD, one CQ and an RC QP (in RESET, one SGE each way) on it, all in the scope. */
export const open = (
  verbs: VerbsShape,
  deviceName: string,
  options: OpenOptions
): Effect.Effect<
  { ctx: DeviceContext; pd: ProtectionDomain; cq: CompletionQueue; qp: QueuePair },
  RdmaError | DeviceNotFound,
  Scope.Scope
> =>
  Effect.gen(function* () {
    const ctx = yield* verbs.openDevice(deviceName)
    const pd = yield* ctx.allocPd
    const cq = yield* ctx.createCq(options.cqe)
    const qp = yield* pd.createQp({
      sendCq: cq,
      recvCq: cq,
      qpType: QpType.RC,
      cap: {
        maxSendWr: options.maxSendWr,
        maxRecvWr: options.maxRecvWr,
        maxSendSge: 1,
        maxRecvSge: 1,
        maxInlineData: options.maxInlineData ?? 0
      }
    })
    return { ctx, pd, cq, qp }
  })
