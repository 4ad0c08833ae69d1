/**
 * The body of `tent bench` (loaded when the command runs): each suite is loaded from its package in this
 * repository (`packages/<package>/bench/<suite>.ts`).
 *
 * @since 0.1.0
 */
import { existsSync } from "node:fs"
import { fileURLToPath, pathToFileURL } from "node:url"
import { Console, Effect } from "effect"
import type { BenchOptions } from "../../Options.js"
import { CliFailure, failWith } from "../../Render.js"

/** Each suite and the package that holds it. */
export const suites = { verbs: "verbs", rpc: "rpc", engine: "core", receipts: "core", cli: "cli" } as const

/** A figure of a suite, beside the floor measured in the same run. */
interface BenchResult {
  readonly name: string
  readonly unit: string
  readonly value: number
  readonly better: string
  readonly floor: number
  readonly ratio: number
}

/** What a suite's module exports. */
interface BenchSuite {
  readonly run: (options: {
    readonly quick: boolean
    readonly log: (line: string) => void
  }) => Promise<ReadonlyArray<BenchResult>>
}

const root = fileURLToPath(new URL("../../../../../", import.meta.url))

export const run = (o: BenchOptions) =>
  Effect.gen(function* () {
    if (o.scale && o.suite !== "engine") {
      return yield* Effect.fail(new CliFailure(`--scale is an option of the engine suite: tent bench engine --scale`))
    }
    const wanted: ReadonlyArray<keyof typeof suites> = o.suite === "all" ? ["verbs", "rpc", "engine"] : [o.suite]
    for (const suite of wanted) {
      const file = `${root}packages/${suites[suite]}/bench/${o.scale ? "scale" : suite}.ts`
      if (!existsSync(file))
        return yield* Effect.fail(
          new CliFailure(
            `benchmark suite ${suite} not found at ${file}; check: the suites run from a clone of the repository, not from an installed package`
          )
        )
      const mod = yield* Effect.promise(() => import(pathToFileURL(file).href) as Promise<BenchSuite>)
      const results = yield* Effect.tryPromise({
        try: () => mod.run({ quick: o.quick, log: (line) => process.stderr.write(`${line}\n`) }),
        catch: (e) => new CliFailure(`benchmark suite ${suite} failed: ${String(e)}`)
      })
      if (o.json) {
        yield* Console.log(JSON.stringify({ suite: o.scale ? "engine-scale" : suite, results }))
        continue
      }
      yield* Console.log(`suite ${o.scale ? "engine-scale" : suite}${o.quick ? " (quick)" : ""}`)
      for (const r of results) {
        yield* Console.log(
          `  ${r.name.padEnd(22)} ${r.value.toFixed(2).padStart(12)} ${r.unit.padEnd(6)} floor ${r.floor.toFixed(2).padStart(12)}  ratio ${r.ratio.toFixed(2)} (${r.better} is better)`
        )
      }
    }
  }).pipe(failWith("bench"))
