/**
 * `Metrics` of peer health and rail health: what `PeerHealth` marked, cleared, failed fast and probed, and when
 * `RailHealth` paused a (local NIC, remote NIC) pair. Defined with `@tent/rpc`'s `Metrics` helpers (one series per
 * label set resolved once; synchronous increments; naming as exported: see that module). The `peer` label is added
 * only while peer labels are switched on (`@tent/core`'s `Metrics.setPeerLabels`).
 *
 * These count every `PeerHealth`/`RailHealth` instance of the process together (the registry is global); the
 * per-instance counters (`PeerHealthMetrics`, `RailHealth.snapshot`) stay where they are.
 *
 * @since 0.1.0
 */
import { Metrics } from "@tent/rpc"

/**
 * Transport failures that (re)armed a peer's cooldown, by who saw them: a `call` or the `probe`r.
 *
 * @since 0.1.0
 */
export const peerMarks = Metrics.counter(
  "tent_peer_health_marks_total",
  "transport failures that marked a peer unreachable or re-armed its cooldown, by source (call, probe)",
  ["source"],
  { peer: true }
)

/**
 * Marks cleared by a reply.
 *
 * @since 0.1.0
 */
export const peerClears = Metrics.counter(
  "tent_peer_health_clears_total",
  "unreachable marks cleared by a reply (a call's or a probe's)",
  [],
  { peer: true }
)

/**
 * Calls refused at once while a peer's cooldown ran.
 *
 * @since 0.1.0
 */
export const fastFailures = Metrics.counter(
  "tent_peer_health_fast_failures_total",
  "control-plane calls failed at once (TransportFailure Timeout) because the peer's cooldown was running",
  [],
  { peer: true }
)

/**
 * Probes of marked peers, by outcome: `success` (cleared), `failure` (re-marked), `defect` (logged).
 *
 * @since 0.1.0
 */
export const probes = Metrics.counter(
  "tent_peer_health_probes_total",
  "probes the prober sent to marked peers, by outcome (success, failure, defect)",
  ["outcome"],
  { peer: true }
)

/**
 * Rail errors counted, by local NIC; `tent_rail_pauses_total` counts those that paused or re-armed a pause.
 *
 * @since 0.1.0
 */
export const railErrors = Metrics.counter(
  "tent_rail_errors_total",
  "failures charged to a (local NIC, remote NIC) pair, by local NIC (the peer label: the remote rail, e.g. peer-a/mlx5_0)",
  ["local_nic"],
  { peer: true }
)

/**
 * Rails paused (`paused`) or whose pause an error extended (`rearmed`), by local NIC.
 *
 * @since 0.1.0
 */
export const railPauses = Metrics.counter(
  "tent_rail_pauses_total",
  "(local NIC, remote NIC) pairs paused after rail_error_threshold errors (kind paused), or whose pause a further error extended (kind rearmed)",
  ["local_nic", "kind"],
  { peer: true }
)

/**
 * This package's metrics.
 *
 * @since 0.1.0
 */
export const catalog: ReadonlyArray<Metrics.CatalogEntry> = [
  peerMarks.entry,
  peerClears.entry,
  fastFailures.entry,
  probes.entry,
  railErrors.entry,
  railPauses.entry
]
