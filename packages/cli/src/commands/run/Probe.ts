/**
 * The body of `tent probe` (loaded when the command runs): the matrix, its table and its live view (`probe/Live.ts`:
 * per arm, sent, received, duplicates dropped, fallbacks, resends and elapsed time, on stderr; in place on a
 * terminal, at most a line a second per arm through a pipe).
 *
 * @since 0.1.0
 */
import { Console, Effect, Option } from "effect"
import type { ProbeOptions } from "../../Options.js"
import { live } from "../../probe/Children.js"
import { explain, type Figures, noFigures, View } from "../../probe/Live.js"
import {
  type Arm,
  type Entry,
  entries,
  entryName,
  fullPlan,
  type Plan,
  quickFactors,
  quickPlan,
  type Row,
  runRow,
  title
} from "../../probe/Matrix.js"
import { CliFailure, failWith } from "../../Render.js"
import { killOnExit } from "./killOnExit.js"

/** The arms of `--arm both`, in the order they run within a scenario. */
export const bothArms: ReadonlyArray<Arm> = ["legacy", "series"]

/** A row's figures as its children reported them. */
const figuresOf = (r: Row): Figures => ({
  sent: r.sent,
  received: r.received,
  duplicatesDropped: r.duplicatesDropped,
  fallbacksVia: r.fallbacksVia,
  resentVia: r.resentVia,
  resentPairs: r.resentPairs,
  resendFailed: r.resendFailed,
  undelivered: r.undelivered,
  undeliveredBy: r.undeliveredBy,
  unreceipted: r.unreceipted,
  ledgerSent: r.ledgerSent,
  rebuilt: r.rebuilt,
  elapsed: r.elapsed
})

const cell = (r: Row) => {
  const t = r.seconds.map((x) => `${x.toFixed(3)} s`).join(", ")
  return [
    entryName(r),
    title(r.scenario, r.freeze),
    r.arm,
    `${r.received}/${r.sent}`,
    `${r.ok}/${r.failed}/${r.notAttempted}`,
    String(r.silent),
    String(r.duplicates),
    explain(figuresOf(r)),
    t === "" ? "-" : t,
    r.note
  ]
}

/** The matrix as a Markdown table (the RFC's Motivation table's shape). */
export const table = (rows: ReadonlyArray<Row>): string => {
  const head = [
    "#",
    "scenario",
    "arm",
    "received/sent",
    "ok/failed/not attempted",
    "silent",
    "duplicates",
    "resent, dropped, fell back",
    "seconds",
    "what happened"
  ]
  const body = rows.map(cell)
  const width = head.map((h, k) => Math.max(h.length, ...body.map((b) => (b[k] as string).length)))
  const line = (cols: ReadonlyArray<string>) => `| ${cols.map((c, k) => c.padEnd(width[k] as number)).join(" | ")} |`
  return [line(head), `|${width.map((w) => "-".repeat(w + 2)).join("|")}|`, ...body.map(line)].join("\n")
}

const parseOnly = (text: string): ReadonlyArray<Entry> | CliFailure => {
  const out: Array<Entry> = []
  for (const part of text.split(",").map((x) => x.trim())) {
    const found = entries.find((e) => entryName(e) === part)
    if (found === undefined)
      return new CliFailure(`--only: unknown scenario ${part}; the scenarios are ${entries.map(entryName).join(", ")}`)
    out.push(found)
  }
  return out
}

export const run = (o: ProbeOptions) =>
  Effect.gen(function* () {
    const only = Option.match(o.only, { onNone: () => entries, onSome: parseOnly })
    if (only instanceof CliFailure) return yield* Effect.fail(only)
    const count = Number(process.env.TENT_PROBE_COUNT ?? 2000)
    if (!Number.isInteger(count) || count < 8) {
      return yield* Effect.fail(
        new CliFailure(`TENT_PROBE_COUNT must be an integer >= 8, got ${process.env.TENT_PROBE_COUNT}`)
      )
    }
    const plan: Plan = o.quick ? quickPlan(count) : fullPlan(count)
    const arms: ReadonlyArray<Arm> = o.arm === "both" ? bothArms : [o.arm]
    const info = (line: string) => (o.json ? Effect.sync(() => process.stderr.write(`${line}\n`)) : Console.log(line))
    yield* info(
      `tent probe: two processes on 127.0.0.1, two SoftVerbs NICs each; ${count} transfer-bound + ${count} standalone notifications then END per stream scenario, counted per (session, seq)`
    )
    yield* info(
      o.quick ? `--quick: ${quickFactors}` : "full timeouts: the library's 30 s control-plane default; a 60 s freeze"
    )
    yield* info(
      "frozen peer (rows 4, 5, 6, recovery): the application frozen, its NIC alive, as the RFC froze it on hardware: the peer's engine stops polling its CQs and its control plane stops reading, while its SoftVerbs NICs run on (they ACK SENDs into posted receives, then RNR-NAK; the kernel still completes TCP handshakes): this models a hardware or rxe NIC. The -host rows SIGSTOP the whole SoftVerbs process, NIC included (a host freeze: no ACKs)"
    )
    if (o.arm !== "legacy" && process.env.TENT_PROBE_WITHOUT_WINDOW === "1") {
      yield* info(
        "TENT_PROBE_WITHOUT_WINDOW=1: the series arm runs without PR 6's dedup window (stamped frames and PR 7's resends, every copy delivered): an ablation, not a configuration"
      )
    }
    if (o.arm !== "legacy") {
      yield* info(
        "series arm: Series.all = RFC PRs 1-7 (QpRetirement, ParamsFromEndpoint, RpcFallback, PeerHealth, DescriptorPolicy, Dedup, Resend)"
      )
    }
    killOnExit(live)
    const view = new View(process.stderr)
    const rows: Array<Row> = []
    const t0 = performance.now()
    for (const entry of only) {
      const name = entryName(entry)
      for (const arm of arms) {
        const label = `${name} ${arm}`
        let phase = "starting two processes"
        let figures: Figures = noFigures
        const show = () => view.update(arm, label, figures, phase)
        show()
        const row = yield* runRow(entry, arm, plan, {
          report: (line) => {
            phase = line
            show()
          },
          figures: (f) => {
            figures = f
            show()
          },
          everyMs: process.stderr.isTTY === true ? 250 : 1000
        })
        view.clear()
        rows.push(row)
        if (!o.json)
          yield* Console.log(
            `  ${name} ${arm}: ${row.received}/${row.sent} received (${row.ok} ok, ${row.failed} failed, ${row.notAttempted} not attempted), ${row.silent} silent, ${row.duplicates} duplicates, ${row.seconds.join(" s, ")}${row.seconds.length > 0 ? " s" : ""}; ${explain(figuresOf(row))}; ${row.elapsed} s`
          )
      }
    }
    const elapsed = ((performance.now() - t0) / 1000).toFixed(1)
    if (o.json) {
      const plain = rows.map(({ note: _, ...r }) => r)
      yield* Console.log(JSON.stringify({ rows: plain }))
      process.stderr.write(`tent probe: ${rows.length} rows in ${elapsed} s\n`)
      return
    }
    yield* Console.log("")
    yield* Console.log(table(rows))
    yield* Console.log(`\n${rows.length} rows in ${elapsed} s`)
  }).pipe(failWith("probe"))
