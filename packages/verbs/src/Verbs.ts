/**
 * The `Verbs` service: the subset of libibverbs the transfer engine uses, typed, with the names and numbers of
 * `<infiniband/verbs.h>`. Two providers implement it: `SoftVerbs` (a user-space RC provider over UDP) and `Ibverbs`
 * (the system `libibverbs.so.1` through koffi). The engine never knows which one it runs on.
 *
 * Lifecycle (open, allocate, register, create, modify, destroy) is made of Effects; resources are scoped and released
 * when their scope closes. The hot path (`postSend`, `postRecv`, `pollCq`, `reqNotifyCq`) is plain synchronous code
 * on handle objects: it returns 0 or an errno, fills caller-provided objects and allocates nothing.
 *
 * Memory is addressed as verbs address it: a memory region covers `[addr, addr + length)`; a scatter/gather entry is
 * `(addr, length, lkey)`; a remote access is `(remoteAddr, rkey)`. Addresses are plain numbers (user-space addresses
 * fit in 53 bits).
 *
 * @since 0.1.0
 */
import type { Effect, Scope, Stream } from "effect"
import { Context } from "effect"
import type { EventType, GidType, Mtu, PortState, QpState, QpType, WcOpcode, WcStatus, WrOpcode } from "./Constants.js"
import type { DeviceNotFound, RdmaError } from "./Errors.js"

/**
 * A 16-byte GID (`union ibv_gid`).
 *
 * @since 0.1.0
 */
export type Gid = Uint8Array

/**
 * One GID table entry as `ibv_query_gid_ex` reports it (`struct ibv_gid_entry`), with the name of the network device
 * the kernel bound it to (sysfs `gid_attrs/ndevs/<index>`; empty when none, as on native InfiniBand or an unbound
 * entry).
 *
 * @since 0.2.0
 */
export interface GidEntry {
  readonly index: number
  readonly gid: Gid
  readonly gidType: GidType
  readonly ndev: string
}

/**
 * What `ibv_get_device_list` names: a device and its node GUID (as 16 hex digits).
 *
 * @since 0.1.0
 */
export interface DeviceInfo {
  readonly name: string
  readonly guid: string
}

/**
 * `struct ibv_port_attr`, the fields the engine reads.
 *
 * @since 0.1.0
 */
export interface PortAttr {
  readonly state: PortState
  /** `max_mtu` as an `ibv_mtu`. */
  readonly maxMtu: Mtu
  /** `active_mtu` as an `ibv_mtu`. */
  readonly activeMtu: Mtu
  readonly gidTblLen: number
  readonly lid: number
  /** `IBV_LINK_LAYER_*`. */
  readonly linkLayer: number
  readonly activeSpeed: number
  readonly activeWidth: number
}

/**
 * `struct ibv_device_attr`, the limits a request is clamped to: work requests and SGEs per QP, CQ entries, and the
 * RDMA READ/atomic depths (`max_qp_init_rd_atom` bounds a QP's `max_rd_atomic`, `max_qp_rd_atom` its
 * `max_dest_rd_atomic`).
 *
 * @since 0.1.0
 */
export interface DeviceAttr {
  readonly maxQp: number
  readonly maxQpWr: number
  readonly maxSge: number
  readonly maxCq: number
  readonly maxCqe: number
  readonly maxMrSize: number
  readonly maxQpRdAtom: number
  readonly maxQpInitRdAtom: number
  readonly physPortCnt: number
  /** `max_srq_wr`: the deepest shared receive queue (0: none); absent where the provider does not say. Since 0.4.0. */
  readonly maxSrqWr?: number
}

/**
 * `struct ibv_global_route`.
 *
 * @since 0.1.0
 */
export interface GlobalRoute {
  readonly dgid: Gid
  readonly flowLabel?: number
  readonly sgidIndex?: number
  readonly hopLimit?: number
  readonly trafficClass?: number
}

/**
 * `struct ibv_ah_attr`: how to reach the peer QP. On RoCE (and SoftVerbs) `isGlobal` is 1 and `grh.dgid` is the key.
 *
 * @since 0.1.0
 */
export interface AhAttr {
  readonly dlid?: number
  readonly sl?: number
  readonly srcPathBits?: number
  readonly isGlobal?: number
  readonly portNum?: number
  readonly grh?: GlobalRoute
}

/**
 * `struct ibv_qp_cap`.
 *
 * @since 0.1.0
 */
export interface QpCap {
  readonly maxSendWr: number
  readonly maxRecvWr: number
  readonly maxSendSge: number
  readonly maxRecvSge: number
  readonly maxInlineData: number
}

/**
 * `struct ibv_qp_init_attr`.
 *
 * @since 0.1.0
 */
export interface QpInitAttr {
  readonly sendCq: CompletionQueue
  readonly recvCq: CompletionQueue
  readonly cap: QpCap
  readonly qpType: QpType
  /** `sq_sig_all`: every send WR is signaled. */
  readonly sqSigAll?: boolean
  /**
   * `srq`: the QP takes its RECVs from this shared receive queue (of the same protection domain); `cap.maxRecvWr` and
   * `cap.maxRecvSge` are then ignored, and `postRecv` on the QP is refused (EINVAL).
   */
  readonly srq?: SharedReceiveQueue
}

/**
 * `struct ibv_srq_attr` at creation (`ibv_srq_init_attr.attr`).
 *
 * @since 0.2.0
 */
export interface SrqInitAttr {
  /** `max_wr`: the most RECVs posted at once. */
  readonly maxWr: number
  /** `max_sge`: scatter entries per RECV. */
  readonly maxSge: number
}

/**
 * `struct ibv_srq`: a shared receive queue. The QPs created with it take their RECVs from it in posting order, so a
 * receive buffer is not held per QP: many QPs that are mostly idle share a few posted buffers. A receive completion
 * still goes to the QP's own `recvCq`, its `qpNum` naming the QP. When it is empty, a QP answers a SEND with RNR NAK,
 * as with its own empty receive queue.
 *
 * @since 0.2.0
 */
export interface SharedReceiveQueue {
  /** `ibv_post_srq_recv`: 0, or an errno with `badRecvWr` set to the first WR not posted (ENOMEM: full). */
  postRecv(wr: RecvWr): number
  readonly badRecvWr: RecvWr | null
  /**
   * `ibv_modify_srq` with `IBV_SRQ_LIMIT`: once fewer than `limit` RECVs are posted, the device raises
   * `IBV_EVENT_SRQ_LIMIT_REACHED` (on `asyncEvents`) once and disarms the limit.
   */
  armLimit(limit: number): Effect.Effect<void, RdmaError>
  /** `ibv_destroy_srq` (EBUSY while a QP uses it). Also done when the scope it was created in closes. */
  readonly destroy: Effect.Effect<void, RdmaError>
}

/**
 * `struct ibv_qp_attr`: the fields `modifyQp` and `queryQp` use. Which ones `modifyQp` reads is chosen by the
 * attribute mask (`QpAttrMask`), exactly as in verbs.
 *
 * @since 0.1.0
 */
export interface QpAttr {
  readonly qpState?: QpState
  readonly curQpState?: QpState
  readonly pathMtu?: Mtu
  readonly qkey?: number
  readonly rqPsn?: number
  readonly sqPsn?: number
  readonly destQpNum?: number
  readonly qpAccessFlags?: number
  readonly cap?: QpCap
  readonly ahAttr?: AhAttr
  readonly pkeyIndex?: number
  readonly enSqdAsyncNotify?: number
  readonly sqDraining?: number
  readonly maxRdAtomic?: number
  readonly maxDestRdAtomic?: number
  readonly minRnrTimer?: number
  readonly portNum?: number
  readonly timeout?: number
  readonly retryCnt?: number
  readonly rnrRetry?: number
}

/**
 * `struct ibv_sge`.
 *
 * @since 0.1.0
 */
export interface Sge {
  addr: number
  length: number
  lkey: number
}

/**
 * `struct ibv_send_wr`. Reuse one object per slot on the hot path; `next` chains several WRs into one post, as in
 * verbs. `remoteAddr`/`rkey` are `wr.rdma`; `immData` is the immediate (host order, 32 bits).
 *
 * @since 0.1.0
 */
export interface SendWr {
  wrId: number
  next?: SendWr | null
  sgList: ReadonlyArray<Sge>
  numSge?: number
  opcode: WrOpcode
  sendFlags: number
  immData?: number
  remoteAddr?: number
  rkey?: number
}

/**
 * `struct ibv_recv_wr`.
 *
 * @since 0.1.0
 */
export interface RecvWr {
  wrId: number
  next?: RecvWr | null
  sgList: ReadonlyArray<Sge>
  numSge?: number
}

/**
 * `struct ibv_wc`, as a mutable object that `pollCq` fills. Allocate an array of them once (`WorkCompletion.array`)
 * and pass it to every poll.
 *
 * @since 0.1.0
 */
export class WorkCompletion {
  /**
   * `wr_id`: the id the caller gave the work request that completed.
   *
   * @since 0.1.0
   */
  wrId = 0
  /**
   * `status`: `WcStatus.SUCCESS`, or why the work request failed (`wcStatusName` names it).
   *
   * @since 0.1.0
   */
  status: WcStatus = 0
  /**
   * `opcode`: the operation that completed (a `WcOpcode`).
   *
   * @since 0.1.0
   */
  opcode: WcOpcode = 0
  /**
   * `vendor_err`: the provider's own error syndrome for a failed completion.
   *
   * @since 0.1.0
   */
  vendorErr = 0
  /**
   * `byte_len`: the bytes received, for a receive completion.
   *
   * @since 0.1.0
   */
  byteLen = 0
  /**
   * Immediate data (host order) when `wcFlags & WcFlags.WITH_IMM`.
   *
   * @since 0.1.0
   */
  immData = 0
  /**
   * `qp_num`: the number of the local QP the work request was posted to.
   *
   * @since 0.1.0
   */
  qpNum = 0
  /**
   * `src_qp`: the remote QP number (meaningful on UD QPs).
   *
   * @since 0.1.0
   */
  srcQp = 0
  /**
   * `wc_flags`: `WcFlags` bits (immediate data present, GRH present, ...).
   *
   * @since 0.1.0
   */
  wcFlags = 0
  /**
   * `pkey_index`: the P_Key index (GSI QPs only).
   *
   * @since 0.1.0
   */
  pkeyIndex = 0
  /**
   * `slid`: the source LID (UD QPs).
   *
   * @since 0.1.0
   */
  slid = 0
  /**
   * `sl`: the service level (UD QPs).
   *
   * @since 0.1.0
   */
  sl = 0
  /**
   * `dlid_path_bits`: the destination LID path bits (UD QPs).
   *
   * @since 0.1.0
   */
  dlidPathBits = 0

  /**
   * `n` fresh completions, for a poller to reuse.
   *
   * @since 0.1.0
   */
  static array(n: number): Array<WorkCompletion> {
    return Array.from({ length: n }, () => new WorkCompletion())
  }
}

/**
 * `struct ibv_async_event`: what happened and to which object (a QP number, a CQ, or a port number).
 *
 * @since 0.1.0
 */
export interface AsyncEvent {
  readonly eventType: EventType
  readonly qpNum?: number
  readonly cq?: CompletionQueue
  readonly portNum?: number
  /** A human-readable cause, for logs. */
  readonly detail?: string
}

/**
 * `struct ibv_mr`: a registered memory region.
 *
 * @since 0.1.0
 */
export interface MemoryRegion {
  readonly addr: number
  readonly length: number
  readonly lkey: number
  readonly rkey: number
  readonly access: number
  /** The memory the region covers: `buffer[0]` is at `addr`. */
  readonly buffer: Buffer
}

/**
 * `struct ibv_cq` with its completion channel. `pollCq` is `ibv_poll_cq`; `reqNotifyCq` arms the channel for the next
 * completion (`ibv_req_notify_cq`); `setNotify` installs the channel's listener, called synchronously once per armed
 * event, so a poller can sleep instead of spinning (`awaitNotify` is the same as an Effect).
 *
 * @since 0.1.0
 */
export interface CompletionQueue {
  readonly cqe: number
  /** Polls at most `n` completions into `wc[0..n)`; returns how many, or a negative value on error (as verbs). */
  pollCq(n: number, wc: ReadonlyArray<WorkCompletion>): number
  /** Arms the completion channel; returns 0 or an errno. */
  reqNotifyCq(solicitedOnly?: boolean): number
  /** Installs (or with `null` removes) the completion channel listener. */
  setNotify(listener: (() => void) | null): void
  /**
   * Arms the CQ and waits for the next completion event; returns at once if completions are already queued (on
   * hardware the provider peeks by polling one completion into a stash that the next `pollCq` returns first).
   */
  readonly awaitNotify: Effect.Effect<void>
}

/**
 * `struct ibv_qp` of type RC.
 *
 * @since 0.1.0
 */
export interface QueuePair {
  readonly qpNum: number
  /**
   * The state as of the last `modifyQp`, read without a verbs call (as `ibv_qp.state`). On hardware a QP the NIC
   * moved to ERR by itself still reads its old state here: watch `asyncEvents` or call `queryQp` for the truth.
   * SoftVerbs keeps it current.
   */
  readonly state: QpState
  /** `ibv_post_send`: 0, or an errno with `badSendWr` set to the first WR not posted. */
  postSend(wr: SendWr): number
  /** `ibv_post_recv`: 0, or an errno with `badRecvWr` set to the first WR not posted. */
  postRecv(wr: RecvWr): number
  readonly badSendWr: SendWr | null
  readonly badRecvWr: RecvWr | null
  /** `ibv_modify_qp`: applies the attributes named by `mask`; an illegal transition or a missing attribute is EINVAL. */
  modifyQp(attr: QpAttr, mask: number): Effect.Effect<void, RdmaError>
  /** `ibv_query_qp`. */
  queryQp(mask: number): Effect.Effect<QpAttr & { readonly qpState: QpState }, RdmaError>
  /** `ibv_destroy_qp`. Also done when the scope the QP was created in closes; destroying twice is a no-op. */
  readonly destroy: Effect.Effect<void, RdmaError>
}

/**
 * `struct ibv_pd`.
 *
 * @since 0.1.0
 */
export interface ProtectionDomain {
  /**
   * `ibv_reg_mr` over a Buffer. `access` is `AccessFlags`; `REMOTE_WRITE` or `REMOTE_ATOMIC` without `LOCAL_WRITE` is
   * `RdmaError` EINVAL (as libibverbs and the kernel refuse it).
   */
  regMr(buffer: Buffer, access: number): Effect.Effect<MemoryRegion, RdmaError, Scope.Scope>
  /** `ibv_create_qp`. */
  createQp(init: QpInitAttr): Effect.Effect<QueuePair, RdmaError, Scope.Scope>
  /** `ibv_create_srq`; left out by a provider without shared receive queues. */
  readonly createSrq?: (init: SrqInitAttr) => Effect.Effect<SharedReceiveQueue, RdmaError, Scope.Scope>
}

/**
 * `struct ibv_context`: an opened device.
 *
 * @since 0.1.0
 */
export interface DeviceContext {
  readonly device: DeviceInfo
  /** `ibv_query_device`; a provider that has no device limits to report leaves it out. */
  readonly queryDevice?: Effect.Effect<DeviceAttr, RdmaError>
  /** `ibv_query_port`. */
  queryPort(portNum: number): Effect.Effect<PortAttr, RdmaError>
  /** `ibv_query_gid`. On SoftVerbs GID 0 of port 1 carries the device's UDP address. */
  queryGid(portNum: number, index: number): Effect.Effect<Gid, RdmaError>
  /**
   * `ibv_query_gid_ex` plus the entry's network device: what GID auto-selection (`Gid.selectGidIndex`) weighs. An
   * empty table slot is `RdmaError` (ENODATA on rdma-core). Since 0.2.0.
   */
  queryGidEntry(portNum: number, index: number): Effect.Effect<GidEntry, RdmaError>
  /** `ibv_alloc_pd`. */
  readonly allocPd: Effect.Effect<ProtectionDomain, RdmaError, Scope.Scope>
  /** `ibv_create_cq` with a completion channel. */
  createCq(cqe: number): Effect.Effect<CompletionQueue, RdmaError, Scope.Scope>
  /** `ibv_get_async_event` as a stream; each subscriber sees the events raised after it subscribed. */
  readonly asyncEvents: Stream.Stream<AsyncEvent>
}

/**
 * The operations of the `Verbs` service.
 *
 * @since 0.1.0
 */
export interface VerbsShape {
  /** `"soft"` or `"ibverbs"`. */
  readonly provider: string
  /** `ibv_get_device_list`. */
  readonly getDeviceList: Effect.Effect<ReadonlyArray<DeviceInfo>, DeviceNotFound>
  /** `ibv_open_device` by name; `DeviceNotFound` lists the devices that are present. */
  openDevice(name: string): Effect.Effect<DeviceContext, DeviceNotFound | RdmaError, Scope.Scope>
}

/**
 * The `Verbs` service. Provide it with `SoftVerbs.layer(...)` or `Ibverbs.layer(...)`.
 *
 * @since 0.1.0
 */
export class Verbs extends Context.Tag("@tent/verbs/Verbs")<Verbs, VerbsShape>() {}
