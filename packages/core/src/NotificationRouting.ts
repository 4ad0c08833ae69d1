/**
 * Seam of RFC PR 3 ("RPC fallback"): which senders a notification tries and in what order — decided per
 * notification — which transports' queues `receiveNotifications` drains, and who installs the control plane's
 * `Notify` callback.
 *
 * The engine offers every notification the installed notification-capable transports in TENT's slot order (RDMA,
 * then TCP) and, always last, the control plane's own `Notify` ({@link NotifySenders.controlPlane}), which exists
 * even in an engine without the TCP transport.
 *
 * TENT `main` ({@link legacy}): the **first** installed transport only, with no fallback when it fails; the control
 * plane's `Notify` is never used as a transport of its own; only the first transport's queue is drained, so what
 * arrived by `Notify` is never returned while RDMA is installed; only the TCP transport installs the `Notify`
 * callback, and without it the server answers `Notify` with success and drops it. PR 3's Layer falls back on
 * `DeviceNotFound`/`RdmaError` to the next transport and then to the control plane, drains every queue, sends a
 * notification larger than a notify slot over the control plane directly (`route` sees the notification), and
 * installs the callback always (`notification/rpc_fallback`).
 *
 * @since 0.1.0
 */
import type { Notification } from "@tent/rpc"
import { Context, type Effect, Layer } from "effect"

/**
 * Which transport carries a notification: the RDMA notify QP, the TCP transport, or the control plane's `Notify`.
 *
 * @since 0.1.0
 */
export type SenderKind = "rdma" | "tcp" | "rpc"

/**
 * One way to send a notification to a segment.
 *
 * @since 0.1.0
 */
export interface NotifySender {
  readonly kind: SenderKind
  readonly send: (segment: string, n: Notification) => Effect.Effect<void, unknown>
}

/**
 * What the engine offers a notification: the installed transports in slot order, and the control plane.
 *
 * @since 0.1.0
 */
export interface NotifySenders {
  /** The installed notification-capable transports, RDMA before TCP. */
  readonly transports: ReadonlyArray<NotifySender>
  /** The control plane's `Notify`, always available. */
  readonly controlPlane: NotifySender
  /** The largest `name.length + msg.length` a notify QP slot carries (the `Dedup` seam's framing). */
  readonly slotPayload: number
}

/**
 * The queue a received notification lands in: the transport that carried it (`Notify` lands in `tcp`'s).
 *
 * @since 0.1.0
 */
export type QueueKind = "rdma" | "tcp"

/**
 * The routing policy.
 *
 * @since 0.1.0
 */
export interface NotificationRoutingShape {
  /** The senders `n` tries, in order (evaluated per notification; keep it allocation-free on the common path). */
  readonly route: (n: Notification, senders: NotifySenders) => ReadonlyArray<NotifySender>
  /** Whether a failed send moves on to the next sender of {@link route}. */
  readonly fallback: (error: unknown) => boolean
  /** The queues `receiveNotifications` drains, from the installed transports' queues in slot order. */
  readonly drainOrder: (installed: ReadonlyArray<QueueKind>) => ReadonlyArray<QueueKind>
  /** `"tcp"`: only the TCP transport installs the `Notify` callback (none installed → dropped); `"engine"`: always. */
  readonly rpcCallback: "tcp" | "engine"
}

/**
 * The notification routing policy of the engine.
 *
 * @since 0.1.0
 */
export class NotificationRouting extends Context.Tag("@tent/core/NotificationRouting")<
  NotificationRouting,
  NotificationRoutingShape
>() {}

const firstOnly = new WeakMap<NotifySenders, ReadonlyArray<NotifySender>>()

/**
 * TENT `main`: first installed transport only, no fallback, drain the first only, TCP installs the callback.
 *
 * @since 0.1.0
 */
export const legacy: NotificationRoutingShape = {
  route: (_n, senders) => {
    let order = firstOnly.get(senders)
    if (order === undefined) {
      order = senders.transports.slice(0, 1)
      firstOnly.set(senders, order)
    }
    return order
  },
  fallback: () => false,
  drainOrder: (installed) => installed.slice(0, 1),
  rpcCallback: "tcp"
}

/**
 * {@link legacy} as a Layer.
 *
 * @since 0.1.0
 */
export const layerLegacy: Layer.Layer<NotificationRouting> = Layer.succeed(NotificationRouting, legacy)

/** The failures of a sender after which nothing left this host, so the next sender may carry the notification. */
const NOTHING_LEFT = new Set([
  "DeviceNotFound", // no enabled RDMA device
  "RdmaError", // the post failed
  "EndpointUnavailable", // the notify QP is not connected (disabled, never set up) or the endpoint is retiring
  "BootstrapRejected", // the peer answered the bootstrap and refused it (its device is down): its control plane is up
  "NotificationTooLarge",
  "NotificationNotSupported"
])

const routes = new WeakMap<
  NotifySenders,
  { readonly all: ReadonlyArray<NotifySender>; readonly large: ReadonlyArray<NotifySender> }
>()

/**
 * RFC PR 3: every installed transport in slot order, then the control plane's `Notify`; a failure after which nothing
 * left the host (no device, a failed post, a notify QP not connected, a refused bootstrap) moves on to the next, a
 * failed control-plane call (`TransportFailure`: the peer did not answer, a bootstrap timeout included) does not — a
 * dead control plane costs the one timeout the caller already paid; a notification larger than a slot skips the
 * notify QP; every queue is drained; the engine takes `Notify` even without the TCP transport.
 *
 * @since 0.1.0
 */
export const rpcFallback: NotificationRoutingShape = {
  route: (n, senders) => {
    let r = routes.get(senders)
    if (r === undefined) {
      const all = [...senders.transports, senders.controlPlane]
      r = { all, large: all.filter((s) => s.kind !== "rdma") }
      routes.set(senders, r)
    }
    return n.name.length + n.msg.length > senders.slotPayload ? r.large : r.all
  },
  fallback: (error) =>
    typeof error === "object" && error !== null && NOTHING_LEFT.has((error as { _tag?: string })._tag ?? ""),
  drainOrder: () => ["rdma", "tcp"],
  rpcCallback: "engine"
}

/**
 * {@link rpcFallback} as a Layer (`Series.RpcFallback`).
 *
 * @since 0.1.0
 */
export const layer: Layer.Layer<NotificationRouting> = Layer.succeed(NotificationRouting, rpcFallback)
