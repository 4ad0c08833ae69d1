/**
 * `tent bench [verbs|rpc|engine|receipts|cli|all]`: runs the benchmark suites (each figure beside a floor measured in
 * the same run). A suite lives in its package: `packages/verbs/bench/verbs.ts`, `packages/rpc/bench/rpc.ts`,
 * `packages/core/bench/engine.ts`, `packages/core/bench/receipts.ts`, each exporting `run({ quick, log })`.
 * The body (`run/Bench.ts`) is loaded when the command runs.
 *
 * @since 0.1.0
 */
import { Args, Command, Options } from "@effect/cli"
import { lazy } from "../Render.js"

/** Each suite and the package that holds it. */
export const suites = { verbs: "verbs", rpc: "rpc", engine: "core", receipts: "core", cli: "cli" } as const

export const options = {
  suite: Args.choice([
    ["verbs", "verbs"],
    ["rpc", "rpc"],
    ["engine", "engine"],
    ["receipts", "receipts"],
    ["cli", "cli"],
    ["all", "all"]
  ] as const).pipe(
    Args.withDescription(
      "the suite to run (all = verbs, rpc, engine; cli measures the built command: run `pnpm build` first)"
    ),
    Args.withDefault("all" as const)
  ),
  scale: Options.boolean("scale").pipe(
    Options.withDescription(
      "with engine: only the scale suite (packages/core/bench/scale.ts): one-way latency and msgs/s from one engine to 1, 8, 64 and 256 peer engines, and memory per idle endpoint, with lazy and TENT notify slots"
    )
  ),
  quick: Options.boolean("quick").pipe(Options.withDescription("fewer iterations (about 30 s per suite)")),
  json: Options.boolean("json").pipe(
    Options.withDescription(
      'one JSON object per suite on stdout: {"suite","results":[{name,unit,value,better,floor,ratio}]}'
    )
  )
}

/** What `tent bench`'s arguments parse to. */
export type BenchOptions = Command.Command.ParseConfig<typeof options>

export const command = Command.make(
  "bench",
  options,
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
