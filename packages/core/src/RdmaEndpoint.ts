/**
 * `RdmaEndpoint`: one per (local device, peer device), as TENT's `RdmaEndPoint`. It owns `num_lanes` data RC QPs and
 * one notify RC QP with 256 × 64 KiB send slots and 256 × 64 KiB receive slots (receives posted only once the notify
 * QP is connected), at most 256 notify sends in flight.
 *
 * States are TENT's: `UNINIT → HANDSHAKING` (construct) `→ READY` (QPs connected) `→ DESTROYING` (retire)
 * `→ DESTROYED` (deconstruct); an endpoint is never reused. `retire`, `finishDestroy` and `deconstruct` may be
 * called from any fiber (the data worker after slice errors, the RPC handler when a peer re-bootstraps, eviction);
 * the endpoint's `lock` plays TENT's `lock_`. The notify send and receive paths are plain synchronous code on the
 * preallocated slots.
 *
 * @since 0.1.0
 */
import type { BootstrapDesc, Notification } from "@tent/rpc"
import { BootstrapRejected } from "@tent/rpc"
import {
  AccessFlags,
  type CompletionQueue,
  type MemoryRegion,
  Mtu,
  QpAttrMask,
  QpState,
  QpType,
  type QueuePair,
  Rc,
  type RdmaError,
  type RecvWr,
  SendFlags,
  type SendWr,
  WrOpcode
} from "@tent/verbs"
import { type Clock, Deferred, Duration, Effect, Exit, FiberId, type Scope } from "effect"
import * as Scope_ from "effect/Scope"
import type { DedupShape } from "./Dedup.js"
import type { EndpointParams } from "./EngineConfig.js"
import { EndpointUnavailable } from "./Errors.js"
import type { NotifyQpParamsShape } from "./NotifyQpParams.js"
import type { PeerHealthPolicyShape } from "./PeerHealth.js"
import type { QpRetirementShape } from "./QpRetirement.js"
import type { ResendShape } from "./Resend.js"

/** TENT's `kNotifyBufferSize`. */
export const NOTIFY_SLOT_BYTES = 65536
/** TENT's `kNotifyMaxPendingSends`: slots, the send window and the receive depth. */
export const NOTIFY_SLOTS = 256
/** TENT's `kFinishDestroyTimeoutSec`: after this, destroy proceeds with work requests still outstanding. */
export const FINISH_DESTROY_TIMEOUT_MS = 30_000

/** TENT's `EndPointStatus`. */
export type EndpointStatus = "UNINIT" | "HANDSHAKING" | "READY" | "DESTROYING" | "DESTROYED"

/** What an endpoint needs from its device. */
export interface EndpointDevice {
  readonly name: string
  readonly pd: import("@tent/verbs").ProtectionDomain
  readonly notifyCq: CompletionQueue
  readonly dataCqs: ReadonlyArray<CompletionQueue>
  /** The GID as TENT sends it: 16 bytes `%02x` joined by `:`. */
  readonly gidText: string
  readonly gid: Uint8Array
  readonly sgidIndex: number
  readonly activeMtu: Mtu
}

/** What an endpoint needs from its transport. */
export interface EndpointHost {
  /** This engine's server name (its segment name). */
  readonly localServer: string
  readonly params: EndpointParams
  readonly numLanes: number
  readonly retirement: QpRetirementShape
  readonly notifyParams: NotifyQpParamsShape
  readonly peerHealth: PeerHealthPolicyShape
  readonly dedup: DedupShape
  readonly resend: ResendShape
  /** Publish / unpublish the notify QP in the transport's QP-number table. */
  readonly publishNotifyQp: (qpNum: number, ep: RdmaEndpoint) => void
  readonly unpublishNotifyQp: (qpNum: number, ep: RdmaEndpoint) => void
  /** Data QPs, for the data pollers. */
  readonly registerDataQp: (qp: QueuePair, ep: RdmaEndpoint, lane: number) => void
  readonly unregisterDataQp: (qp: QueuePair) => void
  /** Cancels the endpoint's in-flight slices (deconstruct). */
  readonly cancelSlices: (ep: RdmaEndpoint) => void
  /** The clock retirement is timed on (the transport's Effect `Clock`, so `TestClock` can move it). */
  readonly clock: Clock.Clock
}

/** `"<server>@<nic>"` (TENT `MakeNicPath`). */
export const nicPath = (server: string, nic: string): string => `${server}@${nic}`

/** Splits a NIC path at its last `@`. */
export const parseNicPath = (path: string): { readonly server: string; readonly nic: string } | undefined => {
  const at = path.lastIndexOf("@")
  return at <= 0 || at === path.length - 1 ? undefined : { server: path.slice(0, at), nic: path.slice(at + 1) }
}

/** A GID as TENT's bootstrap carries it: `"fe:80:…"`, 16 bytes. */
export const gidText = (gid: Uint8Array): string => Array.from(gid, (b) => b.toString(16).padStart(2, "0")).join(":")

/** Parses {@link gidText}; `undefined` if it is not 16 hex bytes. */
export const parseGidText = (text: string): Uint8Array | undefined => {
  const parts = text.split(":")
  if (parts.length !== 16 || !parts.every((p) => /^[0-9a-fA-F]{2}$/.test(p))) return undefined
  return Uint8Array.from(parts, (p) => Number.parseInt(p, 16))
}

/** `path_mtu` bytes → `ibv_mtu`, clamped to the port's active MTU. */
export const clampMtu = (bytes: number, active: Mtu): Mtu => {
  const wanted =
    bytes >= 4096 ? Mtu.MTU_4096 : bytes >= 2048 ? Mtu.MTU_2048 : bytes >= 1024 ? Mtu.MTU_1024 : Mtu.MTU_512
  return (wanted < active ? wanted : active) as Mtu
}

/** The data QPs' RC attributes from `EndPointParams`. */
export const dataQpParams = (p: EndpointParams, device: EndpointDevice): Rc.RcParams => ({
  pathMtu: clampMtu(p.pathMtu, device.activeMtu),
  minRnrTimer: p.minRnrTimer,
  timeout: p.sendTimeout,
  retryCnt: p.sendRetryCount,
  rnrRetry: p.sendRnrCount,
  maxRdAtomic: p.maxRdAtomic,
  maxDestRdAtomic: p.maxDestRdAtomic,
  accessFlags: AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ,
  sgidIndex: device.sgidIndex,
  hopLimit: p.hopLimit
})

/** One endpoint: data QPs and a notify QP towards one peer device. */
export class RdmaEndpoint {
  status: EndpointStatus = "UNINIT"
  /** TENT's `lock_`: construct, connect, accept and destroy take it. */
  readonly lock = Effect.unsafeMakeSemaphore(1)
  dataQps: Array<QueuePair> = []
  /** Outstanding data work requests per lane (TENT `wr_depth_list_`). */
  readonly wrDepth: Array<number> = []
  peerQpNums: ReadonlyArray<number> = []
  notifyQp: QueuePair | undefined
  /** Notify sends posted and not successfully completed (TENT `notify_pending_count_`). */
  pending = 0
  /** TENT `notify_send_wr_id_`: slot = counter % 256. */
  sendCounter = 0
  /** TENT `notify_connected_`. */
  connected = false
  /** The peer's `notify_proto` from its `BootstrapDesc`. */
  peerNotifyProto = 0
  /** When `retire` ran (ms, on the host's clock). */
  destroyStart = 0
  /** Notifications posted and not completed, oldest first, when the resend policy tracks them. */
  readonly inFlight: Array<Notification> = []
  private sendBuf: Buffer | undefined
  private sendMr: MemoryRegion | undefined
  private recvBuf: Buffer | undefined
  private recvMr: MemoryRegion | undefined
  private scope: Scope.CloseableScope | undefined
  private readonly waiters = new Set<() => void>()
  private connecting: Deferred.Deferred<void, unknown> | undefined
  private readonly sge = { addr: 0, length: 0, lkey: 0 }
  private readonly sendWr: SendWr = {
    wrId: 0,
    opcode: WrOpcode.SEND,
    sendFlags: SendFlags.SIGNALED,
    sgList: [this.sge]
  }
  private readonly recvSge = { addr: 0, length: NOTIFY_SLOT_BYTES, lkey: 0 }
  private readonly recvWr: RecvWr = { wrId: 0, sgList: [this.recvSge] }

  constructor(
    readonly host: EndpointHost,
    readonly device: EndpointDevice,
    /** The peer's NIC path, `"<server>@<nic>"`: the key in the device's endpoint store. */
    readonly peerNicPath: string,
    /** The peer's segment name (its server part). */
    readonly segment: string
  ) {}

  /** This side's NIC path. */
  get localNicPath(): string {
    return nicPath(this.host.localServer, this.device.name)
  }

  /** The notify QP's number, 0 without one (TENT `notifyQpNum()`). */
  get notifyQpNum(): number {
    return this.notifyQp?.qpNum ?? 0
  }

  /**
   * TENT `construct`: UNINIT → HANDSHAKING; creates the data QPs and the notify QP (taken to INIT at once), the
   * send slots and receive slots. No receive is posted yet.
   */
  readonly construct: Effect.Effect<void, RdmaError> = Effect.suspend(() => {
    if (this.status !== "UNINIT") return Effect.void
    this.status = "HANDSHAKING"
    const scope = Effect.runSync(Scope_.make())
    this.scope = scope
    const p = this.host.params
    const build = Effect.gen(this, function* () {
      for (let i = 0; i < this.host.numLanes; i++) {
        const cq = this.device.dataCqs[i % this.device.dataCqs.length] as CompletionQueue
        const qp = yield* this.device.pd.createQp({
          sendCq: cq,
          recvCq: cq,
          qpType: QpType.RC,
          sqSigAll: false,
          cap: {
            maxSendWr: p.maxQpWr,
            maxRecvWr: p.maxQpWr,
            maxSendSge: p.maxSge,
            maxRecvSge: p.maxSge,
            maxInlineData: p.maxInlineBytes
          }
        })
        this.dataQps.push(qp)
        this.wrDepth.push(0)
        this.host.registerDataQp(qp, this, i)
      }
      const notifyQp = yield* this.device.pd.createQp({
        sendCq: this.device.notifyCq,
        recvCq: this.device.notifyCq,
        qpType: QpType.RC,
        sqSigAll: true,
        cap: { maxSendWr: NOTIFY_SLOTS, maxRecvWr: NOTIFY_SLOTS, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 }
      })
      const np = this.notifyParams()
      yield* notifyQp.modifyQp(
        { qpState: QpState.INIT, pkeyIndex: p.pkeyIndex, portNum: 1, qpAccessFlags: np.accessFlags },
        QpAttrMask.STATE | QpAttrMask.PKEY_INDEX | QpAttrMask.PORT | QpAttrMask.ACCESS_FLAGS
      )
      this.notifyQp = notifyQp
      this.sendBuf = Buffer.allocUnsafeSlow(NOTIFY_SLOTS * NOTIFY_SLOT_BYTES)
      this.sendMr = yield* this.device.pd.regMr(this.sendBuf, AccessFlags.LOCAL_WRITE)
      this.recvBuf = Buffer.allocUnsafeSlow(NOTIFY_SLOTS * NOTIFY_SLOT_BYTES)
      this.recvMr = yield* this.device.pd.regMr(this.recvBuf, AccessFlags.LOCAL_WRITE)
      this.sge.lkey = this.sendMr.lkey
      this.recvSge.lkey = this.recvMr.lkey
    })
    return Scope_.extend(build, scope).pipe(Effect.tapError(() => this.deconstructUnlocked))
  })

  private notifyParams(): Rc.RcParams {
    return this.host.notifyParams.params(this.host.params, this.device.activeMtu, this.device.sgidIndex)
  }

  /** The descriptor this side sends (connect) or replies (accept). */
  localDesc(peerNicPath: string): BootstrapDesc {
    return {
      local_nic_path: this.localNicPath,
      peer_nic_path: peerNicPath,
      qp_num: this.dataQps.map((q) => q.qpNum),
      local_lid: 0,
      local_gid: this.device.gidText,
      reply_msg: "",
      notify_qp_num: this.notifyQpNum,
      notify_proto: this.host.dedup.notifyProto
    }
  }

  /** TENT `setupAllQPs` + the notify QP setup and publication; caller holds the lock. */
  private setupNoLock(peer: BootstrapDesc): Effect.Effect<void, RdmaError | BootstrapRejected> {
    return Effect.gen(this, function* () {
      const gid = parseGidText(peer.local_gid)
      if (gid === undefined) {
        return yield* new BootstrapRejected({ message: `Missing peer GID in bootstrap (${peer.local_gid})` })
      }
      if (peer.qp_num.length !== this.dataQps.length) {
        return yield* new BootstrapRejected({
          message: `lane count mismatch: peer has ${peer.qp_num.length} data QPs, this side ${this.dataQps.length}`
        })
      }
      const params = dataQpParams(this.host.params, this.device)
      for (let i = 0; i < this.dataQps.length; i++) {
        const qp = this.dataQps[i] as QueuePair
        yield* Rc.connect(qp, 0, { gid, qpNum: peer.qp_num[i] as number, psn: 0 }, params)
      }
      this.peerQpNums = peer.qp_num
      this.status = "READY"
      this.peerNotifyProto = peer.notify_proto
      const notifyQp = this.notifyQp
      if (peer.notify_qp_num !== 0 && notifyQp !== undefined) {
        const ok = yield* Effect.either(this.setupNotifyQp(notifyQp, gid, peer.notify_qp_num))
        if (ok._tag === "Right") {
          this.connected = true
          for (let i = 0; i < NOTIFY_SLOTS; i++) this.postRecv(i)
          this.host.publishNotifyQp(notifyQp.qpNum, this)
        } else {
          this.connected = false
        }
      }
    }).pipe(Effect.tapError(() => Effect.sync(() => this.retireNoLock())))
  }

  private setupNotifyQp(qp: QueuePair, gid: Uint8Array, peerQpNum: number): Effect.Effect<void, RdmaError> {
    const params = this.notifyParams()
    return Effect.zipRight(
      qp.modifyQp({ qpState: QpState.RESET }, QpAttrMask.STATE),
      Rc.connect(qp, 0, { gid, qpNum: peerQpNum, psn: 0 }, params)
    )
  }

  /**
   * TENT `connect`: bootstrap through `bootstrap` (the control-plane call, made without the lock), then connect the
   * QPs. Concurrent callers share one attempt. Returns at once if the endpoint is READY, and succeeds when the call
   * fails but the peer's simultaneous bootstrap made the endpoint READY meanwhile.
   */
  connect<E>(
    bootstrap: (desc: BootstrapDesc) => Effect.Effect<BootstrapDesc, E>
  ): Effect.Effect<void, E | RdmaError | BootstrapRejected | EndpointUnavailable> {
    return Effect.suspend((): Effect.Effect<void, E | RdmaError | BootstrapRejected | EndpointUnavailable> => {
      if (this.status === "READY") return Effect.void
      if (this.status !== "HANDSHAKING") return Effect.fail(this.unavailable(`endpoint is ${this.status}`))
      const running = this.connecting
      if (running !== undefined) return Deferred.await(running) as Effect.Effect<void, E>
      const deferred = Deferred.unsafeMake<void, unknown>(FiberId.none)
      this.connecting = deferred
      const attempt = Effect.gen(this, function* () {
        const desc = this.localDesc(this.peerNicPath)
        const reply = yield* Effect.either(bootstrap(desc))
        yield* this.lock.withPermits(1)(
          Effect.suspend((): Effect.Effect<void, E | RdmaError | BootstrapRejected | EndpointUnavailable> => {
            // Simultaneous open: the peer's own bootstrap may have set this endpoint up (accept) while ours was in
            // flight. Then it is READY with the peer's QPs, whether our call came back or failed (TENT reuses the
            // endpoint generation that issued the call; an endpoint here never changes its QPs).
            if (this.status === "READY") return Effect.void
            if (reply._tag === "Left") return Effect.fail(reply.left)
            if (this.status !== "HANDSHAKING") return Effect.fail(this.unavailable(`endpoint is ${this.status}`))
            return this.setupNoLock(reply.right)
          })
        )
      })
      return attempt.pipe(
        Effect.onExit((exit) =>
          Effect.sync(() => {
            this.connecting = undefined
            Deferred.unsafeDone(deferred, Exit.asVoid(exit) as Exit.Exit<void, unknown>)
          })
        )
      )
    })
  }

  /**
   * TENT `accept` (run on the control-plane handler fiber): idempotent for a READY endpoint with the same peer QPs;
   * a READY endpoint with other peer QPs (the peer recreated its endpoint) is retired and the bootstrap refused;
   * otherwise the QPs are connected to `peer` and this side's descriptor is the reply.
   */
  accept(peer: BootstrapDesc): Effect.Effect<BootstrapDesc, RdmaError | BootstrapRejected> {
    return this.lock.withPermits(1)(
      Effect.suspend((): Effect.Effect<BootstrapDesc, RdmaError | BootstrapRejected> => {
        const reply = this.localDesc(peer.local_nic_path)
        if (this.status === "READY") {
          const same =
            peer.qp_num.length === this.peerQpNums.length && peer.qp_num.every((q, i) => q === this.peerQpNums[i])
          if (same) return Effect.succeed(reply)
          this.retireNoLock()
          return Effect.fail(new BootstrapRejected({ message: "Endpoint retired for reconnection from peer" }))
        }
        if (this.status !== "HANDSHAKING") {
          return Effect.fail(new BootstrapRejected({ message: `endpoint is ${this.status}` }))
        }
        return Effect.as(this.setupNoLock(peer), reply)
      })
    )
  }

  private unavailable(message: string): EndpointUnavailable {
    return new EndpointUnavailable({ segment: this.segment, peerNicPath: this.peerNicPath, message })
  }

  // -------------------------------------------------------------------------------------------------------------------
  // Notify path (hot)
  // -------------------------------------------------------------------------------------------------------------------

  /** Posts receive slot `index` (TENT `postNotifyRecv`); returns 0 or the errno. */
  postRecv(index: number): number {
    const qp = this.notifyQp
    const mr = this.recvMr
    if (qp === undefined || mr === undefined) return -1
    this.recvWr.wrId = index
    this.recvSge.addr = mr.addr + index * NOTIFY_SLOT_BYTES
    return qp.postRecv(this.recvWr)
  }

  /** The receive slots' memory (undefined once deconstructed). */
  get receiveBuffer(): Buffer | undefined {
    return this.recvBuf
  }

  /**
   * Encodes and posts one notification into the next send slot: the synchronous core of TENT's `sendNotification`.
   * Returns 0, -1 when it does not fit a slot, -2 when not connected or without a window unit, or the post's errno.
   */
  postNotification(n: Notification): number {
    const qp = this.notifyQp
    const mr = this.sendMr
    const buf = this.sendBuf
    if (!this.connected || qp === undefined || mr === undefined || buf === undefined) return -2
    if (this.pending >= NOTIFY_SLOTS) return -2
    const slot = this.sendCounter % NOTIFY_SLOTS
    const offset = slot * NOTIFY_SLOT_BYTES
    const len = this.host.dedup.encode(buf, offset, n.name, n.msg, this.peerNotifyProto)
    if (len < 0) return -1
    this.sge.addr = mr.addr + offset
    this.sge.length = len
    this.sendWr.wrId = this.sendCounter++
    const rc = qp.postSend(this.sendWr)
    if (rc !== 0) return rc
    this.pending++
    if (this.host.resend.track) this.inFlight.push(n)
    return 0
  }

  /**
   * Waits for a free send slot (TENT: a condition variable without timeout; the `PeerHealth` seam may bound it):
   * succeeds when a slot is free or the endpoint stopped being connected.
   */
  readonly awaitSlot: Effect.Effect<void, EndpointUnavailable> = Effect.suspend(() => {
    if (!this.connected || this.pending < NOTIFY_SLOTS) return Effect.void
    const wait = Effect.async<void>((resume) => {
      const wake = () => {
        this.waiters.delete(wake)
        resume(Effect.void)
      }
      this.waiters.add(wake)
      return Effect.sync(() => void this.waiters.delete(wake))
    })
    const bound = this.host.peerHealth.slotWait
    const bounded =
      bound === undefined
        ? wait
        : wait.pipe(
            Effect.timeoutFail({
              duration: bound,
              onTimeout: () => this.unavailable(`no free notify send slot within ${Duration.format(bound)}`)
            })
          )
    return Effect.zipRight(bounded, this.awaitSlot)
  })

  /** A successful SEND completion on the notify QP (TENT `handleNotifySendComplete`). */
  onSendComplete(): void {
    if (this.pending > 0) this.pending--
    if (this.host.resend.track) this.inFlight.shift()
    for (const w of this.waiters) {
      w()
      break
    }
  }

  // -------------------------------------------------------------------------------------------------------------------
  // Retirement
  // -------------------------------------------------------------------------------------------------------------------

  /**
   * TENT `beginDestroyNoLock`: READY/HANDSHAKING → DESTROYING. Under the legacy `QpRetirement` the notify QP is
   * unpublished **first**; then the endpoint stops being connected (waiting senders wake and fail) and, if it was
   * READY, every data QP and then the notify QP go to ERR. Synchronous; callers that do not hold the lock use
   * {@link retire}.
   */
  retireNoLock(): void {
    if (this.status === "DESTROYING" || this.status === "DESTROYED") return
    const previous = this.status
    this.status = "DESTROYING"
    this.destroyStart = this.host.clock.unsafeCurrentTimeMillis()
    const notifyQp = this.notifyQp
    if (notifyQp !== undefined && this.host.retirement.unpublishAtRetire) {
      this.host.unpublishNotifyQp(notifyQp.qpNum, this)
    }
    this.connected = false
    for (const w of Array.from(this.waiters)) w()
    if (previous === "READY") {
      for (const qp of this.dataQps) toErr(qp)
      if (notifyQp !== undefined) toErr(notifyQp)
    }
    if (this.inFlight.length > 0) {
      Effect.runFork(
        this.host.resend.onRetire({
          segment: this.segment,
          localNic: this.device.name,
          peerNicPath: this.peerNicPath,
          pending: this.inFlight.splice(0)
        })
      )
    }
  }

  /** TENT `beginDestroy`: {@link retireNoLock} under the lock, from any fiber. */
  readonly retire: Effect.Effect<void> = Effect.suspend(() =>
    this.lock.withPermits(1)(Effect.sync(() => this.retireNoLock()))
  )

  /**
   * TENT `finishDestroy` (the store's reclaim): true once DESTROYED. Waits while data QPs have work outstanding
   * (at most 30 s); the notify QP is waited for only if the `QpRetirement` seam says so.
   */
  readonly finishDestroy: Effect.Effect<boolean> = Effect.suspend(() => {
    if (this.status === "DESTROYED") return Effect.succeed(true)
    if (this.status !== "DESTROYING") return Effect.succeed(false)
    const young = this.host.clock.unsafeCurrentTimeMillis() - this.destroyStart < FINISH_DESTROY_TIMEOUT_MS
    if (young && this.wrDepth.some((d) => d > 0)) return Effect.succeed(false)
    if (young && this.host.retirement.destroyWaitsForNotifyQp && this.pending > 0) return Effect.succeed(false)
    return this.lock.withPermits(1)(Effect.as(this.deconstructUnlocked, true))
  })

  /** TENT `deconstruct`: retire and destroy at once (shutdown). */
  readonly deconstruct: Effect.Effect<void> = Effect.suspend(() =>
    this.lock.withPermits(1)(
      Effect.zipRight(
        Effect.sync(() => this.retireNoLock()),
        this.deconstructUnlocked
      )
    )
  )

  private readonly deconstructUnlocked: Effect.Effect<void> = Effect.suspend(() => {
    if (this.status === "DESTROYED") return Effect.void
    this.host.cancelSlices(this)
    this.peerQpNums = []
    const notifyQp = this.notifyQp
    if (notifyQp !== undefined) this.host.unpublishNotifyQp(notifyQp.qpNum, this)
    for (const qp of this.dataQps) this.host.unregisterDataQp(qp)
    this.connected = false
    this.status = "DESTROYED"
    const scope = this.scope
    this.scope = undefined
    this.notifyQp = undefined
    this.sendMr = undefined
    this.recvMr = undefined
    this.sendBuf = undefined
    this.recvBuf = undefined
    return scope === undefined ? Effect.void : Scope_.close(scope, Exit.void)
  })
}

const toErr = (qp: QueuePair): void => {
  if (qp.state === QpState.ERR || qp.state === QpState.RESET) return
  Effect.runSync(Effect.ignore(qp.modifyQp({ qpState: QpState.ERR }, QpAttrMask.STATE)))
}
