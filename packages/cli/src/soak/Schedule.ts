/**
 * The soak's seeded fault schedule: faults one after another, each `atMs` after the stream started and lasting
 * `forMs`, with quiet gaps between them, every kind at least once in each round of kinds (in a seeded order). The
 * same seed and length give the same schedule, so a run can be repeated.
 *
 * @since 0.2.0
 */

/**
 * A fault the kernel or a signal makes (never the engine's own hooks).
 *
 * @since 0.2.0
 */
export type Fault =
  | { readonly kind: "railDown"; readonly rail: 0 | 1 }
  | { readonly kind: "railDrop"; readonly rail: 0 | 1; readonly percent: number }
  | { readonly kind: "controlDown" }
  | { readonly kind: "freeze" }
  | { readonly kind: "restart" }

/**
 * One scheduled fault.
 *
 * @since 0.2.0
 */
export interface Scheduled {
  readonly fault: Fault
  readonly atMs: number
  readonly forMs: number
}

/**
 * A seeded generator of floats in [0, 1) (mulberry32).
 *
 * @since 0.2.0
 */
export const random = (seed: number): (() => number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/**
 * How long faults and the gaps between them last.
 *
 * @since 0.2.0
 */
export interface Pace {
  readonly faultMs: readonly [number, number]
  readonly gapMs: readonly [number, number]
}

/**
 * `--quick`'s pace: faults of 1.5–3.5 s, 2–4 s apart.
 *
 * @since 0.2.0
 */
export const quickPace: Pace = { faultMs: [1500, 3500], gapMs: [2000, 4000] }
/**
 * The full run's pace: faults of 3–12 s, 5–15 s apart.
 *
 * @since 0.2.0
 */
export const fullPace: Pace = { faultMs: [3000, 12_000], gapMs: [5000, 15_000] }

const kinds = ["railDown", "railDrop", "controlDown", "freeze", "restart"] as const

/**
 * Faults from `startMs` until `untilMs` (a fault starts only if it ends before then).
 *
 * @since 0.2.0
 */
export const schedule = (seed: number, startMs: number, untilMs: number, pace: Pace): ReadonlyArray<Scheduled> => {
  const next = random(seed)
  const between = ([lo, hi]: readonly [number, number]) => Math.round(lo + next() * (hi - lo))
  const out: Array<Scheduled> = []
  let round: Array<(typeof kinds)[number]> = []
  let at = startMs
  for (let guard = 0; guard < 10_000; guard++) {
    if (round.length === 0) {
      round = [...kinds]
      for (let i = round.length - 1; i > 0; i--) {
        const j = Math.floor(next() * (i + 1))
        ;[round[i], round[j]] = [round[j] as (typeof kinds)[number], round[i] as (typeof kinds)[number]]
      }
    }
    const kind = round.shift() as (typeof kinds)[number]
    const forMs = between(pace.faultMs)
    if (at + forMs > untilMs) break
    const rail: 0 | 1 = next() < 0.5 ? 0 : 1
    const fault: Fault =
      kind === "railDown"
        ? { kind, rail }
        : kind === "railDrop"
          ? { kind, rail, percent: Math.round(2 + next() * 18) }
          : { kind }
    out.push({ fault, atMs: at, forMs })
    at += forMs + between(pace.gapMs)
  }
  return out
}

/**
 * A fault in words, and what it stands for.
 *
 * @since 0.2.0
 */
export const describeFault = (f: Fault): string => {
  switch (f.kind) {
    case "railDown":
      return `rail ${f.rail} link down`
    case "railDrop":
      return `rail ${f.rail} drops ${f.percent} %`
    case "controlDown":
      return "control-plane link down"
    case "freeze":
      return "receiver SIGSTOP"
    case "restart":
      return "receiver SIGKILL, restart"
  }
}
