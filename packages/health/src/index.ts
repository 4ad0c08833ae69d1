/** Rail health: TENT's RailMonitor rules per (local NIC, remote NIC) pair, as an Effect service. */
export * as RailHealth from "./RailHealth.js"
