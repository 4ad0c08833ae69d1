/**
 * The `TransferEngine` service, as TENT `main`'s `TransferEngineImpl`: segments, transfers and notifications over
 * the installed transports (RDMA, then TCP, in TENT's slot order, and the control plane's `Notify`), with the control
 * plane serving `Bootstrap`, `Notify`, `GetSegmentDesc` and `Probe` for this engine.
 *
 * This file is the composition and the facade. `layer` wires the engine's services, each a Layer of its own: the
 * control-plane listener (bound first: its address is the segment name), the plain `RpcAgent` and the engine's agent
 * (the `PeerHealth` seam's decoration of it), the segment registry `metadata_type` selects and the descriptor cache in
 * front of it, the local segment, the delivery point, the RDMA and TCP transports, the resend fiber, the control
 * plane's handlers (served once the transports exist), the publication of this segment's descriptor in a central
 * registry, and `Diagnostics`. `layerSoft` is an engine on SoftVerbs, ready to use. See the core README for the walk of one
 * notification through these files.
 *
 * @since 0.1.0
 */
import { RailHealth } from "@tent/health"
import type { InvalidEntry, Notification, ServerError, TransportFailure } from "@tent/rpc"
import { DescriptorCache, RpcConfig } from "@tent/rpc"
import { AccessFlags, type MemoryRegion, type RdmaError, SoftVerbs, type Verbs } from "@tent/verbs"
import { Context, Deferred, Effect, Exit, Layer, Scope, Stream } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { Dedup } from "./Dedup.js"
import * as Diagnostics from "./Diagnostics.js"
import * as EngineConfig from "./EngineConfig.js"
import { NotificationNotSupported, SegmentNotFound } from "./Errors.js"
import * as Delivery from "./internal/Delivery.js"
import * as Ledger from "./internal/Ledger.js"
import * as LocalSegment from "./internal/LocalSegment.js"
import * as RdmaTransport from "./internal/rdma/RdmaTransport.js"
import * as SegmentPublisher from "./internal/SegmentPublisher.js"
import { EngineAgent, EngineIdentity } from "./internal/Services.js"
import * as TcpTransport from "./internal/TcpTransport.js"
import * as Transfers from "./internal/Transfers.js"
import * as Wiring from "./internal/Wiring.js"
import * as Metrics from "./Metrics.js"
import { NotificationRouting, type NotifySender, type NotifySenders, type QueueKind } from "./NotificationRouting.js"
import { Undelivered } from "./Receipts.js"
import * as Series from "./Series.js"

export type {
  /** A batch's state (TENT `TransferStatusEnum`): status, task counts, bytes moved, why it FAILED.
   * @since 0.1.0 */
  BatchStatus,
  /** What `getTransferStatus` and `waitTransfer` fail with: `BatchNotFound`.
   * @since 0.1.0 */
  StatusError,
  /** What `submitTransfer` fails with: no such batch or segment, a bad request, a failed descriptor lookup.
   * @since 0.1.0 */
  SubmitError,
  /** One transfer request (TENT `Request`): WRITE or READ, local address, target segment and offset, length.
   * @since 0.1.0 */
  TransferRequest
} from "./internal/Transfers.js"

/** TENT `LOCAL_SEGMENT_ID`: the handle of this engine's own segment.
 * @since 0.1.0 */
export const LOCAL_SEGMENT_ID = 0

/** A segment handle from `openSegment` (TENT `SegmentID`).
 * @since 0.1.0 */
export type SegmentHandle = number

/** Memory registered with `registerSegment`: `addr` is what transfer requests use as `source`/`targetOffset`.
 * @since 0.1.0 */
export interface LocalBuffer {
  readonly addr: number
  readonly length: number
  readonly buffer: Buffer
}

/** Everything `sendNotification` can fail with (legacy routing: the first transport's errors, unchanged).
 * @since 0.1.0 */
export type SendNotificationError = RdmaTransport.RdmaNotifyError | NotificationNotSupported | SegmentNotFound

/** The operations of the engine.
 * @since 0.1.0 */
export interface TransferEngineShape {
  /** This engine's segment name (under the peer registry: its control-plane `host:port`). */
  readonly segmentName: string
  /** The control plane's `host:port`. */
  readonly address: string
  /**
   * Registers `buffer` on every device (TENT `registerLocalMemory`); it is published in this segment's descriptor
   * (under `metadata_type` `redis`, the registry's copy is written again).
   */
  readonly registerSegment: (buffer: Buffer) => Effect.Effect<LocalBuffer, RdmaError>
  /** A handle for the segment `name` (empty or this engine's name → {@link LOCAL_SEGMENT_ID}); fetches its descriptor. */
  readonly openSegment: (name: string) => Effect.Effect<SegmentHandle, InvalidEntry | TransportFailure>
  /** A new batch id (TENT `allocateBatch`). */
  readonly allocateBatch: Effect.Effect<number>
  /**
   * Splits `requests` into slices over the rails and posts them; `notification` is sent to each target once the batch
   * completes (under `Series.SubmitHooks`, a failure notice instead once it ends FAILED, to peers that take them).
   */
  readonly submitTransfer: (
    batchId: number,
    requests: ReadonlyArray<Transfers.TransferRequest>,
    notification?: Notification
  ) => Effect.Effect<void, Transfers.SubmitError>
  /** The batch's status; fires its notification hooks when the batch is COMPLETED (TENT `getTransferStatus`). */
  readonly getTransferStatus: (batchId: number) => Effect.Effect<Transfers.BatchStatus, Transfers.StatusError>
  /** Polls the batch until it is COMPLETED or FAILED (TENT `waitTransferCompletion`), at most `timeoutMs`. */
  readonly waitTransfer: (
    batchId: number,
    timeoutMs?: number
  ) => Effect.Effect<Transfers.BatchStatus, Transfers.StatusError>
  /** Forgets a batch. */
  readonly freeBatch: (batchId: number) => Effect.Effect<void>
  /**
   * TENT `sendNotification(target_id, notification)`; the segment by handle or by name. A failure notice (`failure`
   * set) to a peer that did not advertise `notify_proto` 3 fails `NotificationNotSupported`, nothing sent.
   */
  readonly sendNotification: (
    segment: SegmentHandle | string,
    notification: Notification
  ) => Effect.Effect<void, SendNotificationError>
  /**
   * `sendNotification`'s fast path as plain synchronous code, for a caller outside an Effect (a `subscribe` handler
   * answering what it received): true when `notification` was posted on the notify QP at once — the route starts with
   * it and the endpoint last used for `segment` (a name) is READY with a free slot, exactly when `sendNotification`
   * would post it without waiting; false when nothing was sent (no such endpoint yet, no free slot, too large, another
   * route): then call `sendNotification`, which takes the full path. No Effect runs and nothing is allocated for it.
   */
  readonly trySendNotification: (segment: string, notification: Notification) => boolean
  /**
   * TENT `probePeerAliveByID`: a `Probe` to the segment's control plane (its cached descriptor's RPC address).
   * Under the legacy `DescriptorPolicy` a failed probe drops the descriptor, refetches it (from the same peer, under
   * the peer registry) and probes again; under RFC PR 5 it returns the probe's own failure.
   */
  readonly probePeerAlive: (
    segment: SegmentHandle | string
  ) => Effect.Effect<void, TransportFailure | InvalidEntry | SegmentNotFound>
  /**
   * Takes the received notifications (TENT `receiveNotification`: the routing policy's transports). Subscribers
   * (`subscribe`) do not take from these queues: a notification handed to them is queued here as well.
   */
  readonly receiveNotifications: Effect.Effect<ReadonlyArray<Notification>>
  /**
   * Received notifications as a stream (the same queues as `receiveNotifications`: each is delivered once, to whichever
   * of the two takes it first, or to one of several concurrent runs of the stream).
   */
  readonly notifications: Stream.Stream<Notification>
  /**
   * The engine's fast consumer: `handler` is called synchronously at the delivery point, in the notify poller's pass
   * (or the control plane's `Notify` handler), with every notification admitted from then on, once, in arrival order,
   * until the scope closes (after which it is not called again). A broadcast beside the queues: every subscriber, and
   * `notifications` / `receiveNotifications`, each see every notification; a duplicate the `Dedup` seam's window
   * drops reaches none of them. Keep the handler short and do not mutate the notification (every subscriber and the
   * queue share it). A handler that throws is caught, logged (a warning) and counted (`Diagnostics` counters
   * `delivery.handlerErrors`); the other subscribers and the next notifications are unaffected. No Effect runs per
   * notification on this path. The queues fill as before whether or not anyone subscribes, unless a subscriber
   * consumes (`{ consume: true }`): while such a subscription lasts, the notifications admitted are handed to every
   * subscriber and not queued, so `notifications` and `receiveNotifications` do not see them. A program that only
   * subscribes without `consume` must still drain the queues now and then (`receiveNotifications`), or their memory
   * grows.
   */
  readonly subscribe: (
    handler: (n: Notification) => void,
    options?: SubscribeOptions
  ) => Effect.Effect<void, never, Scope.Scope>
  /**
   * Delivery receipts (`Series.Receipts`): every accepted notification to a peer that offers receipts that ended
   * without one — which (`segment`, `name`, `msg`, `stamp`) and why (`reason`) — from the moment the stream runs.
   * Empty when receipts are off.
   */
  readonly undelivered: Stream.Stream<Undelivered>
  /**
   * Calls `handler` synchronously with every `Undelivered` from now on, until the scope closes (a throw is caught).
   */
  readonly onUndelivered: (handler: (u: Undelivered) => void) => Effect.Effect<void, never, Scope.Scope>
  /**
   * `sendNotification`, then waits for the outcome: succeeds when the peer receipted it, fails with `Undelivered`
   * when it will not be (within `notification/delivery_timeout_ms`), or with `sendNotification`'s error when it was
   * not accepted. To a peer that does not offer receipts it fails `Undelivered{reason: "Unconfirmed"}` once sent
   * (sent, but nothing can confirm it). Pass a notification object of its own to each call.
   */
  readonly sendNotificationReceipted: (
    segment: SegmentHandle | string,
    notification: Notification
  ) => Effect.Effect<void, ReceiptedError>
}

/** `sendNotificationReceipted`'s failures: not accepted (`sendNotification`'s), or accepted and not receipted.
 * @since 0.2.0 */
export type ReceiptedError = SendNotificationError | Undelivered

/** How a subscriber takes notifications (`TransferEngineShape.subscribe`).
 * @since 0.1.0 */
export interface SubscribeOptions {
  /**
   * The subscriber takes what it is handed: while the subscription lasts, admitted notifications are not queued for
   * `notifications` / `receiveNotifications` (default false: they are, as well).
   */
  readonly consume?: boolean | undefined
}

/** The transfer engine.
 * @since 0.1.0 */
export class TransferEngine extends Context.Tag("@tent/core/TransferEngine")<TransferEngine, TransferEngineShape>() {}

/** Builds the facade over the engine's services, in the current scope.
 * @since 0.1.0 */
export const make = Effect.gen(function* () {
  const { segmentName, address } = yield* EngineIdentity
  const rdma = yield* RdmaTransport.RdmaTransport
  const tcp = yield* TcpTransport.TcpTransport
  const cache = yield* DescriptorCache.DescriptorCache
  const agent = yield* EngineAgent
  const routing = yield* NotificationRouting
  const dedup = yield* Dedup
  const delivery = yield* Delivery.EngineDelivery
  const regions = yield* LocalSegment.LocalSegment
  const publisher = yield* SegmentPublisher.Publisher
  const receipts = yield* Ledger.EngineReceipts
  const scope = yield* Effect.scope

  const access = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ
  const registerSegment = (buffer: Buffer): Effect.Effect<LocalBuffer, RdmaError> =>
    Effect.gen(function* () {
      const mrs: Array<MemoryRegion> = []
      for (const d of rdma?.devices ?? []) mrs.push(yield* Scope.extend(d.pd.regMr(buffer, access), scope))
      const addr = mrs[0]?.addr ?? LocalSegment.nextVirtualAddr(buffer.length)
      regions.list.push({ buffer, mrs, addr })
      yield* publisher.publish
      return { addr, length: buffer.length, buffer }
    })

  // Segment handles (TENT `openSegment`): 0 is this engine.
  const handles = new Map<number, string>([[LOCAL_SEGMENT_ID, segmentName]])
  const byName = new Map<string, number>([[segmentName, LOCAL_SEGMENT_ID]])
  const openSegment = (name: string): Effect.Effect<SegmentHandle, InvalidEntry | TransportFailure> => {
    if (name === "" || name === segmentName) return Effect.succeed(LOCAL_SEGMENT_ID)
    return Effect.map(cache.get(name), (desc) => {
      // A peer whose descriptor says it offers receipts is sent to through the ledger from the first notification.
      receipts.learn(name, desc.notify_incarnation)
      const known = byName.get(name)
      if (known !== undefined) return known
      const id = handles.size
      handles.set(id, name)
      byName.set(name, id)
      return id
    })
  }
  const segmentOf = (segment: SegmentHandle | string): Effect.Effect<string, SegmentNotFound> => {
    if (typeof segment === "string") return Effect.succeed(segment)
    const name = handles.get(segment)
    return name === undefined
      ? Effect.fail(new SegmentNotFound({ segment: String(segment), message: `no segment with handle ${segment}` }))
      : Effect.succeed(name)
  }

  // A notification leaving over TCP or the control plane carries the `Dedup` seam's stamp when the peer advertised a
  // protocol that understands it (learnt from a bootstrap with one of its NICs); to any other peer it goes as TENT's
  // bytes. (The notify QP stamps in its slot.)
  const stamped = (segment: string, n: Notification): Notification => {
    if (n.stamp !== undefined) return n
    // To a peer with receipts only the ledger stamps (its seqs are dense per destination); a copy that goes outside it
    // is unstamped: delivered at most once, as it is never sent again.
    const proto = rdma?.peerProto(segment) ?? 0
    if (receipts.known(segment) || receipts.capable(proto)) return n
    const stamp = dedup.stamp(proto)
    return stamp === undefined ? n : { ...n, stamp }
  }

  // What the routing seam chooses from, per notification: the installed transports in slot order (RDMA before TCP),
  // and the control plane's `Notify`, available to every engine.
  const senders: NotifySenders = {
    transports: [
      ...(rdma === undefined ? [] : [{ kind: "rdma", send: rdma.sendNotification } as const]),
      ...(tcp === undefined
        ? []
        : [
            {
              kind: "tcp",
              send: (segment: string, n: Notification) => tcp.sendNotification(segment, stamped(segment, n))
            } as const
          ])
    ],
    controlPlane: {
      kind: "rpc",
      send: (segment, n) => TcpTransport.notifyRpc(agent, cache, segment, stamped(segment, n))
    },
    slotPayload: rdma?.slotPayload ?? dedup.maxPayload
  }
  const installed: ReadonlyArray<QueueKind> = senders.transports.map((s) => s.kind as QueueKind)
  const drainOrder = routing.drainOrder(installed)

  // `attempt` is sender i's send (built here unless given), and on a failure the routing's fallback moves on to i + 1.
  // A failure is counted against its transport; a fallback taken is counted (from, to) and traced as a span.
  const sendVia = (
    order: ReadonlyArray<NotifySender>,
    i: number,
    name: string,
    n: Notification,
    given?: Effect.Effect<void, SendNotificationError>
  ): Effect.Effect<void, SendNotificationError> => {
    const s = order[i]
    if (s === undefined) return Effect.fail(new NotificationNotSupported({ message: "Notification not supported" }))
    const attempt = given ?? (s.send(name, n) as Effect.Effect<void, SendNotificationError>)
    return Effect.catchAll(attempt, (e) => {
      Metrics.failed[s.kind].update(1, name)
      const next = order[i + 1]
      if (next === undefined || !routing.fallback(e)) return Effect.fail(e)
      Metrics.fallback(s.kind, next.kind).update(1, name)
      return Effect.withSpan(sendVia(order, i + 1, name, n), "tent.notify.fallback", {
        attributes: { peer: name, from: s.kind, to: next.kind, reason: Wiring.errorTag(e) }
      })
    })
  }
  // A segment given by name: one `Effect.suspend` under every routing while the route starts with the RDMA
  // transport's own send and its endpoint used last is READY: `tryPost` posts there at once (what that send does
  // first). Otherwise the route, as built by `sendVia`, its RDMA attempt being what that send does after its
  // `tryPost`: the too-large failure (a stamp was drawn: the post is not made again), or its full path (nothing was
  // sent). Every other route is `sendVia`'s. A handle is resolved first.
  const rdmaSend = rdma?.sendNotification
  // To a peer that offers receipts, a notification the notify QP cannot take at once is given up to ~1 s (the
  // endpoint, a free slot), then accepted by the ledger, whose worker sends it over the control plane: the call never
  // waits out a control-plane timeout, and the outcome arrives as a receipt or an `Undelivered`.
  const acceptWithin = receipts.settings.acceptWithinMs
  const receipted = (name: string): boolean => receipts.known(name) || receipts.capable(rdma?.peerProto(name) ?? 0)
  const toLedger = (name: string, n: Notification): Effect.Effect<void, SendNotificationError> =>
    Effect.suspend(() =>
      receipts.accept(name, n, false) === undefined ? Effect.fail(RdmaTransport.ledgerFull(name, "")) : Effect.void
    )
  const sendReceipted = (name: string, n: Notification, rc: number): Effect.Effect<void, SendNotificationError> =>
    rdma === undefined || rc === RdmaTransport.TOO_LARGE
      ? toLedger(name, n)
      : Effect.suspend(() => {
          // After a wait that ran out, the calls of the next `acceptWithin` go to the ledger at once (one call then
          // tries the notify QP again): a fault costs a caller at most one wait, not one per call. (A fast failure,
          // such as a bootstrap the peer refused while it retires the old endpoint, does not: the next call retries.)
          const d = receipts.destination(name)
          const t0 = performance.now()
          if (d.stalledUntil > t0) return toLedger(name, n)
          return Effect.catchAll(rdma.sendWithin(name, n, acceptWithin), () => {
            const now = performance.now()
            if (now - t0 >= acceptWithin / 2) d.stalledUntil = now + acceptWithin
            return toLedger(name, n)
          })
        })
  const sendByName = (name: string, n: Notification): Effect.Effect<void, SendNotificationError> =>
    Effect.suspend(() => {
      if (n.failure !== undefined && !transfers.failureCapable(name)) return Effect.fail(noFailureNotices(name))
      const order = routing.route(n, senders)
      if (rdma !== undefined && order[0]?.send === rdmaSend) {
        const rc = rdma.tryPost(name, n)
        if (rc === 0) return Effect.void
        if (n.stamp === undefined && receipted(name)) return sendReceipted(name, n, rc)
        return sendVia(
          order,
          0,
          name,
          n,
          rc === RdmaTransport.TOO_LARGE ? Effect.fail(rdma.tooLarge(n, name)) : rdma.sendFull(name, n)
        )
      }
      // To a peer with receipts, a route that skips the notify QP (larger than a slot): the ledger's worker carries it
      // over the control plane. (A notification that comes with a stamp of the caller's goes as the caller stamped it.)
      if (rdma !== undefined && n.stamp === undefined && receipted(name)) return toLedger(name, n)
      return sendVia(order, 0, name, n)
    })
  const trySendNotification = (name: string, n: Notification): boolean =>
    rdma !== undefined &&
    n.failure === undefined &&
    routing.route(n, senders)[0]?.send === rdmaSend &&
    rdma.tryPost(name, n) === 0
  const sendNotification = (segment: SegmentHandle | string, n: Notification) =>
    typeof segment === "string"
      ? sendByName(segment, n)
      : Effect.flatMap(segmentOf(segment), (name) => sendByName(name, n))

  const drain = (): Array<Notification> => delivery.drain(drainOrder)
  const notifications: Stream.Stream<Notification> = Delivery.stream(delivery, drainOrder)

  const sendNotificationReceipted = (
    segment: SegmentHandle | string,
    n: Notification
  ): Effect.Effect<void, ReceiptedError> =>
    Effect.gen(function* () {
      const name = yield* segmentOf(segment)
      const outcome = yield* Deferred.make<void, Undelivered>()
      receipts.waiters.set(n, (u) => Deferred.unsafeDone(outcome, u === undefined ? Exit.void : Exit.fail(u)))
      const sent = yield* Effect.either(sendNotification(name, n))
      // `accept` takes the waiter when a ledger keeps the notification.
      const kept = !receipts.waiters.has(n)
      receipts.waiters.delete(n)
      if (sent._tag === "Left") return yield* Effect.fail(sent.left)
      if (!kept) {
        return yield* Effect.fail(
          new Undelivered({
            segment: name,
            name: n.name,
            msg: n.msg,
            stamp: undefined,
            reason: "Unconfirmed",
            message: `sent to ${name}, which does not offer receipts: nothing can confirm it`
          })
        )
      }
      return yield* Deferred.await(outcome)
    })

  // A failure notice goes only to a peer that takes them (`notify_proto` 3): any other would read a success.
  const noFailureNotices = (name: string) =>
    new NotificationNotSupported({ message: `failure notices: ${name} did not advertise notify_proto 3, none sent` })
  const transfers = yield* Transfers.make({ segmentOf, sendNotification: (name, n) => sendNotification(name, n) })

  return {
    segmentName,
    address,
    registerSegment,
    openSegment,
    allocateBatch: transfers.allocateBatch,
    submitTransfer: transfers.submitTransfer,
    getTransferStatus: transfers.getTransferStatus,
    waitTransfer: transfers.waitTransfer,
    freeBatch: transfers.freeBatch,
    sendNotification,
    trySendNotification,
    probePeerAlive: (segment) =>
      Effect.flatMap(segmentOf(segment), (name) => TcpTransport.atPeer(cache, name, (address) => agent.probe(address))),
    receiveNotifications: Effect.sync(drain),
    notifications,
    subscribe: (handler, options) =>
      Effect.asVoid(
        Effect.acquireRelease(
          Effect.sync(() => delivery.subscribe(handler, options?.consume === true)),
          (unsubscribe) => Effect.sync(unsubscribe)
        )
      ),
    undelivered: receipts.events === undefined ? Stream.empty : Stream.fromPubSub(receipts.events),
    onUndelivered: (handler) =>
      Effect.asVoid(
        Effect.acquireRelease(
          Effect.sync(() => receipts.onUndelivered(handler)),
          (unsubscribe) => Effect.sync(unsubscribe)
        )
      ),
    sendNotificationReceipted
  } satisfies TransferEngineShape
})

// --- Composition (its parts: internal/Wiring.ts) ---------------------------------------------------------------------

/**
 * The engine and its `Diagnostics` as a Layer: needs a `Verbs` provider, the seven policies (`Series.legacy`) and
 * `RailHealth`; reads its settings (and `rpc/*`) from the ambient `ConfigProvider` — provide
 * `EngineConfig.layerProvider(source)` under it. Under `metadata_type` `redis` it fails with a `TransportFailure`
 * when the Redis server cannot be reached or does not take this segment's descriptor.
 *
 * @since 0.1.0
 */
export const layer: Layer.Layer<
  TransferEngine | Diagnostics.Diagnostics,
  RdmaError | ServerError | ConfigError | TransportFailure,
  Verbs | Series.Policies | RailHealth.RailHealth
> = Layer.scoped(TransferEngine, make).pipe(
  Layer.merge(Diagnostics.layer),
  Layer.provideMerge(Layer.merge(Wiring.serveLayer, Wiring.publisherLayer)),
  Layer.provideMerge(Layer.merge(Wiring.resendLayer, SegmentPublisher.descriptorLayer)),
  Layer.provideMerge(Layer.merge(RdmaTransport.layer, TcpTransport.layer)),
  Layer.provideMerge(Layer.mergeAll(Wiring.cacheLayer, Delivery.layer, LocalSegment.layer, Wiring.resendQueueLayer)),
  Layer.provideMerge(Layer.mergeAll(Wiring.engineAgentLayer, Wiring.identityLayer, Ledger.layer)),
  Layer.provideMerge(Wiring.agentLayer),
  Layer.provide(Layer.merge(EngineConfig.layerConfig, RpcConfig.layerConfig))
)

/**
 * An engine on SoftVerbs, ready to use: `devices` soft NICs in this process (default two, on 127.0.0.1), TENT
 * `main`'s policies unless `series` says otherwise, `RailHealth` from config, and the settings from `config` (TENT's
 * JSON, nested or flat keys, over the environment).
 * @since 0.1.0 */
export const layerSoft = (
  options: {
    readonly config?: unknown
    readonly devices?: ReadonlyArray<{ readonly name: string; readonly host?: string }>
    readonly series?: Layer.Layer<Series.Policies, ConfigError>
  } = {}
): Layer.Layer<TransferEngine | Diagnostics.Diagnostics, RdmaError | ServerError | ConfigError | TransportFailure> =>
  layer.pipe(
    Layer.provide(
      SoftVerbs.layer({
        devices: (options.devices ?? [{ name: "mlx0" }, { name: "mlx1" }]).map((d) => ({
          name: d.name,
          host: d.host ?? "127.0.0.1"
        }))
      })
    ),
    Layer.provide(options.series ?? Series.legacy),
    Layer.provide(RailHealth.layerConfig),
    Layer.provide(EngineConfig.layerProvider({ json: options.config }))
  )
