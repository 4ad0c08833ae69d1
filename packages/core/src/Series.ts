/**
 * The seven policy seams of the RFC's series, composed. {@link legacy} reproduces TENT `main`; each RFC PR replaces
 * one seam's Layer, exported here under the name the project's design card gives it, so an application composes
 * them — or a test swaps one back for its legacy twin — in those words:
 *
 * | card name | seam (file) | RFC PR | built |
 * |---|---|---|---|
 * | {@link QpRetirement} | `QpRetirement` (QpRetirement.ts) | 1 | yes |
 * | {@link ParamsFromEndpoint} | `NotifyQpParams` (NotifyQpParams.ts) | 2 | yes |
 * | {@link RpcFallback} | `NotificationRouting` (NotificationRouting.ts) | 3 | yes |
 * | {@link PeerHealth} | `PeerHealthPolicy` (PeerHealth.ts), over `@tent/health`'s record | 4 | yes (the dead-peer record, prober, 1 s slot wait) |
 * | {@link DescriptorPolicy} | `StaleClassifier` (DescriptorPolicy.ts) | 5 | yes (peer registry and Redis: `metadata_type`) |
 * | {@link Dedup} | `Dedup` (Dedup.ts), over `CtrlFrame` and the replay window | 6 | yes (typed frames, the window) |
 * | {@link Resend} | `Resend` (Resend.ts), over a notification-path `RailHealth` of its own | 7 | yes |
 * | {@link Receipts} | `Receipts` (Receipts.ts), the ledger and ack table in `internal/Ledger.ts` | past the RFC | yes |
 * | {@link SubmitHooks} | `SubmitHooks` (SubmitHooks.ts), the hooks in `internal/Hooks.ts`, fired by `internal/Transfers.ts` | past the RFC | yes |
 *
 * {@link all} is everything built (the seven, the receipts and the submit hooks), {@link rfc} the RFC's seven alone;
 * {@link fromConfig} selects each with its key.
 *
 * @since 0.1.0
 */
import type { DescriptorCache } from "@tent/rpc"
import { Effect, Layer } from "effect"
import type { ConfigError } from "effect/ConfigError"
import * as DedupSeam from "./Dedup.js"
import * as DescriptorPolicySeam from "./DescriptorPolicy.js"
import * as EngineConfig from "./EngineConfig.js"
import * as NotificationRouting from "./NotificationRouting.js"
import * as NotifyQpParams from "./NotifyQpParams.js"
import * as PeerHealthSeam from "./PeerHealth.js"
import * as QpRetirementSeam from "./QpRetirement.js"
import * as ReceiptsSeam from "./Receipts.js"
import * as ResendSeam from "./Resend.js"
import * as SubmitHooksSeam from "./SubmitHooks.js"

/**
 * The services of the seven seams, and of the delivery receipts and submit hooks past the RFC.
 *
 * @since 0.1.0
 */
export type Policies =
  | SubmitHooksSeam.SubmitHooks
  | ReceiptsSeam.Receipts
  | QpRetirementSeam.QpRetirement
  | NotifyQpParams.NotifyQpParams
  | NotificationRouting.NotificationRouting
  | PeerHealthSeam.PeerHealthPolicy
  | DescriptorCache.StaleClassifier
  | DedupSeam.Dedup
  | ResendSeam.Resend

/**
 * RFC PR 1: the notify QP stays published until `deconstruct()`; destroy waits for it; a failed send disables it.
 *
 * @since 0.1.0
 */
export const QpRetirement: Layer.Layer<QpRetirementSeam.QpRetirement> = QpRetirementSeam.layer

/**
 * RFC PR 2: the notify QP's `path_mtu`, `min_rnr_timer`, `timeout`, `retry_cnt` from `EndPointParams`.
 *
 * @since 0.1.0
 */
export const ParamsFromEndpoint: Layer.Layer<NotifyQpParams.NotifyQpParams> = NotifyQpParams.layer

/**
 * RFC PR 3: fall back to the next transport and the control plane's `Notify`; drain every queue.
 *
 * @since 0.1.0
 */
export const RpcFallback: Layer.Layer<NotificationRouting.NotificationRouting> = NotificationRouting.layer

/**
 * RFC PR 4: a dead-peer record (`peer_health/*`) every control-plane call passes — a marked peer fails at once, any
 * reply clears it, a prober re-checks marked peers — and a 1 s bound on the wait for a notify send slot. Reads its
 * keys from the ambient config (a wrong value fails at start naming the key).
 *
 * @since 0.1.0
 */
export const PeerHealth: Layer.Layer<PeerHealthSeam.PeerHealthPolicy, ConfigError> = PeerHealthSeam.layer

/**
 * RFC PR 5: a failed control-plane call keeps the descriptor and returns its own failure. Built ahead of PR 4: with
 * PR 3's fallback and the legacy refetch, a `Notify` that timed out against a frozen peer ran again once the peer
 * answered the refetch, and the peer received it twice.
 *
 * @since 0.1.0
 */
export const DescriptorPolicy: Layer.Layer<DescriptorCache.StaleClassifier> = DescriptorPolicySeam.layer

/**
 * RFC PR 6: `notify_proto` 1; notifications to peers that advertise it are framed as `CtrlFrame` v1 stamped
 * `(session, seq)`, and every received notification passes one per-sender-session anti-replay window
 * (`notification/dedup_*`), whichever transport carried it. Peers at 0 get TENT's raw bytes.
 *
 * @since 0.1.0
 */
export const Dedup: Layer.Layer<DedupSeam.Dedup, ConfigError> = DedupSeam.layer

/**
 * RFC PR 7: every stamped notification posted to a peer that can deduplicate stays in its endpoint's pending table
 * until it completes; when the notify channel is disabled or the endpoint retires, the table is resent on the NIC
 * pairs (primary first, paused pairs skipped, ≤ 3 attempts), then TCP, then the control plane's `Notify`, each copy
 * with its first stamp so PR 6's window delivers it once. Reads `transports/rdma/rail_*` for its own pair table.
 *
 * @since 0.1.0
 */
export const Resend: Layer.Layer<ResendSeam.Resend, ConfigError> = ResendSeam.layer

/**
 * Past the RFC: delivery receipts (`notify_proto` 2). Every notification `sendNotification` accepted for a peer that
 * offers them ends receipted or as an `Undelivered` event within `notification/delivery_timeout_ms`; a call never
 * waits more than about a second on a fault; a disabled notify channel is rebuilt so traffic returns to RDMA. Needs
 * PR 6's stamps (with `notification/proto` 0 it does nothing). Reads `notification/delivery_timeout_ms`,
 * `receipt_resend_ms`, `max_unreceipted`.
 *
 * @since 0.2.0
 */
export const Receipts: Layer.Layer<ReceiptsSeam.Receipts, ConfigError> = ReceiptsSeam.layer

/**
 * Past the RFC: submit hooks (transfer-bound notifications) that never re-send to a target already served, and
 * failure notices (`notify_proto` 3) for batches that end FAILED, to peers that take them. Failure notices ride the
 * receipts: without {@link Receipts} only the first half applies.
 *
 * @since 0.3.0
 */
export const SubmitHooks: Layer.Layer<SubmitHooksSeam.SubmitHooks> = SubmitHooksSeam.layer

/**
 * TENT `main`: every seam's legacy Layer.
 *
 * @since 0.1.0
 */
export const legacy: Layer.Layer<Policies> = Layer.mergeAll(
  SubmitHooksSeam.layerLegacy,
  ReceiptsSeam.layerLegacy,
  QpRetirementSeam.layerLegacy,
  NotifyQpParams.layerLegacy,
  NotificationRouting.layerLegacy,
  PeerHealthSeam.layerLegacy,
  DescriptorPolicySeam.layerLegacy,
  DedupSeam.layerLegacy,
  ResendSeam.layerLegacy
)

/** The built PRs, with PR 3, 4 or 6 swapped for its legacy twin where its key says so. */
const compose = (o: {
  readonly rpcFallback: boolean
  readonly peerHealth: boolean
  readonly notifyProto: 0 | 1
  readonly receipts: boolean
}): Layer.Layer<Policies, ConfigError> =>
  Layer.mergeAll(
    o.receipts && o.notifyProto === 1 ? SubmitHooks : SubmitHooksSeam.layerLegacy,
    o.receipts && o.notifyProto === 1 ? Receipts : ReceiptsSeam.layerLegacy,
    QpRetirement,
    ParamsFromEndpoint,
    o.rpcFallback ? RpcFallback : NotificationRouting.layerLegacy,
    o.peerHealth ? PeerHealth : PeerHealthSeam.layerLegacy,
    DescriptorPolicy,
    o.notifyProto === 1 ? Dedup : DedupSeam.layerLegacy,
    // PR 7 resends only what PR 6 stamped: without the stamp a resend could deliver twice.
    o.notifyProto === 1 ? Resend : ResendSeam.layerLegacy
  )

/**
 * Everything built: PRs 1-7's Layers, the delivery receipts ({@link Receipts}) and the submit hooks
 * ({@link SubmitHooks}). PR 4 reads `peer_health/*`, PR 6
 * `notification/dedup_*`, PR 7 `transports/rdma/rail_*` and the receipts `notification/delivery_timeout_ms` (…) from
 * the ambient config (defaults when absent).
 *
 * @example
 * ```ts
 * import { RailHealth } from "@tent/health"
 * import { makeNotification, notificationText } from "@tent/rpc"
 * import { SoftVerbs } from "@tent/verbs"
 * import { Context, Effect, Layer, Stream } from "effect"
 * import { EngineConfig, Series, TransferEngine } from "@tent/core"
 *
 * // An engine on two SoftVerbs devices (UDP on 127.0.0.1) with the whole series, config from JSON.
 * const engine = (nic: string) =>
 *   TransferEngine.layer.pipe(
 *     Layer.provide([SoftVerbs.layer({ devices: [{ name: `${nic}0` }, { name: `${nic}1` }] }), Series.all]),
 *     Layer.provide(RailHealth.layerConfig),
 *     Layer.provide(EngineConfig.layerProvider({ json: { transports: { rdma: { num_lanes: 2 } } } })),
 *     Layer.build,
 *     Effect.map(Context.get(TransferEngine.TransferEngine))
 *   )
 *
 * const program = Effect.gen(function* () {
 *   const [a, b] = [yield* engine("a"), yield* engine("b")]
 *   const src = yield* a.registerSegment(Buffer.from("hello, rdma"))
 *   const dst = yield* b.registerSegment(Buffer.alloc(11))
 *   const target = yield* a.openSegment(b.segmentName)
 *   const batch = yield* a.allocateBatch
 *   const write = { opcode: "WRITE", source: src.addr, target, targetOffset: dst.addr, length: 11 } as const
 *   yield* a.submitTransfer(batch, [write], makeNotification("done", "batch 1"))
 *   yield* a.waitTransfer(batch)
 *   const note = yield* b.notifications.pipe(Stream.runHead, Effect.flatten)
 *   return { note: notificationText(note), data: dst.buffer.toString() }
 * }).pipe(Effect.scoped)
 *
 * Effect.runPromise(program).then(console.log) // { note: { name: 'done', msg: 'batch 1' }, data: 'hello, rdma' }
 * ```
 *
 * @since 0.1.0
 */
export const all: Layer.Layer<Policies, ConfigError> = compose({
  rpcFallback: true,
  peerHealth: true,
  notifyProto: 1,
  receipts: true
})

/**
 * The RFC's seven alone (PRs 1-7, receipts and submit hooks legacy): the RFC's own arm, to show what the series does
 * without what goes past it.
 *
 * @since 0.2.0
 */
export const rfc: Layer.Layer<Policies, ConfigError> = compose({
  rpcFallback: true,
  peerHealth: true,
  notifyProto: 1,
  receipts: false
})

/**
 * The series selected by the RFC's keys from the ambient `ConfigProvider` (provide `EngineConfig.layerProvider`
 * under it, as `TransferEngine.layerSoft` does): PRs 1, 2 and 5 have no key and are always on;
 * `notification/rpc_fallback` (default true) selects PR 3 and `peer_health/enable` (default true) PR 4, false
 * restores the legacy twin; `notification/proto` (default 1) selects PRs 6 and 7, 0 their legacy twins (raw frames, no
 * stamp: exactly the old bytes; nothing to resend without a stamp); `notification/receipts` (default true, with proto
 * 1) the delivery receipts and, with them, the submit hooks. A wrong value fails at start naming the key.
 *
 * @since 0.1.0
 */
export const fromConfig: Layer.Layer<Policies, ConfigError> = Layer.unwrapEffect(
  Effect.map(EngineConfig.seriesConfig, compose)
)
