/**
 * `tent soak` (root): two network namespaces as two hosts, each with two SoftVerbs NICs on two veth pairs (two rails)
 * and its control plane on a third; a receiver in one and a long-lived sender in the other; `N` notifications at a
 * rate, standalone and transfer-bound mixed, while a seeded schedule of faults made by the kernel and by signals runs
 * (a rail's link down, random drop on a rail, the control plane's link down, SIGSTOP/SIGCONT and SIGKILL + restart of
 * the receiver). Accounting per arm and per fault window from the receivers' own logs (`soak/Accounting.ts`).
 * The body (`run/Soak.ts`) is loaded when the command runs.
 *
 * @since 0.2.0
 */
import { Command } from "@effect/cli"
import { type SoakOptions, soakOptions } from "../Options.js"
import { lazy } from "../Render.js"

/**
 * The `tent soak` command; its options are `Options.soakOptions`.
 *
 * @since 0.2.0
 */
export const command = Command.make(
  "soak",
  soakOptions,
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
