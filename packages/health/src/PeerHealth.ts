/**
 * Peer health (RFC PR 4, "fail fast on dead peers"): a process-wide record, keyed by a peer's control-plane address,
 * of the peers whose control plane stopped answering, so that calls to them fail at once instead of each waiting out
 * its timeout.
 *
 * - A transport-level failure (a `TransportFailure`) marks the peer for `peer_health/cooldown_ms`. A failure while it
 *   is marked, or at most one cooldown's length after that cooldown ran out, doubles the cooldown, up to
 *   `peer_health/max_cooldown_ms`; a later one starts again from `peer_health/cooldown_ms`. Each failure restarts
 *   the cooldown from its own time.
 * - While the cooldown runs, {@link PeerHealthShape.admit} fails at once, with a `TransportFailure` whose message
 *   says it came from this record. Once it has run out, calls go through: the first is the re-check.
 * - Any reply (`record(address, undefined)`: a success, or the peer's typed refusal) clears the mark and its
 *   backoff memory. A mark whose cooldown ran out stays until then, so the prober keeps probing the peer.
 * - The prober ({@link PeerHealthShape.runProber}) probes every marked peer each `peer_health/probe_interval_ms`,
 *   cooldown or not: a peer that comes back is usable again within about one interval.
 * - A peer nobody asked about (no `admit`, no `record`) for `peer_health/max_age_ms` is forgotten, mark and all; the
 *   prober's own probes do not count, so a peer that stays dead and unused is not probed for ever.
 *
 * `admit` and `record` are `RpcAgent.CallGuard` of `@tent/rpc`: `RpcAgent.decorate(agent, PeerHealth.guard(health))`
 * is the agent of RFC PR 4.
 *
 * @since 0.1.0
 */
import { type RpcAgent, TransportFailure } from "@tent/rpc"
import { Cause, Config, Context, Duration, Effect, Exit, Layer, Option } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { type KeySpec, positive, read as readKey } from "./internal/keys.js"
import * as Metrics from "./Metrics.js"

// The metrics' series, resolved once (every instance of the process counts into them).
const markByCall = Metrics.peerMarks.child("call")
const markByProbe = Metrics.peerMarks.child("probe")
const clearSeries = Metrics.peerClears.child()
const fastFailureSeries = Metrics.fastFailures.child()
const probeSuccess = Metrics.probes.child("success")
const probeFailure = Metrics.probes.child("failure")
const probeDefect = Metrics.probes.child("defect")

/**
 * The counters of one record; plain numbers, read them at any time or through {@link PeerHealthShape.snapshot}.
 *
 * @since 0.1.0
 */
export interface PeerHealthMetrics {
  /** Transport failures recorded, each of which (re)armed a cooldown: by calls and by the prober. */
  marks: number
  /** Marks cleared by a reply: by calls and by the prober. */
  clears: number
  /** Calls `admit` refused while a cooldown ran. */
  fastFailures: number
  /** Probes started by the prober. */
  probes: number
  /** Probes that got an answer (each cleared its peer). */
  probeSuccesses: number
  /** Probes that failed (a transport failure re-marked the peer; a defect is only logged). */
  probeFailures: number
}

/**
 * What {@link PeerHealthShape.snapshot} reports: the peers marked now, and the counters.
 *
 * @since 0.1.0
 */
export interface PeerHealthSnapshot extends PeerHealthMetrics {
  /** Peers marked and not yet cleared or forgotten, whether or not their cooldown has run out. */
  readonly marked: number
}

/**
 * The service: a call guard, plus what the prober needs.
 *
 * @since 0.1.0
 */
export interface PeerHealthShape extends RpcAgent.CallGuard {
  /**
   * Fails at once, with a `TransportFailure` (reason `Timeout`) naming this record, while `address` is marked and
   * its cooldown has not run out; otherwise succeeds, and the call goes out.
   */
  readonly admit: (address: string) => Effect.Effect<void, TransportFailure>
  /**
   * Whether `address` is marked and its cooldown still runs (what `admit` would refuse), read synchronously and
   * counting nothing: for a caller deciding whether to wait on the peer at all (the notify send-slot wait).
   */
  readonly unreachable: (address: string) => boolean
  /** How a call to `address` ended: a transport failure marks the peer, `undefined` (any reply) clears it. */
  readonly record: (address: string, failure: TransportFailure | undefined) => Effect.Effect<void>
  /** The peers marked now, whether or not their cooldown has run out (what the prober probes). */
  readonly markedPeers: Effect.Effect<ReadonlyArray<string>>
  /**
   * One round of the prober: `probe` on every marked peer, at most `concurrency` (default 4) at once. An answer
   * clears the peer, a transport failure re-marks it (doubling the cooldown). Never fails; `probe` must be bounded
   * by its own timeout (`rpc/probe_timeout_ms`) and must not pass through this guard, or it would be refused.
   */
  readonly probeRound: (
    probe: (address: string) => Effect.Effect<void, TransportFailure>,
    concurrency?: number
  ) => Effect.Effect<void>
  /**
   * {@link PeerHealthShape.probeRound} every `intervalMs` (default `peer_health/probe_interval_ms`) after the end of
   * the previous round, for ever, while a peer is marked: with none marked it sleeps until a mark (the first round
   * `intervalMs` after it), so an idle engine's prober wakes for nothing. Fork it in a scope (`Effect.forkScoped`) to
   * stop it with the scope.
   */
  readonly runProber: (
    probe: (address: string) => Effect.Effect<void, TransportFailure>,
    intervalMs?: number
  ) => Effect.Effect<never>
  /** The live counters. */
  readonly metrics: PeerHealthMetrics
  /** The number of marked peers (after forgetting old entries) and a copy of the counters. */
  readonly snapshot: Effect.Effect<PeerHealthSnapshot>
}

/**
 * The peer-health service tag; one instance per process (engine).
 *
 * @since 0.1.0
 */
export class PeerHealth extends Context.Tag("@tent/health/PeerHealth")<PeerHealth, PeerHealthShape>() {}

/**
 * The settings, in milliseconds.
 *
 * @since 0.1.0
 */
export interface PeerHealthOptions {
  /** `peer_health/cooldown_ms`: the cooldown of a first mark. */
  readonly cooldownMs: number
  /** `peer_health/max_cooldown_ms`: the cap on a doubled cooldown. */
  readonly maxCooldownMs: number
  /** `peer_health/probe_interval_ms`: the prober's interval. */
  readonly probeIntervalMs: number
  /** `peer_health/max_age_ms`: how long an entry nobody asked about is kept. */
  readonly maxAgeMs: number
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
 * The keys this module reads, with the RFC's defaults ("Configuration added", PR 4).
 *
 * @since 0.1.0
 */
export const keys = {
  "peer_health/cooldown_ms": {
    kind: "int",
    default: 5000,
    description:
      "RFC PR 4: ms a peer whose control plane failed at transport level is failed fast; doubled on every further failure up to peer_health/max_cooldown_ms",
    valid: positive
  },
  "peer_health/max_cooldown_ms": {
    kind: "int",
    default: 60000,
    description: "RFC PR 4: cap in ms of a peer's doubled cooldown",
    valid: positive
  },
  "peer_health/probe_interval_ms": {
    kind: "int",
    default: 1000,
    description: "RFC PR 4: ms between two rounds of the prober that re-checks every marked peer",
    valid: positive
  },
  "peer_health/max_age_ms": {
    kind: "int",
    default: 600000,
    description: "RFC PR 4: ms after which a marked peer nobody called is forgotten, so the record stays bounded",
    valid: positive
  }
} as const satisfies Record<string, KeySpec>

/**
 * The RFC's defaults: those of {@link keys}.
 *
 * @since 0.1.0
 */
export const defaults: PeerHealthOptions = {
  cooldownMs: keys["peer_health/cooldown_ms"].default,
  maxCooldownMs: keys["peer_health/max_cooldown_ms"].default,
  probeIntervalMs: keys["peer_health/probe_interval_ms"].default,
  maxAgeMs: keys["peer_health/max_age_ms"].default
}

/** The `Config` of a key of {@link keys}. */
const read = (path: keyof typeof keys): Config.Config<number> => readKey(path, keys[path])

/**
 * The settings from the current `ConfigProvider`, under `peer_health` (`{"peer_health": {"cooldown_ms": 2000}}`, or
 * the flat key `peer_health/cooldown_ms` from a provider whose path delimiter is `/`). Absent keys take
 * {@link defaults}; a value that is not a positive integer fails with a `ConfigError` naming the key.
 *
 * @since 0.1.0
 */
export const config: Config.Config<PeerHealthOptions> = Config.all({
  cooldownMs: read("peer_health/cooldown_ms"),
  maxCooldownMs: read("peer_health/max_cooldown_ms"),
  probeIntervalMs: read("peer_health/probe_interval_ms"),
  maxAgeMs: read("peer_health/max_age_ms")
})

/** One marked peer. */
interface Entry {
  /** When the last failure marked it; its cooldown runs from here. */
  readonly markedAt: number
  readonly cooldownMs: number
  /** `markedAt + cooldownMs`: `admit` refuses calls before this. */
  readonly until: number
  /** The last failure, for the fast failure's message. */
  readonly after: string
  /** The last `admit` or `record` (not the prober's): the entry is forgotten `maxAgeMs` after it. */
  touchedAt: number
}

const describeFailure = (f: TransportFailure) => (f.message === "" ? f.reason : `${f.reason} (${f.message})`)

const newCounters = (): PeerHealthMetrics => ({
  marks: 0,
  clears: 0,
  fastFailures: 0,
  probes: 0,
  probeSuccesses: 0,
  probeFailures: 0
})

/**
 * Builds a record with its own table and counters; time comes from `Clock`, so `TestClock` drives it.
 *
 * @since 0.1.0
 */
export const make = (options: Partial<PeerHealthOptions> = {}): Effect.Effect<PeerHealthShape> =>
  Effect.map(Effect.clock, (clock) => {
    const o: PeerHealthOptions = { ...defaults, ...options }
    // Changed only by synchronous code: every change is atomic on the one JS thread.
    const peers = new Map<string, Entry>()
    // Open while a peer is marked: the prober sleeps on it otherwise (an engine with no marked peer wakes for nothing).
    const anyMarked = Effect.unsafeMakeLatch(false)
    const metrics = newCounters()
    const now = () => clock.unsafeCurrentTimeMillis()

    const expired = (e: Entry, t: number) => t - e.touchedAt >= o.maxAgeMs

    /** The entry of `address` at `t`; one nobody asked about for `maxAgeMs` is dropped here. */
    const lookup = (address: string, t: number): Entry | undefined => {
      const e = peers.get(address)
      if (e === undefined || !expired(e, t)) return e
      peers.delete(address)
      return undefined
    }

    const sweep = (t: number) => {
      for (const [address, e] of peers) if (expired(e, t)) peers.delete(address)
    }

    /** Marks `address` after `failure`; `touch` is false for the prober's failures, which do not keep it alive. */
    const mark = (address: string, failure: TransportFailure, touch: boolean): Effect.Effect<void> => {
      const t = now()
      const before = lookup(address, t)
      const doubled = before !== undefined && t <= before.until + before.cooldownMs
      const cooldownMs = doubled
        ? Math.max(o.cooldownMs, Math.min(before.cooldownMs * 2, o.maxCooldownMs))
        : o.cooldownMs
      const after = describeFailure(failure)
      peers.set(address, {
        markedAt: t,
        cooldownMs,
        until: t + cooldownMs,
        after,
        touchedAt: touch || before === undefined ? t : before.touchedAt
      })
      anyMarked.unsafeOpen()
      metrics.marks++
      if (touch) markByCall.update(1, address)
      else markByProbe.update(1, address)
      const line = `Peer marked unreachable for ${cooldownMs} ms after ${after}`
      // Debug: the call that marked it returns this very failure to its caller; the counters are for operators.
      return Effect.logDebug(line).pipe(Effect.annotateLogs({ peer: address }))
    }

    const clear = (address: string): Effect.Effect<void> => {
      if (lookup(address, now()) === undefined) return Effect.void
      peers.delete(address)
      metrics.clears++
      clearSeries.update(1, address)
      return Effect.logInfo("Peer answered: unreachable mark cleared").pipe(Effect.annotateLogs({ peer: address }))
    }

    const admit = (address: string): Effect.Effect<void, TransportFailure> =>
      Effect.suspend(() => {
        const t = now()
        const e = lookup(address, t)
        if (e === undefined) return Effect.void
        e.touchedAt = t
        if (t >= e.until) return Effect.void
        metrics.fastFailures++
        fastFailureSeries.update(1, address)
        return Effect.fail(
          new TransportFailure({
            address,
            reason: "Timeout",
            message:
              `peer marked unreachable by PeerHealth ${t - e.markedAt} ms ago after ${e.after}; ` +
              `failing fast for ${e.until - t} ms more (cooldown ${e.cooldownMs} ms)`
          })
        )
      })

    const unreachable = (address: string): boolean => {
      const t = now()
      const e = lookup(address, t)
      return e !== undefined && t < e.until
    }

    const record = (address: string, failure: TransportFailure | undefined): Effect.Effect<void> =>
      Effect.suspend(() => (failure === undefined ? clear(address) : mark(address, failure, true)))

    const markedPeers = Effect.sync(() => {
      sweep(now())
      return Array.from(peers.keys())
    })

    const probeOne = (probe: (address: string) => Effect.Effect<void, TransportFailure>, address: string) =>
      Effect.suspend(() => {
        metrics.probes++
        return Effect.exit(probe(address))
      }).pipe(
        Effect.flatMap((exit) =>
          Effect.suspend(() => {
            if (Exit.isSuccess(exit)) {
              metrics.probeSuccesses++
              probeSuccess.update(1, address)
              return clear(address)
            }
            metrics.probeFailures++
            const failure = Cause.failureOption(exit.cause)
            if (Option.isSome(failure)) probeFailure.update(1, address)
            else probeDefect.update(1, address)
            return Option.isSome(failure)
              ? mark(address, failure.value, false)
              : Effect.logWarning("Peer probe died", exit.cause).pipe(Effect.annotateLogs({ peer: address }))
          })
        )
      )

    const probeRound: PeerHealthShape["probeRound"] = (probe, concurrency = 4) =>
      Effect.flatMap(markedPeers, (targets) =>
        targets.length === 0
          ? Effect.void
          : Effect.forEach(targets, (address) => probeOne(probe, address), { concurrency, discard: true }).pipe(
              Effect.withSpan("tent.health.probe_round", { attributes: { peers: targets.length } })
            )
      )

    // Parked while no peer is marked: the check and the close are one synchronous step, and a mark reopens it.
    const parkIfNoneMarked = Effect.sync(() => {
      sweep(now())
      if (peers.size === 0) anyMarked.unsafeClose()
    })
    const runProber: PeerHealthShape["runProber"] = (probe, intervalMs = o.probeIntervalMs) =>
      Effect.forever(
        Effect.zipRight(
          anyMarked.await,
          Effect.zipRight(
            Effect.zipRight(Effect.sleep(Duration.millis(intervalMs)), probeRound(probe)),
            parkIfNoneMarked
          )
        )
      )

    const snapshot = Effect.sync(() => {
      sweep(now())
      return { marked: peers.size, ...metrics }
    })

    return {
      admit,
      unreachable,
      record,
      markedPeers,
      probeRound,
      runProber,
      metrics,
      snapshot
    } satisfies PeerHealthShape
  })

/**
 * The twin without PR 4 (`peer_health/enable = false`, TENT main): admits every call, remembers nothing, probes
 * nothing. The negative control of this module's tests.
 *
 * @since 0.1.0
 */
export const makeLegacy: Effect.Effect<PeerHealthShape> = Effect.sync(() => {
  const metrics = newCounters()
  return {
    admit: () => Effect.void,
    unreachable: () => false,
    record: () => Effect.void,
    markedPeers: Effect.succeed([]),
    probeRound: () => Effect.void,
    runProber: () => Effect.never,
    metrics,
    snapshot: Effect.sync(() => ({ marked: 0, ...metrics }))
  }
})

/**
 * The record as `RpcAgent.decorate`'s guard (the shape is one already; this names the intent).
 *
 * @since 0.1.0
 */
export const guard = (health: PeerHealthShape): RpcAgent.CallGuard => ({ admit: health.admit, record: health.record })

/**
 * The record with the given settings; unspecified ones take the RFC's {@link defaults}.
 *
 * @example
 * ```ts
 * import { PeerHealth } from "@tent/health"
 * import { Effect } from "effect"
 *
 * const program = Effect.gen(function* () {
 *   const health = yield* PeerHealth.PeerHealth
 *   return health.unreachable("127.0.0.1:7000")
 * })
 * console.log(Effect.runSync(program.pipe(Effect.provide(PeerHealth.layer()))))
 * ```
 *
 * @since 0.1.0
 */
export const layer = (options: Partial<PeerHealthOptions> = {}): Layer.Layer<PeerHealth> =>
  Layer.effect(PeerHealth, make(options))

/**
 * The record with the settings read by {@link config}; fails at start, naming the key, on a bad value.
 *
 * @since 0.1.0
 */
export const layerConfig: Layer.Layer<PeerHealth, ConfigError> = Layer.effect(
  PeerHealth,
  Effect.flatMap(config, (o) => make(o))
)

/**
 * The legacy twin ({@link makeLegacy}) as a Layer.
 *
 * @since 0.1.0
 */
export const layerLegacy: Layer.Layer<PeerHealth> = Layer.effect(PeerHealth, makeLegacy)
