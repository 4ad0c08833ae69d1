/**
 * `@tent/rpc`: the control plane of the engine. Schema models, the `@effect/rpc` group, a TCP server (a listener bound
 * first, served later), the `RpcAgent` client with per-call timeouts, failures told apart and a `CallGuard` seam, the
 * one codec of TENT's notification payload (`NotifyWire`), the segment `Registry` and the descriptor cache.
 *
 * @since 0.1.0
 */
export * from "./ControlPlane.js"
export * as DescriptorCache from "./DescriptorCache.js"
export * from "./Errors.js"
/** `host:port` (IPv6 hosts in brackets) parsed, or `undefined`: what a peer's address under the peer registry is. */
export { formatAddress, parseAddress } from "./internal/address.js"
/** The control plane's metrics, and the helpers every tent `Metrics` module defines its metrics with. */
export * as Metrics from "./Metrics.js"
export * from "./Models.js"
export * as NotifyWire from "./NotifyWire.js"
export * as Registry from "./Registry.js"
export * as RpcAgent from "./RpcAgent.js"
export * as RpcConfig from "./RpcConfig.js"
export * as Server from "./Server.js"
export * as Stock from "./Stock.js"
