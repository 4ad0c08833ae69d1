/**
 * The receiver of `send_msgs_per_s`: an engine (two SoftVerbs devices) with `Series.all`, so it advertises
 * `notify_proto` 1 and its senders stamp what they send it (RFC PR 6), draining its `notifications` stream. Prints
 * `{segment}` when ready, then answers `{"cmd":"stats"}` with how many notifications it received and what its dedup
 * window counted (stamped ones accepted, duplicates, unstamped).
 */
import { createInterface } from "node:readline"
import { Context, Effect, Layer, Stream } from "effect"
import { Diagnostics, Series, TransferEngine } from "../src/index.js"
import { engineLayer } from "../test/fixtures/engine.js"

const program = Effect.gen(function* () {
  const ctx = yield* Layer.build(engineLayer({}, undefined, Series.all))
  const engine = Context.get(ctx, TransferEngine.TransferEngine)
  const dedup = Context.get(ctx, Diagnostics.Diagnostics).counters.dedup
  let received = 0
  yield* Stream.runForEachChunk(engine.notifications, (chunk) =>
    Effect.sync(() => {
      received += chunk.length
    })
  ).pipe(Effect.forkScoped)
  const lines = createInterface({ input: process.stdin })
  lines.on("line", (line) => {
    const req = JSON.parse(line) as { cmd?: string }
    const reply =
      req.cmd === "stats"
        ? {
            received,
            accepted: dedup?.accepted ?? -1,
            duplicates: dedup?.duplicates ?? -1,
            unstamped: dedup?.unstamped ?? -1
          }
        : { error: `unknown command ${String(req.cmd)}` }
    process.stdout.write(`${JSON.stringify(reply)}\n`)
  })
  lines.on("close", () => process.exit(0))
  process.stdout.write(`${JSON.stringify({ segment: engine.segmentName })}\n`)
  yield* Effect.never
})

Effect.runPromise(Effect.scoped(program)).catch((e) => {
  process.stderr.write(`notify-sink-peer failed: ${String(e)}\n`)
  process.exit(1)
})
