/**
 * Seam of RFC PR 1 ("keep the notify QP published until it is destroyed"): what retiring an endpoint does to its
 * notify QP's entry in the transport's QP-number table, and whether the final destroy waits for the notify QP.
 *
 * TENT `main` ({@link legacy}): `beginDestroy` unpublishes the notify QP **before** moving the QPs to ERR, so RECV
 * completions that arrived but were not yet polled come back to the notify poller as "unknown QP" and are dropped
 * (counted as `unknownQp`); `finishDestroy` waits only for the data QPs' outstanding work requests, so destroying
 * the notify QP can also discard its unpolled completions. PR 1's Layer keeps the entry until `deconstruct()` and
 * makes destroy wait for the notify QP too.
 *
 * @since 0.1.0
 */
import { Context, Layer } from "effect"

/** What retirement does to the notify QP. */
export interface QpRetirementShape {
  /** Remove the notify QP from the QP-number table when retirement starts (before ERR). Legacy: true. */
  readonly unpublishAtRetire: boolean
  /** `finishDestroy` also waits for the notify QP (its sends in flight). Legacy: false. */
  readonly destroyWaitsForNotifyQp: boolean
}

/** The retirement policy of the RDMA transport. */
export class QpRetirement extends Context.Tag("@tent/core/QpRetirement")<QpRetirement, QpRetirementShape>() {}

/** TENT `main`: unpublish at retire; destroy does not wait for the notify QP. */
export const legacy: QpRetirementShape = { unpublishAtRetire: true, destroyWaitsForNotifyQp: false }

/** {@link legacy} as a Layer. */
export const layerLegacy: Layer.Layer<QpRetirement> = Layer.succeed(QpRetirement, legacy)
