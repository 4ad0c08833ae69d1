/**
 * The parts of the engine's composition (`TransferEngine.layer`): the control-plane listener and this engine's
 * identity, its agent (the `PeerHealth` seam's decoration), the segment registry and the descriptor cache before it,
 * the publisher, the resend and receipts fibers, and the control plane's handlers; and {@link errorTag}, which the
 * facade's spans use.
 */
import { DescriptorCache, Registry, RpcAgent, RpcConfig, Server } from "@tent/rpc"
import { Effect, Layer, Queue } from "effect"
import * as EngineConfig from "../EngineConfig.js"
import { PeerHealthPolicy } from "../PeerHealth.js"
import type { RetiringChannel } from "../Resend.js"
import * as Handlers from "./Handlers.js"
import * as LocalSegment from "./LocalSegment.js"
import * as ReceiptWorker from "./ReceiptWorker.js"
import * as Resender from "./Resender.js"
import { rdmaServerName } from "./rdma/NicPath.js"
import * as SegmentPublisher from "./SegmentPublisher.js"
import { EngineAgent, EngineIdentity, ResendQueue } from "./Services.js"

/** The control-plane listener, bound at `rpc_server_hostname:rpc_server_port` with the `rpc/*` limits. */
export const listenerLayer = Layer.scoped(
  Server.Listener,
  Effect.gen(function* () {
    const settings = yield* EngineConfig.EngineConfig
    const rpc = yield* RpcConfig.RpcConfig
    return yield* Server.makeListener({
      ...Server.listenerLimits(rpc),
      host: settings.rpcServerHostname,
      port: settings.rpcServerPort
    })
  })
)

/**
 * The control-plane agent, with the name it claims when it proves the shared secret: the server part of this
 * engine's NIC paths (`local_nic_path`), the identity a peer binds its `Bootstrap`s and stamps to.
 */
export const agentLayer = RpcAgent.layer.pipe(
  Layer.provide(
    Layer.effect(
      RpcAgent.AgentName,
      Effect.gen(function* () {
        const settings = yield* EngineConfig.EngineConfig
        const { address } = yield* Server.Listener
        const segment = settings.localSegmentName === "" ? address : settings.localSegmentName
        return rdmaServerName(settings.rdmaBindAddress, segment, settings.rpcServerPort)
      })
    )
  ),
  Layer.provideMerge(listenerLayer)
)

/** Who this engine is: the listener's address, and `local_segment_name` or that address. */
export const identityLayer = Layer.effect(
  EngineIdentity,
  Effect.gen(function* () {
    const settings = yield* EngineConfig.EngineConfig
    const { address } = yield* Server.Listener
    return { address, segmentName: settings.localSegmentName === "" ? address : settings.localSegmentName }
  })
)

/** The engine's agent: the plain `RpcAgent` as the `PeerHealth` seam decorates it; the seam's prober starts here. */
export const engineAgentLayer = Layer.scoped(
  EngineAgent,
  Effect.gen(function* () {
    const plain = yield* RpcAgent.RpcAgent
    const policy = yield* PeerHealthPolicy
    yield* policy.start(plain)
    return policy.decorate(plain)
  })
)

/**
 * The segment registry `metadata_type` selects: the peer registry, whose `GetSegmentDesc` calls go through the
 * engine's agent, or TENT's central registry in Redis at `metadata_servers`. One instance (Layers are shared by
 * reference) serves the descriptor cache and the publisher.
 */
export const registryLayer = Layer.unwrapEffect(
  Effect.map(EngineConfig.EngineConfig, (settings) =>
    settings.metadataType === "redis"
      ? Registry.layerRedis({ address: settings.metadataServers })
      : Registry.layerPeer.pipe(Layer.provide(Layer.effect(RpcAgent.RpcAgent, EngineAgent)))
  )
)

/** The descriptor cache over the registry. */
export const cacheLayer = DescriptorCache.layer().pipe(Layer.provide(registryLayer))

/** This segment's descriptor in the registry: put at start, on change and periodically, deleted at shutdown. */
export const publisherLayer = SegmentPublisher.layer.pipe(Layer.provide(registryLayer))

/** The resend queue and the fiber that drains it; the receipts' worker. */
export const resendLayer = Layer.merge(Layer.scopedDiscard(Resender.start), Layer.scopedDiscard(ReceiptWorker.start))
export const resendQueueLayer = Layer.effect(ResendQueue, Queue.unbounded<RetiringChannel>())

/** The control plane's handlers, attached to the listener once the transports exist. */
export const serveLayer = Layer.scopedDiscard(
  Effect.gen(function* () {
    const handlers = yield* Handlers.make
    const regions = yield* LocalSegment.LocalSegment
    yield* Server.serve(handlers, {
      memory: {
        lookup: (addr, length) => {
          const got = regions.find(addr, length)
          return got === undefined ? undefined : { buffer: got.region.buffer, offset: got.offset }
        }
      }
    })
  })
)

/** The `_tag` of a failure, for a span attribute. */
export const errorTag = (e: unknown): string =>
  typeof e === "object" && e !== null && typeof (e as { _tag?: unknown })._tag === "string"
    ? (e as { _tag: string })._tag
    : "unknown"
