/**
 * `RdmaEndpoint`: one per (local device, peer device), as TENT's `RdmaEndPoint`: `num_lanes` data RC QPs and one
 * notify RC QP with its {@link NotifyChannel} (its slots sized by `transports/rdma/notify/*`; receives posted once the
 * notify QP is connected).
 *
 * States are TENT's: `UNINIT → HANDSHAKING` (construct) `→ READY` (QPs connected) `→ DESTROYING` (retire)
 * `→ DESTROYED` (deconstruct); an endpoint is never reused. `retire`, `finishDestroy` and `deconstruct` may be
 * called from any fiber (the data worker after slice errors, the RPC handler when a peer re-bootstraps, eviction);
 * the endpoint's `lock` plays TENT's `lock_`. Its QPs and slots live in a scope of their own, a child of the
 * transport's, closed by `deconstruct`.
 *
 * @since 0.1.0
 */
import type { BootstrapDesc } from "@tent/rpc"
import { BootstrapRejected } from "@tent/rpc"
import {
  type CompletionQueue,
  Errno,
  type Mtu,
  type ProtectionDomain,
  QpAttrMask,
  QpState,
  QpType,
  type QueuePair,
  Rc,
  RdmaError
} from "@tent/verbs"
import { type Clock, Deferred, Effect, ExecutionStrategy, Exit, FiberId, Scope } from "effect"
import type { EndpointParams } from "../../EngineConfig.js"
import { EndpointUnavailable } from "../../Errors.js"
import * as Metrics from "../../Metrics.js"
import type { NotifyQpParamsShape } from "../../NotifyQpParams.js"
import type { QpRetirementShape } from "../../QpRetirement.js"
import type { RetiringChannel } from "../../Resend.js"
import { parseIncarnation } from "../Ledger.js"
import {
  NOTIFY_SLOT_BYTES,
  NotifyChannel,
  type NotifyChannelPolicies,
  type NotifySlotSettings,
  TENT_SLOTS
} from "../NotifyChannel.js"
import type { SharedRecv } from "../SharedRecv.js"
import { postImmRecvs } from "./DataRecvs.js"
import { dataQpParams, nicPath, notifyQpParams, parseGidText, toErr } from "./NicPath.js"
import { connectQp, WireSecrets } from "./WireSecrets.js"

/** TENT's `kFinishDestroyTimeoutSec`: after this, destroy proceeds with work requests still outstanding. */
export const FINISH_DESTROY_TIMEOUT_MS = 30_000

/** TENT's `EndPointStatus`. */
export type EndpointStatus = "UNINIT" | "HANDSHAKING" | "READY" | "DESTROYING" | "DESTROYED"

/** What an endpoint needs from its device. */
export interface EndpointDevice {
  readonly name: string
  readonly pd: ProtectionDomain
  readonly notifyCq: CompletionQueue
  readonly dataCqs: ReadonlyArray<CompletionQueue>
  /** The GID as TENT sends it: 16 bytes `%02x` joined by `:`. */
  readonly gidText: string
  readonly gid: Uint8Array
  readonly sgidIndex: number
  readonly activeMtu: Mtu
  /** The port the QPs use (`device/port`: link layer, LID) and the device's limits; absent: port 1, RoCE, LID 0. */
  readonly limits?: Rc.Limits
  /** The device's shared notify receive ring (`notify/shared_recv`): its notify QPs take their receives from it. */
  readonly sharedRecv?: SharedRecv | undefined
}

/** What an endpoint needs from its transport. */
export interface EndpointHost {
  /** This engine's server name (its segment name). */
  readonly localServer: string
  readonly params: EndpointParams
  readonly numLanes: number
  readonly retirement: QpRetirementShape
  readonly notifyParams: NotifyQpParamsShape
  /** The seams the notify channel consults (framing, pending table, slot wait). */
  readonly policies: NotifyChannelPolicies
  /** How notify slots are allocated (`transports/rdma/notify/*`); absent: TENT's 256 × 64 KiB each way, at once. */
  readonly notifySlots?: NotifySlotSettings
  /** Receives kept posted per data QP for the peers' immediates (`notify_imm_recvs`); 0 or absent: none. */
  readonly immRecvs?: number
  /** Publish / unpublish the notify QP in the transport's QP-number table. */
  readonly publishNotifyQp: (qpNum: number, ep: RdmaEndpoint) => void
  readonly unpublishNotifyQp: (qpNum: number, ep: RdmaEndpoint) => void
  /** Data QPs, for the data pollers. */
  readonly registerDataQp: (qp: QueuePair, ep: RdmaEndpoint, lane: number) => void
  readonly unregisterDataQp: (qp: QueuePair, ep: RdmaEndpoint) => void
  /** Cancels the endpoint's in-flight slices (deconstruct). */
  readonly cancelSlices: (ep: RdmaEndpoint) => void
  /** Hands a channel that went away with sends pending to the engine's resend queue. */
  readonly retiring: (channel: RetiringChannel) => void
  /** Counts the sends a channel had in flight when it was retired or disabled (`closedInFlight`). */
  readonly closedInFlight: (sends: number) => void
  /** The scope endpoints' resources are opened in (a child scope per endpoint). */
  readonly scope: Scope.Scope
  /** The clock retirement is timed on (the transport's Effect `Clock`, so `TestClock` can move it). */
  readonly clock: Clock.Clock
}

/** One endpoint: data QPs and a notify QP towards one peer device. */
export class RdmaEndpoint {
  status: EndpointStatus = "UNINIT"
  /** TENT's `lock_`: construct, connect, accept and destroy take it. */
  readonly lock = Effect.unsafeMakeSemaphore(1)
  dataQps: Array<QueuePair> = []
  /** Outstanding data work requests per lane (TENT `wr_depth_list_`). */
  readonly wrDepth: Array<number> = []
  peerQpNums: ReadonlyArray<number> = []
  /** The receives the peer keeps posted per data QP for immediates (its `notify_imm_recvs`); 0: it takes none. */
  peerImmRecvs = 0
  /** This side's initial PSNs and its QPs' token, sent in its descriptor. */
  private readonly secrets = new WireSecrets()
  /** The notify QP's send and receive rings. */
  readonly notify: NotifyChannel
  /** When `retire` ran (ms, on the host's clock). */
  destroyStart = 0
  private scope: Scope.CloseableScope | undefined
  private connecting: Deferred.Deferred<void, unknown> | undefined

  /**
   * The work requests each data QP was created to hold: `transports/rdma/endpoint/max_qp_wr`, at most the device's
   * `max_qp_wr` (what `Rc.createQp` clamped it to). Fixed at construction: read for every slice a worker posts.
   */
  readonly laneDepth: number
  /** Receives this side keeps posted per data QP for immediates (`imm_recvs`, at most the lane depth); 0: none. */
  readonly immRecvs: number

  constructor(
    readonly host: EndpointHost,
    readonly device: EndpointDevice,
    /** The peer's NIC path, `"<server>@<nic>"`: the key in the device's endpoint store. */
    readonly peerNicPath: string,
    /** The peer's segment name (its server part). */
    readonly segment: string
  ) {
    this.notify = new NotifyChannel(
      host.policies,
      (message) => this.unavailable(message),
      host.notifySlots ?? TENT_SLOTS
    )
    this.notify.segment = segment
    const limit = device.limits?.device?.maxQpWr
    this.laneDepth = limit === undefined ? host.params.maxQpWr : Math.min(host.params.maxQpWr, limit)
    this.immRecvs = Math.min(host.immRecvs ?? 0, this.laneDepth)
  }

  /** This side's NIC path. */
  get localNicPath(): string {
    return nicPath(this.host.localServer, this.device.name)
  }

  /** The notify QP's number, 0 without one (TENT `notifyQpNum()`). */
  get notifyQpNum(): number {
    return this.notify.qpNum
  }

  /** Notify sends posted and not successfully completed. */
  get pending(): number {
    return this.notify.pending
  }

  /** TENT `notify_connected_`. */
  get connected(): boolean {
    return this.notify.connected
  }

  /**
   * TENT `construct`: UNINIT → HANDSHAKING; creates the data QPs and the notify QP (taken to INIT at once), the
   * send slots and receive slots. No receive is posted yet.
   */
  readonly construct: Effect.Effect<void, RdmaError> = Effect.suspend(() => {
    if (this.status !== "UNINIT") return Effect.void
    this.status = "HANDSHAKING"
    return Effect.flatMap(Scope.fork(this.host.scope, ExecutionStrategy.sequential), (scope) => {
      this.scope = scope
      return Scope.extend(this.build, scope).pipe(Effect.tapError(() => this.deconstructUnlocked))
    })
  })

  private readonly build: Effect.Effect<void, RdmaError, Scope.Scope> = Effect.gen(this, function* () {
    const p = this.host.params
    for (let i = 0; i < this.host.numLanes; i++) {
      const cq = this.device.dataCqs[i % this.device.dataCqs.length] as CompletionQueue
      // Depths and SGEs clamped to the device's limits; the inline size stepped down to what the device accepts.
      const qp = yield* Rc.createQp(
        this.device.pd,
        {
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
        },
        this.device.limits
      )
      this.dataQps.push(qp)
      this.secrets.addQp()
      this.wrDepth.push(0)
      this.host.registerDataQp(qp, this, i)
    }
    // The notify channel's window is its slots each way (TENT: 256): a device that cannot hold them gets no notify QP.
    const slots = this.notify.slots
    const maxQpWr = this.device.limits?.device?.maxQpWr ?? slots
    if (maxQpWr < slots) {
      return yield* new RdmaError({
        op: "ibv_create_qp",
        errno: Errno.EINVAL,
        message: `the notify QP needs ${slots} work requests each way (transports/rdma/notify/slots); ${this.device.name} allows max_qp_wr ${maxQpWr}`
      })
    }
    const notifyQp = yield* this.device.pd.createQp({
      sendCq: this.device.notifyCq,
      recvCq: this.device.notifyCq,
      qpType: QpType.RC,
      sqSigAll: true,
      cap: { maxSendWr: slots, maxRecvWr: slots, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 },
      ...(this.device.sharedRecv === undefined ? {} : { srq: this.device.sharedRecv.srq })
    })
    const np = notifyQpParams(this.host.notifyParams, this.host.params, this.device)
    yield* notifyQp.modifyQp(
      { qpState: QpState.INIT, pkeyIndex: p.pkeyIndex, portNum: np.portNum, qpAccessFlags: np.accessFlags },
      QpAttrMask.STATE | QpAttrMask.PKEY_INDEX | QpAttrMask.PORT | QpAttrMask.ACCESS_FLAGS
    )
    this.notify.qp = notifyQp
    const shared = this.device.sharedRecv
    this.notify.sharedRecv = shared !== undefined
    // The shared ring may hold one more sender's window while this QP lives (released before the QP is destroyed).
    if (shared !== undefined)
      yield* Effect.acquireRelease(
        Effect.sync(() => shared.attach()),
        () => Effect.sync(() => shared.detach())
      )
    yield* this.notify.allocate(this.device.pd)
  })

  /** The descriptor this side sends (connect) or replies (accept). */
  localDesc(peerNicPath: string): BootstrapDesc {
    const receipts = this.host.policies.receipts
    return {
      local_nic_path: this.localNicPath,
      peer_nic_path: peerNicPath,
      qp_num: this.dataQps.map((q) => q.qpNum),
      local_lid: this.device.limits?.port.lid ?? 0,
      local_gid: this.device.gidText,
      reply_msg: "",
      notify_qp_num: this.notifyQpNum,
      notify_proto: receipts.advertise(this.host.policies.dedup.notifyProto),
      // Only an engine that offers receipts adds its incarnation: otherwise the descriptor is TENT's (or the RFC's).
      ...(receipts.enabled && this.host.policies.dedup.notifyProto >= 1
        ? {
            notify_incarnation: String(receipts.incarnation),
            ...(receipts.settings.carryAcks ? { notify_ack_carry: 1 as const } : {})
          }
        : {}),
      // Sent only when it is not TENT's 64 KiB, so a descriptor with TENT's slots is TENT's descriptor.
      ...(this.notify.slotBytes === NOTIFY_SLOT_BYTES ? {} : { notify_slot_bytes: this.notify.slotBytes }),
      ...(this.immRecvs > 0 ? { notify_imm_recvs: this.immRecvs } : {}),
      ...this.secrets.desc
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
      const receipts = this.host.policies.receipts
      const params = dataQpParams(this.host.params, this.device)
      // Random PSNs and a token (SoftVerbs: checked on every datagram) only with a peer that sent its own (TENT: 0, none).
      const agreed = this.secrets.agree(peer)
      if (typeof agreed === "string") return yield* new BootstrapRejected({ message: agreed })
      for (let i = 0; i < this.dataQps.length; i++) {
        const psn = agreed.data[i] ?? { mine: 0, theirs: 0 }
        const remote = { gid, lid: peer.local_lid, qpNum: peer.qp_num[i] as number, psn: psn.theirs }
        yield* connectQp(this.dataQps[i] as QueuePair, psn.mine, remote, agreed.tokens, params)
      }
      this.peerQpNums = peer.qp_num
      // Immediates need the receipts' stamps (a fallback resends a record unheld, once) on both sides.
      this.peerImmRecvs = receipts.capable(peer.notify_proto) ? (peer.notify_imm_recvs ?? 0) : 0
      for (let i = 0; this.immRecvs > 0 && i < this.dataQps.length; i++) {
        const rc = postImmRecvs(this.dataQps[i] as QueuePair, i, this.immRecvs)
        if (rc !== 0) return yield* new RdmaError({ op: "ibv_post_recv", errno: rc, message: "data QP immediates" })
      }
      this.status = "READY"
      this.notify.peerProto = peer.notify_proto
      this.notify.peerCarriesAcks =
        receipts.settings.carryAcks && receipts.capable(peer.notify_proto) && peer.notify_ack_carry === 1
      this.notify.peerSlotBytes = peer.notify_slot_bytes ?? NOTIFY_SLOT_BYTES
      // The peer's incarnation: a new one ends what the ledger held for the old one (`Undelivered{PeerRestarted}`).
      if (receipts.capable(peer.notify_proto) && peer.notify_incarnation !== undefined) {
        receipts.onIncarnation(this.segment, parseIncarnation(peer.notify_incarnation))
      }
      const notifyQp = this.notify.qp
      if (peer.notify_qp_num !== 0 && notifyQp !== undefined) {
        const remote = { gid, lid: peer.local_lid, qpNum: peer.notify_qp_num, psn: agreed.notify.theirs }
        const np = notifyQpParams(this.host.notifyParams, this.host.params, this.device)
        const reset = notifyQp.modifyQp({ qpState: QpState.RESET }, QpAttrMask.STATE) // TENT's: from RESET
        const ok = yield* Effect.either(
          Effect.zipRight(reset, connectQp(notifyQp, agreed.notify.mine, remote, agreed.tokens, np))
        )
        if (ok._tag === "Right") {
          this.notify.open()
          this.host.publishNotifyQp(notifyQp.qpNum, this)
        } else {
          this.notify.connected = false
        }
      }
    }).pipe(Effect.tapError(() => Effect.sync(() => this.retireNoLock("setup_failed"))))
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
      // In the endpoints' scope, not the caller's fiber: a caller that stops waiting leaves it to finish for the others.
      const shared = attempt.pipe(
        Effect.withSpan("tent.endpoint.connect", {
          attributes: { peer: this.peerNicPath, local: this.device.name, segment: this.segment }
        }),
        Effect.onExit((exit) =>
          Effect.sync(() => {
            this.connecting = undefined
            Deferred.unsafeDone(deferred, Exit.asVoid(exit) as Exit.Exit<void, unknown>)
          })
        )
      )
      return Effect.zipRight(
        Effect.forkIn(shared, this.host.scope),
        Deferred.await(deferred) as Effect.Effect<void, E | RdmaError | BootstrapRejected | EndpointUnavailable>
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
          this.retireNoLock("reconnect")
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
  // Retirement
  // -------------------------------------------------------------------------------------------------------------------

  /** Hands what the notify channel had pending to the engine's resend queue; counts the sends it had in flight. */
  private handOver(cause: RetiringChannel["cause"], inFlight: number): void {
    if (inFlight > 0) this.host.closedInFlight(inFlight)
    // What the ledger holds for the peer goes again at once (over the control plane) rather than at its resend time.
    const receipts = this.host.policies.receipts
    if (receipts.capable(this.notify.peerProto)) receipts.kick(receipts.destination(this.segment))
    const pending = this.notify.close()
    if (pending.length > 0) {
      this.host.retiring({
        segment: this.segment,
        localNic: this.device.name,
        peerNicPath: this.peerNicPath,
        cause,
        pending
      })
    }
  }

  /**
   * A notify completion failed with an error that is not a quiet flush, under the `"disable"` reaction of the
   * `QpRetirement` seam. An RC QP goes to ERR on its first error, so every send in flight is lost with it: the channel
   * is disabled, all its window units are freed and its pending sends handed over (once: the flushes that follow find
   * nothing left). The endpoint stays READY for data.
   */
  disableNotify(): void {
    if (this.notify.connected) Metrics.notifyQpDisable.update(1)
    const inFlight = this.notify.pending
    this.notify.freeAll()
    this.handOver("disable", inFlight)
  }

  /**
   * TENT `beginDestroyNoLock`: READY/HANDSHAKING → DESTROYING. Under the legacy `QpRetirement` the notify QP is
   * unpublished **first**; then the endpoint stops being connected (waiting senders wake and fail) and, if it was
   * READY, every data QP and then the notify QP go to ERR. Synchronous; callers that do not hold the lock use
   * {@link retire}.
   */
  retireNoLock(cause: Metrics.RetireCause = "reset"): void {
    if (this.status === "DESTROYING" || this.status === "DESTROYED") return
    Metrics.retired(cause).update(1, this.segment)
    const previous = this.status
    this.status = "DESTROYING"
    this.destroyStart = this.host.clock.unsafeCurrentTimeMillis()
    const notifyQp = this.notify.qp
    if (notifyQp !== undefined && this.host.retirement.unpublishAtRetire) {
      this.host.unpublishNotifyQp(notifyQp.qpNum, this)
    }
    this.handOver("retire", this.notify.pending)
    if (previous === "READY") {
      for (const qp of this.dataQps) toErr(qp)
      if (notifyQp !== undefined) toErr(notifyQp)
    }
  }

  /** TENT `beginDestroy`: {@link retireNoLock} under the lock, from any fiber. */
  readonly retire: Effect.Effect<void> = Effect.suspend(() =>
    this.lock.withPermits(1)(Effect.sync(() => this.retireNoLock()))
  )

  /** {@link retire}, counted under `cause` (`tent_endpoint_retirements_total`). */
  retireFor(cause: Metrics.RetireCause): Effect.Effect<void> {
    return this.lock.withPermits(1)(Effect.sync(() => this.retireNoLock(cause)))
  }

  /**
   * TENT `finishDestroy` (the store's reclaim): true once DESTROYED. Waits while data QPs have work outstanding
   * (at most 30 s); the notify QP — its sends in flight and its posted receives, until the poller has counted each
   * out — only if the `QpRetirement` seam says so (RFC PR 1).
   */
  readonly finishDestroy: Effect.Effect<boolean> = Effect.suspend(() => {
    if (this.status === "DESTROYED") return Effect.succeed(true)
    if (this.status !== "DESTROYING") return Effect.succeed(false)
    const young = this.host.clock.unsafeCurrentTimeMillis() - this.destroyStart < FINISH_DESTROY_TIMEOUT_MS
    if (young && this.wrDepth.some((d) => d > 0)) return Effect.succeed(false)
    if (
      young &&
      this.host.retirement.destroyWaitsForNotifyQp &&
      (this.notify.pending > 0 || this.notify.recvPosted > 0)
    ) {
      return Effect.succeed(false)
    }
    return this.lock.withPermits(1)(Effect.as(this.deconstructUnlocked, true))
  })

  /** TENT `deconstruct`: retire and destroy at once (shutdown). */
  readonly deconstruct: Effect.Effect<void> = Effect.suspend(() =>
    this.lock.withPermits(1)(
      Effect.zipRight(
        Effect.sync(() => this.retireNoLock("shutdown")),
        this.deconstructUnlocked
      )
    )
  )

  private readonly deconstructUnlocked: Effect.Effect<void> = Effect.suspend(() => {
    if (this.status === "DESTROYED") return Effect.void
    this.host.cancelSlices(this)
    this.peerQpNums = []
    const notifyQp = this.notify.qp
    if (notifyQp !== undefined) this.host.unpublishNotifyQp(notifyQp.qpNum, this)
    for (const qp of this.dataQps) this.host.unregisterDataQp(qp, this)
    this.notify.release()
    this.status = "DESTROYED"
    const scope = this.scope
    this.scope = undefined
    return scope === undefined ? Effect.void : Scope.close(scope, Exit.void)
  })
}
