/**
 * `@tent/core`: the transfer engine as TENT `main` has it — `TransferEngine` (segments, transfers over rails,
 * notifications over RDMA, TCP and the control plane), its configuration (`EngineConfig`), its errors, `Diagnostics`
 * for tools — and the seven policy seams of the RFC's series, each with its legacy Layer (`Series.legacy`). The
 * engine's parts live under `src/internal/` (see the README's walk of one notification).
 *
 * @since 0.1.0
 */
export * as CtrlFrame from "./CtrlFrame.js"
/**
 * Seam of RFC PR 6: how a notification is framed and stamped, and whether a received one is a duplicate.
 *
 * @since 0.1.0
 */
export * as Dedup from "./Dedup.js"
/**
 * Seam of RFC PR 5: what a failed operation against a cached segment descriptor does to the cache.
 *
 * @since 0.1.0
 */
export * as DescriptorPolicy from "./DescriptorPolicy.js"
/**
 * What tools and fault-injection harnesses read and do inside a running engine.
 *
 * @since 0.1.0
 */
export * as Diagnostics from "./Diagnostics.js"
/**
 * The engine's configuration: TENT's `transfer-engine.json` plus environment variables, as one `ConfigProvider`.
 *
 * @since 0.1.0
 */
export * as EngineConfig from "./EngineConfig.js"
/**
 * The engine's own typed errors.
 *
 * @since 0.1.0
 */
export * from "./Errors.js"
/**
 * The engine's Effect `Metric`s on the notification paths.
 *
 * @since 0.1.0
 */
export * as Metrics from "./Metrics.js"
/**
 * The metrics export's configuration: TENT's `metrics/*` keys.
 *
 * @since 0.1.0
 */
export * as MetricsConfig from "./MetricsConfig.js"
/**
 * The metrics export: Effect's global metric registry served in the Prometheus text format.
 *
 * @since 0.1.0
 */
export * as MetricsExport from "./MetricsExport.js"
/**
 * Seam of RFC PR 3: which senders a notification tries, in what order, and which queues are drained.
 *
 * @since 0.1.0
 */
export * as NotificationRouting from "./NotificationRouting.js"
/**
 * The notification wire payload of TENT `main` on the notify QP.
 *
 * @since 0.1.0
 */
export * as NotifyFrame from "./NotifyFrame.js"
/**
 * Seam of RFC PR 2: the RC attributes the notify QP is brought up with.
 *
 * @since 0.1.0
 */
export * as NotifyQpParams from "./NotifyQpParams.js"
/**
 * Seam of RFC PR 4: a decoration of the engine's control-plane agent that remembers dead peers.
 *
 * @since 0.1.0
 */
export * as PeerHealth from "./PeerHealth.js"
/**
 * Seam of RFC PR 1: what retiring an endpoint does to its notify QP.
 *
 * @since 0.1.0
 */
export * as QpRetirement from "./QpRetirement.js"
/**
 * Delivery receipts, past the RFC: the seam that turns an accepted notification into a promise.
 *
 * @since 0.2.0
 */
export * as Receipts from "./Receipts.js"
/**
 * Seam of RFC PR 7: what happens to notifications a disabled or retired notify QP had not completed.
 *
 * @since 0.1.0
 */
export * as Resend from "./Resend.js"
/**
 * The seven policy seams of the RFC's series, composed.
 *
 * @since 0.1.0
 */
export * as Series from "./Series.js"
/**
 * Submit hooks past the RFC: transfer-bound notifications that never re-send to a served target, and failure notices.
 *
 * @since 0.3.0
 */
export * as SubmitHooks from "./SubmitHooks.js"
/**
 * The `TransferEngine` service: segments, transfers and notifications over the installed transports.
 *
 * @since 0.1.0
 */
export * as TransferEngine from "./TransferEngine.js"
