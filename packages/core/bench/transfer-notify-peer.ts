/**
 * The receiver of the transfer-bound notification figures (`transfer-notify.ts`): an engine (one SoftVerbs NIC, two
 * lanes, `Series.all`, `transports/rdma/notify/transfer_bound` from the first argument) that registers a segment of
 * the second argument's bytes, prints `{segment, addr}`, and on `{"cmd":"echo","target"}` answers every notification
 * it receives, from its `subscribe` handler, with a notification to `target` whose `msg` is the arrival time (ms since
 * the epoch, float64 LE, `performance.timeOrigin + performance.now()`: one host, one clock).
 */
import { createInterface } from "node:readline"
import type { Notification } from "@tent/rpc"
import { Context, Effect, Exit, Layer, Runtime } from "effect"
import { Series, TransferEngine } from "../src/index.js"
import { engineLayer } from "../test/fixtures/engine.js"

const mode = process.argv[2] ?? "notify_qp"
const size = Number(process.argv[3] ?? 1 << 20)

const program = Effect.gen(function* () {
  const ctx = yield* Layer.build(
    engineLayer({ transports: { rdma: { notify: { transfer_bound: mode } } } }, ["mlx0"], Series.all)
  )
  const engine = Context.get(ctx, TransferEngine.TransferEngine)
  const runtime = yield* Effect.runtime<never>()
  const runSyncExit = Runtime.runSyncExit(runtime)
  const runFork = Runtime.runFork(runtime)
  const region = yield* engine.registerSegment(Buffer.alloc(size))
  const name = new TextEncoder().encode("arrived")
  let failed = 0
  let warm = false
  const echo = (target: string) => (_: Notification) => {
    const msg = new Uint8Array(8)
    new DataView(msg.buffer).setFloat64(0, performance.timeOrigin + performance.now(), true)
    const n = { name, msg }
    if (!warm) {
      // The first echo bootstraps the endpoint back (I/O): forked, not run synchronously.
      runFork(engine.sendNotification(target, n)).addObserver((exit) => {
        if (Exit.isSuccess(exit)) warm = true
        else failed++
      })
      return
    }
    if (engine.trySendNotification(target, n)) return
    if (Exit.isFailure(runSyncExit(engine.sendNotification(target, n)))) failed++
  }
  const lines = createInterface({ input: process.stdin })
  lines.on("line", (line) => {
    const req = JSON.parse(line) as { cmd?: string; target?: string }
    const handle: Effect.Effect<unknown> =
      req.cmd === "echo" && typeof req.target === "string"
        ? Effect.as(
            Effect.forkDaemon(
              Effect.scoped(Effect.zipRight(engine.subscribe(echo(req.target), { consume: true }), Effect.never))
            ),
            { ok: true }
          )
        : req.cmd === "stats"
          ? Effect.succeed({ failed })
          : Effect.succeed({ error: `unknown or malformed command ${line}` })
    Effect.runPromise(handle).then((reply) => process.stdout.write(`${JSON.stringify(reply)}\n`))
  })
  lines.on("close", () => process.exit(0))
  process.stdout.write(`${JSON.stringify({ segment: engine.segmentName, addr: region.addr })}\n`)
  yield* Effect.never
})

Effect.runPromise(Effect.scoped(program)).catch((e) => {
  process.stderr.write(`transfer-notify-peer failed: ${String(e)}\n`)
  process.exit(1)
})
