/**
 * What the two targets against an engine share: the victim started with its regions read, the memory watched while
 * the fuzz runs (every 5 s, after GC), the halfway injection of a negative control, and the end — the victim's
 * counters, its memory growth, and its regions compared with what the fuzz and the client asked to write.
 */
import { Effect, Fiber, type Scope } from "effect"
import { spawnVictim, type Victim, type VictimFailure } from "./Child.js"
import { type Range, sha256 } from "./Regions.js"
import {
  ask,
  checkRegion,
  commonViolations,
  mib,
  type RegionCheck,
  type TargetOptions,
  type TargetResult
} from "./Target.js"
import { type EngineRegions, type EngineStats, engineConfig, engineViolations } from "./victimEngine.js"

/** What the engine victim printed when it was ready. */
export interface EngineReady {
  readonly segment: string
  readonly address: string
  readonly device: string
  readonly regions: Record<string, { readonly addr: number; readonly length: number }>
}

/** A started engine victim, its regions' bytes and its memory before the fuzz. */
export interface EngineVictim {
  readonly victim: Victim
  readonly ready: EngineReady
  readonly port: number
  readonly before: EngineRegions
}

/** Starts the engine victim and reads its regions. */
export const start = (
  o: TargetOptions,
  transferBound: "immediate" | "notify_qp"
): Effect.Effect<EngineVictim, VictimFailure, Scope.Scope> =>
  Effect.gen(function* () {
    const victim = yield* spawnVictim({ role: "engine", seed: o.seed, config: engineConfig(transferBound) })
    const ready = victim.ready as unknown as EngineReady
    const port = Number(ready.address.slice(ready.address.lastIndexOf(":") + 1))
    const before = (yield* victim.request<{ regions: EngineRegions }>({ cmd: "memory" })).regions
    return { victim, ready, port, before }
  })

/** The progress of a running fuzz, as the monitor and the injector read it. */
export interface Progress {
  done: number
  stop: boolean
}

/**
 * Forks the monitor (a progress line and the victim's memory every 5 s) and the injector (the negative control at half
 * the inputs); returns the peak RSS seen, whether the injection happened, and how to stop both.
 */
export const watch = (
  name: string,
  o: TargetOptions,
  victim: Victim,
  progress: Progress,
  baselineRss: number,
  extra: () => string
) =>
  Effect.gen(function* () {
    const state = { peakRss: baselineRss, injected: false }
    const started = performance.now()
    const monitor = yield* Effect.fork(
      Effect.forever(
        Effect.gen(function* () {
          yield* Effect.sleep("5 seconds")
          const s = yield* ask<EngineStats>(victim, { cmd: "stats" })
          if (s !== undefined) state.peakRss = Math.max(state.peakRss, s.memory.rss)
          const secs = (performance.now() - started) / 1000
          o.progress(
            `${name}: ${progress.done}/${o.count} inputs (${Math.round(progress.done / secs)}/s), ${extra()}, victim RSS ${s === undefined ? "?" : mib(s.memory.rss)}`
          )
        })
      )
    )
    const injector = yield* Effect.fork(
      Effect.gen(function* () {
        if (o.inject === undefined) return
        while (progress.done < o.count / 2 && !progress.stop) yield* Effect.sleep("20 millis")
        yield* ask(victim, { cmd: "inject", kind: o.inject })
        state.injected = true
      })
    )
    return { state, stop: Effect.zipRight(Fiber.interrupt(monitor), Fiber.interrupt(injector)) }
  })

/**
 * The end of a run against an engine: counters, memory, regions (each compared with the writes `asked` for it; a
 * region not named there must not have changed at all), and the violations they show.
 */
export const finish = (
  e: EngineVictim,
  baseline: EngineStats,
  peakRss: number,
  asked: Readonly<Record<string, ReadonlyArray<Range>>>,
  client: TargetResult["client"],
  clientNotifications: number
) =>
  Effect.gen(function* () {
    const final = yield* ask<EngineStats>(e.victim, { cmd: "stats" })
    const after = (yield* ask<{ regions: EngineRegions }>(e.victim, { cmd: "memory" }))?.regions
    const regions: Record<string, RegionCheck> = {}
    for (const [name, r] of Object.entries(e.before)) {
      regions[name] = checkRegion(sha256, r, after?.[name] ?? { bytes: "" }, asked[name] ?? [])
    }
    const memory = {
      baselineRss: baseline.memory.rss,
      finalRss: final?.memory.rss ?? 0,
      growth: (final?.memory.rss ?? 0) - baseline.memory.rss,
      peakRss: Math.max(peakRss, final?.memory.rss ?? 0),
      heapGrowth: (final?.memory.heapUsed ?? 0) - baseline.memory.heapUsed
    }
    const violations = commonViolations(e.victim, memory, regions, client)
    if (final !== undefined) {
      violations.push(...engineViolations(final))
      if (final.client.distinct !== clientNotifications || final.client.duplicates > 0)
        violations.push(
          `the real client's notifications: ${clientNotifications} sent, ${final.client.distinct} delivered, ${final.client.duplicates} duplicated`
        )
    }
    return { final, regions, memory, violations }
  })
