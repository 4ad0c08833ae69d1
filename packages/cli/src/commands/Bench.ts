/**
 * `tent bench [verbs|rpc|engine|all]`: runs the benchmark suites (each figure beside a floor measured in the same
 * run). A suite lives in its package: `packages/verbs/bench/verbs.ts`, `packages/rpc/bench/rpc.ts`,
 * `packages/core/bench/engine.ts`, each exporting `run({ quick, log })`.
 *
 * @since 0.1.0
 */
import { existsSync } from "node:fs"
import { fileURLToPath, pathToFileURL } from "node:url"
import { Args, Command, Options } from "@effect/cli"
import type { BenchSuite } from "@tent/verbs/bench"
import { Console, Effect } from "effect"
import { CliFailure, failWith } from "../Render.js"

/** Each suite and the package that holds it. */
export const suites = { verbs: "verbs", rpc: "rpc", engine: "core" } as const

const root = fileURLToPath(new URL("../../../../", import.meta.url))

export const command = Command.make(
  "bench",
  {
    suite: Args.choice([
      ["verbs", "verbs"],
      ["rpc", "rpc"],
      ["engine", "engine"],
      ["all", "all"]
    ] as const).pipe(Args.withDescription("the suite to run"), Args.withDefault("all" as const)),
    quick: Options.boolean("quick").pipe(Options.withDescription("fewer iterations (about 30 s per suite)")),
    json: Options.boolean("json").pipe(
      Options.withDescription(
        'one JSON object per suite on stdout: {"suite","results":[{name,unit,value,better,floor,ratio}]}'
      )
    )
  },
  (o) =>
    Effect.gen(function* () {
      const wanted = o.suite === "all" ? (Object.keys(suites) as Array<keyof typeof suites>) : [o.suite]
      for (const suite of wanted) {
        const file = `${root}packages/${suites[suite]}/bench/${suite}.ts`
        if (!existsSync(file))
          return yield* Effect.fail(new CliFailure(`benchmark suite ${suite} not found at ${file}`))
        const mod = yield* Effect.promise(() => import(pathToFileURL(file).href) as Promise<BenchSuite>)
        const results = yield* Effect.tryPromise({
          try: () => mod.run({ quick: o.quick, log: (line) => process.stderr.write(`${line}\n`) }),
          catch: (e) => new CliFailure(`benchmark suite ${suite} failed: ${String(e)}`)
        })
        if (o.json) {
          yield* Console.log(JSON.stringify({ suite, results }))
          continue
        }
        yield* Console.log(`suite ${suite}${o.quick ? " (quick)" : ""}`)
        for (const r of results) {
          yield* Console.log(
            `  ${r.name.padEnd(22)} ${r.value.toFixed(2).padStart(12)} ${r.unit.padEnd(6)} floor ${r.floor.toFixed(2).padStart(12)}  ratio ${r.ratio.toFixed(2)} (${r.better} is better)`
          )
        }
      }
    }).pipe(failWith("bench"))
).pipe(
  Command.withDescription(
    "Run the benchmark suites (verbs, rpc, engine or all), each figure beside a floor measured in the same run."
  )
)
