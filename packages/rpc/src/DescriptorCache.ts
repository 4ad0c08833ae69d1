/**
 * The per-engine cache of segment descriptors in front of the `Registry` (entries live TENT's one hour), and the
 * `StaleClassifier` seam that decides which failures make a cached descriptor stale.
 *
 * @since 0.1.0
 */
import { Clock, Context, Deferred, Duration, Effect, type Exit, FiberId, Layer } from "effect"
import { InvalidEntry, NeedsRefreshCache, TransportFailure } from "./Errors.js"
import type { SegmentDesc } from "./Models.js"
import { Registry, type RegistryShape } from "./Registry.js"

/**
 * What to do with an operation's failure against a cached descriptor.
 *
 * @since 0.1.0
 */
export type Staleness = "stale" | "keep"

/**
 * The seam where descriptor policy plugs in (the RFC's `DescriptorPolicy` provides another implementation): which
 * failures mean "the cached descriptor is stale", and what to do after refetching.
 *
 * @since 0.1.0
 */
export interface StaleClassifierShape {
  /** `stale`: drop the entry, refetch once and maybe run the operation again; `keep`: return the failure as it is. */
  readonly classify: (error: unknown, registry: RegistryShape) => Staleness
  /** After a refetch: run the operation again with `fresh`? (Otherwise the operation's failure is returned.) */
  readonly rerun: (previous: SegmentDesc, fresh: SegmentDesc) => boolean
  /** When the refetch itself fails: return its error (`refetch`, TENT `main`) or the operation's (`original`). */
  readonly onRefetchFailure: "refetch" | "original"
}

/**
 * Classifies failures of operations that ran against a cached descriptor.
 *
 * @since 0.1.0
 */
export class StaleClassifier extends Context.Tag("@tent/rpc/StaleClassifier")<
  StaleClassifier,
  StaleClassifierShape
>() {}

/**
 * TENT `main`: `NeedsRefreshCache`, and any failed control-plane call (it becomes `NeedsRefreshCache` at the
 * `Notify` and `Probe` sites), drop the descriptor and refetch it, even from the peer that just failed to answer;
 * the operation always runs again; a failed refetch reports the refetch's error.
 *
 * @since 0.1.0
 */
export const legacy: StaleClassifierShape = {
  classify: (error) => (error instanceof NeedsRefreshCache || error instanceof TransportFailure ? "stale" : "keep"),
  rerun: () => true,
  onRefetchFailure: "refetch"
}

/**
 * {@link legacy} as a Layer.
 *
 * @since 0.1.0
 */
export const layerLegacy: Layer.Layer<StaleClassifier> = Layer.succeed(StaleClassifier, legacy)

/**
 * Per-engine cache of segment descriptors in front of the {@link Registry}.
 *
 * @since 0.1.0
 */
export interface DescriptorCacheShape {
  /** The cached descriptor, or one fetched from the registry (concurrent misses share one fetch). */
  readonly get: (name: string) => Effect.Effect<SegmentDesc, InvalidEntry | TransportFailure>
  /** Drops one entry. */
  readonly invalidate: (name: string) => Effect.Effect<void>
  /**
   * Runs `op` against the segment's descriptor (TENT `withCachedSegment`). A failure the {@link StaleClassifier}
   * calls stale drops the entry and refetches once; if the operation runs again and is stale again, the result is
   * `InvalidEntry` ("refetched but still invalid").
   */
  readonly withSegment: <A, E, R>(
    name: string,
    op: (desc: SegmentDesc) => Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | InvalidEntry | TransportFailure, R>
}

/**
 * The descriptor cache of this engine.
 *
 * @since 0.1.0
 */
export class DescriptorCache extends Context.Tag("@tent/rpc/DescriptorCache")<
  DescriptorCache,
  DescriptorCacheShape
>() {}

/**
 * TENT's `TENT_SEGMENT_DESC_TTL_MS`: a descriptor older than this is fetched again.
 *
 * @since 0.1.0
 */
export const DEFAULT_TTL = Duration.hours(1)

/**
 * Builds a cache with entries living `ttl` (default 1 h, measured on the Effect `Clock`).
 *
 * @since 0.1.0
 */
export const make = (
  options: { readonly ttl?: Duration.DurationInput | undefined } = {}
): Effect.Effect<DescriptorCacheShape, never, Registry | StaleClassifier> =>
  Effect.gen(function* () {
    const registry = yield* Registry
    const classifier = yield* StaleClassifier
    const ttlMs = Duration.toMillis(options.ttl ?? DEFAULT_TTL)
    const entries = new Map<string, { readonly desc: SegmentDesc; readonly fetchedAt: number }>()
    const inflight = new Map<string, Deferred.Deferred<SegmentDesc, InvalidEntry | TransportFailure>>()

    const fetch = (name: string): Effect.Effect<SegmentDesc, InvalidEntry | TransportFailure> =>
      Effect.suspend(() => {
        const running = inflight.get(name)
        if (running !== undefined) return Deferred.await(running)
        const deferred = Deferred.unsafeMake<SegmentDesc, InvalidEntry | TransportFailure>(FiberId.none)
        inflight.set(name, deferred)
        return registry.getSegmentDesc(name).pipe(
          Effect.tap((desc) =>
            Effect.flatMap(Clock.currentTimeMillis, (now) =>
              Effect.sync(() => entries.set(name, { desc, fetchedAt: now }))
            )
          ),
          Effect.onExit((exit) =>
            Effect.sync(() => {
              inflight.delete(name)
              Deferred.unsafeDone(deferred, exit as Exit.Exit<SegmentDesc, InvalidEntry | TransportFailure>)
            })
          )
        )
      })

    const get = (name: string) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const hit = entries.get(name)
        if (hit !== undefined && now - hit.fetchedAt < ttlMs) return Effect.succeed(hit.desc)
        entries.delete(name)
        return fetch(name)
      })

    const invalidate = (name: string) => Effect.sync(() => void entries.delete(name))

    const withSegment = <A, E, R>(
      name: string,
      op: (desc: SegmentDesc) => Effect.Effect<A, E, R>
    ): Effect.Effect<A, E | InvalidEntry | TransportFailure, R> => {
      type Err = E | InvalidEntry | TransportFailure
      const stillInvalid = (again: E): Effect.Effect<A, Err> =>
        classifier.classify(again, registry) === "stale"
          ? Effect.fail(
              new InvalidEntry({
                segment: name,
                message: `Segment refetched from registry but still invalid: ${describe(again)}`
              })
            )
          : Effect.fail(again)
      const onFailure = (desc: SegmentDesc, error: E): Effect.Effect<A, Err, R> => {
        if (classifier.classify(error, registry) === "keep") return Effect.fail(error)
        return Effect.zipRight(invalidate(name), Effect.either(fetch(name))).pipe(
          Effect.flatMap((refetched): Effect.Effect<A, Err, R> => {
            if (refetched._tag === "Left") {
              return classifier.onRefetchFailure === "refetch" ? Effect.fail(refetched.left) : Effect.fail(error)
            }
            if (!classifier.rerun(desc, refetched.right)) return Effect.fail(error)
            return Effect.catchAll(op(refetched.right), stillInvalid)
          })
        )
      }
      return Effect.flatMap(get(name), (desc) => Effect.catchAll(op(desc), (error) => onFailure(desc, error)))
    }

    return { get, invalidate, withSegment } satisfies DescriptorCacheShape
  })

const describe = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/**
 * The cache as a Layer.
 *
 * @since 0.1.0
 */
export const layer = (
  options: { readonly ttl?: Duration.DurationInput | undefined } = {}
): Layer.Layer<DescriptorCache, never, Registry | StaleClassifier> => Layer.effect(DescriptorCache, make(options))
