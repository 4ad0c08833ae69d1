/**
 * What delivery receipts cost on a one-way stream, both arms in one run (alternated, so the machine's load falls on
 * both): two engines in this process, `Series.all` (receipts on) against `Series.rfc` (the RFC's seven, receipts off);
 * N notifications of 64 bytes sent as fast as `sendNotification` takes them, timed until the receiver's subscriber
 * has them all (and, with receipts, until the sender holds a receipt for every one). Prints msgs/s per arm, their
 * ratio, and the acks the receiver sent per notification. `tsx packages/core/bench/receipts-cost.ts [N] [rounds]`.
 */
import { makeNotification } from "@tent/rpc"
import { Context, Effect, Layer } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { Diagnostics, Series, TransferEngine } from "../src/index.js"
import { engineLayer } from "../test/fixtures/engine.js"

const N = Number(process.argv[2] ?? 20_000)
const ROUNDS = Number(process.argv[3] ?? 3)

const arm = (series: Layer.Layer<Series.Policies, ConfigError>) =>
  Effect.scoped(
    Effect.gen(function* () {
      const build = Effect.map(Layer.build(engineLayer({}, undefined, series)), (ctx) => ({
        engine: Context.get(ctx, TransferEngine.TransferEngine),
        diag: Context.get(ctx, Diagnostics.Diagnostics)
      }))
      const a = yield* build
      const b = yield* build
      let got = 0
      yield* b.engine.subscribe(() => void got++, { consume: true })
      const msg = new Uint8Array(64)
      // warm up: the bootstrap, and V8's tiering
      for (let i = 0; i < 2000; i++)
        yield* a.engine.sendNotification(b.engine.segmentName, makeNotification(`w${i}`, msg))
      for (let i = 0; i < 500 && got < 2000; i++) yield* Effect.sleep("10 millis")
      got = 0
      const acks0 = b.diag.counters.receipts?.acksSent ?? 0
      const t0 = performance.now()
      for (let i = 0; i < N; i++) yield* a.engine.sendNotification(b.engine.segmentName, makeNotification(`m${i}`, msg))
      const r = a.diag.counters.receipts
      const want = (r?.receipted ?? 0) + N
      for (let i = 0; i < 6000 && (got < N || (r !== undefined && r.receipted < want)); i++) {
        yield* Effect.sleep("1 millis")
      }
      const s = (performance.now() - t0) / 1000
      return { msgsPerS: N / s, acks: (b.diag.counters.receipts?.acksSent ?? 0) - acks0, got }
    })
  )

Effect.runPromise(
  Effect.gen(function* () {
    const on: Array<number> = []
    const off: Array<number> = []
    let acks = 0
    for (let k = 0; k < ROUNDS; k++) {
      const x = yield* arm(Series.rfc)
      off.push(x.msgsPerS)
      const y = yield* arm(Series.all)
      on.push(y.msgsPerS)
      acks += y.acks
    }
    const median = (xs: Array<number>) => [...xs].sort((p, q) => p - q)[Math.floor(xs.length / 2)] as number
    console.log(
      JSON.stringify({
        n: N,
        rounds: ROUNDS,
        msgs_per_s_receipts_on: Math.round(median(on)),
        msgs_per_s_receipts_off: Math.round(median(off)),
        ratio_on_off: Number((median(on) / median(off)).toFixed(3)),
        acks_per_notification: Number((acks / (N * ROUNDS)).toFixed(4))
      })
    )
  })
).catch((e) => {
  console.error(e)
  process.exit(1)
})
