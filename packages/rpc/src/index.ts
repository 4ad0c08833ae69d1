/**
 * `@tent/rpc`: the control plane of the engine. Schema models, the `@effect/rpc` group, a TCP server (a listener bound
 * first, served later), the `RpcAgent` client with per-call timeouts, failures told apart and a `CallGuard` seam, the
 * one codec of TENT's notification payload (`NotifyWire`), the segment `Registry` and the descriptor cache.
 *
 * @since 0.1.0
 */
export * from "./ControlPlane.js"
/**
 * The per-engine cache of segment descriptors in front of the `Registry`, and its `StaleClassifier` seam.
 *
 * @since 0.1.0
 */
export * as DescriptorCache from "./DescriptorCache.js"
/**
 * The control plane's errors: `TransportFailure` when a peer did not answer, and the refusals a peer answers with.
 *
 * @since 0.1.0
 */
export * from "./Errors.js"
/** `host:port` (IPv6 hosts in brackets) parsed, or `undefined`: what a peer's address under the peer registry is. */
export {
  /**
   * Formats a host and port as a peer's RPC address: `host:port`, IPv6 hosts in brackets.
   *
   * @since 0.1.0
   */
  formatAddress,
  /**
   * A peer's RPC address (`host:port` or `[v6]:port`) split into host and port, or `undefined` when it does not parse.
   *
   * @since 0.1.0
   */
  parseAddress
} from "./internal/address.js"
/**
 * The control plane's metrics, and the helpers every tent `Metrics` module defines its metrics with.
 *
 * @since 0.1.0
 */
export * as Metrics from "./Metrics.js"
/**
 * The schemas of what the control plane carries: endpoint, device, buffer and segment descriptors, notifications.
 *
 * @since 0.1.0
 */
export * from "./Models.js"
/**
 * TENT's notification wire payload, the one codec of it.
 *
 * @since 0.1.0
 */
export * as NotifyWire from "./NotifyWire.js"
/**
 * The segment registry: the peer registry, a central one in memory, or one in Redis.
 *
 * @since 0.1.0
 */
export * as Registry from "./Registry.js"
/**
 * The `RpcAgent`, the only client through which the engine calls a peer.
 *
 * @since 0.1.0
 */
export * as RpcAgent from "./RpcAgent.js"
/**
 * The control plane's settings, the `rpc/*` keys of the engine's configuration.
 *
 * @since 0.1.0
 */
export * as RpcConfig from "./RpcConfig.js"
/**
 * The control-plane TCP server: a listener bound first, served later.
 *
 * @since 0.1.0
 */
export * as Server from "./Server.js"
/**
 * The stock `@effect/rpc` server and client over TCP, kept to measure against and for peers that speak it.
 *
 * @since 0.1.0
 */
export * as Stock from "./Stock.js"
/**
 * TENT's JSON bodies of its control-plane calls (`Notify`, `BootstrapDesc`, `SegmentDesc`, the `SendData`/`RecvData`
 * header), encoded byte for byte as TENT's nlohmann/json writes them and decoded as its `from_json` reads them.
 *
 * @since 0.2.0
 */
export * as Bodies from "./tent/Bodies.js"
/**
 * TENT's control-plane wire: yalantinglibs `coro_rpc` frames carrying `CoroRpcAgent::process(func_id)`, their
 * struct_pack bodies and a streaming decoder.
 *
 * @since 0.2.0
 */
export * as CoroRpc from "./tent/CoroRpc.js"
/**
 * A client of a TENT peer's control plane over coro_rpc: `notify`, `getSegmentDesc`, `bootstrap`, `probe`.
 *
 * @since 0.2.0
 */
export * as TentClient from "./tent/TentClient.js"
/**
 * A coro_rpc listener that answers TENT peers: func ids dispatched to handlers, TENT's answers for the rest.
 *
 * @since 0.2.0
 */
export * as TentServer from "./tent/TentServer.js"
