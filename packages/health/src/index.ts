/** Metrics of peer health and rail health (Effect `Metric`s in the global registry). */
export * as Metrics from "./Metrics.js"
/** Peer health: RFC PR 4's record of peers whose control plane stopped answering, and its prober. */
export * as PeerHealth from "./PeerHealth.js"
/** Rail health: TENT's RailMonitor rules per (local NIC, remote NIC) pair, as an Effect service. */
export * as RailHealth from "./RailHealth.js"
