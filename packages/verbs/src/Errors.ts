/**
 * The errors of the `Verbs` service: no usable RDMA device (`DeviceNotFound`), a verbs call that failed
 * (`RdmaError`) and fault settings the soft provider rejects (`InvalidFaults`).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * No RDMA device could be used: `reason` says whether the verbs library is missing (`LibraryMissing`), the host has
 * no devices (`NoDevices`) or the named device is absent (`Absent`); `message` says what to do about it;
 * `available` lists the devices that are present.
 *
 * @since 0.1.0
 */
export class DeviceNotFound extends Schema.TaggedError<DeviceNotFound>()("DeviceNotFound", {
  reason: Schema.optional(Schema.Literal("LibraryMissing", "NoDevices", "Absent")),
  device: Schema.optional(Schema.String),
  available: Schema.Array(Schema.String),
  message: Schema.String
}) {}

/**
 * A verbs call failed. `op` is the verbs function (`ibv_modify_qp`), `errno` the Linux errno it returned (EINVAL 22
 * for an illegal QP transition or a missing attribute), `message` says what was wrong.
 *
 * @since 0.1.0
 */
export class RdmaError extends Schema.TaggedError<RdmaError>()("RdmaError", {
  op: Schema.String,
  errno: Schema.Number,
  message: Schema.String
}) {}

/**
 * A fault-injection setting was refused and nothing changed (`SoftVerbsControl.setFaults`, `SoftDevice.setFaults`).
 * `field` names what was wrong (`dropIn`, `dropOut`, `delayMs`, an unknown key, `peer`, or `faults` for a value that is
 * not an object); `message` says what is allowed and what was given.
 *
 * @since 0.1.0
 */
export class InvalidFaults extends Schema.TaggedError<InvalidFaults>()("InvalidFaults", {
  field: Schema.String,
  message: Schema.String
}) {}
