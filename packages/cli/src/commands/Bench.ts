/**
 * `tent bench [verbs|rpc|engine|receipts|cli|all]`: runs the benchmark suites (each figure beside a floor measured in
 * the same run). A suite lives in its package: `packages/verbs/bench/verbs.ts`, `packages/rpc/bench/rpc.ts`,
 * `packages/core/bench/engine.ts`, `packages/core/bench/receipts.ts`, each exporting `run({ quick, log })`.
 * The body (`run/Bench.ts`) is loaded when the command runs.
 *
 * @since 0.1.0
 */
import { Command } from "@effect/cli"
import { type BenchOptions, benchOptions } from "../Options.js"
import { lazy } from "../Render.js"

/**
 * The `tent bench` command; its options are `Options.benchOptions`.
 *
 * @since 0.1.0
 */
export const command = Command.make(
  "bench",
  benchOptions,
  lazy(
    "bench",
    () => import("./run/Bench.js"),
    (m, o: BenchOptions) => m.run(o)
  )
).pipe(
  Command.withDescription(
    "Run the benchmark suites (verbs, rpc, engine or all), each figure beside a floor measured in the same run."
  )
)
