/**
 * The bootstrap acceptor's guards against hostile peers, checked before a `Bootstrap` touches any endpoint:
 *
 * - **identity**: on an authenticated control-plane connection (the `x-tent-peer` header: the peer's proven segment
 *   name) the NIC path the caller gives as its own must be of that segment, so a peer can neither retire nor take over
 *   another peer's endpoint by bootstrapping with its NIC path. Without the header (no secret set: the control plane
 *   authenticates nothing) nothing is checked, as TENT.
 * - **bounds**: each endpoint this engine accepts holds its notify slots (TENT's: 256 × 64 KiB each way, 32 MiB) and
 *   QPs for as long as it lives, and a peer chooses how many it makes. A `Bootstrap` that would make a new one is
 *   refused when its segment has `transports/rdma/max_endpoints_per_peer` accepted endpoints already, or when the
 *   accepted endpoints together would pass `transports/rdma/max_accepted_bytes`. Counted are the endpoints accepted and
 *   not yet destroyed (a retired one still holds its memory until the reclaim destroys it), each at its slots' full
 *   size (a lazy ring may grow to it) plus {@link QP_BYTES} per QP. An existing endpoint is never evicted to make room,
 *   and a `Bootstrap` for an endpoint that is live already (a reconnection, a simultaneous open) is not a new one.
 *   Endpoints this engine opened itself (its own sends and transfers) are not counted: no peer chooses those.
 *
 * Plain synchronous code on the control-plane handler, before `EndpointStore.getOrInsert`.
 */
import { BootstrapRejected } from "@tent/rpc"
import type { NotifySlotSettings } from "../../EngineConfig.js"
import type { EndpointBounds } from "../config/guards.js"
import type { EndpointStore } from "../EndpointStore.js"
import { type BootstrapRefusal, bootstrapRefused } from "../GuardMetrics.js"
import type { RdmaEndpoint } from "./RdmaEndpoint.js"

/** Host memory counted per QP of an accepted endpoint besides its notify slots (its rings and state, rounded up). */
export const QP_BYTES = 64 * 1024

/** What the guards refused. */
export interface BootstrapGuardCounters {
  identity: number
  peerEndpoints: number
  acceptedBytes: number
}

/** The guards of one RDMA transport's acceptor. */
export class BootstrapGuard {
  readonly counters: BootstrapGuardCounters = { identity: 0, peerEndpoints: 0, acceptedBytes: 0 }
  /** The endpoints accepted and not yet seen destroyed. */
  private readonly accepted = new Set<RdmaEndpoint>()

  constructor(
    readonly bounds: EndpointBounds,
    /** Bytes one accepted endpoint is counted at (see {@link reservation}). */
    readonly endpointBytes: number
  ) {}

  /** The bytes an endpoint with these notify slots and `lanes` data QPs is counted at: slots each way, and its QPs. */
  static reservation(slots: NotifySlotSettings, lanes: number): number {
    return 2 * slots.slots * slots.slotBytes + (lanes + 1) * QP_BYTES
  }

  /**
   * The refusal of a `Bootstrap` whose caller names itself by the NIC path `peerNicPath` of segment `segment`, on a
   * connection authenticated as `peer` (undefined: not authenticated); undefined when it may go on.
   */
  identity(peerNicPath: string, segment: string, peer: string | undefined): BootstrapRejected | undefined {
    if (peer === undefined || segment === peer) return undefined
    return this.refuse(
      "identity",
      `IDENTITY: this connection is authenticated as ${peer}, and a Bootstrap from ${peerNicPath} names the segment ` +
        `${segment}: refused, no endpoint touched. Bootstrap with your own NIC paths (<your segment name>@<nic>), ` +
        "the segment name you authenticate with being the server part of your NIC paths"
    )
  }

  /**
   * The refusal of a `Bootstrap` that would make a new endpoint in `store` for `peerNicPath` (of `segment`) when a
   * bound is reached; undefined when it may go on (or when the endpoint is live already: nothing new is made).
   */
  bounded(store: EndpointStore, peerNicPath: string, segment: string): BootstrapRejected | undefined {
    const live = store.active.get(peerNicPath)
    if (live !== undefined && live.status !== "DESTROYING" && live.status !== "DESTROYED") return undefined
    let ofPeer = 0
    for (const ep of this.accepted) {
      if (ep.status === "DESTROYED") this.accepted.delete(ep)
      else if (ep.segment === segment) ofPeer++
    }
    const { perPeer, acceptedBytes } = this.bounds
    if (ofPeer >= perPeer) {
      return this.refuse(
        "peer_endpoints",
        `RESOURCE_EXHAUSTED: ${segment} has ${ofPeer} endpoints accepted by this engine already ` +
          `(transports/rdma/max_endpoints_per_peer ${perPeer}): no new one for ${peerNicPath}, none evicted. Use the ` +
          "endpoints you have, or raise the key on this engine if you have more NIC pairs with it"
      )
    }
    const held = this.accepted.size * this.endpointBytes
    if (held + this.endpointBytes > acceptedBytes) {
      return this.refuse(
        "accepted_bytes",
        `RESOURCE_EXHAUSTED: the endpoints this engine accepted hold ${held} bytes, and one more counts ` +
          `${this.endpointBytes} (transports/rdma/max_accepted_bytes ${acceptedBytes}): no new one for ` +
          `${peerNicPath}, none evicted. Retry later, or raise the key on this engine (or make its notify slots ` +
          "smaller: transports/rdma/notify/{slots, slot_bytes})"
      )
    }
    return undefined
  }

  /** Counts `ep`, made for an accepted `Bootstrap`, until it is destroyed. */
  record(ep: RdmaEndpoint): void {
    this.accepted.add(ep)
  }

  /** Accepted endpoints not yet seen destroyed, and the bytes they are counted at. */
  get held(): { readonly endpoints: number; readonly bytes: number } {
    for (const ep of this.accepted) if (ep.status === "DESTROYED") this.accepted.delete(ep)
    return { endpoints: this.accepted.size, bytes: this.accepted.size * this.endpointBytes }
  }

  private refuse(reason: BootstrapRefusal, message: string): BootstrapRejected {
    if (reason === "identity") this.counters.identity++
    else if (reason === "peer_endpoints") this.counters.peerEndpoints++
    else this.counters.acceptedBytes++
    bootstrapRefused[reason].update(1)
    return new BootstrapRejected({ message })
  }
}
