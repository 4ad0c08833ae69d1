/**
 * The `TransferEngine` service, as TENT `main`'s `TransferEngineImpl`: segments, transfers and notifications over
 * the installed transports (RDMA, then TCP, in TENT's slot order), with the control plane serving `Bootstrap`,
 * `Notify`, `GetSegmentDesc` and `Probe` for this engine.
 *
 * `TransferEngine.layer` composes everything from a `Verbs` provider, the seven policy seams (`Series.legacy` for
 * TENT `main`) and `RailHealth`; configuration is read from the ambient `ConfigProvider` (see `EngineConfig`).
 *
 * @since 0.1.0
 */

import { RailHealth } from "@tent/health"
import type { BufferDesc, DeviceDesc, Notification, SegmentDesc } from "@tent/rpc"
import {
  BootstrapRejected,
  ControlPlane,
  DescriptorCache,
  type InvalidEntry,
  type NotificationTooLarge,
  Registry,
  RpcAgent,
  RpcConfig,
  Server,
  type TransportFailure
} from "@tent/rpc"
import { AccessFlags, type DeviceNotFound, type MemoryRegion, type RdmaError, Verbs } from "@tent/verbs"
import { Channel, Chunk, Context, Effect, Layer, Scope, Stream } from "effect"
import { Dedup } from "./Dedup.js"
import * as EngineConfig from "./EngineConfig.js"
import { type EndpointUnavailable, NotificationNotSupported, SegmentNotFound } from "./Errors.js"
import { Signal } from "./internal/Inbox.js"
import { NotificationRouting } from "./NotificationRouting.js"
import { NotifyQpParams } from "./NotifyQpParams.js"
import { PeerHealthPolicy } from "./PeerHealth.js"
import { QpRetirement } from "./QpRetirement.js"
import * as RdmaTransport from "./RdmaTransport.js"
import { Resend } from "./Resend.js"
import type { Policies } from "./Series.js"
import * as TcpTransport from "./TcpTransport.js"
import * as Transfers from "./Transfers.js"

/** TENT `LOCAL_SEGMENT_ID`: the handle of this engine's own segment. */
export const LOCAL_SEGMENT_ID = 0

/** A segment handle from `openSegment` (TENT `SegmentID`). */
export type SegmentHandle = number

/** Memory registered with `registerSegment`: `addr` is what transfer requests use as `source`/`targetOffset`. */
export interface LocalBuffer {
  readonly addr: number
  readonly length: number
  readonly buffer: Buffer
}

/** Everything `sendNotification` can fail with (legacy routing: the first transport's errors, unchanged). */
export type SendNotificationError =
  | DeviceNotFound
  | RdmaError
  | TransportFailure
  | BootstrapRejected
  | InvalidEntry
  | NotificationTooLarge
  | EndpointUnavailable
  | NotificationNotSupported
  | SegmentNotFound

/** Either transport, as the engine's slot table holds them. */
export type Transport = RdmaTransport.RdmaTransport | TcpTransport.TcpTransport

/** The operations of the engine. */
export interface TransferEngineShape {
  /** This engine's segment name (under the peer registry: its control-plane `host:port`). */
  readonly segmentName: string
  /** The control plane's `host:port`. */
  readonly address: string
  /** Registers `buffer` on every device (TENT `registerLocalMemory`); it is published in this segment's descriptor. */
  readonly registerSegment: (buffer: Buffer) => Effect.Effect<LocalBuffer, RdmaError>
  /** A handle for the segment `name` (empty or this engine's name → {@link LOCAL_SEGMENT_ID}); fetches its descriptor. */
  readonly openSegment: (name: string) => Effect.Effect<SegmentHandle, InvalidEntry | TransportFailure>
  /** A new batch id (TENT `allocateBatch`). */
  readonly allocateBatch: Effect.Effect<number>
  /** Splits `requests` into slices over the rails and posts them; `notification` is sent once the batch completes. */
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
  /** TENT `sendNotification(target_id, notification)`; the segment by handle or by name. */
  readonly sendNotification: (
    segment: SegmentHandle | string,
    notification: Notification
  ) => Effect.Effect<void, SendNotificationError>
  /** Takes the received notifications (TENT `receiveNotification`: the routing policy's transports). */
  readonly receiveNotifications: Effect.Effect<ReadonlyArray<Notification>>
  /** Received notifications as a stream (the same queue as `receiveNotifications`: each is delivered once). */
  readonly notifications: Stream.Stream<Notification>
  /** The RDMA transport, if installed (inspection and tests). */
  readonly rdma: RdmaTransport.RdmaTransport | undefined
  /** The TCP transport, if installed. */
  readonly tcp: TcpTransport.TcpTransport | undefined
}

/** The transfer engine. */
export class TransferEngine extends Context.Tag("@tent/core/TransferEngine")<TransferEngine, TransferEngineShape>() {}

/** The region holding `[addr, addr + length)` and the offset of `addr` in it (the server's `SendData` lookup). */
const lookupRegion = (
  regions: ReadonlyArray<{ readonly buffer: Buffer; readonly addr: number }>,
  addr: number,
  length: number
): { readonly buffer: Buffer; readonly offset: number } | undefined => {
  for (const r of regions)
    if (addr >= r.addr && addr + length <= r.addr + r.buffer.length) return { buffer: r.buffer, offset: addr - r.addr }
  return undefined
}

/** Addresses for memory no device registered (no RDMA): distinct, page-aligned, one free page between regions. */
let virtualNext = 0x10_0000_0000
const nextVirtualAddr = (length: number): number => {
  const addr = virtualNext
  virtualNext += Math.ceil(length / 4096) * 4096 + 4096
  return addr
}

/** Builds the engine in the current scope. */
export const make = Effect.gen(function* () {
  const settings = yield* EngineConfig.EngineConfig
  const rpcSettings = yield* RpcConfig.RpcConfig
  const verbs = yield* Verbs
  const retirement = yield* QpRetirement
  const notifyParams = yield* NotifyQpParams
  const routing = yield* NotificationRouting
  const peerHealth = yield* PeerHealthPolicy
  const classifier = yield* DescriptorCache.StaleClassifier
  const dedup = yield* Dedup
  const resend = yield* Resend
  const rails = yield* RailHealth.RailHealth

  const agent = yield* RpcAgent.make.pipe(Effect.provideService(RpcConfig.RpcConfig, rpcSettings))
  const registry = yield* Registry.makePeer.pipe(Effect.provideService(RpcAgent.RpcAgent, agent))
  const cache = yield* DescriptorCache.make().pipe(
    Effect.provideService(Registry.Registry, registry),
    Effect.provideService(DescriptorCache.StaleClassifier, classifier)
  )

  // The control plane comes up first (its address is this engine's name); handlers dispatch to the transports once
  // they exist, and until then refuse a bootstrap as TENT does ("NOT_READY: transport not initialized").
  const inbound: {
    bootstrap: RdmaTransport.RdmaTransport["onBootstrap"] | undefined
    notify: ((n: Notification) => void) | undefined
    segmentDesc: () => SegmentDesc
  } = {
    bootstrap: undefined,
    notify: undefined,
    segmentDesc: () => ({ name: "", rpc_server_addr: "", devices: [], buffers: [] })
  }
  const handlers = ControlPlane.toLayer({
    Bootstrap: (desc) =>
      inbound.bootstrap === undefined
        ? Effect.fail(new BootstrapRejected({ message: "NOT_READY: transport not initialized" }))
        : inbound.bootstrap(desc),
    Notify: (n) =>
      Effect.sync(() => {
        inbound.notify?.(n)
      }),
    GetSegmentDesc: () => Effect.sync(() => inbound.segmentDesc()),
    Probe: () => Effect.void
  })
  const scope = yield* Effect.scope
  const handlerContext = yield* Layer.buildWithScope(handlers, scope)
  // Local segment: memory registered on every device (and served to `SendData` / `RecvData` by the control plane).
  const regions: Array<{ readonly buffer: Buffer; readonly mrs: ReadonlyArray<MemoryRegion>; readonly addr: number }> =
    []
  const server = yield* Server.make({
    host: settings.rpcServerHostname,
    port: settings.rpcServerPort,
    maxNotifyBytes: rpcSettings.maxNotifyBytes,
    maxDataBytes: rpcSettings.maxDataBytes,
    memory: { lookup: (addr, length) => lookupRegion(regions, addr, length) }
  }).pipe(Effect.provide(handlerContext))
  const segmentName = settings.localSegmentName === "" ? server.address : settings.localSegmentName

  const signal = new Signal()
  const rdma = settings.rdmaEnable
    ? yield* RdmaTransport.make({
        verbs,
        settings,
        agent,
        cache,
        localServer: segmentName,
        signal,
        retirement,
        notifyParams,
        peerHealth,
        dedup,
        resend
      })
    : undefined
  const tcp = settings.tcpEnable ? TcpTransport.make({ agent, cache, signal, peerHealth }) : undefined

  // TENT slot order: RDMA (1) before TCP (7).
  const capable: ReadonlyArray<Transport> = [rdma, tcp].filter((t): t is Transport => t !== undefined)
  if (routing.rpcCallback === "engine" || tcp !== undefined) {
    const sink = tcp ?? TcpTransport.make({ agent, cache, signal, peerHealth })
    inbound.notify = sink.onNotify
  }
  if (rdma !== undefined) inbound.bootstrap = rdma.onBootstrap

  const deviceDescs: ReadonlyArray<DeviceDesc> = (rdma?.devices ?? []).map((d) => ({
    name: d.name,
    lid: 0,
    gid: d.gidText
  }))
  inbound.segmentDesc = () => ({
    name: segmentName,
    rpc_server_addr: server.address,
    devices: deviceDescs,
    buffers: regions.map(
      (r): BufferDesc => ({
        addr: r.addr,
        length: r.buffer.length,
        rkey: r.mrs.map((m) => m.rkey),
        transports: [...(r.mrs.length > 0 ? ["rdma"] : []), ...(tcp !== undefined ? ["tcp"] : [])]
      })
    )
  })
  const access = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ
  const registerSegment = (buffer: Buffer): Effect.Effect<LocalBuffer, RdmaError> =>
    Effect.gen(function* () {
      const mrs: Array<MemoryRegion> = []
      for (const d of rdma?.devices ?? []) mrs.push(yield* Scope.extend(d.pd.regMr(buffer, access), scope))
      const addr = mrs[0]?.addr ?? nextVirtualAddr(buffer.length)
      regions.push({ buffer, mrs, addr })
      return { addr, length: buffer.length, buffer }
    })

  // Segment handles (TENT `openSegment`): 0 is this engine.
  const handles = new Map<number, string>([[LOCAL_SEGMENT_ID, segmentName]])
  const byName = new Map<string, number>([[segmentName, LOCAL_SEGMENT_ID]])
  const openSegment = (name: string): Effect.Effect<SegmentHandle, InvalidEntry | TransportFailure> => {
    if (name === "" || name === segmentName) return Effect.succeed(LOCAL_SEGMENT_ID)
    return Effect.map(cache.get(name), () => {
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

  // The routing policy over this engine's transports, evaluated once: the transports do not change after start.
  const sendOrder = routing.sendOrder(capable)
  const drainOrder = routing.drainOrder(capable)

  const sendVia = (i: number, name: string, n: Notification): Effect.Effect<void, SendNotificationError> => {
    const t = sendOrder[i]
    if (t === undefined) return Effect.fail(new NotificationNotSupported({ message: "Notification not supported" }))
    const attempt = t.sendNotification(name, n) as Effect.Effect<void, SendNotificationError>
    return i + 1 === sendOrder.length
      ? attempt
      : Effect.catchIf(
          attempt,
          (e) => routing.fallback(e),
          () => sendVia(i + 1, name, n)
        )
  }
  // A segment given by name goes straight to the first transport (for RDMA: one `Effect.suspend` posting to the
  // endpoint last used, when it is still READY); a handle is resolved first.
  const sendNotification = (segment: SegmentHandle | string, n: Notification) =>
    typeof segment === "string"
      ? sendVia(0, segment, n)
      : Effect.flatMap(segmentOf(segment), (name) => sendVia(0, name, n))

  const drain = (): Array<Notification> => {
    if (drainOrder.length === 1) return (drainOrder[0] as Transport).inbox.drain()
    const out: Array<Notification> = []
    for (const t of drainOrder) if (t.inbox.size > 0) for (const n of t.inbox.drain()) out.push(n)
    return out
  }

  // One channel step per chunk, run in the consumer's fiber: take what is queued and emit it, or park on this run's
  // wake-up slot and look again. A notification leaves its inbox only in the step that emits it, so a consumer
  // interrupted while parked takes nothing with it. (`Channel.repeated` over an effect that drains or waits, with a
  // canceller per wait, cost about a dozen more run-loop steps per chunk.)
  const notifications: Stream.Stream<Notification> = Stream.fromChannel(
    Channel.suspend(() => {
      const waiter = signal.subscribe()
      const again = () => next
      const next: Channel.Channel<Chunk.Chunk<Notification>> = Channel.suspend(() => {
        waiter.seen = signal.current
        const got = drain()
        return got.length > 0 ? Channel.flatMap(Channel.write(Chunk.unsafeFromArray(got)), again) : park
      })
      const park = Channel.flatMap(Channel.fromEffect(waiter.wait), again)
      return Channel.ensuring(
        next,
        Effect.sync(() => waiter.close())
      )
    })
  )

  const transfers = yield* Transfers.make({
    settings,
    rdma,
    rails,
    segmentOf,
    resolve: (name) => cache.get(name),
    refresh: (name) => Effect.zipRight(cache.invalidate(name), cache.get(name)),
    localRegions: () => regions,
    tcp,
    sendNotification: (name, n) => sendNotification(name, n)
  })

  return {
    segmentName,
    address: server.address,
    registerSegment,
    openSegment,
    allocateBatch: transfers.allocateBatch,
    submitTransfer: transfers.submitTransfer,
    getTransferStatus: transfers.getTransferStatus,
    waitTransfer: transfers.waitTransfer,
    freeBatch: transfers.freeBatch,
    sendNotification,
    receiveNotifications: Effect.sync(drain),
    notifications,
    rdma,
    tcp
  } satisfies TransferEngineShape
})

/**
 * The engine as a Layer: needs a `Verbs` provider, the seven policies (`Series.legacy`) and `RailHealth`; reads its
 * settings (and `rpc/*`) from the ambient `ConfigProvider` — provide `EngineConfig.layerProvider(source)` under it.
 */
export const layer: Layer.Layer<
  TransferEngine,
  RdmaError | import("@tent/rpc").ServerError | import("effect/ConfigError").ConfigError,
  Verbs | Policies | RailHealth.RailHealth
> = Layer.scoped(TransferEngine, make).pipe(Layer.provide(Layer.merge(EngineConfig.layerConfig, RpcConfig.layerConfig)))
