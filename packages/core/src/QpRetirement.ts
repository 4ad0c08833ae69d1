/**
 * Seam of RFC PR 1 ("keep the notify QP published until it is destroyed"): what retiring an endpoint does to its
 * notify QP's entry in the transport's QP-number table, whether the final destroy waits for the notify QP, and what
 * the notify channel does when a send on it completes with an error that is not a flush.
 *
 * TENT `main` ({@link legacy}): `beginDestroy` unpublishes the notify QP **before** moving the QPs to ERR, so RECV
 * completions that arrived but were not yet polled come back to the notify poller as "unknown QP" and are dropped
 * (counted as `unknownQp`); `finishDestroy` waits only for the data QPs' outstanding work requests, so destroying
 * the notify QP can also discard its unpolled completions; a failed (non-flush) notify completion is logged and
 * dropped: the channel stays "connected" and the send's window unit leaks (reference §10.1). PR 1's Layer keeps the
 * entry until `deconstruct()`, makes destroy wait for the notify QP too (its sends in flight and its RECV completions
 * copied out), and disables the channel on a failed completion, which hands its pending sends to the `Resend` seam.
 *
 * @since 0.1.0
 */
import { Context, Layer } from "effect"

/**
 * What retirement does to the notify QP.
 *
 * @since 0.1.0
 */
export interface QpRetirementShape {
  /** Remove the notify QP from the QP-number table when retirement starts (before ERR). Legacy: true. */
  readonly unpublishAtRetire: boolean
  /**
   * `finishDestroy` also waits for the notify QP: its sends in flight and its posted receives, until every one of
   * them completed and was copied out (at most `FINISH_DESTROY_TIMEOUT_MS`). For this to end, every notify
   * completion is counted out, a flushed or failed one too: a flushed send frees its window unit. Legacy: false (a
   * flushed send never frees its unit; destroy does not look).
   */
  readonly destroyWaitsForNotifyQp: boolean
  /**
   * A notify completion that failed with anything but a flush of a non-READY endpoint: `"log"` counts it
   * (`notifyErrors`) and leaks its window unit (legacy); `"disable"` frees the unit, disables the channel and hands
   * what it had pending to the resend queue; the flushes of a disabled channel are then quiet (a disabled notify QP
   * is "not ready" in the completion classifier, as a retiring one is).
   */
  readonly onNotifyError: "log" | "disable"
}

/**
 * The retirement policy of the RDMA transport.
 *
 * @since 0.1.0
 */
export class QpRetirement extends Context.Tag("@tent/core/QpRetirement")<QpRetirement, QpRetirementShape>() {}

/**
 * TENT `main`: unpublish at retire; destroy does not wait for the notify QP; a failed send is logged and leaks.
 *
 * @since 0.1.0
 */
export const legacy: QpRetirementShape = {
  unpublishAtRetire: true,
  destroyWaitsForNotifyQp: false,
  onNotifyError: "log"
}

/**
 * {@link legacy} as a Layer.
 *
 * @since 0.1.0
 */
export const layerLegacy: Layer.Layer<QpRetirement> = Layer.succeed(QpRetirement, legacy)

/**
 * RFC PR 1: the notify QP stays in the QP-number table until `deconstruct()` (which unpublishes it in the same
 * synchronous step that releases the receive slots, so the poller never sees a published QP without its buffers);
 * `finishDestroy` waits for its sends in flight and its receives; a failed notify completion disables the channel.
 *
 * @since 0.1.0
 */
export const series: QpRetirementShape = {
  unpublishAtRetire: false,
  destroyWaitsForNotifyQp: true,
  onNotifyError: "disable"
}

/**
 * {@link series} as a Layer (`Series.QpRetirement`).
 *
 * @since 0.1.0
 */
export const layer: Layer.Layer<QpRetirement> = Layer.succeed(QpRetirement, series)
