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
import { Command, Options } from "@effect/cli"
import { lazy } from "../Render.js"

export const options = {
  arm: Options.choice("arm", ["legacy", "series", "both"]).pipe(
    Options.withDescription(
      "legacy = TENT main (Series.legacy); series = the RFC's seven Layers (Series.all); both = the two arms alternating per scenario"
    ),
    Options.withDefault("both" as const)
  ),
  quick: Options.boolean("quick").pipe(
    Options.withDescription(
      "divide the control-plane timeouts (30 s -> 2 s) and the freeze (60 s -> 4 s) by 15, retry counts unchanged, so the matrix runs in minutes; what it changes is printed"
    )
  ),
  json: Options.boolean("json").pipe(
    Options.withDescription(
      'print {"rows":[{"scenario":1..6|"recovery"|"storm","freeze":"application"|"host"|null,"arm","sent","ok","failed","notAttempted","inFlightAtFault","closedInFlight","completedWhileFrozen","received","end","unknownQp","duplicates","seconds":[...]}]} on stdout'
    )
  ),
  only: Options.text("only").pipe(
    Options.withDescription(
      "comma-separated rows to run: 1-6, recovery, storm (the resend storm: the receiver's notify QP to ERR after every 200 notifications); the frozen peers 4, 5, 6 and recovery as the RFC froze them: the application stopped, its NIC alive), and 4-host, 5-host, 6-host, recovery-host (a SIGSTOP of the whole SoftVerbs process, NIC included); default all"
    ),
    Options.optional
  )
}

/** What `tent probe`'s arguments parse to. */
export type ProbeOptions = Command.Command.ParseConfig<typeof options>

export const command = Command.make(
  "probe",
  options,
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
