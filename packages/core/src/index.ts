/**
 * `@tent/core`: the transfer engine as TENT `main` has it — config, segments, RDMA endpoints with data QPs and a
 * notify QP, the notify path, transfers over rails, the TCP transport, the `TransferEngine` service — and the seven
 * policy seams of the RFC's series, each with its legacy Layer (`Series.legacy`).
 *
 * @since 0.1.0
 */
export * as Dedup from "./Dedup.js"
export * as DescriptorPolicy from "./DescriptorPolicy.js"
export * as EndpointStore from "./EndpointStore.js"
export * as EngineConfig from "./EngineConfig.js"
export * from "./Errors.js"
export * as NotificationRouting from "./NotificationRouting.js"
export * as NotifyFrame from "./NotifyFrame.js"
export * as NotifyQpParams from "./NotifyQpParams.js"
export * as PeerHealth from "./PeerHealth.js"
export * as QpRetirement from "./QpRetirement.js"
export * as RdmaEndpoint from "./RdmaEndpoint.js"
export * as RdmaTransport from "./RdmaTransport.js"
export * as Resend from "./Resend.js"
export * as Series from "./Series.js"
export * as TcpTransport from "./TcpTransport.js"
export * as TransferEngine from "./TransferEngine.js"
export * as Transfers from "./Transfers.js"
