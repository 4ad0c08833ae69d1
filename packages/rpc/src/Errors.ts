/**
 * The control plane's errors: `TransportFailure` when a peer did not answer, the refusals a peer answers with, and the
 * errors of the server and the descriptor cache.
 *
 * @since 0.1.0
 */
import { Data, Schema } from "effect"

/**
 * A control-plane call did not get a reply from the peer. `reason` says why: `Refused` (nothing accepted the
 * connection: port closed, host unknown or unreachable), `Closed` (the connection broke, or was closed, before the
 * reply), `Timeout` (connect or request exceeded its timeout: the peer may be frozen), `Protocol` (a malformed frame,
 * a payload that does not encode, or a peer handler that died). `transportLevel` is always true: a failure of this
 * class never carries the peer's answer, which is what a caller (and later `PeerHealth`) needs to know.
 *
 * @since 0.1.0
 */
export class TransportFailure extends Schema.TaggedError<TransportFailure>()("TransportFailure", {
  address: Schema.String,
  reason: Schema.Literal("Refused", "Closed", "Timeout", "Protocol"),
  transportLevel: Schema.optionalWith(Schema.Literal(true), { default: () => true as const }),
  message: Schema.String
}) {}

/**
 * The reasons a {@link TransportFailure} can have.
 *
 * @since 0.1.0
 */
export type TransportFailureReason = TransportFailure["reason"]

/**
 * A `Notify` whose name and message together exceed the configured maximum (`rpc/max_notify_bytes`).
 *
 * @since 0.1.0
 */
export class NotificationTooLarge extends Schema.TaggedError<NotificationTooLarge>()("NotificationTooLarge", {
  size: Schema.Number,
  max: Schema.Number
}) {
  override get message(): string {
    return `notification of ${this.size} bytes exceeds the maximum of ${this.max} bytes`
  }
}

/**
 * The peer answered a `Notify` and refused to deliver it. `StaleIncarnation`: the stamp names an incarnation of the
 * peer other than the one that answers (the process it was meant for is gone, and with it the request state the
 * notification was about). `InboxFull` (since 0.3.0): its queues hold their byte bound and no consumer took them yet;
 * send it again later. `ForeignSession` (since 0.3.0): the stamp's session is bound there to another sender.
 * `incarnation` is the answering one's, in decimal.
 *
 * @since 0.2.0
 */
export class NotificationRefused extends Schema.TaggedError<NotificationRefused>()("NotificationRefused", {
  reason: Schema.Literal("StaleIncarnation", "InboxFull", "ForeignSession"),
  incarnation: Schema.String,
  message: Schema.String
}) {}

/**
 * The peer answered a `Bootstrap` and refused it (TENT's `reply_msg`, e.g. `NOT_READY: transport not initialized`,
 * or its device is down). Told apart from a peer that did not answer at all, which is a {@link TransportFailure}.
 *
 * @since 0.1.0
 */
export class BootstrapRejected extends Schema.TaggedError<BootstrapRejected>()("BootstrapRejected", {
  message: Schema.String
}) {}

/**
 * A registry has no valid descriptor for the segment (TENT `InvalidEntry`).
 *
 * @since 0.1.0
 */
export class InvalidEntry extends Schema.TaggedError<InvalidEntry>()("InvalidEntry", {
  segment: Schema.String,
  message: Schema.String
}) {}

/**
 * An operation ran against a cached segment descriptor and found it stale (TENT `NeedsRefreshCache`). Local to the
 * engine: the descriptor cache catches it, refetches and runs the operation once more.
 *
 * @since 0.1.0
 */
export class NeedsRefreshCache extends Data.TaggedError("NeedsRefreshCache")<{
  readonly segment: string
  readonly message: string
}> {}

/**
 * The control-plane server could not listen on the requested host and port.
 *
 * @since 0.1.0
 */
export class ServerError extends Data.TaggedError("ServerError")<{
  readonly host: string
  readonly port: number
  readonly message: string
  readonly cause?: unknown
}> {}

/**
 * A `SendData` / `RecvData` range that is not inside memory the peer registered (TENT `onSendData`/`onRecvData`
 * answer with error text). Nothing was read or written.
 *
 * @since 0.1.0
 */
export class SegmentRangeInvalid extends Schema.TaggedError<SegmentRangeInvalid>()("SegmentRangeInvalid", {
  addr: Schema.Number,
  length: Schema.Number,
  message: Schema.String
}) {}

/**
 * A `SendData` / `RecvData` of more bytes than `rpc/max_data_bytes`; refused before any buffer is allocated for it.
 *
 * @since 0.1.0
 */
export class DataTooLarge extends Schema.TaggedError<DataTooLarge>()("DataTooLarge", {
  size: Schema.Number,
  max: Schema.Number
}) {
  override get message(): string {
    return `data transfer of ${this.size} bytes exceeds the maximum of ${this.max} bytes`
  }
}
