/**
 * Seam of RFC PR 3 ("RPC fallback"): which notification-capable transports a send tries and in what order, which
 * ones `receiveNotifications` drains, and who installs the control plane's `Notify` callback.
 *
 * TENT `main` ({@link legacy}): the **first** transport (slot order: RDMA before TCP) whose `supportNotification()`
 * is true, with no fallback to the next one when it fails; only that first transport is drained, so what the TCP
 * transport queued from an incoming `Notify` is never returned while RDMA is installed; only the TCP transport
 * installs the `Notify` callback, and without it the server answers `Notify` with success and drops it. PR 3's Layer
 * falls back on `DeviceNotFound`/`RdmaError` to the next transport and then to the control plane's `Notify`, drains
 * every transport, and sends notifications larger than a notify slot over RPC (`notification/rpc_fallback`).
 *
 * @since 0.1.0
 */
import { Context, Layer } from "effect"

/** The routing policy; `T` is the engine's transport handle. The engine evaluates both orders once, when it starts. */
export interface NotificationRoutingShape {
  /** The transports a send tries, in order, from the notification-capable ones in slot order. */
  readonly sendOrder: <T>(capable: ReadonlyArray<T>) => ReadonlyArray<T>
  /** Whether a failed send moves on to the next transport of {@link sendOrder}. */
  readonly fallback: (error: unknown) => boolean
  /** The transports `receiveNotifications` drains. */
  readonly drainOrder: <T>(capable: ReadonlyArray<T>) => ReadonlyArray<T>
  /** `"tcp"`: only the TCP transport installs the `Notify` callback (none installed → dropped); `"engine"`: always. */
  readonly rpcCallback: "tcp" | "engine"
}

/** The notification routing policy of the engine. */
export class NotificationRouting extends Context.Tag("@tent/core/NotificationRouting")<
  NotificationRouting,
  NotificationRoutingShape
>() {}

/** TENT `main`: first capable transport only, no fallback, drain the first only, TCP installs the callback. */
export const legacy: NotificationRoutingShape = {
  sendOrder: (capable) => capable.slice(0, 1),
  fallback: () => false,
  drainOrder: (capable) => capable.slice(0, 1),
  rpcCallback: "tcp"
}

/** {@link legacy} as a Layer. */
export const layerLegacy: Layer.Layer<NotificationRouting> = Layer.succeed(NotificationRouting, legacy)
