/**
 * `tent probe`: the RFC's fault matrix between two real processes (`probe/Matrix.ts`), printed as a table shaped like
 * the RFC's Motivation table, or as `{"rows":[…]}` with `--json`. Two arms: `legacy` (TENT `main`, `Series.legacy`)
 * and `series` (`Series.all`: the RFC's seven PRs); `--arm both`
 * alternates them per scenario, as the RFC did. Each row says what the sender attempted (calls that returned success,
 * calls that failed, never attempted because the run stalled), so received/sent is not read as loss when nothing was
 * sent.
 *
 * `TENT_PROBE_COUNT` (hidden, for tests) replaces the 2000 notifications per kind of a stream scenario;
 * `TENT_PROBE_WITHOUT_WINDOW=1` (hidden, an ablation) runs the series arm without PR 6's window (PR 7 alone).
 * The body (`run/Probe.ts`) is loaded when the command runs.
 *
 * @since 0.1.0
 */
import { Command } from "@effect/cli"
import { type ProbeOptions, probeOptions } from "../Options.js"
import { lazy } from "../Render.js"

/**
 * The `tent probe` command; its options are `Options.probeOptions`.
 *
 * @since 0.1.0
 */
export const command = Command.make(
  "probe",
  probeOptions,
  lazy(
    "probe",
    () => import("./run/Probe.js"),
    (m, o: ProbeOptions) => m.run(o)
  )
).pipe(
  Command.withDescription(
    "Run the RFC's notification fault matrix between two real processes (two soft NICs each) and print received/sent, duplicates and times per scenario and arm."
  )
)
