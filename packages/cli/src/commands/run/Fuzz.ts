/**
 * The body of `tent fuzz` (loaded when the command runs): prints the seed first (so a failure can be replayed with
 * `--seed`), runs the targets (`fuzz/Fuzz.ts`) with a progress line every 5 s on stderr, prints each target's report
 * (or one JSON object), and fails (exit 1) when any target found a violation.
 *
 * @since 0.3.0
 */
import { Console, Effect, Option } from "effect"
import { available, isConfigVariable, live } from "../../fuzz/Child.js"
import * as Fuzz from "../../fuzz/Fuzz.js"
import { freshSeed } from "../../fuzz/Prng.js"
import { type TargetName, targets } from "../../fuzz/Target.js"
import type { FuzzOptions } from "../../Options.js"
import { CliFailure, failWith, UsageFailure } from "../../Render.js"
import { killOnExit } from "./killOnExit.js"

export const run = (o: FuzzOptions) =>
  Effect.gen(function* () {
    const missing = available()
    if (missing !== undefined) return yield* Effect.fail(new CliFailure(missing))
    if (o.count < 1) return yield* Effect.fail(new UsageFailure("--count must be at least 1"))
    const seed = Option.getOrElse(o.seed, freshSeed) >>> 0
    const chosen: ReadonlyArray<TargetName> = o.target === "all" ? targets : [o.target]
    const info = (line: string) => Effect.sync(() => process.stderr.write(`${line}\n`))
    yield* info(
      `tent fuzz: seed ${seed}; ${o.count.toLocaleString("en-US")} inputs per target; targets ${chosen.join(", ")} (replay: tent fuzz --seed ${seed} --count ${o.count}${o.target === "all" ? "" : ` --target ${o.target}`})`
    )
    killOnExit(live)
    // the fuzzer's own engines (the notify-slots client) take the configuration it gives them, not the shell's
    for (const name of Object.keys(process.env)) if (isConfigVariable(name)) delete process.env[name]
    const results = yield* Fuzz.run({
      seed,
      count: o.count,
      targets: chosen,
      progress: (line) => process.stderr.write(`${line}\n`)
    })
    if (o.json) yield* Console.log(JSON.stringify({ seed, count: o.count, targets: results }))
    else for (const r of results) yield* Console.log(Fuzz.render(r).join("\n"))
    const failed = results.filter((r) => r.violations.length > 0)
    if (failed.length > 0) {
      return yield* Effect.fail(
        new CliFailure(
          `${failed.map((r) => `${r.target}: ${r.violations.length} violation(s) (${r.violations[0]})`).join("; ")}; replay with --seed ${seed}`
        )
      )
    }
  }).pipe(failWith("fuzz"))
