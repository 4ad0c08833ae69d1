/**
 * `tent bench receipts`: what delivery receipts (`Series.Receipts`) cost, each figure beside the same figure with
 * receipts off (`Series.rfc`: the RFC's seven alone) measured in the same run, arms in blocks (off, on, on, off) so
 * the machine's load falls on both. Two engines in this process, two SoftVerbs NICs each.
 *
 * - `receipts_one_way_us`: median RTT/2 of a ping-pong of a 64-byte notification, each side's `subscribe` handler
 *   echoing with `trySendNotification` (the engine suite's fast consumer). With receipts the receiver also sends a
 *   `CTRL_ACK` after 32 notifications or 1 ms. Floor: the same with receipts off.
 * - `receipts_msgs_per_s`: a one-way stream of 64-byte notifications sent back to back (as fast as the 256-deep
 *   notify window takes them), timed until the receiver's subscriber has them all and, with receipts, until the
 *   sender holds a receipt for every one. Floor: receipts off (the window's completions only). Goal: ratio ≥ 0.9.
 * - `receipts_acks_per_msg`: the `CTRL_ACK`s the receiver sent per notification of that stream. Floor: 1/32, the
 *   pacing's least (one ack per 32); the 1 ms timer adds more on a slow stream. Goal ≤ 0.05.
 */
import { type BenchOptions, type BenchResult, median } from "@tent/verbs/bench"
import { Context, Effect, Layer, Runtime } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { Diagnostics, Series, TransferEngine } from "../src/index.js"
import { engineLayer } from "../test/fixtures/engine.js"

type Policies = Layer.Layer<Series.Policies, ConfigError>

const ping = { name: new TextEncoder().encode("ping"), msg: new Uint8Array(64) }

/** Two engines with `series`. */
const pair = (series: Policies) =>
  Effect.gen(function* () {
    const build = Effect.map(Layer.build(engineLayer({}, undefined, series)), (ctx) => ({
      engine: Context.get(ctx, TransferEngine.TransferEngine),
      diag: Context.get(ctx, Diagnostics.Diagnostics)
    }))
    return { a: yield* build, b: yield* build }
  })

/** `total` ping-pongs between a and b; RTT/2 of each, µs. */
const oneWay = (series: Policies, warm: number, total: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { a, b } = yield* pair(series)
      const runSync = Runtime.runSync(yield* Effect.runtime<never>())
      const to = (e: TransferEngine.TransferEngineShape, peer: string) => () => {
        if (!e.trySendNotification(peer, ping)) runSync(e.sendNotification(peer, ping))
      }
      const echo = to(b.engine, a.engine.segmentName)
      const again = to(a.engine, b.engine.segmentName)
      const rtts: Array<number> = []
      let n = 0
      let t0 = 0
      let done: (() => void) | undefined
      // Both directions' endpoints first, so every echo takes the fast path (no bootstrap inside a handler).
      yield* a.engine.sendNotification(b.engine.segmentName, ping)
      yield* b.engine.sendNotification(a.engine.segmentName, ping)
      for (let i = 0; i < 500; i++) {
        const got = (yield* a.engine.receiveNotifications).length + (yield* b.engine.receiveNotifications).length
        if (got > 0 && i > 5) break
        yield* Effect.sleep("2 millis")
      }
      yield* b.engine.subscribe(echo, { consume: true })
      yield* a.engine.subscribe(
        () => {
          n++
          if (n > warm) rtts.push(performance.now() - t0)
          if (n >= warm + total) {
            done?.()
            return
          }
          t0 = performance.now()
          again()
        },
        { consume: true }
      )
      // the bootstrap, both ways
      yield* a.engine.sendNotification(b.engine.segmentName, ping)
      yield* Effect.async<void>((resume) => {
        done = () => resume(Effect.void)
      }).pipe(Effect.timeout("120 seconds"))
      return rtts.map((x) => (x * 1000) / 2)
    })
  )

/** A one-way stream of `count`; messages per second, and acks per message. */
const stream = (series: Policies, count: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { a, b } = yield* pair(series)
      let got = 0
      yield* b.engine.subscribe(() => void got++, { consume: true })
      const to = b.engine.segmentName
      for (let i = 0; i < 2000; i++) yield* a.engine.sendNotification(to, ping) // warm-up: bootstrap, V8's tiering
      for (let i = 0; i < 2000 && got < 2000; i++) yield* Effect.sleep("5 millis")
      const r = a.diag.counters.receipts
      const receiptedBefore = r?.receipted ?? 0
      const acksBefore = b.diag.counters.receipts?.acksSent ?? 0
      got = 0
      const t0 = performance.now()
      for (let i = 0; i < count; i++) yield* a.engine.sendNotification(to, ping)
      for (let i = 0; i < 60_000 && (got < count || (r !== undefined && r.receipted - receiptedBefore < count)); i++) {
        yield* Effect.sleep("1 millis")
      }
      const seconds = (performance.now() - t0) / 1000
      if (got < count) return yield* Effect.fail(new Error(`receipts stream: ${got} of ${count} arrived`))
      return { msgsPerS: count / seconds, acksPerMsg: ((b.diag.counters.receipts?.acksSent ?? 0) - acksBefore) / count }
    })
  )

export const run = (options: BenchOptions): Promise<ReadonlyArray<BenchResult>> =>
  Effect.runPromise(
    Effect.gen(function* () {
      const { quick, log } = options
      const rounds = quick ? 2000 : 10_000
      const warm = quick ? 1000 : 3000
      const count = quick ? 20_000 : 100_000
      const on = { oneWay: [] as Array<number>, msgs: [] as Array<number>, acks: [] as Array<number> }
      const off = { oneWay: [] as Array<number>, msgs: [] as Array<number> }
      for (const receipts of [false, true, true, false]) {
        const series = receipts ? Series.all : Series.rfc
        const ow = median(yield* oneWay(series, warm, rounds))
        const st = yield* stream(series, count)
        log(
          `receipts ${receipts ? "on " : "off"}: one-way ${ow.toFixed(1)} us, ${Math.round(st.msgsPerS)} msgs/s, ${st.acksPerMsg.toFixed(4)} acks per message`
        )
        if (receipts) {
          on.oneWay.push(ow)
          on.msgs.push(st.msgsPerS)
          on.acks.push(st.acksPerMsg)
        } else {
          off.oneWay.push(ow)
          off.msgs.push(st.msgsPerS)
        }
      }
      const mean = (xs: ReadonlyArray<number>) => xs.reduce((x, y) => x + y, 0) / xs.length
      const figure = (name: string, unit: string, better: "lower" | "higher", value: number, floor: number) => ({
        name,
        unit,
        better,
        value: Number(value.toFixed(4)),
        floor: Number(floor.toFixed(4)),
        ratio: Number((value / floor).toFixed(3))
      })
      return [
        figure("receipts_one_way_us", "us", "lower", mean(on.oneWay), mean(off.oneWay)),
        figure("receipts_msgs_per_s", "msgs/s", "higher", mean(on.msgs), mean(off.msgs)),
        figure("receipts_acks_per_msg", "acks/msg", "lower", mean(on.acks), 1 / 32)
      ] satisfies ReadonlyArray<BenchResult>
    })
  )
