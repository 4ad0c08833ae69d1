/**
 * `RdmaTransport`, as TENT `main`'s (`rdma_transport.cpp`): the opened devices (`RdmaContext`), an endpoint store per
 * device, the transport-wide QP-number table of notify QPs and its poller (`NotifyPoller`), the data QP table and
 * its pollers, the reclaim of retired endpoints, the bootstrap acceptor, and `sendNotification` over the first
 * enabled local device to the peer's NIC 0. A service with a scoped Layer; `undefined` when RDMA is disabled or there
 * is no device.
 */

import type { BootstrapDesc, InvalidEntry, Notification, TransportFailure } from "@tent/rpc"
import { BootstrapRejected, DescriptorCache, NeedsRefreshCache, NotificationTooLarge } from "@tent/rpc"
import { DeviceNotFound, type QueuePair, RdmaError, Verbs } from "@tent/verbs"
import { Context, Duration, Effect, Either, ExecutionStrategy, Layer, Queue, Scope } from "effect"
import { Dedup, type Stamp } from "../../Dedup.js"
import { EngineConfig } from "../../EngineConfig.js"
import { EndpointUnavailable } from "../../Errors.js"
import * as Metrics from "../../Metrics.js"
import { NotifyQpParams } from "../../NotifyQpParams.js"
import { PeerHealthPolicy } from "../../PeerHealth.js"
import { QpRetirement } from "../../QpRetirement.js"
import { Resend } from "../../Resend.js"
import { endpointBoundsConfig } from "../config/guards.js"
import { EngineDelivery } from "../Delivery.js"
import { HELD_TTL_MS } from "../HeldRecord.js"
import { EngineReceipts } from "../Ledger.js"
import { LEDGER_FULL, NO_SLOT, NOTIFY_SLOT_BYTES, TOO_LARGE } from "../NotifyChannel.js"
import { parked } from "../Parked.js"
import { EngineAgent, EngineIdentity, ResendQueue } from "../Services.js"
import { BootstrapGuard } from "./BootstrapGuard.js"
import { Markers, onImmRecv, TransferMarks } from "./Immediates.js"
import { nicPath, parseNicPath, rdmaServerName } from "./NicPath.js"
import * as NotifyPoller from "./NotifyPoller.js"
import { type DataCompletionSink, openDevices, pollData, type RdmaDevice, selectDevices } from "./RdmaContext.js"
import { type EndpointHost, RdmaEndpoint } from "./RdmaEndpoint.js"

/** How often retired endpoints are reclaimed (TENT's monitor thread: ≥ 1 s). */
export const RECLAIM_INTERVAL = Duration.seconds(1)

/** The peer a notification or slice goes to, resolved from its descriptor. */
export interface PeerTarget {
  readonly server: string
  readonly address: string
}

/** Errors of `sendNotification` on this transport. */
export type RdmaNotifyError =
  | DeviceNotFound
  | RdmaError
  | TransportFailure
  | BootstrapRejected
  | InvalidEntry
  | NotificationTooLarge
  | EndpointUnavailable

/** The RDMA transport. */
export interface RdmaTransportShape {
  readonly kind: "rdma"
  /** The server part of this engine's NIC paths: `transports/rdma/bind_address`'s, or the segment name. */
  readonly serverName: string
  readonly devices: ReadonlyArray<RdmaDevice>
  readonly counters: NotifyPoller.NotifyCounters
  readonly poller: NotifyPoller.NotifyPoller
  /** Stops (or resumes) polling the data CQs: their completions wait in the CQs meanwhile. */
  readonly pauseDataPollers: (paused: boolean) => void
  /** TENT `RdmaTransport::sendNotification`: first enabled device → the peer's NIC 0. */
  readonly sendNotification: (segment: string, n: Notification) => Effect.Effect<void, RdmaNotifyError>
  /**
   * `sendNotification`'s fast path, synchronous: posts `n` on the endpoint `segment`'s notifications went to last when
   * it is still READY, connected and on the first enabled device, and returns 0; {@link TOO_LARGE} when the post found
   * `n` larger than a slot (`sendNotification` fails with {@link tooLarge}: the same stamp was drawn); {@link FULL_PATH}
   * when nothing was sent (no such endpoint, no free slot, a post the QP refused: as before, the full path posts
   * again), and `sendNotification` takes its full path.
   * `sendNotification(segment, n)` is exactly: this, then `Effect.void`, that failure or {@link sendFull}.
   */
  readonly tryPost: (segment: string, n: Notification) => number
  /** The largest `name.length + msg.length` a notify slot carries (`transports/rdma/notify/slot_bytes`). */
  readonly slotPayload: number
  /** The error of a notification larger than a notify slot (what `sendNotification` fails with on {@link TOO_LARGE}). */
  readonly tooLarge: (n: Notification, segment?: string) => NotificationTooLarge
  /**
   * `sendNotification`'s full path (what it runs on {@link FULL_PATH}): the descriptor from the cache, the endpoint
   * from the store (bootstrapped if needed), a wait for a free slot, the post.
   */
  readonly sendFull: (segment: string, n: Notification) => Effect.Effect<void, RdmaNotifyError>
  /**
   * {@link sendFull}, giving up after `ms` (delivery receipts: the ledger then takes the notification): the slot wait on
   * a READY endpoint bounded by the deadline, anything else under a timeout.
   */
  readonly sendWithin: (segment: string, n: Notification, ms: number) => Effect.Effect<void, unknown>
  /** Posts `n` on the endpoint from `device` to the peer's `peerNic` (the resend's walk over NIC pairs). */
  readonly sendVia: (
    device: RdmaDevice,
    segment: string,
    peerNic: string,
    n: Notification,
    stamp: Stamp | undefined
  ) => Effect.Effect<void, RdmaNotifyError>
  /**
   * The control-plane `Bootstrap` handler (TENT `onSetupRdmaConnections`), from a connection authenticated as the
   * segment `peer` (undefined: not authenticated), through the acceptor's guards ({@link BootstrapGuard}).
   */
  readonly onBootstrap: (desc: BootstrapDesc, peer?: string) => Effect.Effect<BootstrapDesc, BootstrapRejected>
  /** The acceptor's guards: identity and the bounds on accepted endpoints, with what they refused. */
  readonly guard: BootstrapGuard
  /** The endpoint from `device` to the peer's `peerNic`, bootstrapped if needed (TENT `getEndpoint`). */
  readonly getEndpoint: (
    device: RdmaDevice,
    target: PeerTarget,
    peerNic: string
  ) => Effect.Effect<RdmaEndpoint, RdmaError | TransportFailure | BootstrapRejected | EndpointUnavailable>
  /** TENT `resetConnection`: retire (counted under `cause`, default `reset`) and hand to the store's reclaim. */
  readonly resetConnection: (ep: RdmaEndpoint, cause?: Metrics.RetireCause) => Effect.Effect<void>
  /**
   * The highest `notify_proto` the peer `segment` advertised in a bootstrap with one of this transport's endpoints
   * (0 when none: a peer never bootstrapped with, or one that predates the field).
   */
  readonly peerProto: (segment: string) => number
  /** The receives for immediates a READY endpoint's peer `segment` keeps posted (`notify_imm_recvs`; 0: none). */
  readonly peerImm: (segment: string) => number
  /** The receiver's immediates and held records (transfer-bound notifications on the data QPs). */
  readonly marks: TransferMarks
  /** The sender's held records and markers (one for the transport: the slice engine posts them). */
  readonly markers: Markers
  /** Installs the slice engine's completion handler and its slice canceller. */
  readonly setDataPath: (sink: DataCompletionSink, cancel: (ep: RdmaEndpoint) => void) => void
}

/** {@link RdmaTransportShape.tryPost}'s result when `n` does not fit a slot (as `postNotification`'s). */
export { TOO_LARGE }

/** {@link RdmaTransportShape.tryPost}'s result when nothing was sent: take `sendNotification`'s full path. */
export const FULL_PATH = NO_SLOT

/** What a send fails with when `segment`'s ledger holds `notification/max_unreceipted` already (nothing accepted). */
export const ledgerFull = (segment: string, peerNicPath: string): EndpointUnavailable =>
  new EndpointUnavailable({
    segment,
    peerNicPath,
    message: `notification/max_unreceipted notifications to ${segment} await a receipt already: not accepted`
  })

/** The RDMA transport service (`undefined`: not installed). */
export class RdmaTransport extends Context.Tag("@tent/core/internal/RdmaTransport")<
  RdmaTransport,
  RdmaTransportShape | undefined
>() {}

/** Opens the devices and starts the pollers; `undefined` when RDMA is disabled or there is no device. */
export const make = Effect.gen(function* () {
  const settings = yield* EngineConfig
  if (!settings.rdmaEnable) return undefined
  const verbs = yield* Verbs
  const names = yield* selectDevices(verbs, settings)
  if (names.length === 0) return undefined
  const agent = yield* EngineAgent
  const cache = yield* DescriptorCache.DescriptorCache
  const { segmentName } = yield* EngineIdentity
  const delivery = yield* EngineDelivery
  const retirement = yield* QpRetirement
  const dedup = yield* Dedup
  const peerHealth = yield* PeerHealthPolicy
  const resend = yield* Resend
  const retiring = yield* ResendQueue
  const notifyParams = yield* NotifyQpParams
  const receipts = yield* EngineReceipts

  const guard = new BootstrapGuard(
    yield* endpointBoundsConfig,
    BootstrapGuard.reservation(settings.notify, settings.numLanes)
  )
  const devices = yield* openDevices(verbs, settings, names)
  const counters = NotifyPoller.makeCounters()
  /** Immediates and held records from peers (transfer-bound notifications on the data QPs). */
  const marks = new TransferMarks()
  const markers = new Markers(marks.counters)
  /** TENT `notify_qp_to_endpoint_`: one table per transport, keyed by QP number only. */
  const notifyTable = new Map<number, RdmaEndpoint>()
  /** Data QPs by device index, then QP number (QP numbers are per device). */
  const dataByNum: Array<Map<number, { ep: RdmaEndpoint; lane: number }>> = devices.map(() => new Map())
  let sink: DataCompletionSink = () => {}
  let cancel: (ep: RdmaEndpoint) => void = () => {}
  // Endpoints live in a scope of their own: closed after every endpoint was deconstructed (finalizer below).
  const endpointScope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
  yield* Effect.addFinalizer(() => Effect.forEach(devices, (d) => d.store.clear, { discard: true }))

  const serverName = rdmaServerName(settings.rdmaBindAddress, segmentName, settings.rpcServerPort)
  if (serverName !== segmentName) {
    yield* Effect.logDebug(`RDMA NIC paths use ${serverName} (transports/rdma/bind_address; segment ${segmentName})`)
  }
  if (settings.qpPools.length > 0) {
    yield* Effect.logWarning(
      `transports/rdma/endpoint/qp_pools (${settings.qpPools.map((p) => p.name).join(", ")}) is accepted and not ` +
        "applied: every endpoint keeps num_lanes data QPs at the global service_level and traffic_class"
    )
  }
  const host: EndpointHost = {
    localServer: serverName,
    params: settings.endpoint,
    numLanes: settings.numLanes,
    retirement,
    notifyParams,
    policies: { dedup, resend, peerHealth, receipts },
    notifySlots: settings.notify,
    immRecvs: settings.notify.transferBound === "immediate" ? (settings.notify.immRecvs ?? 0) : 0,
    publishNotifyQp: (qpNum, ep) => void notifyTable.set(qpNum, ep),
    unpublishNotifyQp: (qpNum, ep) => {
      if (notifyTable.get(qpNum) === ep) notifyTable.delete(qpNum)
    },
    registerDataQp: (qp, ep, lane) => void dataByNum[(ep.device as RdmaDevice).index]?.set(qp.qpNum, { ep, lane }),
    unregisterDataQp: (qp, ep) => {
      const table = dataByNum[(ep.device as RdmaDevice).index]
      if (table?.get(qp.qpNum)?.ep === ep) table.delete(qp.qpNum)
    },
    cancelSlices: (ep) => cancel(ep),
    retiring: (channel) => void Queue.unsafeOffer(retiring, channel),
    closedInFlight: (sends) => {
      counters.closedInFlight += sends
    },
    scope: endpointScope,
    clock: yield* Effect.clock
  }

  const poller = NotifyPoller.start({
    cqs: devices.map((d) => d.notifyCq),
    shared: devices.map((d) => d.sharedRecv),
    table: notifyTable,
    delivery,
    dedup,
    retirement,
    counters,
    receipts,
    marks
  })
  yield* Effect.addFinalizer(() => Effect.sync(() => poller.stop()))
  // Before the poller stops and the endpoints close: the receipts this engine still owes go now, and get a moment to
  // leave (a process that exits right after admitting a notification still receipts it).
  yield* Effect.addFinalizer(() =>
    Effect.gen(function* () {
      const eps = devices.flatMap((d) => Array.from(d.store.active.values()))
      if (!eps.map((ep) => ep.notify.flushOwedAck()).some((x) => x)) return
      const deadline = Date.now() + 200
      while (Date.now() < deadline && eps.some((ep) => ep.notify.pending > 0)) yield* Effect.sleep(2)
    })
  )
  const onImm: DataCompletionSink = (ep, lane, wc) =>
    void onImmRecv(marks, ep.segment, ep.dataQps[lane] as QueuePair, wc)
  const dataPollers = devices.map((d) =>
    pollData(d, dataByNum[d.index] as Map<number, { ep: RdmaEndpoint; lane: number }>, () => sink, onImm)
  )
  yield* Effect.forkScoped(
    Effect.forever(
      Effect.zipRight(
        Effect.sleep(HELD_TTL_MS / 10),
        Effect.sync(() => marks.sweep())
      )
    )
  )

  // Reclaim retired endpoints (TENT's monitor thread, every ≥ 1 s) while any waits; parked while none does.
  const reclaim = parked(
    RECLAIM_INTERVAL,
    Effect.forEach(devices, (d) => d.store.reclaim, { discard: true }),
    () => devices.every((d) => d.store.waiting.size === 0)
  )
  for (const d of devices) d.store.onWaiting = reclaim.wake
  yield* Effect.forkScoped(reclaim.loop)

  const getEndpoint: RdmaTransportShape["getEndpoint"] = (device, target, peerNic) =>
    Effect.gen(function* () {
      const key = nicPath(target.server, peerNic)
      const ep = device.store.getOrInsert(key, () => new RdmaEndpoint(host, device, key, target.server))
      // Whose health the slot wait consults (an endpoint the peer opened learns it here, at its first send).
      ep.notify.peerAddress = target.address
      yield* ep.lock.withPermits(1)(ep.construct)
      yield* ep.connect((desc) => agent.bootstrap(target.address, desc))
      return ep
    })

  const resetConnection = (ep: RdmaEndpoint, cause: Metrics.RetireCause = "reset"): Effect.Effect<void> =>
    Effect.zipRight(
      cause === "reset" ? ep.retire : ep.retireFor(cause),
      Effect.sync(() => (ep.device as RdmaDevice).store.remove(ep))
    )

  const onBootstrap = (desc: BootstrapDesc, peer?: string): Effect.Effect<BootstrapDesc, BootstrapRejected> =>
    Effect.withSpan(acceptEndpoint(desc, peer), "tent.endpoint.accept", {
      attributes: { peer: desc.local_nic_path, local: desc.peer_nic_path }
    })

  const acceptEndpoint = (
    desc: BootstrapDesc,
    peer: string | undefined
  ): Effect.Effect<BootstrapDesc, BootstrapRejected> =>
    Effect.gen(function* () {
      const local = parseNicPath(desc.peer_nic_path)
      const remote = parseNicPath(desc.local_nic_path)
      if (local === undefined || remote === undefined) {
        return yield* new BootstrapRejected({
          message: `malformed NIC paths ${desc.local_nic_path} → ${desc.peer_nic_path}`
        })
      }
      const wrongPeer = guard.identity(desc.local_nic_path, remote.server, peer)
      if (wrongPeer !== undefined) return yield* wrongPeer
      const device = devices.find((d) => d.name === local.nic)
      if (device === undefined) return yield* new BootstrapRejected({ message: `NOT_READY: no device ${local.nic}` })
      const over = guard.bounded(device.store, desc.local_nic_path, remote.server)
      if (over !== undefined) return yield* over
      const ep = device.store.getOrInsert(desc.local_nic_path, () => {
        const made = new RdmaEndpoint(host, device, desc.local_nic_path, remote.server)
        guard.record(made)
        return made
      })
      yield* ep.lock
        .withPermits(1)(ep.construct)
        .pipe(Effect.mapError((e) => new BootstrapRejected({ message: e.message })))
      return yield* ep.accept(desc).pipe(
        Effect.catchTag("RdmaError", (e) => Effect.fail(new BootstrapRejected({ message: e.message }))),
        Effect.tapError(() => Effect.sync(() => (ep.status === "DESTROYING" ? device.store.remove(ep) : undefined)))
      )
    })

  // A slot smaller than TENT's (`transports/rdma/notify/slot_bytes`, this side's or the peer's) carries that much less.
  const payloadOf = (frameBytes: number) => dedup.maxPayload - (NOTIFY_SLOT_BYTES - frameBytes)
  const slotPayload = payloadOf(settings.notify.slotBytes)
  const tooLargeOn = (n: Notification, ep: RdmaEndpoint | undefined) =>
    new NotificationTooLarge({
      size: n.name.length + n.msg.length,
      max: ep === undefined ? slotPayload : payloadOf(ep.notify.frameBytes)
    })
  const tooLarge = (n: Notification, segment?: string) =>
    tooLargeOn(n, segment === undefined ? undefined : lastEndpoint.get(segment))

  /** Posts on `ep`, waiting for a window unit while the channel stays connected. */
  const post = (
    ep: RdmaEndpoint,
    n: Notification,
    stamp?: Stamp,
    deadline?: number
  ): Effect.Effect<void, RdmaNotifyError> =>
    Effect.suspend(() => {
      const rc = ep.notify.postNotification(n, stamp)
      if (rc === 0) {
        counters.sent++
        Metrics.sent.rdma.update(1, ep.segment)
        return Effect.void
      }
      if (rc === TOO_LARGE) {
        return Effect.fail(tooLargeOn(n, ep))
      }
      if (rc === LEDGER_FULL) return Effect.fail(ledgerFull(ep.segment, ep.peerNicPath))
      if (rc === NO_SLOT) {
        if (!ep.connected) {
          return Effect.fail(
            new EndpointUnavailable({
              segment: ep.segment,
              peerNicPath: ep.peerNicPath,
              message: "Notification QP not connected"
            })
          )
        }
        const wait = deadline === undefined ? ep.notify.awaitSlot : ep.notify.awaitSlotBy(deadline)
        return Effect.zipRight(wait, post(ep, n, stamp, deadline))
      }
      return Effect.fail(new RdmaError({ op: "ibv_post_send", errno: rc, message: "posting a notification failed" }))
    })

  const targetOf = (segment: string) =>
    cache.withSegment(segment, (desc) => {
      receipts.learn(segment, desc.notify_incarnation)
      const nic = desc.devices[0]?.name
      return nic === undefined || desc.rpc_server_addr === "" || desc.name === ""
        ? Effect.fail(new NeedsRefreshCache({ segment, message: "segment has no RDMA device or RPC address" }))
        : Effect.succeed({ target: { server: desc.rdma_server_name || desc.name, address: desc.rpc_server_addr }, nic })
    })

  const sendVia: RdmaTransportShape["sendVia"] = (device, segment, peerNic, n, stamp) =>
    Effect.gen(function* () {
      const { target } = yield* targetOf(segment)
      const ep = yield* getEndpoint(device, target, peerNic)
      yield* Effect.zipRight(ep.notify.awaitSlot, post(ep, n, stamp))
    }) as Effect.Effect<void, RdmaNotifyError>

  // The endpoint each segment's notifications went to last. While it stays READY and the first enabled device is
  // still its device, a notification is posted at once: the same outcome as the full path below (descriptor from
  // the cache, the endpoint from the store, a free slot), without its Effects. Anything else takes the full path.
  const lastEndpoint = new Map<string, RdmaEndpoint>()
  /** Segments whose notify channel was retired to be rebuilt, until a new endpoint to them is READY. */
  const rebuilding = new Set<string>()

  const sendNotificationFull = (segment: string, n: Notification): Effect.Effect<void, RdmaNotifyError> =>
    Effect.gen(function* () {
      const device = devices.find((d) => d.enabled)
      if (device === undefined) {
        return yield* new DeviceNotFound({
          available: devices.map((d) => d.name),
          message: "no enabled RDMA device for notifications"
        })
      }
      const { nic, target } = yield* targetOf(segment)
      let ep = yield* getEndpoint(device, target, nic)
      // The RDMA path comes back: a READY endpoint whose notify channel was disabled (its QP failed) is retired and a
      // new one bootstrapped to the same peer — once the peer answers again (the bootstrap is the test) — instead of
      // carrying every later notification over the control plane. Only towards a peer that offers receipts: its
      // ledger holds what the old channel lost.
      if (ep.status === "READY" && !ep.connected && receipts.capable(ep.notify.peerProto)) {
        yield* resetConnection(ep, "reconnect")
        counters.rebuilt++
        rebuilding.add(segment)
        // (The peer may refuse this first bootstrap while it retires its side of the old endpoint: then this send
        // fails over to the ledger and the next one bootstraps again.)
        ep = yield* getEndpoint(device, target, nic)
      }
      if (rebuilding.delete(segment)) {
        // What the old channel had in flight went with its QP, or reached the peer with its receipt lost: what the
        // ledger holds without a receipt goes first on the new channel, at once, rather than one control-plane
        // `Notify` each after `receipt_resend_ms` (the peer's ack table drops the copies it has). One the channel
        // refuses goes back to the ledger's worker (at its next tick, over the control plane): one larger than a
        // slot is skipped; after any other failure the channel is not tried again and every entry left goes back
        // too (each was marked sent when taken: kept so, it would wait a whole `receipt_resend_ms`).
        let refused = false
        for (const e of receipts.takeForRebuild(segment, settings.notify.slots)) {
          if (!refused) {
            const r = yield* Effect.either(post(ep, e.n, e))
            if (Either.isRight(r)) {
              counters.rebuiltResent++
              continue
            }
            refused = r.left._tag !== "NotificationTooLarge"
          }
          receipts.giveBack(e)
        }
      }
      lastEndpoint.set(segment, ep)
      yield* Effect.zipRight(ep.notify.awaitSlot, post(ep, n))
    }) as Effect.Effect<void, RdmaNotifyError>

  const tryPost = (segment: string, n: Notification): number => {
    const ep = lastEndpoint.get(segment)
    if (ep === undefined || ep.status !== "READY" || !ep.connected || ep.device !== devices.find((d) => d.enabled)) {
      return FULL_PATH
    }
    const rc = ep.notify.postNotification(n)
    if (rc === 0) {
      counters.sent++
      Metrics.sent.rdma.update(1, segment)
      void (ep.device as RdmaDevice).store.get(ep.peerNicPath) // a use, for SIEVE (as the full path's lookup)
      return 0
    }
    return rc === TOO_LARGE ? TOO_LARGE : FULL_PATH
  }

  // `sendFull`, giving up after `ms`: on the endpoint used last, while it is READY, with a slot wait bounded by the
  // deadline (one timer, as any slot wait has); otherwise the full path under a timeout.
  const sendWithin = (segment: string, n: Notification, ms: number): Effect.Effect<void, unknown> =>
    Effect.suspend(() => {
      const ep = lastEndpoint.get(segment)
      if (ep !== undefined && ep.status === "READY" && ep.connected && ep.device === devices.find((d) => d.enabled)) {
        return post(ep, n, undefined, performance.now() + ms)
      }
      return Effect.timeoutFail(sendNotificationFull(segment, n), {
        duration: ms,
        onTimeout: () => new EndpointUnavailable({ segment, peerNicPath: "", message: `not sent within ${ms} ms` })
      })
    })

  const sendNotification = (segment: string, n: Notification): Effect.Effect<void, RdmaNotifyError> =>
    Effect.suspend(() => {
      const rc = tryPost(segment, n)
      return rc === 0
        ? Effect.void
        : rc === TOO_LARGE
          ? Effect.fail(tooLarge(n, segment))
          : sendNotificationFull(segment, n)
    })

  /** The most `f` says of any of `segment`'s endpoints (0 with none): what its bootstraps advertised. */
  const peerMost = (segment: string, f: (ep: RdmaEndpoint) => number): number => {
    let most = 0
    for (const d of devices)
      for (const ep of d.store.active.values()) if (ep.segment === segment) most = Math.max(most, f(ep))
    return most
  }

  return {
    kind: "rdma",
    serverName,
    devices,
    counters,
    poller,
    pauseDataPollers: (paused) => {
      for (const pause of dataPollers) pause(paused)
    },
    sendNotification,
    tryPost,
    tooLarge,
    slotPayload,
    sendFull: sendNotificationFull,
    sendWithin,
    sendVia,
    onBootstrap,
    guard,
    getEndpoint,
    resetConnection,
    peerProto: (segment) => peerMost(segment, (ep) => ep.notify.peerProto),
    peerImm: (segment) => peerMost(segment, (ep) => (ep.status === "READY" ? ep.peerImmRecvs : 0)),
    marks,
    markers,
    setDataPath: (s, c) => {
      sink = s
      cancel = c
    }
  } satisfies RdmaTransportShape
})

/** The RDMA transport as a scoped Layer. */
export const layer = Layer.scoped(RdmaTransport, make)
