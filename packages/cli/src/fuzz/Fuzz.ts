/**
 * The fuzz harness (`tent fuzz`, `pnpm fuzz`): runs each target with its count of inputs and seed, and reports per
 * target the inputs, the rate, the connections, the counters, the victim's memory growth, the registered regions'
 * check and every violation. A run fails when any target has a violation.
 */
import { Effect } from "effect"
import * as NotifySlots from "./NotifySlots.js"
import * as RpcFrames from "./RpcFrames.js"
import * as SoftDatagrams from "./SoftDatagrams.js"
import { type Inject, mib, type TargetName, type TargetOptions, type TargetResult } from "./Target.js"

/** How `tent fuzz` runs. */
export interface FuzzOptions {
  readonly seed: number
  readonly count: number
  readonly targets: ReadonlyArray<TargetName>
  readonly inject?: Inject | undefined
  readonly progress: (line: string) => void
}

const runners: Record<TargetName, (o: TargetOptions) => Effect.Effect<TargetResult, unknown>> = {
  "rpc-frames": RpcFrames.run,
  "notify-slots": NotifySlots.run,
  softverbs: SoftDatagrams.run
}

/** Runs the targets one after another; a target that could not run at all fails the run. */
export const run = (o: FuzzOptions): Effect.Effect<ReadonlyArray<TargetResult>, unknown> =>
  Effect.forEach(o.targets, (target) =>
    runners[target]({ seed: o.seed, count: o.count, inject: o.inject, progress: o.progress })
  )

const n = (v: unknown): string => (typeof v === "number" ? v.toLocaleString("en-US") : String(v))

/** `counters` as `a.b=1` pairs, zeros and empty values left out. */
export const flat = (v: unknown, prefix = ""): Array<string> => {
  if (typeof v === "number") return v === 0 ? [] : [`${prefix}=${v}`]
  if (typeof v === "string") return v === "" || v === "0" ? [] : [`${prefix}=${v}`]
  if (v === null || typeof v !== "object") return []
  return Object.entries(v).flatMap(([k, x]) => flat(x, prefix === "" ? k : `${prefix}.${k}`))
}

/** The report of one target, for a person. */
export const render = (r: TargetResult): Array<string> => {
  const lines = [
    `${r.target}: ${n(r.inputs)} inputs in ${r.seconds.toFixed(1)} s (${n(Math.round(r.rate))}/s), ${n(r.connections)} connections; ${r.violations.length === 0 ? "OK" : `${r.violations.length} VIOLATION(S)`}`,
    `  victim RSS after GC ${mib(r.memory.baselineRss)} -> ${mib(r.memory.finalRss)} (growth ${mib(r.memory.growth)}, peak ${mib(r.memory.peakRss)}, heap ${mib(r.memory.heapGrowth)})`,
    `  real client: ${n(r.client.rounds)} rounds, ${r.client.errors.length} errors`
  ]
  for (const [name, c] of Object.entries(r.regions)) {
    lines.push(
      `  region ${name}: sha256 ${c.before.slice(0, 16)}… -> ${c.after.slice(0, 16)}… (${c.changedInside} bytes changed by asked writes, ${c.changedOutside} outside)`
    )
  }
  const pairs = flat(r.counters)
  for (let i = 0; i < pairs.length; i += 8)
    lines.push(`  ${i === 0 ? "counters:" : "         "} ${pairs.slice(i, i + 8).join(" ")}`)
  for (const v of r.violations) lines.push(`  VIOLATION: ${v}`)
  for (const s of r.samples.slice(0, 5)) lines.push(`  sample: ${s.replace(/\s+/g, " ").slice(0, 300)}`)
  return lines
}
