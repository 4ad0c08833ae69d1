/**
 * `@tent/verbs`: the `Verbs` service and its providers.
 *
 * @since 0.1.0
 */
export * from "./Constants.js"
/**
 * The errors of the `Verbs` service: `DeviceNotFound`, `RdmaError` and `InvalidFaults`.
 *
 * @since 0.1.0
 */
export * from "./Errors.js"
/**
 * GIDs formatted and parsed as verbs tools print them.
 *
 * @since 0.1.0
 */
export * from "./Gid.js"
/**
 * The `Ibverbs` provider: the system `libibverbs.so.1` through koffi, for hosts with real RDMA NICs.
 *
 * @since 0.1.0
 */
export * as Ibverbs from "./Ibverbs.js"
/**
 * Bringing an RC QP up (RESET → INIT → RTR → RTS) on any `Verbs` provider, as `ibv_rc_pingpong` does.
 *
 * @since 0.1.0
 */
export * as Rc from "./Rc.js"
/**
 * The `SoftVerbs` provider: the `Verbs` service over UDP sockets, for hosts without an RDMA NIC, tests and the demo.
 *
 * @since 0.1.0
 */
export * as SoftVerbs from "./SoftVerbs.js"
/**
 * The `Verbs` service: the subset of libibverbs the transfer engine uses, typed.
 *
 * @since 0.1.0
 */
export * from "./Verbs.js"
