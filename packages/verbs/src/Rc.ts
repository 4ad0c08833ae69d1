/**
 * Bringing an RC QP up, as `ibv_rc_pingpong` does: RESET → INIT → RTR → RTS with the attributes each step requires.
 * Works on any `Verbs` provider.
 *
 * @since 0.1.0
 */
import { randomInt } from "node:crypto"
import type { Scope } from "effect"
import { Effect } from "effect"
import { AccessFlags, Errno, LinkLayer, QpAttrMask as M, Mtu, QpState, QpType } from "./Constants.js"
import { type DeviceNotFound, RdmaError } from "./Errors.js"
import type {
  AhAttr,
  CompletionQueue,
  DeviceAttr,
  DeviceContext,
  Gid,
  PortAttr,
  ProtectionDomain,
  QpCap,
  QpInitAttr,
  QueuePair,
  VerbsShape
} from "./Verbs.js"

/**
 * What one side tells the other so that it can connect (TENT exchanges this in its bootstrap).
 *
 * @since 0.1.0
 */
export interface RcPeer {
  readonly gid: Gid
  /**
   * The LID of the peer's port (TENT's `local_lid`): native InfiniBand addresses the peer by it; RoCE does not use it.
   * Absent means 0, what a RoCE port (and a peer that predates the field) reports.
   */
  readonly lid?: number
  readonly qpNum: number
  readonly psn: number
}

/**
 * The RC parameters of a connection; defaults are TENT's `EndPointParams` and `DeviceParams`.
 *
 * @since 0.1.0
 */
export interface RcParams {
  /** The local port the QP uses (`qp_attr.port_num`, `ah_attr.port_num`; TENT `transports/rdma/device/port`). */
  readonly portNum: number
  /**
   * The port's `IBV_LINK_LAYER_*` (`ibv_port_attr.link_layer`): on ETHERNET (RoCE) the peer is addressed by its GID
   * in a GRH; on anything else (InfiniBand, or a provider that predates the field) by its LID, without a GRH.
   */
  readonly linkLayer: number
  readonly pkeyIndex: number
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
  /** The GRH's traffic class (TENT `endpoint/traffic_class`, `MC_IB_TC`): lossless RoCE classes traffic by it. */
  readonly trafficClass: number
  readonly flowLabel: number
  /** `ah_attr.sl` (TENT `endpoint/service_level`, `MC_IB_SL`). */
  readonly serviceLevel: number
}

/**
 * TENT's defaults: port 1 over RoCE, MTU 4096, min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7, 16 outstanding
 * reads, traffic class and service level 0.
 *
 * @since 0.1.0
 */
export const defaultParams: RcParams = {
  portNum: 1,
  linkLayer: LinkLayer.ETHERNET,
  pkeyIndex: 0,
  pathMtu: Mtu.MTU_4096,
  minRnrTimer: 12,
  timeout: 14,
  retryCnt: 7,
  rnrRetry: 7,
  maxRdAtomic: 16,
  maxDestRdAtomic: 16,
  accessFlags: AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ,
  sgidIndex: 0,
  hopLimit: 64,
  trafficClass: 0,
  flowLabel: 0,
  serviceLevel: 0
}

/**
 * Whether `params` address the peer by GID in a GRH (RoCE) rather than by LID (InfiniBand).
 *
 * @since 0.1.0
 */
export const usesGrh = (params: Pick<RcParams, "linkLayer">): boolean => params.linkLayer === LinkLayer.ETHERNET

/**
 * The address vector towards `remote`: on RoCE a GRH with the peer's GID, this side's GID index, hop limit, traffic
 * class and flow label; on InfiniBand the peer's LID and no GRH. Either way on `params.portNum`, at `serviceLevel`.
 *
 * @since 0.1.0
 */
export const addressVector = (remote: RcPeer, params: RcParams): AhAttr =>
  usesGrh(params)
    ? {
        isGlobal: 1,
        dlid: remote.lid ?? 0,
        sl: params.serviceLevel,
        portNum: params.portNum,
        grh: {
          dgid: remote.gid,
          sgidIndex: params.sgidIndex,
          hopLimit: params.hopLimit,
          trafficClass: params.trafficClass,
          flowLabel: params.flowLabel
        }
      }
    : { isGlobal: 0, dlid: remote.lid ?? 0, sl: params.serviceLevel, portNum: params.portNum }

/**
 * RESET → INIT on `params.portNum`.
 *
 * @since 0.1.0
 */
export const toInit = (qp: QueuePair, params: RcParams = defaultParams): Effect.Effect<void, RdmaError> =>
  qp.modifyQp(
    {
      qpState: QpState.INIT,
      pkeyIndex: params.pkeyIndex,
      portNum: params.portNum,
      qpAccessFlags: params.accessFlags
    },
    M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS
  )

/**
 * INIT → RTR towards `remote`. On InfiniBand a peer without a LID (0) cannot be addressed: EINVAL, nothing modified.
 *
 * @since 0.1.0
 */
export const toRtr = (
  qp: QueuePair,
  remote: RcPeer,
  params: RcParams = defaultParams
): Effect.Effect<void, RdmaError> =>
  !usesGrh(params) && (remote.lid ?? 0) === 0
    ? Effect.fail(
        new RdmaError({
          op: "ibv_modify_qp",
          errno: Errno.EINVAL,
          message:
            `ibv_modify_qp on QP ${qp.qpNum} (INIT → RTR): port ${params.portNum} is InfiniBand, which addresses the ` +
            `peer QP ${remote.qpNum} by LID, and the peer sent LID 0 (its port has no LID from a subnet manager, or ` +
            "it is not on InfiniBand)"
        })
      )
    : qp.modifyQp(
        {
          qpState: QpState.RTR,
          pathMtu: params.pathMtu,
          destQpNum: remote.qpNum,
          rqPsn: remote.psn,
          maxDestRdAtomic: params.maxDestRdAtomic,
          minRnrTimer: params.minRnrTimer,
          ahAttr: addressVector(remote, params)
        },
        M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER
      )

/**
 * RTR → RTS, sending from `psn`.
 *
 * @since 0.1.0
 */
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

/**
 * RESET → INIT → RTR → RTS: `localPsn` is this side's send PSN, `remote.psn` the peer's. Both sides should pick
 * theirs with {@link randomPsn} and exchange them with the QP numbers: a fixed PSN (0, as TENT uses) lets a host that
 * can forge the peer's address place a packet inside the window without seeing any traffic.
 *
 * @since 0.1.0
 */
export const connect = (
  qp: QueuePair,
  localPsn: number,
  remote: RcPeer,
  params: RcParams = defaultParams
): Effect.Effect<void, RdmaError> =>
  Effect.zipRight(toInit(qp, params), Effect.zipRight(toRtr(qp, remote, params), toRts(qp, localPsn, params)))

/**
 * What a port and its device allow, as `ibv_query_port` and `ibv_query_device` report them.
 *
 * @since 0.1.0
 */
export interface Limits {
  readonly portNum: number
  readonly port: PortAttr
  /** Absent when the provider reports no device limits (its `queryDevice` is left out). */
  readonly device?: DeviceAttr
}

/**
 * Queries port `portNum` of `ctx` and, when the provider has `queryDevice`, the device's limits. A port the device
 * does not have fails as `ibv_query_port` would, EINVAL, with a message saying which ports it has.
 *
 * @since 0.1.0
 */
export const queryLimits = (ctx: DeviceContext, portNum: number): Effect.Effect<Limits, RdmaError> =>
  Effect.gen(function* () {
    const device = ctx.queryDevice === undefined ? undefined : yield* ctx.queryDevice
    if (device !== undefined && !(Number.isInteger(portNum) && portNum >= 1 && portNum <= device.physPortCnt)) {
      return yield* new RdmaError({
        op: "ibv_query_port",
        errno: Errno.EINVAL,
        message: `ibv_query_port: ${ctx.device.name} has ports 1..${device.physPortCnt}, not ${portNum}`
      })
    }
    const port = yield* ctx.queryPort(portNum)
    return device === undefined ? { portNum, port } : { portNum, port, device }
  })

/**
 * `params` fitted to the port and device of `limits`: the port's number and link layer, the path MTU at most the
 * port's active MTU, `max_rd_atomic` at most the device's `max_qp_init_rd_atom` and `max_dest_rd_atomic` at most its
 * `max_qp_rd_atom` (a NIC refuses the modify otherwise).
 *
 * @since 0.1.0
 */
export const clampParams = (params: RcParams, limits: Limits): RcParams => {
  const active = limits.port.activeMtu
  const device = limits.device
  return {
    ...params,
    portNum: limits.portNum,
    linkLayer: limits.port.linkLayer,
    pathMtu: active >= Mtu.MTU_256 && active < params.pathMtu ? active : params.pathMtu,
    maxRdAtomic: device === undefined ? params.maxRdAtomic : Math.min(params.maxRdAtomic, device.maxQpInitRdAtom),
    maxDestRdAtomic:
      device === undefined ? params.maxDestRdAtomic : Math.min(params.maxDestRdAtomic, device.maxQpRdAtom)
  }
}

/**
 * `cap` with its queue depths at most the device's `max_qp_wr` and its SGEs at most `max_sge`.
 *
 * @since 0.1.0
 */
export const clampCap = (cap: QpCap, limits: Limits): QpCap => {
  const device = limits.device
  if (device === undefined) return cap
  return {
    maxSendWr: Math.min(cap.maxSendWr, device.maxQpWr),
    maxRecvWr: Math.min(cap.maxRecvWr, device.maxQpWr),
    maxSendSge: Math.min(cap.maxSendSge, device.maxSge),
    maxRecvSge: Math.min(cap.maxRecvSge, device.maxSge),
    maxInlineData: cap.maxInlineData
  }
}

/**
 * A CQ size at most the device's `max_cqe`.
 *
 * @since 0.1.0
 */
export const clampCqe = (cqe: number, limits: Limits): number =>
  limits.device === undefined ? cqe : Math.min(cqe, limits.device.maxCqe)

/** Halving a 32-bit inline size reaches 0 in 32 steps. */
const MAX_CREATE_ATTEMPTS = 33

/**
 * `pd.createQp` with the capabilities clamped to `limits` ({@link clampCap}). No query reports the largest inline
 * size, so while the device refuses the QP with EINVAL the inline size is halved and the create retried (at most 33
 * tries, the last with 0); a refusal with any other errno, or at inline 0, is the error.
 *
 * @since 0.1.0
 */
export const createQp = (
  pd: ProtectionDomain,
  init: QpInitAttr,
  limits?: Limits
): Effect.Effect<QueuePair, RdmaError, Scope.Scope> =>
  Effect.gen(function* () {
    const cap = limits === undefined ? init.cap : clampCap(init.cap, limits)
    let inline = cap.maxInlineData
    for (let attempt = 1; ; attempt++) {
      const created = yield* Effect.either(pd.createQp({ ...init, cap: { ...cap, maxInlineData: inline } }))
      if (created._tag === "Right") return created.right
      if (created.left.errno !== Errno.EINVAL || !(inline > 0) || attempt === MAX_CREATE_ATTEMPTS) {
        return yield* Effect.fail(created.left)
      }
      inline = Math.floor(inline / 2)
    }
  })

/** PSNs are 24 bits. */
const PSN_SPACE = 0x1000000

/**
 * A random 24-bit initial PSN (0..2^24-1), as `ibv_rc_pingpong` picks one, from the system's CSPRNG so that a host
 * which does not see the bootstrap cannot predict it. Give it as `localPsn` to {@link connect} and send it to the
 * peer, which gives it as `remote.psn`; every provider honours any 24-bit value (SoftVerbs too).
 *
 * @since 0.1.0
 */
export const randomPsn = (): number => randomInt(PSN_SPACE)

/**
 * The sizes of the RC QP that `open` creates.
 *
 * @since 0.1.0
 */
export interface OpenOptions {
  /** Entries of the one CQ that serves both send and receive. */
  readonly cqe: number
  readonly maxSendWr: number
  readonly maxRecvWr: number
  /** Defaults to 0. */
  readonly maxInlineData?: number
}

/**
 * Opens `deviceName` and creates a PD, one CQ and an RC QP (in RESET, one SGE each way) on it, all in the scope.
 *
 * @since 0.1.0
 */
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
