/**
 * The control plane's handlers for this engine (TENT `ControlService`): `Bootstrap` to the RDMA transport's acceptor
 * (refused "NOT_READY" without one, as TENT), `Notify` to the delivery point (queued as the TCP transport's; when no
 * transport installs the callback, answered and dropped, as TENT — the `NotificationRouting` seam decides), this
 * segment's descriptor (`SegmentPublisher.LocalDescriptor`, the one a central registry is given), and `Probe`. A
 * `Notify` that is a failure notice (its body's failure trailer) reaches the delivery point with its `failure` key, as
 * the notify poller hands one over at `notify_proto` 3; only peers that advertised 3 are sent one. Built
 * from services, after the transports: the listener was bound before them and holds early connections until
 * `Server.serve` attaches these.
 *
 * On an authenticated connection every request carries the peer's proven segment name ({@link PEER_HEADER}): a
 * `Bootstrap` must then name a NIC path of that segment (the acceptor's identity guard), and a `Notify`'s sender is
 * that segment, to which its stamp's session must belong; without it (no secret set) a `Notify`'s sender is
 * `rpc#<clientId>`, whose segment is not known.
 */

import type { Headers } from "@effect/platform"
import type { Notification } from "@tent/rpc"
import {
  BootstrapRejected,
  ControlPlane,
  type ControlPlaneHandlers,
  NotificationRefused,
  RpcConfig,
  Server
} from "@tent/rpc"
import { Effect, type Layer } from "effect"
import * as Metrics from "../Metrics.js"
import { NotificationRouting } from "../NotificationRouting.js"
import { EngineDelivery, Refusal, UNKNOWN_SENDER } from "./Delivery.js"
import { EngineReceipts } from "./Ledger.js"
import { RdmaTransport } from "./rdma/RdmaTransport.js"
import { LocalDescriptor } from "./SegmentPublisher.js"
import { TcpTransport } from "./TcpTransport.js"

/** The header an authenticated control-plane connection's requests carry: the name the peer proved. */
export const PEER_HEADER: string = Server.PEER_HEADER

/**
 * The segment name a connection proved, from its requests' `headers`; undefined: it did not authenticate. With a
 * secret set every connection authenticates (`authenticated`), so one without the header proved an empty name, and
 * is held to it ("" names no segment: its `Bootstrap`s and stamps are refused) rather than let through unchecked.
 */
export const peerOf = (headers: Headers.Headers, authenticated: boolean): string | undefined =>
  headers[PEER_HEADER] ?? (authenticated ? "" : undefined)

/** The handlers as a Layer built from the engine's services. */
export const make: Effect.Effect<
  Layer.Layer<ControlPlaneHandlers>,
  never,
  | RdmaTransport
  | TcpTransport
  | EngineDelivery
  | NotificationRouting
  | LocalDescriptor
  | EngineReceipts
  | RpcConfig.RpcConfig
> = Effect.gen(function* () {
  const authenticated = (yield* RpcConfig.RpcConfig).secret !== undefined
  const rdma = yield* RdmaTransport
  const tcp = yield* TcpTransport
  const delivery = yield* EngineDelivery
  const routing = yield* NotificationRouting
  const segmentDesc = yield* LocalDescriptor
  const receipts = yield* EngineReceipts
  // A `Notify` the delivery point refused is answered with a refusal, never delivered: stamped for another incarnation
  // of this engine; with full queues; or with a session bound to another segment. Each carries this incarnation (a
  // sender's ledger keeps the last two for a later try: not a restart).
  const refused = (reason: Refusal) =>
    new NotificationRefused({
      reason:
        reason === Refusal.InboxFull
          ? "InboxFull"
          : reason === Refusal.ForeignSession
            ? "ForeignSession"
            : "StaleIncarnation",
      incarnation: String(receipts.incarnation),
      message:
        reason === Refusal.InboxFull
          ? `INBOX_FULL: this engine's queues hold notification/max_queued_bytes (${delivery.maxQueuedBytes}) that no consumer took yet: not delivered, send it again later`
          : reason === Refusal.ForeignSession
            ? "FOREIGN_SESSION: its stamp's session is bound to another sender segment here: not delivered"
            : `stamped for another incarnation of this engine (this one is ${receipts.incarnation}): not delivered`
    })

  const onNotify: ((n: Notification, from: string) => void) | undefined =
    tcp !== undefined
      ? tcp.onNotify
      : routing.rpcCallback === "engine"
        ? (n, from) => {
            // No TCP transport: a `Notify` taken by the engine itself is counted as the control plane's.
            if (delivery.fromNotify(from, n)) Metrics.received.rpc.update(1)
          }
        : undefined

  return ControlPlane.toLayer({
    Bootstrap: (desc, { headers }) =>
      rdma === undefined
        ? Effect.fail(new BootstrapRejected({ message: "NOT_READY: transport not initialized" }))
        : rdma.onBootstrap(desc, peerOf(headers, authenticated)),
    Notify: (n, { clientId, headers }) =>
      Effect.suspend(() => {
        delivery.lastRefused = false
        onNotify?.(n, peerOf(headers, authenticated) ?? `${UNKNOWN_SENDER}${clientId}`)
        return delivery.lastRefused ? Effect.fail(refused(delivery.lastReason)) : Effect.void
      }),
    GetSegmentDesc: () => Effect.sync(segmentDesc),
    Probe: () => Effect.void
  })
})
