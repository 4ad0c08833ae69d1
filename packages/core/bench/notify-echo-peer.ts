/**
 * The peer of the notification ping-pongs (`notify_one_way_us`, `notify_one_way_us_stream`): an engine (two SoftVerbs
 * devices, legacy series) that echoes every notification it receives back to `target`, with one of its two consumers.
 * Prints `{segment}` when ready, then serves JSON-line requests on stdin:
 *
 * - `{"cmd":"echo","target","mode":"subscribe"}`: echoes from `subscribe`, the engine's fast consumer: the handler
 *   sends the echo with `trySendNotification` (the synchronous fast path), or, when that posts nothing, with
 *   `Runtime.runSync` (a send on a READY endpoint completes synchronously). Until one echo has
 *   completed, an echo is forked instead (the first send to `target` bootstraps the endpoint: it waits on I/O, so it
 *   cannot complete inside `runSync`).
 * - `{"cmd":"echo","target","mode":"stream"}`: echoes from the `notifications` stream, one `sendNotification` per
 *   notification taken.
 *
 * Each `echo` first stops the previous one and drains the queues (the subscriber's notifications are queued as well),
 * so the new consumer does not echo old ones; it answers `{ok, drained}`. `{"cmd":"stats"}` answers `{echoed, failed,
 * lastError}`.
 */
import { createInterface } from "node:readline"
import type { Notification } from "@tent/rpc"
import { Cause, Context, Effect, Exit, Layer, Runtime, Scope, Stream } from "effect"
import { TransferEngine } from "../src/index.js"
import { engineLayer } from "../test/fixtures/engine.js"

const program = Effect.gen(function* () {
  const ctx = yield* Layer.build(engineLayer({}))
  const engine = Context.get(ctx, TransferEngine.TransferEngine)
  const runtime = yield* Effect.runtime<never>()
  const runSyncExit = Runtime.runSyncExit(runtime)
  const runFork = Runtime.runFork(runtime)
  let echoed = 0
  let failed = 0
  let lastError: string | undefined
  const failure = (cause: Cause.Cause<unknown>) => {
    failed++
    lastError = Cause.pretty(cause)
  }
  let current: Scope.CloseableScope | undefined

  const echo = (target: string, mode: string) =>
    Effect.gen(function* () {
      if (current !== undefined) yield* Scope.close(current, Exit.void)
      current = undefined
      const drained = (yield* engine.receiveNotifications).length
      const scope = yield* Scope.make()
      if (mode === "subscribe") {
        let warm = false
        const send = (n: Notification) => {
          if (!warm) {
            // The first echo bootstraps the endpoint (I/O): forked, not run synchronously.
            runFork(engine.sendNotification(target, n)).addObserver((exit) => {
              if (Exit.isSuccess(exit)) {
                warm = true
                echoed++
              } else failure(exit.cause)
            })
            return
          }
          // The engine's synchronous fast path; anything it does not post goes the Effect's way.
          if (engine.trySendNotification(target, n)) {
            echoed++
            return
          }
          const exit = runSyncExit(engine.sendNotification(target, n))
          if (Exit.isSuccess(exit)) echoed++
          else failure(exit.cause)
        }
        yield* Scope.extend(engine.subscribe(send), scope)
      } else if (mode === "stream") {
        yield* Stream.runForEach(engine.notifications, (n) =>
          engine.sendNotification(target, n).pipe(
            Effect.matchCause({
              onFailure: failure,
              onSuccess: () => {
                echoed++
              }
            })
          )
        ).pipe(Effect.forkIn(scope))
      } else {
        yield* Scope.close(scope, Exit.void)
        return { error: `unknown echo mode ${mode}` }
      }
      current = scope
      return { ok: true, drained }
    })

  const lines = createInterface({ input: process.stdin })
  lines.on("line", (line) => {
    const req = JSON.parse(line) as { cmd?: string; target?: string; mode?: string }
    const handle: Effect.Effect<unknown> =
      req.cmd === "echo" && typeof req.target === "string" && typeof req.mode === "string"
        ? echo(req.target, req.mode)
        : req.cmd === "stats"
          ? Effect.succeed({ echoed, failed, lastError })
          : Effect.succeed({ error: `unknown or malformed command ${line}` })
    Effect.runPromise(handle).then((reply) => process.stdout.write(`${JSON.stringify(reply)}\n`))
  })
  lines.on("close", () => process.exit(0))
  process.stdout.write(`${JSON.stringify({ segment: engine.segmentName })}\n`)
  yield* Effect.never
})

Effect.runPromise(Effect.scoped(program)).catch((e) => {
  process.stderr.write(`notify-echo-peer failed: ${String(e)}\n`)
  process.exit(1)
})
