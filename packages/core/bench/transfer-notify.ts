/**
 * Transfer-bound notifications, part of `tent bench engine`: the immediates path
 * (`transports/rdma/notify/transfer_bound` = `immediate`) beside TENT's notify-QP path (`notify_qp`) measured in the
 * same run, arms in blocks (notify_qp, immediate, immediate, notify_qp) so the machine's load falls on both. Two
 * engines in this process (`Series.all`: receipts, which the immediates need), one SoftVerbs NIC each, two lanes
 * (`num_lanes` 2), TENT's 64 KiB slices.
 *
 * - `notify_after_transfer_us_k4` / `_k16`: one `submitTransfer` of k WRITE requests of 64 KiB with a notification,
 *   timed from the call to the receiver's `subscribe` handler seeing the notification; median over the rounds. The
 *   next round starts when the notification arrived (closed loop); the sender's batches are waited for and freed
 *   every 32 rounds, outside the timed span. Floor: the notify-QP path's median.
 * - `transfer_notify_per_s_k16`: the same closed loop at k = 16, rounds per second over the timed rounds (bookkeeping
 *   included). Floor: the notify-QP path's.
 *
 * Goals (issue: ≤ 0.8× and ≥ 1.2×). The log gives each block's figures and the immediates' counters (records,
 * markers, released, spoiled), so a run that silently fell back to the notify QP shows.
 */

import { fileURLToPath } from "node:url"
import { type BenchOptions, type BenchResult, median } from "@tent/verbs/bench"
import { spawnChild } from "@tent/verbs/testing"
import { Context, Deferred, Effect, Exit, Layer } from "effect"
import { Diagnostics, Series, TransferEngine } from "../src/index.js"
import { engineLayer } from "../test/fixtures/engine.js"
import type { Mode } from "../test/fixtures/imm-pair.js"

const KB64 = 65536

/** One arm: `warm` untimed then `rounds` timed closed-loop rounds at each k; latencies (µs) and rounds/s at k = 16. */
const arm = (mode: Mode, warm: number, rounds: number, log: (l: string) => void) =>
  Effect.scoped(
    Effect.gen(function* () {
      const peer = yield* spawnChild<{ segment: string; addr: number }>(
        fileURLToPath(new URL("./transfer-notify-peer.ts", import.meta.url)),
        [mode, String(16 * KB64)]
      )
      const json = { transports: { rdma: { notify: { transfer_bound: mode } } } }
      const ctx = yield* Layer.build(engineLayer(json, ["mlx0"], Series.all))
      const engine = Context.get(ctx, TransferEngine.TransferEngine)
      const diag = Context.get(ctx, Diagnostics.Diagnostics)
      const src = Buffer.alloc(16 * KB64)
      for (let i = 0; i < src.length; i++) src[i] = (i * 7 + 3) & 0xff
      const local = yield* engine.registerSegment(src)
      const target = yield* engine.openSegment(peer.ready.segment)
      let arrived: ((at: number) => void) | undefined
      yield* engine.subscribe((n) => arrived?.(new DataView(n.msg.buffer, n.msg.byteOffset, 8).getFloat64(0, true)), {
        consume: true
      })
      const echo = yield* Effect.promise(() =>
        peer.request<{ ok?: boolean }>({ cmd: "echo", target: engine.segmentName })
      )
      if (echo.ok !== true) return yield* Effect.fail(new Error(`transfer-notify-peer: ${JSON.stringify(echo)}`))
      const name = new TextEncoder().encode("xfer")
      const requests = (k: number) =>
        Array.from({ length: k }, (_, j) => ({
          opcode: "WRITE" as const,
          source: local.addr + j * KB64,
          target,
          targetOffset: peer.ready.addr + j * KB64,
          length: KB64
        }))
      const pending: Array<number> = []
      const settle = Effect.gen(function* () {
        for (const batch of pending) {
          const s = yield* engine.waitTransfer(batch, 30_000)
          if (s.status !== "COMPLETED") return yield* Effect.fail(new Error(`a bench transfer ended ${s.status}`))
          yield* engine.freeBatch(batch)
        }
        pending.length = 0
      })
      // One round: submit, then the receiver's echo of its arrival time (one host's clock: ms since the epoch).
      const round = (k: number) =>
        Effect.gen(function* () {
          const got = yield* Deferred.make<number>()
          arrived = (at) => Deferred.unsafeDone(got, Exit.succeed(at))
          const batch = yield* engine.allocateBatch
          const t0 = performance.timeOrigin + performance.now()
          yield* engine.submitTransfer(batch, requests(k), { name, msg: new Uint8Array(4) })
          const at = yield* Deferred.await(got).pipe(Effect.timeout("30 seconds"))
          arrived = undefined
          pending.push(batch)
          return (at - t0) * 1000
        })
      const loop = (k: number, n: number) =>
        Effect.gen(function* () {
          const us: Array<number> = []
          let spent = 0
          for (let i = 0; i < n; i++) {
            const t0 = performance.now()
            us.push(yield* round(k))
            if (pending.length >= 32) yield* settle
            spent += performance.now() - t0
          }
          yield* settle
          return { us, perS: n / (spent / 1000) }
        })
      yield* loop(4, warm)
      yield* loop(16, warm)
      const k4 = yield* loop(4, rounds)
      const k16 = yield* loop(16, rounds)
      const c = diag.counters.immediates
      log(
        `transfer-bound ${mode.padEnd(9)}: k=4 ${median(k4.us).toFixed(1)} µs, k=16 ${median(k16.us).toFixed(1)} µs, ` +
          `${Math.round(k16.perS)} rounds/s at k=16; sender records ${c?.records ?? 0}, markers ${c?.markers ?? 0}, ` +
          `spoiled ${c?.spoiled ?? 0}`
      )
      return { k4: median(k4.us), k16: median(k16.us), perS: k16.perS }
    })
  )

/** The figures, arms in blocks (notify_qp, immediate, immediate, notify_qp). */
export const figures = (options: BenchOptions): Effect.Effect<ReadonlyArray<BenchResult>, unknown> =>
  Effect.gen(function* () {
    const warm = options.quick ? 100 : 300
    const rounds = options.quick ? 300 : 1500
    const acc: Record<Mode, { k4: Array<number>; k16: Array<number>; perS: Array<number> }> = {
      notify_qp: { k4: [], k16: [], perS: [] },
      immediate: { k4: [], k16: [], perS: [] }
    }
    for (const mode of ["notify_qp", "immediate", "immediate", "notify_qp"] as const) {
      const f = yield* arm(mode, warm, rounds, options.log)
      acc[mode].k4.push(f.k4)
      acc[mode].k16.push(f.k16)
      acc[mode].perS.push(f.perS)
    }
    const mean = (xs: ReadonlyArray<number>) => xs.reduce((x, y) => x + y, 0) / xs.length
    const figure = (name: string, unit: string, better: "lower" | "higher", value: number, floor: number) => ({
      name,
      unit,
      better,
      value: Number(value.toFixed(2)),
      floor: Number(floor.toFixed(2)),
      ratio: Number((value / floor).toFixed(3))
    })
    const i = acc.immediate
    const q = acc.notify_qp
    return [
      figure("notify_after_transfer_us_k4", "us", "lower", mean(i.k4), mean(q.k4)),
      figure("notify_after_transfer_us_k16", "us", "lower", mean(i.k16), mean(q.k16)),
      figure("transfer_notify_per_s_k16", "xfer/s", "higher", mean(i.perS), mean(q.perS))
    ]
  })
