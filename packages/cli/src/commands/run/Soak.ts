/**
 * The body of `tent soak` (loaded when the command runs): checks that it can run (root, `ip`, `nft`: otherwise one
 * line and exit 2), removes what an earlier run left behind, runs each arm on the same seeded schedule (`soak/Soak.ts`)
 * with a live line on stderr (the probe's `Live.View`), and prints the accounting. It fails (exit 1) when the series
 * arm delivered a duplicate or lost a notification silently.
 *
 * @since 0.2.0
 */
import { Console, Effect, Option } from "effect"
import type { SoakOptions } from "../../Options.js"
import { noFigures, View } from "../../probe/Live.js"
import { CliFailure, failWith, UsageFailure } from "../../Render.js"
import type { Figures, WindowFigures } from "../../soak/Accounting.js"
import * as Hosts from "../../soak/Hosts.js"
import { live } from "../../soak/Process.js"
import { describeFault, fullPace, quickPace, schedule } from "../../soak/Schedule.js"
import { type ArmResult, runArm } from "../../soak/Soak.js"
import { killOnExit } from "./killOnExit.js"

const figuresLine = (f: Figures) =>
  `${f.calls} calls (${f.ok} ok, ${f.failed} failed, ${f.unfinished} unfinished), ${f.delivered} delivered, ${f.duplicates} duplicates, ${f.undelivered} undelivered, ${f.silent} silent, longest call ${f.longestCallMs} ms, ${f.callsOver1s} over 1 s (sendNotification alone: longest ${f.longestNotifyMs} ms, ${f.notifyCallsOver1s} over 1 s)`

const windowRow = (w: WindowFigures) =>
  `    ${w.startS.toFixed(1).padStart(6)} s  ${w.fault.padEnd(26)} ${w.lastedS.toFixed(1)} s: ${figuresLine(w)}; RDMA back ${w.rdmaBackS < 0 ? "never" : `${w.rdmaBackS} s`} after its end`

export const run = (o: SoakOptions) =>
  Effect.gen(function* () {
    const lacking = Hosts.missing()
    if (lacking !== undefined) return yield* Effect.fail(new UsageFailure(lacking))
    const count = Option.getOrElse(o.count, () => (o.quick ? 10_000 : 100_000))
    const rate = Option.getOrElse(o.rate, () => (o.quick ? 250 : 500))
    if (count < 1 || rate < 1) return yield* Effect.fail(new UsageFailure("--count and --rate must be at least 1"))
    const seed = Option.getOrElse(o.seed, () => (Math.random() * 0x7fffffff) >>> 0)
    const sendingMs = (count * 1000) / rate
    const faults = schedule(seed, sendingMs * 0.1, sendingMs * 0.85, o.quick ? quickPace : fullPace)
    const arms: ReadonlyArray<"legacy" | "series"> = o.arm === "both" ? ["legacy", "series"] : [o.arm]
    const info = (line: string) => (o.json ? Effect.sync(() => process.stderr.write(`${line}\n`)) : Console.log(line))
    const removed = Hosts.cleanLeftovers()
    if (removed.length > 0) yield* info(`removed what an earlier soak left: ${removed.join(", ")}`)
    yield* info(
      `tent soak: seed ${seed}; ${count} notifications per arm at ${rate}/s (every 4th bound to a 4 KiB transfer), two namespaced hosts, two rails and a control-plane link each; ${faults.length} faults: ${faults.map((f) => `${describeFault(f.fault)} at ${(f.atMs / 1000).toFixed(1)} s for ${(f.forMs / 1000).toFixed(1)} s`).join("; ")}`
    )
    killOnExit(live)
    const view = new View(process.stderr)
    const results: Array<ArmResult> = []
    for (const arm of arms) {
      const t0 = performance.now()
      const result = yield* runArm(
        {
          arm,
          count,
          rate,
          transferEvery: 4,
          faults,
          quick: o.quick,
          deadlineMs: o.quick ? Math.max(60_000, sendingMs + 20_000) : sendingMs * 1.5 + 60_000,
          settleMs: o.quick ? 10_000 : 60_000
        },
        {
          report: (phase, sent, received) =>
            view.update(
              arm,
              `soak ${arm}`,
              { ...noFigures, sent, received, elapsed: (performance.now() - t0) / 1000 },
              phase
            )
        }
      )
      view.clear()
      results.push(result)
      if (!o.json) {
        const a = result.accounts
        yield* Console.log(
          `  ${arm}: ${figuresLine(a.total)}; ${result.notAttempted} not attempted; ${result.elapsedS} s`
        )
        yield* Console.log(
          `    undelivered by reason: ${JSON.stringify(a.undeliveredBy)}; receiver incarnations logged ${a.incarnations.join(", ")} distinct`
        )
        yield* Console.log(`    between faults: ${figuresLine(a.quiet)}`)
        for (const w of a.windows) yield* Console.log(windowRow(w))
      }
    }
    const left = Hosts.present()
    if (o.json) {
      yield* Console.log(
        JSON.stringify({
          seed,
          count,
          rate,
          quick: o.quick,
          schedule: faults.map((f) => ({ ...f.fault, atS: f.atMs / 1000, forS: f.forMs / 1000 })),
          arms: results.map((r) => ({
            arm: r.arm,
            sent: r.sent,
            notAttempted: r.notAttempted,
            elapsedS: r.elapsedS,
            ...r.accounts
          })),
          namespacesLeft: left
        })
      )
    }
    if (left.length > 0) return yield* Effect.fail(new CliFailure(`namespaces left behind: ${left.join(", ")}`))
    const series = results.find((r) => r.arm === "series")
    if (series !== undefined && (series.accounts.total.duplicates > 0 || series.accounts.total.silent > 0)) {
      return yield* Effect.fail(
        new CliFailure(
          `the series arm delivered ${series.accounts.total.duplicates} duplicate(s) and lost ${series.accounts.total.silent} notification(s) silently (seed ${seed})`
        )
      )
    }
  }).pipe(failWith("soak"))
