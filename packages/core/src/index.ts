/**
 * `@tent/core`: the transfer engine as TENT `main` has it — `TransferEngine` (segments, transfers over rails,
 * notifications over RDMA, TCP and the control plane), its configuration (`EngineConfig`), its errors, `Diagnostics`
 * for tools — and the seven policy seams of the RFC's series, each with its legacy Layer (`Series.legacy`). The
 * engine's parts live under `src/internal/` (see the README's walk of one notification).
 *
 * @since 0.1.0
 */
export * as CtrlFrame from "./CtrlFrame.js"
export * as Dedup from "./Dedup.js"
export * as DescriptorPolicy from "./DescriptorPolicy.js"
export * as Diagnostics from "./Diagnostics.js"
export * as EngineConfig from "./EngineConfig.js"
export * from "./Errors.js"
export * as Metrics from "./Metrics.js"
export * as MetricsConfig from "./MetricsConfig.js"
export * as MetricsExport from "./MetricsExport.js"
export * as NotificationRouting from "./NotificationRouting.js"
export * as NotifyFrame from "./NotifyFrame.js"
export * as NotifyQpParams from "./NotifyQpParams.js"
export * as PeerHealth from "./PeerHealth.js"
export * as QpRetirement from "./QpRetirement.js"
export * as Receipts from "./Receipts.js"
export * as Resend from "./Resend.js"
export * as Series from "./Series.js"
export * as TransferEngine from "./TransferEngine.js"
