/**
 * What every fuzz target takes and reports, and the checks they share: a crash is the victim's exit, a handler error
 * or defect is a counter above zero, memory growth is the victim's RSS after a full GC at the end against the same
 * after the seeds, and registered memory is compared byte by byte with what the fuzzer asked to write.
 */
import { Effect } from "effect"
import type { Victim } from "./Child.js"
import { diff, type Range } from "./Regions.js"

/** The targets, in the order `tent fuzz` runs them. */
export const targets = ["rpc-frames", "notify-slots", "softverbs"] as const
/** A target's name. */
export type TargetName = (typeof targets)[number]

/** A violation the harness injects on purpose (negative control): it must be reported. */
export type Inject = "canary" | "throw" | "crash"

/** How one target runs. */
export interface TargetOptions {
  readonly seed: number
  /** Inputs to the target's decoder(s). */
  readonly count: number
  /** Injected halfway through, to show the checks fail (tests only). */
  readonly inject?: Inject | undefined
  /** A line of progress (stderr). */
  readonly progress: (line: string) => void
}

/** RSS growth allowed over a run, after a full GC. */
export const MAX_GROWTH_BYTES = 64 * 1024 * 1024

/** What a target reports. */
export interface TargetResult {
  readonly target: TargetName
  readonly seed: number
  readonly inputs: number
  readonly seconds: number
  readonly rate: number
  readonly connections: number
  /** Counters: the harness's (what came back) and the victim's (what it dropped, refused, counted). */
  readonly counters: Record<string, unknown>
  readonly memory: {
    readonly baselineRss: number
    readonly finalRss: number
    readonly growth: number
    readonly peakRss: number
    readonly heapGrowth: number
  }
  /** The registered regions: digests before and after, bytes changed inside and outside what was asked. */
  readonly regions: Record<string, RegionCheck>
  readonly client: { readonly rounds: number; readonly errors: ReadonlyArray<string> }
  readonly violations: ReadonlyArray<string>
  /** Samples of what the victim answered with a defect or a handler error, for the report. */
  readonly samples: ReadonlyArray<string>
}

/** One region's check. */
export interface RegionCheck {
  readonly before: string
  readonly after: string
  readonly changedInside: number
  readonly changedOutside: number
  readonly firstOutside?: number | undefined
}

/** Compares a region's bytes (base64, guards included) before and after against the ranges asked for. */
export const checkRegion = (
  sha: (b: Buffer) => string,
  before: { readonly addr: number; readonly bytes: string },
  after: { readonly bytes: string },
  asked: ReadonlyArray<Range>
): RegionCheck => {
  const b = Buffer.from(before.bytes, "base64")
  // the victim exited before its regions could be read: the crash is the violation
  if (after.bytes === "") return { before: sha(b), after: "(not read)", changedInside: 0, changedOutside: 0 }
  const a = Buffer.from(after.bytes, "base64")
  const d = diff(b, a, before.addr, asked)
  return {
    before: sha(b),
    after: sha(a),
    changedInside: d.inside,
    changedOutside: d.outside,
    firstOutside: d.firstOutside
  }
}

/** The victim's memory after GC, as `stats` reports it. */
export interface VictimMemory {
  readonly rss: number
  readonly heapUsed: number
  readonly external: number
}

/** Violations every target checks: the victim alive, memory growth, regions, the client. */
export const commonViolations = (
  victim: Victim,
  memory: TargetResult["memory"],
  regions: Record<string, RegionCheck>,
  client: TargetResult["client"]
): Array<string> => {
  const out: Array<string> = []
  const exited = victim.exited()
  if (exited !== undefined) out.push(`the victim process exited (${exited.code ?? exited.signal}): a crash`)
  const log = victim.logLines()
  const errors = (log.ERROR ?? 0) + (log.FATAL ?? 0)
  if (errors > 0) out.push(`the victim logged ${errors} error(s)`)
  if (memory.growth >= MAX_GROWTH_BYTES)
    out.push(`RSS grew ${(memory.growth / 2 ** 20).toFixed(1)} MiB after GC (limit ${MAX_GROWTH_BYTES / 2 ** 20} MiB)`)
  for (const [name, r] of Object.entries(regions)) {
    if (r.changedOutside > 0)
      out.push(
        `${r.changedOutside} byte(s) of ${name} (guards included) changed that no accepted write asked for (first at 0x${(r.firstOutside ?? 0).toString(16)})`
      )
  }
  if (client.errors.length > 0) out.push(`the real client was not served: ${client.errors.slice(0, 3).join("; ")}`)
  if (client.rounds === 0) out.push("the real client made no round")
  return out
}

/** A victim request that a crash turns into `undefined` (the crash is reported by {@link commonViolations}). */
export const ask = <A>(victim: Victim, message: Record<string, unknown>, timeoutMs = 30_000) =>
  Effect.option(victim.request<A>(message, timeoutMs)).pipe(
    Effect.map((o) => (o._tag === "Some" ? o.value : undefined))
  )

/** Megabytes, one decimal. */
export const mib = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`
