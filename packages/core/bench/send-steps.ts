/**
 * `node bench/send-steps.ts` (with tsx): what one `sendNotification` on a READY endpoint costs in this process under
 * each routing, `Series.legacy` and `Series.all`: run-loop steps (effects the fiber evaluates, counted by a
 * supervisor with op supervision on, less those of the same wrapper around `Effect.void`) and µs per send run with
 * `Runtime.runSync` (median of rounds of {@link ROUND} sends, each round then waiting for its completions). The peer is
 * `notify-sink-peer.ts` (`Series.all`, so both arms stamp). Prints one JSON line per routing.
 */
import type { Notification } from "@tent/rpc"
import {
  Context,
  Effect,
  type Fiber as FiberT,
  Layer,
  Runtime,
  RuntimeFlags,
  RuntimeFlagsPatch,
  Supervisor
} from "effect"
import { Diagnostics, Series, TransferEngine } from "../src/index.js"
import { spawnChild } from "../test/fixtures/child.js"
import { engineLayer } from "../test/fixtures/engine.js"

const ping: Notification = { name: new TextEncoder().encode("ping"), msg: new Uint8Array(56) }
const ROUND = 128
const ROUNDS = Number(process.argv[2] ?? 200)

class StepCounter extends Supervisor.AbstractSupervisor<number> {
  steps = 0
  get value() {
    return Effect.sync(() => this.steps)
  }
  override onEffect(_fiber: FiberT.RuntimeFiber<unknown, unknown>, _effect: Effect.Effect<unknown, unknown, unknown>) {
    this.steps++
  }
}

const counted = <A, E>(counter: StepCounter, self: Effect.Effect<A, E>) =>
  self.pipe(
    Effect.withRuntimeFlagsPatch(RuntimeFlagsPatch.enable(RuntimeFlags.OpSupervision)),
    Effect.supervised(counter)
  )

const measure = (name: string, series: Layer.Layer<Series.Policies, never>, segment: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const ctx = yield* Layer.build(engineLayer({}, undefined, series as never))
      const engine = Context.get(ctx, TransferEngine.TransferEngine)
      const rdma = Context.get(ctx, Diagnostics.Diagnostics).counters.rdma
      if (rdma === undefined) return yield* Effect.fail(new Error("no RDMA transport"))
      const runSync = Runtime.runSync(yield* Effect.runtime<never>())
      yield* engine.sendNotification(segment, ping) // bootstraps the endpoint
      const settle = (target: number) =>
        Effect.gen(function* () {
          for (let i = 0; i < 5000 && rdma.sendsCompleted < target; i++) yield* Effect.sleep("1 millis")
          if (rdma.sendsCompleted < target) return yield* Effect.fail(new Error("sends did not complete"))
        })
      yield* settle(1)
      const send = engine.sendNotification(segment, ping)
      // Run-loop steps: one send counted, less the wrapper's own steps around `Effect.void`.
      const base = new StepCounter()
      runSync(counted(base, Effect.void))
      const one = new StepCounter()
      runSync(counted(one, send))
      yield* settle(2)
      let sent = 2
      const perSend: Array<number> = []
      for (let r = 0; r < ROUNDS; r++) {
        const t0 = performance.now()
        for (let i = 0; i < ROUND; i++) runSync(send)
        perSend.push(((performance.now() - t0) * 1000) / ROUND)
        sent += ROUND
        yield* settle(sent)
      }
      const sorted = perSend.slice(ROUNDS >> 1).sort((a, b) => a - b)
      const line = {
        routing: name,
        steps: one.steps - base.steps,
        usPerSend: Number((sorted[sorted.length >> 1] as number).toFixed(3)),
        sends: sent
      }
      process.stdout.write(`${JSON.stringify(line)}\n`)
    })
  )

Effect.runPromise(
  Effect.scoped(
    Effect.gen(function* () {
      const peer = yield* spawnChild<{ segment: string }>(new URL("notify-sink-peer.ts", import.meta.url).pathname)
      yield* measure("legacy", Series.legacy as never, peer.ready.segment)
      yield* measure("all", Series.all as never, peer.ready.segment)
    })
  )
).then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`send-steps failed: ${String(e)}\n`)
    process.exit(1)
  }
)
