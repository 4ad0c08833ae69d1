/**
 * Seam of RFC PR 5 ("keep the descriptor on a failed control-plane call"): what a failure of an operation run against
 * a cached segment descriptor does to the cache. It is `@tent/rpc`'s `StaleClassifier`, which the engine's
 * `DescriptorCache` consults.
 *
 * TENT `main` ({@link legacy}): a failed control-plane call (the TCP transport's `Notify`, the engine's `Probe`) is
 * turned into `NeedsRefreshCache`, which drops the descriptor and refetches it, under the peer registry from the
 * same peer that just failed to answer (another full timeout), then runs the call again; a failed refetch reports
 * the refetch's error. PR 5's Layer keeps the descriptor and returns the call's own error; under a central registry
 * it refetches once and retries only if the address changed.
 *
 * @since 0.1.0
 */
import { DescriptorCache, NeedsRefreshCache, TransportFailure } from "@tent/rpc"
import { Layer } from "effect"

/**
 * The descriptor policy service (the cache's `StaleClassifier`).
 *
 * @since 0.1.0
 */
export const DescriptorPolicy = DescriptorCache.StaleClassifier

/**
 * TENT `main`: refetch on any failed control-plane call.
 *
 * @since 0.1.0
 */
export const legacy: DescriptorCache.StaleClassifierShape = DescriptorCache.legacy

/**
 * {@link legacy} as a Layer.
 *
 * @since 0.1.0
 */
export const layerLegacy: Layer.Layer<DescriptorCache.StaleClassifier> = DescriptorCache.layerLegacy

/**
 * RFC PR 5: a failed control-plane call (`TransportFailure`) is not a stale descriptor. Under the peer registry the
 * descriptor is kept and the call's own failure returned (no refetch from the peer that just failed, no second
 * timeout, and no second run of a call the peer may yet have received: a `Notify` that timed out against a frozen
 * peer is delivered when it resumes, and running it again would deliver it twice). Under a central registry it is
 * refetched once and the call repeated only if the address changed; a failed refetch returns the call's own error.
 * `NeedsRefreshCache` (the descriptor lacks what the call needs) still refetches, as in TENT.
 *
 * @since 0.1.0
 */
export const keepOnFailure: DescriptorCache.StaleClassifierShape = {
  classify: (error, registry) =>
    error instanceof NeedsRefreshCache
      ? "stale"
      : error instanceof TransportFailure && registry.kind === "central"
        ? "stale"
        : "keep",
  rerun: (previous, fresh) => previous.rpc_server_addr !== fresh.rpc_server_addr,
  onRefetchFailure: "original"
}

/**
 * {@link keepOnFailure} as a Layer (`Series.DescriptorPolicy`).
 *
 * @since 0.1.0
 */
export const layer: Layer.Layer<DescriptorCache.StaleClassifier> = Layer.succeed(
  DescriptorCache.StaleClassifier,
  keepOnFailure
)
