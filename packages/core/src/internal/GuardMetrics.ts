/**
 * The counters of the guards against hostile peers — identity binding, the bounds on accepted endpoints and on queued
 * notifications — declared here and exported by `Metrics`, whose catalogue lists them.
 */
import { Metrics as Rpc } from "@tent/rpc"

/** `Bootstrap`s a guard refused before any endpoint was touched, by reason. */
export const bootstrapsRefused = Rpc.counter(
  "tent_bootstrap_refused_total",
  "Bootstraps refused: identity (a NIC path not of the proven peer), peer_endpoints or accepted_bytes (max_endpoints_per_peer, max_accepted_bytes reached)",
  ["reason"]
)

/** Received notifications a guard did not admit, by reason. */
export const notificationsRefused = Rpc.counter(
  "tent_notify_refused_total",
  "received notifications not admitted, by reason (foreign_session: a session bound to another sender segment; inbox_full: queues at max_queued_bytes)",
  ["reason"]
)

/** Why a `Bootstrap` was refused (the `reason` label of {@link bootstrapsRefused}). */
export type BootstrapRefusal = "identity" | "peer_endpoints" | "accepted_bytes"

/** The series of {@link bootstrapsRefused}, by reason. */
export const bootstrapRefused: Readonly<Record<BootstrapRefusal, Rpc.Series>> = {
  identity: bootstrapsRefused.child("identity"),
  peer_endpoints: bootstrapsRefused.child("peer_endpoints"),
  accepted_bytes: bootstrapsRefused.child("accepted_bytes")
}

/** `tent_notify_refused_total{reason="foreign_session"}`. */
export const foreignSession = notificationsRefused.child("foreign_session")
/** `tent_notify_refused_total{reason="inbox_full"}`. */
export const inboxFull = notificationsRefused.child("inbox_full")
