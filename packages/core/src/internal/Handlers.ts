/**
 * The control plane's handlers for this engine (TENT `ControlService`): `Bootstrap` to the RDMA transport's acceptor
 * (refused "NOT_READY" without one, as TENT), `Notify` to the delivery point (queued as the TCP transport's; when no
 * transport installs the callback, answered and dropped, as TENT — the `NotificationRouting` seam decides), this
 * segment's descriptor (`SegmentPublisher.LocalDescriptor`, the one a central registry is given), and `Probe`. A
 * `Notify` that is a failure notice (its body's failure trailer) reaches the delivery point with its `failure` key, as
 * the notify poller hands one over at `notify_proto` 3; only peers that advertised 3 are sent one. Built
 * from services, after the transports: the listener was bound before them and holds early connections until
 * `Server.serve` attaches these.
 */
import type { Notification } from "@tent/rpc"
import { BootstrapRejected, ControlPlane, type ControlPlaneHandlers, NotificationRefused } from "@tent/rpc"
import { Effect, type Layer } from "effect"
import * as Metrics from "../Metrics.js"
import { NotificationRouting } from "../NotificationRouting.js"
import { EngineDelivery } from "./Delivery.js"
import { EngineReceipts } from "./Ledger.js"
import { RdmaTransport } from "./rdma/RdmaTransport.js"
import { LocalDescriptor } from "./SegmentPublisher.js"
import { TcpTransport } from "./TcpTransport.js"

/** The handlers as a Layer built from the engine's services. */
export const make: Effect.Effect<
  Layer.Layer<ControlPlaneHandlers>,
  never,
  RdmaTransport | TcpTransport | EngineDelivery | NotificationRouting | LocalDescriptor | EngineReceipts
> = Effect.gen(function* () {
  const rdma = yield* RdmaTransport
  const tcp = yield* TcpTransport
  const delivery = yield* EngineDelivery
  const routing = yield* NotificationRouting
  const segmentDesc = yield* LocalDescriptor
  const receipts = yield* EngineReceipts
  // A `Notify` stamped for another incarnation of this engine is answered with a refusal, never delivered.
  const refused = () =>
    new NotificationRefused({
      reason: "StaleIncarnation",
      incarnation: String(receipts.incarnation),
      message: `stamped for another incarnation of this engine (this one is ${receipts.incarnation}): not delivered`
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
    Bootstrap: (desc) =>
      rdma === undefined
        ? Effect.fail(new BootstrapRejected({ message: "NOT_READY: transport not initialized" }))
        : rdma.onBootstrap(desc),
    Notify: (n, { clientId }) =>
      Effect.suspend(() => {
        delivery.lastRefused = false
        onNotify?.(n, `rpc#${clientId}`)
        return delivery.lastRefused ? Effect.fail(refused()) : Effect.void
      }),
    GetSegmentDesc: () => Effect.sync(segmentDesc),
    Probe: () => Effect.void
  })
})
