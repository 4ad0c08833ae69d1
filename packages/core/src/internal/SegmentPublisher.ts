/**
 * This engine's segment descriptor, and its publication in a central registry (TENT `SegmentManager::
 * synchronizeLocal` / `deleteLocal`). {@link LocalDescriptor} builds the descriptor the control plane's
 * `GetSegmentDesc` answers with; under a central registry the {@link Publisher} puts that same descriptor at start,
 * after every `registerSegment`, and every {@link REFRESH_INTERVAL} (so a store that restarted or lost the key has it
 * again), and deletes it when the engine's scope closes. Under the peer registry there is nothing to publish: a peer
 * asks this engine itself.
 */
import type { BufferDesc, DeviceDesc, SegmentDesc, TransportFailure } from "@tent/rpc"
import { Registry } from "@tent/rpc"
import { Context, Duration, Effect, Layer } from "effect"
import { PROTO as FAILURE_PROTO } from "../SubmitHooks.js"
import { EngineReceipts } from "./Ledger.js"
import { LocalSegment } from "./LocalSegment.js"
import { RdmaTransport } from "./rdma/RdmaTransport.js"
import { EngineIdentity } from "./Services.js"
import { TcpTransport } from "./TcpTransport.js"

/** Builds this engine's current descriptor (name, RPC address, devices, registered buffers). */
export class LocalDescriptor extends Context.Tag("@tent/core/internal/LocalDescriptor")<
  LocalDescriptor,
  () => SegmentDesc
>() {}

/** {@link LocalDescriptor} over the engine's identity, transports and registered memory. */
export const descriptorLayer: Layer.Layer<
  LocalDescriptor,
  never,
  RdmaTransport | TcpTransport | EngineIdentity | LocalSegment | EngineReceipts
> = Layer.effect(
  LocalDescriptor,
  Effect.gen(function* () {
    const rdma = yield* RdmaTransport
    const tcp = yield* TcpTransport
    const { segmentName, address } = yield* EngineIdentity
    const regions = yield* LocalSegment
    const receipts = yield* EngineReceipts
    // Only an engine that offers receipts adds its incarnation, and one that takes failure notices its level (3):
    // otherwise the descriptor is TENT's.
    const incarnation = receipts.enabled
      ? receipts.failureNotices
        ? { notify_incarnation: String(receipts.incarnation), notify_proto: FAILURE_PROTO }
        : { notify_incarnation: String(receipts.incarnation) }
      : {}
    const devices: ReadonlyArray<DeviceDesc> = (rdma?.devices ?? []).map((d) => ({
      name: d.name,
      lid: 0,
      gid: d.gidText
    }))
    return (): SegmentDesc => ({
      name: segmentName,
      rpc_server_addr: address,
      devices,
      buffers: regions.list.map(
        (r): BufferDesc => ({
          addr: r.addr,
          length: r.buffer.length,
          rkey: r.mrs.map((m) => m.rkey),
          transports: [...(r.mrs.length > 0 ? ["rdma"] : []), ...(tcp !== undefined ? ["tcp"] : [])]
        })
      ),
      // TENT writes `rdma_server_name` only when it differs from the segment's name (rdma_transport.cpp:636-640).
      ...(rdma !== undefined && rdma.serverName !== segmentName ? { rdma_server_name: rdma.serverName } : {}),
      ...incarnation
    })
  })
)

/**
 * How often a central registry's copy is written again. TENT writes only on change; the refresh puts the key back
 * after the store restarted or someone removed it, at the cost of one SET per interval.
 */
export const REFRESH_INTERVAL = Duration.seconds(10)

/** Publishes this engine's descriptor in the registry. */
export interface PublisherShape {
  /** Puts the current descriptor (after a change); a failure is logged, and the next refresh tries again. */
  readonly publish: Effect.Effect<void>
}

/** The publisher of this engine. */
export class Publisher extends Context.Tag("@tent/core/internal/Publisher")<Publisher, PublisherShape>() {}

/**
 * The publisher as a scoped Layer: under a central registry it puts the descriptor once (the engine does not start
 * if that fails, as TENT's `setupLocalSegment`), refreshes it in a fiber of the engine's scope, and deletes it when
 * the scope closes (after the fiber stopped; a failed delete is logged).
 */
export const layer: Layer.Layer<Publisher, TransportFailure, Registry.Registry | LocalDescriptor | EngineIdentity> =
  Layer.scoped(
    Publisher,
    Effect.gen(function* () {
      const registry = yield* Registry.Registry
      if (registry.kind !== "central") return { publish: Effect.void }
      const describe = yield* LocalDescriptor
      const { segmentName } = yield* EngineIdentity
      // One {snapshot, put} at a time, as TENT: a put of an older snapshot must not land after a newer one.
      const lock = yield* Effect.makeSemaphore(1)
      const put = lock.withPermits(1)(Effect.suspend(() => registry.putSegmentDesc(describe())))
      const logged = put.pipe(
        Effect.catchAll((e) => Effect.logWarning(`segment ${segmentName}: publishing its descriptor failed`, e))
      )

      yield* put
      yield* Effect.addFinalizer(() =>
        lock
          .withPermits(1)(registry.deleteSegmentDesc(segmentName))
          .pipe(Effect.catchAll((e) => Effect.logWarning(`segment ${segmentName}: deleting its descriptor failed`, e)))
      )
      yield* Effect.forkScoped(Effect.forever(Effect.delay(logged, REFRESH_INTERVAL)))
      return { publish: logged }
    })
  )
