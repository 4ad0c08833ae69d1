/**
 * Transfer-bound notifications past the RFC: the seam of the engine's submit hooks (the notification given to
 * `submitTransfer`, sent to each distinct target of the batch once the batch ends).
 *
 * TENT `main` ({@link legacy}): a hook fires once every task of the batch COMPLETED, to each target in turn, stopping
 * at the first failed send; a hook that did not fire whole is tried again whole on the next poll, so a target served
 * before the failure is sent the notification again (a duplicate); a batch that ends FAILED notifies nobody, so a
 * target that counts notifications per request waits out its own timeout.
 *
 * {@link layer} (`Series.SubmitHooks`):
 * - **a hook remembers the targets it served**: a retry sends only to those whose send failed, and a failed target
 *   does not keep the others waiting (each target is tried on every firing);
 * - **failure notices**: a batch that ends FAILED sends each target of each unfired hook a failure notice — the hook's
 *   notification with `failure` set to the reason (the first failed task's error) — once per hook and target (the
 *   same memory), with every guarantee of a notification to that peer (stamped, deduplicated, receipted, resent).
 *   Only to peers that advertised `notify_proto` {@link PROTO} (learnt from their `BootstrapDesc` or descriptor): a
 *   peer that does not know the flag would take the notice for a success, so it is sent nothing, as TENT sends.
 *
 * When a batch "ends FAILED": every task has ended (none in flight, so no byte lands after the notice) and a task
 * failed with no failover left: `enable_auto_failover_on_poll` off, `max_failover_attempts` spent, or no next
 * transport. A failed task that a poll would still resubmit (TENT's failover on poll) keeps the batch open: the notice
 * waits for the poll that finds no failover; a batch freed before that is not failed over any more, and its notices go
 * once it has ended. One failed task fails the whole batch (TENT's status): every target of the hook gets the notice,
 * also one whose own bytes arrived.
 *
 * The level (failure notices offered, {@link PROTO}) needs the delivery receipts (`Series.Receipts`, level 2): with
 * receipts off an engine neither sends nor takes failure notices, and the hooks still remember their targets.
 *
 * @since 0.3.0
 */
import { Context, Layer } from "effect"

/**
 * The `notify_proto` of a peer that takes failure notices (and delivery receipts, level 2, with them).
 *
 * @since 0.3.0
 */
export const PROTO = 3

/**
 * What the submit hooks do.
 *
 * @since 0.3.0
 */
export interface SubmitHooksShape {
  /** A hook remembers the targets it served; a retry sends only to the others. Legacy: false (re-sends to all). */
  readonly rememberTargets: boolean
  /** A batch that ends FAILED sends failure notices (`notify_proto` {@link PROTO}). Legacy: false (nothing sent). */
  readonly failureNotices: boolean
}

/**
 * The submit hooks' policy.
 *
 * @since 0.3.0
 */
export class SubmitHooks extends Context.Tag("@tent/core/SubmitHooks")<SubmitHooks, SubmitHooksShape>() {}

/**
 * TENT `main`: a failed hook is retried whole (a served target gets it again); a FAILED batch sends nothing.
 *
 * @since 0.3.0
 */
export const legacy: SubmitHooksShape = { rememberTargets: false, failureNotices: false }

/**
 * {@link legacy} as a Layer.
 *
 * @since 0.3.0
 */
export const layerLegacy: Layer.Layer<SubmitHooks> = Layer.succeed(SubmitHooks, legacy)

/**
 * Hooks that never re-send to a served target, and failure notices for batches that end FAILED.
 *
 * @since 0.3.0
 */
export const series: SubmitHooksShape = { rememberTargets: true, failureNotices: true }

/**
 * {@link series} as a Layer (`Series.SubmitHooks`).
 *
 * @since 0.3.0
 */
export const layer: Layer.Layer<SubmitHooks> = Layer.succeed(SubmitHooks, series)

/**
 * The reason a failure notice carries, from the failed task's error: `"<tag>: <message>"`, at most
 * {@link MAX_REASON} characters.
 *
 * @since 0.3.0
 */
export const reasonOf = (error: { readonly _tag: string; readonly message?: string } | undefined): string => {
  const text = error === undefined ? "FAILED" : `${error._tag}: ${error.message ?? ""}`
  return text.length > MAX_REASON ? text.slice(0, MAX_REASON) : text
}

/**
 * The longest reason a failure notice carries (characters): the notice fits a notify slot whenever the notification
 * does with room to spare.
 *
 * @since 0.3.0
 */
export const MAX_REASON = 256
