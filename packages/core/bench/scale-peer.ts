/**
 * The peers of `pnpm bench engine --scale` (`bench/scale.ts`): `K` engines in this one process, each light — ONE
 * SoftVerbs device named `s<pid>_<k>`, one data lane, one data CQ, one worker, its own control-plane server on
 * 127.0.0.1 port 0 — and each counting what its `subscribe` handler is given and, when told to, echoing it back to a
 * target (the engine's fast consumer, as `notify-echo-peer.ts`: `trySendNotification`, and the full
 * `sendNotification` in a fiber of its own when that posts nothing).
 *
 * Arguments: `K` and the engine config as JSON (merged over the light settings). Prints `{engines: [{segment, address, nic}],
 * startupMs, rss}` (each engine's segment, control-plane address and device) when every engine is built, then serves JSON-line requests on stdin:
 *
 * - `{"cmd":"echo","target"}` echoes from then on to `target` (`"target": null`: count only); drains the queues.
 * - `{"cmd":"stats"}` answers `{received: [per engine], echoed, failed, lastError, cpuUs}` (this process's CPU, user
 *   and system, µs since it started) and drains the queues.
 * - `{"cmd":"freeze","frozen"}` freezes (or thaws) every engine's application (`Diagnostics.freezeApplication`: the
 *   pollers and control-plane servers stop, the SoftVerbs NICs of this process keep answering).
 */
import { createInterface } from "node:readline"
import type { Notification } from "@tent/rpc"
import { Cause, Context, Effect, Exit, Layer, Runtime } from "effect"
import { Diagnostics, Series, TransferEngine } from "../src/index.js"
import { engineLayer } from "../test/fixtures/engine.js"
import { lightConfig } from "./scale-peers.js"

const program = (count: number, json: unknown) =>
  Effect.gen(function* () {
    const t0 = performance.now()
    const runtime = yield* Effect.runtime<never>()
    const runFork = Runtime.runFork(runtime)
    const received = new Array<number>(count).fill(0)
    let target: string | undefined
    let echoed = 0
    let failed = 0
    let lastError: string | undefined
    const failure = (cause: Cause.Cause<unknown>) => {
      failed++
      lastError = Cause.pretty(cause)
    }
    const config = lightConfig(json)
    const start = (k: number) =>
      Effect.gen(function* () {
        const nic = `s${process.pid}_${k}`
        const ctx = yield* Layer.build(engineLayer(config, [nic], Series.all))
        const engine = Context.get(ctx, TransferEngine.TransferEngine)
        const diagnostics = Context.get(ctx, Diagnostics.Diagnostics)
        const done = (exit: Exit.Exit<unknown, unknown>) => {
          if (Exit.isSuccess(exit)) echoed++
          else failure(exit.cause)
        }
        yield* engine.subscribe((n: Notification) => {
          received[k] = (received[k] as number) + 1
          const to = target
          if (to === undefined) return
          // the fast path where it posts at once; otherwise (the target's descriptor not fetched yet, a full window, a
          // fallback) the full path in a fiber of its own
          if (engine.trySendNotification(to, n)) echoed++
          else runFork(engine.sendNotification(to, n)).addObserver(done)
        })
        return { engine, diagnostics, nic }
      })
    const built = yield* Effect.forEach(
      Array.from({ length: count }, (_, k) => k),
      start,
      { concurrency: 4 }
    )
    const engines = built.map((b) => b.engine)
    const startupMs = performance.now() - t0
    // The subscribers' notifications are queued as well: drained on every request and once a second.
    const drain = Effect.forEach(engines, (e) => e.receiveNotifications, { discard: true })
    const timer = setInterval(() => Effect.runFork(drain), 1000)
    timer.unref()
    const lines = createInterface({ input: process.stdin })
    lines.on("line", (line) => {
      const req = JSON.parse(line) as { cmd?: string; target?: string | null; frozen?: boolean }
      const reply: Effect.Effect<unknown> =
        req.cmd === "echo" && (typeof req.target === "string" || req.target === null)
          ? Effect.as(
              Effect.zipRight(
                drain,
                Effect.sync(() => {
                  target = req.target ?? undefined
                })
              ),
              { ok: true }
            )
          : req.cmd === "stats"
            ? Effect.flatMap(
                // the CPU read before the drain: a caller measuring between two requests counts one drain, not two
                Effect.sync(() => process.cpuUsage()),
                (cpu) => Effect.as(drain, { received, echoed, failed, lastError, cpuUs: cpu.user + cpu.system })
              )
            : req.cmd === "freeze" && typeof req.frozen === "boolean"
              ? Effect.as(
                  Effect.forEach(built, (b) => b.diagnostics.freezeApplication(req.frozen === true), { discard: true }),
                  { ok: true }
                )
              : Effect.succeed({ error: `unknown or malformed command ${line}` })
      Effect.runPromise(reply).then((r) => process.stdout.write(`${JSON.stringify(r)}\n`))
    })
    lines.on("close", () => process.exit(0))
    process.stdout.write(
      `${JSON.stringify({
        engines: built.map((b) => ({ segment: b.engine.segmentName, address: b.engine.address, nic: b.nic })),
        startupMs,
        rss: process.memoryUsage().rss
      })}\n`
    )
    yield* Effect.never
  })

const count = Number(process.argv[2] ?? "1")
const json = JSON.parse(process.argv[3] ?? "{}") as unknown
if (!Number.isInteger(count) || count < 1 || count > 1024) {
  process.stderr.write(`scale-peer: engine count ${process.argv[2]} is not in 1..1024\n`)
  process.exit(2)
}
Effect.runPromise(Effect.scoped(program(count, json))).catch((e) => {
  process.stderr.write(`scale-peer failed: ${String(e)}\n`)
  process.exit(1)
})
