/**
 * `@tent/health`: peer health and rail health for the tent transfer engine, each an Effect service with its
 * metrics.
 *
 * @since 0.1.0
 */
/**
 * Metrics of peer health and rail health (Effect `Metric`s in the global registry).
 *
 * @since 0.1.0
 */
export * as Metrics from "./Metrics.js"
/**
 * Peer health: RFC PR 4's record of peers whose control plane stopped answering, and its prober.
 *
 * @since 0.1.0
 */
export * as PeerHealth from "./PeerHealth.js"
/**
 * Rail health: TENT's RailMonitor rules per (local NIC, remote NIC) pair, as an Effect service.
 *
 * @since 0.1.0
 */
export * as RailHealth from "./RailHealth.js"
