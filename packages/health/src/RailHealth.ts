/**
 * Health of rails, i.e. (local NIC, remote NIC) pairs on the data path, with the rules of TENT's `RailMonitor`
 * (`tent/src/transport/rdma/rail_monitor.cpp`):
 *
 * - an error counts towards the threshold if the pair's previous error is at most `rail_error_window_secs` old,
 *   otherwise the count restarts at 1 (the window slides from error to error);
 * - every error sets the cooldown: `rail_cooldown_secs` on the first, then double the last one, capped at 300 s, even
 *   below the threshold; so with the defaults three quick errors pause the pair for 120 s (30 → 60 → 120), not 30 s;
 * - once the count reaches `rail_error_threshold` the pair is paused until now + cooldown, and every further error
 *   re-arms the pause with the doubled cooldown;
 * - a success, or the pause's expiry, clears the pair's error count, pause and cooldown.
 *
 * Two deliberate differences: TENT clears an expired pause only inside `available()`, so an error that reaches an
 * expired but unobserved pair keeps doubling the old cooldown; here expiry is a matter of time and every call sees
 * the pair cleared. And TENT reports a pair missing from its topology table as unavailable and ignores its errors;
 * here a rail exists once named, and the caller's `candidates` are the topology.
 *
 * @since 0.1.0
 */
import { Config, Context, Effect, Layer } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { type KeySpec, positive, read as readKey } from "./internal/keys.js"
import * as Metrics from "./Metrics.js"

/**
 * A rail: the local and the remote device name.
 *
 * @since 0.1.0
 */
export interface RailKey {
  readonly local: string
  readonly remote: string
}

/**
 * What {@link RailHealthShape.snapshot} reports about one rail.
 *
 * @since 0.1.0
 */
export interface RailState {
  readonly local: string
  readonly remote: string
  /** True while the rail is paused (the pause has not expired). */
  readonly paused: boolean
  /** Errors counted towards the threshold in the current window (TENT's `error_count`). */
  readonly errors: number
  /** When the pause ends, epoch ms from `Clock`; 0 if not paused. */
  readonly pausedUntil: number
  /** The cooldown the last error set (TENT's `cooldown`), in ms; 0 for a clean rail. */
  readonly cooldownMs: number
}

/**
 * The rail-health service. One instance holds every rail it has been asked about. Rails are keyed by device
 * names alone, so when several peers have devices of the same name, `remote` must tell them apart (TENT keeps one
 * monitor per remote machine), e.g. `"peer-a/mlx5_0"`.
 *
 * @since 0.1.0
 */
export interface RailHealthShape {
  /** False while the pair is paused; an expired pause is cleared here (and by every other call). */
  readonly available: (local: string, remote: string) => Effect.Effect<boolean>
  /** Counts a failure of the pair (TENT's `markFailed`): see the module's rules. */
  readonly recordError: (local: string, remote: string) => Effect.Effect<void>
  /** A success on the pair clears its count, pause and cooldown (TENT's `markRecovered`). */
  readonly recordSuccess: (local: string, remote: string) => Effect.Effect<void>
  /** Picks the first available remote for `local` among `candidates` (preferred first); undefined if all paused. */
  readonly choose: (local: string, candidates: ReadonlyArray<string>) => Effect.Effect<string | undefined>
  /** Every rail seen so far, in the order first seen, with expired pauses cleared. */
  readonly snapshot: Effect.Effect<ReadonlyArray<RailState>>
  /**
   * Plain synchronous calls for a data path's hot path, with the clock the instance was built with. Each answers
   * only when the call changes nothing worth a log line, and returns `undefined` otherwise (a pause expired, a paused
   * rail recovered); the caller then makes the same call through the Effect API above, which logs it.
   */
  readonly unsafe: {
    /** As {@link RailHealthShape.available}; `undefined` when the rail's pause has just expired. */
    readonly available: (local: string, remote: string) => boolean | undefined
    /** As {@link RailHealthShape.recordSuccess} for a rail that is not paused (true); `undefined` for a paused one. */
    readonly recordSuccess: (local: string, remote: string) => true | undefined
  }
}

/**
 * The rail-health service tag.
 *
 * @since 0.1.0
 */
export class RailHealth extends Context.Tag("@tent/health/RailHealth")<RailHealth, RailHealthShape>() {}

/**
 * The settings, in TENT's units (seconds).
 *
 * @since 0.1.0
 */
export interface RailHealthOptions {
  /** `transports/rdma/rail_error_threshold`: errors within the window that pause a rail. */
  readonly errorThreshold: number
  /** `transports/rdma/rail_error_window_secs`: the largest gap between two errors that still counts them together. */
  readonly errorWindowSecs: number
  /** `transports/rdma/rail_cooldown_secs`: the cooldown the first error sets. */
  readonly cooldownSecs: number
  /** The cap on a doubled cooldown; TENT's `kMaxCooldown`, a constant there (no config key). */
  readonly maxCooldownSecs: number
}

export type {
  /**
   * One integer configuration key of {@link keys}: its default, description and accepted values (the shape
   * `EngineConfig.KeySpec` of `@tent/core` merges).
   *
   * @since 0.1.0
   */
  KeySpec
} from "./internal/keys.js"

/**
 * The keys this module reads, with TENT's defaults from `rail_monitor.h` (`error_threshold_ = 3`,
 * `error_window_ = 10 s`, `cooldown_ = 30 s`). `EngineConfig.keys` of `@tent/core` includes them.
 *
 * @since 0.1.0
 */
export const keys = {
  "transports/rdma/rail_error_threshold": {
    kind: "int",
    default: 3,
    description: "errors within rail_error_window_secs that pause a (local NIC, remote NIC) pair",
    valid: positive
  },
  "transports/rdma/rail_error_window_secs": {
    kind: "int",
    default: 10,
    description: "largest gap in seconds between two errors of a rail that still counts them together",
    valid: positive
  },
  "transports/rdma/rail_cooldown_secs": {
    kind: "int",
    default: 30,
    description: "seconds of the first cooldown of a rail; doubled on every further error up to 300 s",
    valid: positive
  }
} as const satisfies Record<string, KeySpec>

/**
 * TENT's defaults: those of {@link keys}, and `kMaxCooldown = 300 s` (a constant in TENT, no key).
 *
 * @since 0.1.0
 */
export const defaults: RailHealthOptions = {
  errorThreshold: keys["transports/rdma/rail_error_threshold"].default,
  errorWindowSecs: keys["transports/rdma/rail_error_window_secs"].default,
  cooldownSecs: keys["transports/rdma/rail_cooldown_secs"].default,
  maxCooldownSecs: 300
}

/** The `Config` of a key of {@link keys}. */
const read = (path: keyof typeof keys): Config.Config<number> => readKey(path, keys[path])

/**
 * The settings from the current `ConfigProvider`, under `transports/rdma` as in TENT's config
 * (`{"transports": {"rdma": {"rail_cooldown_secs": 60}}}`, or the flat key `transports/rdma/rail_cooldown_secs` from
 * a provider whose path delimiter is `/`, as the engine's config provider is). Absent keys take {@link defaults}; a
 * value that is not a positive integer fails with a `ConfigError` naming the key (TENT would keep the default on a
 * wrong type and accept 0 or a negative number).
 *
 * @since 0.1.0
 */
export const config: Config.Config<RailHealthOptions> = Config.all({
  errorThreshold: read("transports/rdma/rail_error_threshold"),
  errorWindowSecs: read("transports/rdma/rail_error_window_secs"),
  cooldownSecs: read("transports/rdma/rail_cooldown_secs"),
  maxCooldownSecs: Config.succeed(defaults.maxCooldownSecs)
})

/** One rail's state in TENT's terms; `resumeAt` undefined means not paused. */
interface Entry {
  readonly local: string
  readonly remote: string
  readonly errors: number
  readonly lastErrorAt: number
  readonly cooldownMs: number
  readonly resumeAt: number | undefined
}

const clean = (local: string, remote: string): Entry => ({
  local,
  remote,
  errors: 0,
  lastErrorAt: 0,
  cooldownMs: 0,
  resumeAt: undefined
})

const isClean = (e: Entry) => e.errors === 0 && e.cooldownMs === 0 && e.resumeAt === undefined

/** The entry at `now`: a pause whose time has come is cleared with all its backoff memory. */
const settle = (e: Entry, now: number): Entry =>
  e.resumeAt !== undefined && now >= e.resumeAt ? clean(e.local, e.remote) : e

const failed = (e: Entry, now: number, o: RailHealthOptions): Entry => {
  const errors = e.errors === 0 || now - e.lastErrorAt > o.errorWindowSecs * 1000 ? 1 : e.errors + 1
  const cooldownMs = e.cooldownMs === 0 ? o.cooldownSecs * 1000 : Math.min(e.cooldownMs * 2, o.maxCooldownSecs * 1000)
  return {
    local: e.local,
    remote: e.remote,
    errors,
    lastErrorAt: now,
    cooldownMs,
    resumeAt: errors >= o.errorThreshold ? now + cooldownMs : e.resumeAt
  }
}

const toState = (e: Entry): RailState => ({
  local: e.local,
  remote: e.remote,
  paused: e.resumeAt !== undefined,
  errors: e.errors,
  pausedUntil: e.resumeAt ?? 0,
  cooldownMs: e.cooldownMs
})

/** What happened to a rail in one call, for the log. */
type Transition = "none" | "paused" | "rearmed" | "expired" | "recovered"

/**
 * Builds a rail-health instance with its own table (TENT keeps one per worker and remote machine; one per engine
 * is the usual choice here, see {@link layer}).
 *
 * @since 0.1.0
 */
export const make = (options: Partial<RailHealthOptions> = {}): Effect.Effect<RailHealthShape> =>
  Effect.map(Effect.clock, (clock) => {
    const o: RailHealthOptions = { ...defaults, ...options }
    // One table, changed only by synchronous code (a call is atomic on the one JS thread).
    const rails = new Map<string, Entry>()
    // Each rail's table key, built once: the slice path asks for a rail's state on every post and completion, and a
    // key concatenated per call is a new string to allocate, flatten and hash each time.
    const keys = new Map<string, Map<string, string>>()
    const railKey = (local: string, remote: string): string => {
      let byRemote = keys.get(local)
      if (byRemote === undefined) {
        byRemote = new Map()
        keys.set(local, byRemote)
      }
      let k = byRemote.get(remote)
      if (k === undefined) {
        k = `${local}\u0000${remote}`
        byRemote.set(remote, k)
      }
      return k
    }

    /** Applies `f` to the settled entry of a rail at the current time and stores the result. */
    const update = <A>(
      local: string,
      remote: string,
      f: (e: Entry, now: number) => readonly [A, Entry, Transition]
    ): Effect.Effect<A> =>
      Effect.suspend(() => {
        const now = clock.unsafeCurrentTimeMillis()
        const k = railKey(local, remote)
        const before = rails.get(k) ?? clean(local, remote)
        const settled = settle(before, now)
        const [a, after, t] = f(settled, now)
        const transition: Transition = t === "none" && settled !== before ? "expired" : t
        if (after !== before || !rails.has(k)) rails.set(k, after)
        return transition === "none" ? Effect.succeed(a) : Effect.as(log(after, transition), a)
      })

    const available = (local: string, remote: string) =>
      update(local, remote, (e) => [e.resumeAt === undefined, e, "none"] as const)

    const recordError = (local: string, remote: string) =>
      update(local, remote, (e, now) => {
        const after = failed(e, now, o)
        const t: Transition = after.resumeAt === e.resumeAt ? "none" : e.resumeAt === undefined ? "paused" : "rearmed"
        Metrics.railErrors.child(local).update(1, remote)
        if (t !== "none") Metrics.railPauses.child(local, t).update(1, remote)
        return [undefined, after, t] as const
      })

    const recordSuccess = (local: string, remote: string) =>
      update(local, remote, (e) =>
        isClean(e)
          ? ([undefined, e, "none"] as const)
          : ([undefined, clean(local, remote), e.resumeAt !== undefined ? "recovered" : "none"] as const)
      )

    const choose = (local: string, candidates: ReadonlyArray<string>) =>
      Effect.gen(function* () {
        for (const remote of candidates) {
          if (yield* available(local, remote)) return remote
        }
        return undefined
      })

    const snapshot = Effect.sync(() => {
      const now = clock.unsafeCurrentTimeMillis()
      for (const [k, e] of rails) rails.set(k, settle(e, now))
      return Array.from(rails.values(), toState)
    })

    const unsafe: RailHealthShape["unsafe"] = {
      available: (local, remote) => {
        const e = rails.get(railKey(local, remote))
        if (e === undefined || e.resumeAt === undefined) return true
        return clock.unsafeCurrentTimeMillis() >= e.resumeAt ? undefined : false
      },
      recordSuccess: (local, remote) => {
        const e = rails.get(railKey(local, remote))
        if (e === undefined || isClean(e)) return true
        if (e.resumeAt !== undefined) return undefined // un-pausing is logged: the Effect call does it
        rails.set(railKey(local, remote), clean(local, remote))
        return true
      }
    }

    return { available, recordError, recordSuccess, choose, snapshot, unsafe } satisfies RailHealthShape
  })

const log = (e: Entry, t: Transition): Effect.Effect<void> => {
  switch (t) {
    case "none":
      return Effect.void
    case "paused":
      return Effect.logWarning(`Rail paused for ${e.cooldownMs / 1000} s after ${e.errors} errors`).pipe(
        Effect.annotateLogs({ local: e.local, remote: e.remote })
      )
    case "rearmed":
      // TENT logs every re-armed pause as a warning (one per failed slice of a dead rail); one warning per pause here.
      return Effect.logDebug(`Rail pause re-armed for ${e.cooldownMs / 1000} s after ${e.errors} errors`).pipe(
        Effect.annotateLogs({ local: e.local, remote: e.remote })
      )
    case "expired":
      return Effect.logInfo("Rail recovered (cooldown expired)").pipe(
        Effect.annotateLogs({ local: e.local, remote: e.remote })
      )
    case "recovered":
      return Effect.logInfo("Rail recovered (un-paused by successful transfer)").pipe(
        Effect.annotateLogs({ local: e.local, remote: e.remote })
      )
  }
}

/**
 * Rail health with the given settings; unspecified ones take TENT's {@link defaults}.
 *
 * @since 0.1.0
 */
export const layer = (options: Partial<RailHealthOptions> = {}): Layer.Layer<RailHealth> =>
  Layer.effect(RailHealth, make(options))

/**
 * Rail health with the settings read by {@link config}; fails at start, naming the key, on a bad value.
 *
 * @since 0.1.0
 */
export const layerConfig: Layer.Layer<RailHealth, ConfigError> = Layer.effect(
  RailHealth,
  Effect.flatMap(config, (o) => make(o))
)

/**
 * A twin that never pauses a rail: errors are counted as TENT counts them, but `available` is always true and
 * `choose` returns the first candidate. For tests of the data path, and as the negative control of this module's.
 *
 * @since 0.1.0
 */
export const layerTest: Layer.Layer<RailHealth> = layer({ errorThreshold: Number.POSITIVE_INFINITY })
