/**
 * `tent soak` (root): two network namespaces as two hosts, each with two SoftVerbs NICs on two veth pairs (two rails)
 * and its control plane on a third; a receiver in one and a long-lived sender in the other; `N` notifications at a
 * rate, standalone and transfer-bound mixed, while a seeded schedule of faults made by the kernel and by signals runs
 * (a rail's link down, random drop on a rail, the control plane's link down, SIGSTOP/SIGCONT and SIGKILL + restart of
 * the receiver). Accounting per arm and per fault window from the receivers' own logs (`soak/Accounting.ts`).
 * The body (`run/Soak.ts`) is loaded when the command runs.
 *
 * @since 0.1.0
 */
import { Command, Options } from "@effect/cli"
import { lazy } from "../Render.js"

export const options = {
  arm: Options.choice("arm", ["legacy", "series", "both"]).pipe(
    Options.withDescription(
      "legacy = TENT main (Series.legacy); series = the configured series (Series.fromConfig); both = legacy then series, on the same schedule"
    ),
    Options.withDefault("both" as const)
  ),
  quick: Options.boolean("quick").pipe(
    Options.withDescription(
      "10,000 notifications at 250/s with faults of 1.5-3.5 s and the control-plane timeouts of tent probe --quick (2 s): at most 2 minutes per arm"
    )
  ),
  count: Options.integer("count").pipe(
    Options.withDescription("notifications per arm (default 100,000; --quick 10,000)"),
    Options.optional
  ),
  rate: Options.integer("rate").pipe(
    Options.withDescription("notifications per second the sender is paced at (default 500; --quick 250)"),
    Options.optional
  ),
  seed: Options.integer("seed").pipe(
    Options.withDescription("seed of the fault schedule (default: a new one, printed, so the run can be repeated)"),
    Options.optional
  ),
  json: Options.boolean("json").pipe(
    Options.withDescription(
      'print {"seed","count","rate","schedule":[…],"arms":[{"arm","total","quiet","windows":[…]}]} on stdout'
    )
  )
}

/** What `tent soak`'s arguments parse to. */
export type SoakOptions = Command.Command.ParseConfig<typeof options>

export const command = Command.make(
  "soak",
  options,
  lazy(
    "soak",
    () => import("./run/Soak.js"),
    (m, o: SoakOptions) => m.run(o)
  )
).pipe(
  Command.withDescription(
    "As root: two namespaced hosts, two rails and a control-plane link each; send N notifications under a seeded schedule of kernel-made faults and signals; count delivered, duplicates, undelivered and silent per arm and fault window from the receivers' logs."
  )
)
