/**
 * The engine's own typed errors. Errors of the layers below are re-used as they are: `DeviceNotFound` and
 * `RdmaError` from `@tent/verbs`; `TransportFailure`, `BootstrapRejected`, `InvalidEntry` and
 * `NotificationTooLarge` from `@tent/rpc`.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * An endpoint could not carry the operation: its notify QP is not connected (the peer advertised no notify QP, or
 * its setup failed), or it was retired while the caller waited (TENT: "Notification QP not connected").
 *
 * @since 0.1.0
 */
export class EndpointUnavailable extends Schema.TaggedError<EndpointUnavailable>()("EndpointUnavailable", {
  segment: Schema.String,
  peerNicPath: Schema.String,
  message: Schema.String
}) {}

/**
 * No installed transport supports notifications (TENT: `InvalidArgument("Notification not supported")`).
 *
 * @since 0.1.0
 */
export class NotificationNotSupported extends Schema.TaggedError<NotificationNotSupported>()(
  "NotificationNotSupported",
  { message: Schema.String }
) {}

/**
 * A segment handle or name that this engine does not know.
 *
 * @since 0.1.0
 */
export class SegmentNotFound extends Schema.TaggedError<SegmentNotFound>()("SegmentNotFound", {
  segment: Schema.String,
  message: Schema.String
}) {}

/**
 * A transfer request that cannot be carried out as given (bounds, unregistered memory, unknown opcode).
 *
 * @since 0.1.0
 */
export class InvalidRequest extends Schema.TaggedError<InvalidRequest>()("InvalidRequest", {
  message: Schema.String
}) {}

/**
 * A batch id that was never allocated, or already freed.
 *
 * @since 0.1.0
 */
export class BatchNotFound extends Schema.TaggedError<BatchNotFound>()("BatchNotFound", {
  batchId: Schema.Number
}) {}

/**
 * A slice of the task stayed in flight longer than `transports/rdma/max_timeout_ns` (TENT's software timeout: the
 * slice ends TIMEOUT and its endpoint is retired). Reported in `BatchStatus.error`.
 *
 * @since 0.1.0
 */
export class TransferTimeout extends Schema.TaggedError<TransferTimeout>()("TransferTimeout", {
  timeoutMs: Schema.Number,
  message: Schema.String
}) {}

/**
 * No path could carry a slice of the task: every (local NIC, remote NIC) pair was paused or down, or the endpoint
 * could not be set up within `transports/rdma/workers/max_retry_count` attempts, or its last completion failed
 * (TENT: `DeviceNotFound("No available path")`, retry exhaustion). Reported in `BatchStatus.error`.
 *
 * @since 0.1.0
 */
export class RdmaTransferFailed extends Schema.TaggedError<RdmaTransferFailed>()("RdmaTransferFailed", {
  message: Schema.String
}) {}
