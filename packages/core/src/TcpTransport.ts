/**
 * `TcpTransport`, as TENT `main`'s: notifications carried by the control plane's `Notify` RPC, and (TENT
 * `install()`) the control-plane notify callback that queues incoming `Notify`s in this transport's inbox. Whether
 * that callback is installed is the `NotificationRouting` seam's call (legacy: only this transport installs it).
 *
 * `sendNotification` runs the `Notify` call against the cached segment descriptor: under the legacy
 * `DescriptorPolicy` a failed call drops the descriptor, refetches it (from the same peer, under the peer registry)
 * and calls again — TENT's `NeedsRefreshCache` on `RpcServiceError`.
 *
 * @since 0.1.0
 */
import type { DescriptorCache, InvalidEntry, Notification, NotificationTooLarge, RpcAgent } from "@tent/rpc"
import { NeedsRefreshCache, type TransportFailure } from "@tent/rpc"
import { Effect } from "effect"
import { Inbox, type Signal } from "./internal/Inbox.js"
import type { PeerHealthPolicyShape } from "./PeerHealth.js"

/** Errors of `sendNotification` over TCP. */
export type TcpNotifyError = TransportFailure | InvalidEntry | NotificationTooLarge

/** The TCP transport. */
export interface TcpTransport {
  readonly kind: "tcp"
  readonly inbox: Inbox
  /** TENT `TcpTransport::sendNotification`: `Notify` to the segment's RPC address. */
  readonly sendNotification: (segment: string, n: Notification) => Effect.Effect<void, TcpNotifyError>
  /** The control-plane notify callback this transport installs. */
  readonly onNotify: (n: Notification) => void
  /** Notifications sent and received by this transport. */
  readonly counters: { sent: number; received: number }
}

/** What the TCP transport needs. */
export interface TcpTransportDeps {
  readonly agent: RpcAgent.RpcAgentShape
  readonly cache: DescriptorCache.DescriptorCacheShape
  readonly signal: Signal
  readonly peerHealth: PeerHealthPolicyShape
}

/** Builds the TCP transport. */
export const make = (deps: TcpTransportDeps): TcpTransport => {
  const inbox = new Inbox(deps.signal)
  const counters = { sent: 0, received: 0 }
  const notifyPeer = (address: string, n: Notification) =>
    Effect.zipRight(
      deps.peerHealth.admit(address),
      deps.agent.notify(address, n).pipe(
        Effect.tapBoth({
          onFailure: (e) => (e._tag === "TransportFailure" ? deps.peerHealth.record(address, e) : Effect.void),
          onSuccess: () => deps.peerHealth.record(address, undefined)
        })
      )
    )
  return {
    kind: "tcp",
    inbox,
    counters,
    sendNotification: (segment, n) =>
      deps.cache
        .withSegment(
          segment,
          (desc): Effect.Effect<void, NeedsRefreshCache | TcpNotifyError> =>
            desc.rpc_server_addr === ""
              ? Effect.fail(new NeedsRefreshCache({ segment, message: "segment has no RPC address" }))
              : notifyPeer(desc.rpc_server_addr, n)
        )
        .pipe(
          Effect.tap(() => {
            counters.sent++
          })
        ) as Effect.Effect<void, TcpNotifyError>,
    onNotify: (n) => {
      counters.received++
      inbox.push(n)
    }
  }
}
