/**
 * `TcpTransport`, as TENT `main`'s: notifications carried by the control plane's `Notify` RPC, and (TENT
 * `install()`) the control-plane notify callback that queues incoming `Notify`s in this transport's inbox. Whether
 * that callback is installed is the `NotificationRouting` seam's call (legacy: only this transport installs it).
 *
 * `sendNotification` runs the `Notify` call against the cached segment descriptor: under the legacy
 * `DescriptorPolicy` a failed call drops the descriptor, refetches it (from the same peer, under the peer registry)
 * and calls again — TENT's `NeedsRefreshCache` on `RpcServiceError`.
 *
 * Transfers: `writeData` / `readData` move one slice with the control plane's `SendData` / `RecvData` (TENT function
 * ids 3 and 4: a 16-byte `{addr, len}` header plus the data), each call bounded by `rpc/request_timeout_ms`; the peer
 * checks the range against the memory it registered. `Transfers` chooses this transport for a request (TENT's rule)
 * and runs the retries.
 *
 * @since 0.1.0
 */
import type {
  DataTooLarge,
  DescriptorCache,
  InvalidEntry,
  Notification,
  NotificationTooLarge,
  RpcAgent,
  SegmentRangeInvalid
} from "@tent/rpc"
import { NeedsRefreshCache, type TransportFailure } from "@tent/rpc"
import { Effect } from "effect"
import { Inbox, type Signal } from "./internal/Inbox.js"
import type { PeerHealthPolicyShape } from "./PeerHealth.js"

/** Errors of `sendNotification` over TCP. */
export type TcpNotifyError = TransportFailure | InvalidEntry | NotificationTooLarge

/** Errors of one TCP data call: the peer's typed refusal, or the call did not get a reply. */
export type TcpDataError = SegmentRangeInvalid | DataTooLarge | TransportFailure

/** The TCP transport. */
export interface TcpTransport {
  readonly kind: "tcp"
  readonly inbox: Inbox
  /** TENT `TcpTransport::sendNotification`: `Notify` to the segment's RPC address. */
  readonly sendNotification: (segment: string, n: Notification) => Effect.Effect<void, TcpNotifyError>
  /** The control-plane notify callback this transport installs. */
  readonly onNotify: (n: Notification) => void
  /** `SendData`: writes `data` at `addr` in the memory the peer at `address` registered. */
  readonly writeData: (address: string, addr: number, data: Uint8Array) => Effect.Effect<void, TcpDataError>
  /** `RecvData`: `length` bytes at `addr` of the memory the peer at `address` registered. */
  readonly readData: (address: string, addr: number, length: number) => Effect.Effect<Uint8Array, TcpDataError>
  /** Notifications sent and received by this transport; data calls that succeeded and failed. */
  readonly counters: { sent: number; received: number; dataOk?: number; dataFailed?: number }
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
  const counters = { sent: 0, received: 0, dataOk: 0, dataFailed: 0 }
  const count = <A>(self: Effect.Effect<A, TcpDataError>): Effect.Effect<A, TcpDataError> =>
    Effect.tapBoth(self, {
      onFailure: () =>
        Effect.sync(() => {
          counters.dataFailed++
        }),
      onSuccess: () =>
        Effect.sync(() => {
          counters.dataOk++
        })
    })
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
    writeData: (address, addr, data) => count(deps.agent.sendData(address, addr, data)),
    readData: (address, addr, length) => count(deps.agent.recvData(address, addr, length)),
    onNotify: (n) => {
      counters.received++
      inbox.push(n)
    }
  }
}
