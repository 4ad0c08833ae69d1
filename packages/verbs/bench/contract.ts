/**
 * What every benchmark suite exports and returns: `run(options)` resolving to its figures, each beside a floor
 * measured in the same run (`tent bench` / `pnpm bench` runs them; `packages/<pkg>/bench/<suite>.ts`).
 *
 * @since 0.1.0
 */

/** One measured figure beside its floor. */
export interface BenchResult {
  readonly name: string
  readonly unit: string
  readonly value: number
  readonly better: "lower" | "higher"
  readonly floor: number
  readonly ratio: number
}

/** What the runner passes to a suite's `run`. */
export interface BenchOptions {
  readonly quick: boolean
  readonly log: (line: string) => void
}

/** A suite module. */
export interface BenchSuite {
  readonly run: (options: BenchOptions) => Promise<ReadonlyArray<BenchResult>>
}

/** The `q` quantile of `xs` (0.5: the median): the value at ⌊n · q⌋ of the sorted values. */
export const quantile = (xs: ArrayLike<number>, q: number): number => {
  const s = Array.from(xs).sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(s.length * q))] as number
}

/** The median of `xs` (of an even count, the upper of the middle two). */
export const median = (xs: ArrayLike<number>): number => quantile(xs, 0.5)
