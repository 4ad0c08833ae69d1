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
import { DescriptorCache } from "@tent/rpc"
import type { Layer } from "effect"

/** The descriptor policy service (the cache's `StaleClassifier`). */
export const DescriptorPolicy = DescriptorCache.StaleClassifier

/** TENT `main`: refetch on any failed control-plane call. */
export const legacy: DescriptorCache.StaleClassifierShape = DescriptorCache.legacy

/** {@link legacy} as a Layer. */
export const layerLegacy: Layer.Layer<DescriptorCache.StaleClassifier> = DescriptorCache.layerLegacy
