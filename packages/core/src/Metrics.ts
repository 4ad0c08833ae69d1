/**
 * `Metrics`: the engine's Effect `Metric`s, one per thing an operator watches on the notification paths — sent,
 * received and failed per transport, fallbacks taken, resends, duplicates dropped, frames rejected, unknown-QP drops,
 * notify send-slot waits, notify QP errors and disables, endpoint retirements, transfers — and {@link allMetrics},
 * every metric of tent (with `@tent/health`'s and `@tent/rpc`'s), as the README's metrics table lists them.
 *
 * They live in Effect's global metric registry: read them with `Metric.value` / `Metric.snapshot`, export them with
 * `@effect/opentelemetry`. The names are the exported ones (counters are incremental and end in `_total`, which
 * OpenTelemetry's Prometheus exporter keeps as is; see `@tent/rpc`'s `Metrics` for what was checked).
 *
 * Hot path: every label set is resolved to its registry hook once, here, at module load ({@link Series}); the
 * notification paths increment it with a plain synchronous call (`sentRdma.update(1)`), no Effect, no allocation,
 * no registry lookup per notification. A per-peer series is looked up in a `Map` only while {@link setPeerLabels}
 * is on.
 *
 * @since 0.1.0
 */
import { Metrics as Health } from "@tent/health"
import { NotifyWire, Metrics as Rpc } from "@tent/rpc"
import * as CtrlFrame from "./CtrlFrame.js"
import * as Guards from "./internal/GuardMetrics.js"

/**
 * One metric as the README's table documents it.
 *
 * @since 0.1.0
 */
export type CatalogEntry = Rpc.CatalogEntry

/**
 * A label set's series: `update(n, peer?)`.
 *
 * @since 0.1.0
 */
export type Series = Rpc.Series

/**
 * Adds (or stops adding) a `peer` label to the metrics that take one (see {@link allMetrics}' `optionalLabels`);
 * off by default, as one series per peer can be many. Synchronous, effective from the next increment. Wired to the
 * config key `metrics/peer_labels` by the CLI.
 * @since 0.1.0 */
export const setPeerLabels: (on: boolean) => void = Rpc.setPeerLabels

/** Whether the `peer` label is on.
 * @since 0.1.0 */
export const peerLabels: () => boolean = Rpc.peerLabels

/**
 * The transports a notification goes over: RDMA notify QP, the TCP transport, the control plane's `Notify`.
 *
 * @since 0.1.0
 */
export type Transport = "rdma" | "tcp" | "rpc"

/** Notifications handed to a transport (posted on the notify QP, written to TCP, sent with `Notify`).
 * @since 0.1.0 */
export const notificationsSent = Rpc.counter(
  "tent_notifications_sent_total",
  "notifications sent, by transport (rdma: posted on a notify QP; tcp: the TCP transport's Notify; rpc: the control plane's own Notify), resends included",
  ["transport"],
  { peer: true }
)

/** Notifications delivered to this engine's handlers, by the transport that brought them.
 * @since 0.1.0 */
export const notificationsReceived = Rpc.counter(
  "tent_notifications_received_total",
  "notifications received and delivered (duplicates not counted), by transport (a Notify is tcp when the TCP transport takes it, else rpc)",
  ["transport"],
  { peer: true }
)

/** Notifications a transport failed to send (the caller may then fall back to the next).
 * @since 0.1.0 */
export const notificationsFailed = Rpc.counter(
  "tent_notifications_failed_total",
  "notification sends that failed on a transport, by transport (a fallback may still deliver them)",
  ["transport"],
  { peer: true }
)

/** A notification sent over a later transport after an earlier one failed or was unavailable.
 * @since 0.1.0 */
export const fallbacks = Rpc.counter(
  "tent_fallbacks_total",
  "notifications that fell back from one transport to the next (from, to)",
  ["from", "to"],
  { peer: true }
)

/** Pending notifications of a retired channel resent, by the transport that took them, and those lost.
 * @since 0.1.0 */
export const resends = Rpc.counter(
  "tent_resends_total",
  "pending notifications of a retired or disabled notify channel: resent (rdma, tcp, rpc; sent), lost (none, failed), unstamped (none, not_resendable)",
  ["transport", "outcome"],
  { peer: true }
)

/** Notify channels handed to the resend with entries pending.
 * @since 0.1.0 */
export const resendChannels = Rpc.counter(
  "tent_resend_channels_total",
  "notify channels retired or disabled with notifications pending, handed to the resend",
  []
)

/** NIC-pair attempts of the resend, by pair and outcome (`sent`, `failed`, `skipped`: the pair was paused).
 * @since 0.1.0 */
export const resendPairAttempts = Rpc.counter(
  "tent_resend_pair_attempts_total",
  "NIC-pair attempts of the resend, by local NIC, peer NIC and outcome (sent, failed, skipped: pair paused)",
  ["local_nic", "peer_nic", "outcome"]
)

/** Stamped notifications dropped by the dedup window as copies already delivered.
 * @since 0.1.0 */
export const duplicatesDropped = Rpc.counter(
  "tent_duplicates_dropped_total",
  "stamped notifications dropped by the dedup window as copies of one already delivered",
  []
)

/** Stamped notifications dropped as older than their session's window.
 * @since 0.1.0 */
export const dedupTooOld = Rpc.counter(
  "tent_dedup_too_old_total",
  "stamped notifications dropped as older than their session's dedup window",
  []
)

/** Dedup sessions forgotten: `evicted` (over `notification/dedup_max_sessions`) or `expired` (idle past the TTL).
 * @since 0.1.0 */
export const dedupSessionsDropped = Rpc.counter(
  "tent_dedup_sessions_dropped_total",
  "dedup sessions forgotten, by cause (evicted: over dedup_max_sessions; expired: idle past dedup_session_ttl_ms)",
  ["cause"]
)

/**
 * Why a received frame was dropped (the `reason` label): a `NotifyWire` or `CtrlFrame` reject, or `slot` for a
 * completion whose slot index or length is out of range.
 * @since 0.1.0 */
export const FRAME_REJECT_REASONS = [
  "empty",
  "short",
  "name_too_long",
  "msg_too_long",
  "magic",
  "version",
  "type",
  "not_notify",
  "flags",
  "payload_length",
  "payload_short",
  "trailing",
  "slot",
  "other"
] as const

/** Received notification frames that did not decode, dropped and counted, by reason.
 * @since 0.1.0 */
export const framesRejected = Rpc.counter(
  "tent_frames_rejected_total",
  "received notify QP frames dropped as malformed, by reason (a NotifyWire or CtrlFrame reject: short, magic, ...; slot: bad slot index or length)",
  ["reason"]
)

/** Successful notify completions whose QP number was not in the table (TENT "unknown QP").
 * @since 0.1.0 */
export const unknownQpDrops = Rpc.counter(
  "tent_unknown_qp_drops_total",
  "notify completions dropped because their QP number was not in the QP table",
  []
)

/** Waits for a free notify send slot (window unit), seconds, by outcome (`ok`, `timeout`).
 * @since 0.1.0 */
export const slotWait = Rpc.histogram(
  "tent_notify_slot_wait_seconds",
  "waits of a notification for a free notify send slot, seconds (only sends that had to wait)",
  Rpc.latencyBoundaries,
  ["outcome"]
)

/** Slot waits that ran out of time (the send then fails or falls back).
 * @since 0.1.0 */
export const slotWaitTimeouts = Rpc.counter(
  "tent_notify_slot_wait_timeouts_total",
  "notifications that waited for a notify send slot past the timeout",
  []
)

/** Failed notify completions other than the flushes of an endpoint no longer ready.
 * @since 0.1.0 */
export const notifyQpErrors = Rpc.counter(
  "tent_notify_qp_errors_total",
  "failed notify QP completions (not counting flushes of endpoints no longer ready)",
  []
)

/** Notify channels disabled (TENT's `notify_connected_ = false`): after an error, or injected.
 * @since 0.1.0 */
export const notifyQpDisables = Rpc.counter(
  "tent_notify_qp_disables_total",
  "notify channels disabled, so notifications towards that peer take the fallback path",
  []
)

/** Endpoints retired, by cause.
 * @since 0.1.0 */
export const retirements = Rpc.counter(
  "tent_endpoint_retirements_total",
  "RDMA endpoints retired (QPs to ERR, then destroyed), by cause (reset, data_error, evicted, reconnect, setup_failed, shutdown)",
  ["cause"]
)

/** Bytes moved by transfers, by op (`read`, `write`) and transport.
 * @since 0.1.0 */
export const transferBytes = Rpc.counter(
  "tent_transfer_bytes_total",
  "bytes of completed transfer slices, by op (read, write) and transport (rdma, tcp)",
  ["op", "transport"]
)

/** Transfer slices tried again after a failure.
 * @since 0.1.0 */
export const sliceRetries = Rpc.counter(
  "tent_transfer_slice_retries_total",
  "transfer slices posted again after a failed attempt",
  []
)

/** Notifications whose subscribed handler threw (the notification still counts as received).
 * @since 0.1.0 */
export const handlerErrors = Rpc.counter(
  "tent_handler_errors_total",
  "calls of a subscribed notification handler that threw",
  []
)

// -----------------------------------------------------------------------------------------------------------------
// Series resolved once, for the paths that increment them
// -----------------------------------------------------------------------------------------------------------------

const byTransport = (family: typeof notificationsSent): Readonly<Record<Transport, Series>> => ({
  rdma: family.child("rdma"),
  tcp: family.child("tcp"),
  rpc: family.child("rpc")
})

/** `tent_notifications_sent_total` by transport.
 * @since 0.1.0 */
export const sent = byTransport(notificationsSent)
/** `tent_notifications_received_total` by transport.
 * @since 0.1.0 */
export const received = byTransport(notificationsReceived)
/** `tent_notifications_failed_total` by transport.
 * @since 0.1.0 */
export const failed = byTransport(notificationsFailed)

const fallbackSeries = new Map<string, Series>()
/**
 * `tent_fallbacks_total{from, to}` (three transports: at most six series).
 *
 * @since 0.1.0
 */
export const fallback = (from: Transport, to: Transport): Series => {
  const k = `${from}>${to}`
  let series = fallbackSeries.get(k)
  if (series === undefined) {
    series = fallbacks.child(from, to)
    fallbackSeries.set(k, series)
  }
  return series
}

// The series an operator expects on a fresh engine's first scrape, at 0 (a label set has no series, and the exporter
// writes no family, until it is made): the slot order's fallbacks, every retirement cause, the resend's channels.
for (const [from, to] of [
  ["rdma", "tcp"],
  ["rdma", "rpc"],
  ["tcp", "rpc"]
] as const)
  fallback(from, to)

/** `tent_resends_total` by what became of a pending notification.
 * @since 0.1.0 */
export const resent = {
  rdma: resends.child("rdma", "sent"),
  tcp: resends.child("tcp", "sent"),
  rpc: resends.child("rpc", "sent"),
  failed: resends.child("none", "failed"),
  notResendable: resends.child("none", "not_resendable")
} as const

/** `tent_duplicates_dropped_total`.
 * @since 0.1.0 */
export const duplicate = duplicatesDropped.child()
/** `tent_dedup_too_old_total`.
 * @since 0.1.0 */
export const tooOld = dedupTooOld.child()
/** `tent_dedup_sessions_dropped_total` by cause.
 * @since 0.1.0 */
export const sessionEvicted = dedupSessionsDropped.child("evicted")
/** `tent_dedup_sessions_dropped_total` with cause `expired` (idle past `dedup_session_ttl_ms`).
 * @since 0.1.0 */
export const sessionExpired = dedupSessionsDropped.child("expired")

const rejectSeries: Array<Series> = []
const rejectOther = framesRejected.child("other")
const rejectReason = (code: number, reason: (typeof FRAME_REJECT_REASONS)[number]) => {
  rejectSeries[code] = framesRejected.child(reason)
}
rejectReason(NotifyWire.Reject.Empty, "empty")
rejectReason(NotifyWire.Reject.Short, "short")
rejectReason(NotifyWire.Reject.NameTooLong, "name_too_long")
rejectReason(NotifyWire.Reject.MsgTooLong, "msg_too_long")
rejectReason(CtrlFrame.Reject.Short, "short")
rejectReason(CtrlFrame.Reject.Magic, "magic")
rejectReason(CtrlFrame.Reject.Version, "version")
rejectReason(CtrlFrame.Reject.Type, "type")
rejectReason(CtrlFrame.Reject.NotNotify, "not_notify")
rejectReason(CtrlFrame.Reject.Flags, "flags")
rejectReason(CtrlFrame.Reject.PayloadLength, "payload_length")
rejectReason(CtrlFrame.Reject.PayloadShort, "payload_short")
rejectReason(CtrlFrame.Reject.NameTooLong, "name_too_long")
rejectReason(CtrlFrame.Reject.MsgTooLong, "msg_too_long")
rejectReason(CtrlFrame.Reject.Trailing, "trailing")

/**
 * `tent_frames_rejected_total` of a `NotifyWire`/`CtrlFrame` reject code (`other` for a code not listed).
 *
 * @since 0.1.0
 */
export const rejected = (code: number): Series => rejectSeries[code] ?? rejectOther
/** `tent_frames_rejected_total{reason="slot"}`: a receive completion whose slot index or length is out of range.
 * @since 0.1.0 */
export const rejectedSlot = framesRejected.child("slot")

/** `tent_unknown_qp_drops_total`.
 * @since 0.1.0 */
export const unknownQp = unknownQpDrops.child()
/** `tent_notify_slot_wait_seconds` by outcome, and `tent_notify_slot_wait_timeouts_total`.
 * @since 0.1.0 */
export const slotWaitOk = slotWait.child("ok")
/** `tent_notify_slot_wait_seconds` with outcome `timeout`.
 * @since 0.1.0 */
export const slotWaitTimedOut = slotWait.child("timeout")
/** `tent_notify_slot_wait_timeouts_total`.
 * @since 0.1.0 */
export const slotTimeout = slotWaitTimeouts.child()
/** `tent_notify_qp_errors_total`, `tent_notify_qp_disables_total`.
 * @since 0.1.0 */
export const notifyQpError = notifyQpErrors.child()
/** `tent_notify_qp_disables_total`.
 * @since 0.1.0 */
export const notifyQpDisable = notifyQpDisables.child()

/**
 * Why an endpoint was retired (the `cause` label of `tent_endpoint_retirements_total`).
 *
 * @since 0.1.0
 */
export type RetireCause = "reset" | "data_error" | "evicted" | "reconnect" | "setup_failed" | "shutdown"

const retireSeries = new Map<RetireCause, Series>()
/**
 * `tent_endpoint_retirements_total{cause}`.
 *
 * @since 0.1.0
 */
export const retired = (cause: RetireCause): Series => {
  let series = retireSeries.get(cause)
  if (series === undefined) {
    series = retirements.child(cause)
    retireSeries.set(cause, series)
  }
  return series
}
for (const cause of ["reset", "data_error", "evicted", "reconnect", "setup_failed", "shutdown"] as const) retired(cause)

/** `tent_resend_channels_total`.
 * @since 0.1.0 */
export const resendChannel = resendChannels.child()

/** `tent_transfer_bytes_total` by op and transport.
 * @since 0.1.0 */
export const bytes = {
  read: { rdma: transferBytes.child("read", "rdma"), tcp: transferBytes.child("read", "tcp") },
  write: { rdma: transferBytes.child("write", "rdma"), tcp: transferBytes.child("write", "tcp") }
} as const
/** `tent_transfer_slice_retries_total`.
 * @since 0.1.0 */
export const sliceRetry = sliceRetries.child()
/** `tent_handler_errors_total`.
 * @since 0.1.0 */
export const handlerError = handlerErrors.child()

/** Accepted notifications that ended without a receipt (delivery receipts), by reason.
 * @since 0.2.0 */
export const notificationsUndelivered = Rpc.counter(
  "tent_notify_undelivered_total",
  "accepted notifications that ended as an Undelivered event instead of a receipt, by reason (PeerRestarted, Timeout, NotResendable, Rejected, Unconfirmed)",
  ["reason"],
  { peer: true }
)

/** Time from acceptance to receipt.
 * @since 0.2.0 */
export const receiptSeconds = Rpc.histogram(
  "tent_notify_receipt_seconds",
  "time from sendNotification accepting a notification to its receipt, seconds",
  Rpc.latencyBoundaries,
  []
)

/** Header-only `CTRL_ACK`s this engine sent (receipts of what it received).
 * @since 0.2.0 */
export const acksSent = Rpc.counter(
  "tent_notify_acks_sent_total",
  "header-only CTRL_ACK frames sent on notify QPs (cumulative receipts of the notifications received)",
  []
)

const undeliveredSeries = new Map<string, Series>()
/**
 * `tent_notify_undelivered_total{reason}`.
 *
 * @since 0.2.0
 */
export const undelivered = (reason: string): Series => {
  let series = undeliveredSeries.get(reason)
  if (series === undefined) {
    series = notificationsUndelivered.child(reason)
    undeliveredSeries.set(reason, series)
  }
  return series
}
for (const reason of ["PeerRestarted", "Timeout", "NotResendable", "Rejected", "Unconfirmed"]) undelivered(reason)
/** `tent_notify_receipt_seconds`.
 * @since 0.2.0 */
export const receiptLatency = receiptSeconds.child()
/** `tent_notify_acks_sent_total`.
 * @since 0.2.0 */
export const ackSent = acksSent.child()

export {
  /** `Bootstrap`s a guard refused (identity, endpoint bounds), no endpoint touched, by reason.
   * @since 0.3.0 */
  bootstrapsRefused,
  /** Received notifications a guard did not admit (a session bound elsewhere, full queues), by reason.
   * @since 0.3.0 */
  notificationsRefused
} from "./internal/GuardMetrics.js"

/** This package's metrics.
 * @since 0.1.0 */
export const catalog: ReadonlyArray<CatalogEntry> = [
  notificationsSent.entry,
  notificationsReceived.entry,
  notificationsFailed.entry,
  fallbacks.entry,
  resends.entry,
  resendChannels.entry,
  resendPairAttempts.entry,
  duplicatesDropped.entry,
  dedupTooOld.entry,
  dedupSessionsDropped.entry,
  framesRejected.entry,
  unknownQpDrops.entry,
  slotWait.entry,
  slotWaitTimeouts.entry,
  notifyQpErrors.entry,
  notifyQpDisables.entry,
  retirements.entry,
  transferBytes.entry,
  sliceRetries.entry,
  handlerErrors.entry,
  notificationsUndelivered.entry,
  receiptSeconds.entry,
  acksSent.entry,
  Guards.bootstrapsRefused.entry,
  Guards.notificationsRefused.entry
]

/** Every metric of tent: core's, then `@tent/health`'s, then `@tent/rpc`'s.
 * @since 0.1.0 */
export const allMetrics: ReadonlyArray<CatalogEntry> = [...catalog, ...Health.catalog, ...Rpc.catalog]
