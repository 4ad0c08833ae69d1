/**
 * `pnpm bench rpc [--quick] [--json]`: the control plane's `Notify` against a plain `node:net` floor measured in the
 * same run, server in its own process.
 *
 * - `notify_rtt_us`: median of sequential `Notify` calls (64-byte message) through `RpcAgent` and the lean server;
 *   floor: a `node:net` ping-pong of 64-byte length-prefixed frames. `ratio` = value / floor (target ≤ 1.5).
 * - `notify_rtt_p99_us`: the 99th percentile of the same calls.
 * - `notify_calls_per_s`: 64 callers in one process, each calling in a loop; floor: 64 frames outstanding on one
 *   `node:net` connection. `ratio` = value / floor (1 = as fast as the floor).
 * - `notify_rtt_us_fiber_handler`: as `notify_rtt_us`, but the server's handler returns `Effect.sync(..)` instead of
 *   `Effect.void`, so it runs in a fiber of its own (an already-complete effect is answered without one); same floor.
 * - `notify_rtt_us_auth`, `notify_calls_per_s_auth`: as `notify_rtt_us` and `notify_calls_per_s`, to the same server
 *   with the control plane's shared secret (each connection proves it once; every request after passes the same
 *   checks); the floor is the unauthenticated lean figure, measured in alternating blocks with it (goal: ratio ≤ 1.05
 *   for the latency, ≥ 0.95 for the calls).
 * - `*_tent_wire`: the same calls as a Mooncake TENT node makes them (`TentClient`: yalantinglibs coro_rpc, the
 *   `Notify` body TENT's JSON) to the same server port, which tells the two wires apart by a connection's first bytes.
 * - `*_stock`: the same over the stock @effect/rpc path (`RpcClient` + `NodeSocket`, `RpcServer` +
 *   `NodeSocketServer`, msgpack, tracing off), for comparison.
 *
 * The floor is measured right before and right after each variant and averaged.
 *
 * Environment: `TENT_BENCH_PROFILE_DIR=<dir>` writes a CPU profile of the server process there when the bench ends
 * (run this process with `node --cpu-prof` to profile the calling side too); `TENT_BENCH_RPC_LEAN_ONLY=1` skips the
 * stock variant (its figures are then absent).
 */
import * as Net from "node:net"
import { fileURLToPath } from "node:url"
import type { BenchOptions, BenchResult } from "@tent/verbs/bench"
import { frameSplitter } from "@tent/verbs/bench/frames"
import { Effect, type Scope } from "effect"
import { makeNotification, RpcAgent, RpcConfig, Stock, TentClient } from "../src/index.js"
import { spawnChild } from "../test/fixtures/process.js"
import { BENCH_SECRET } from "./secret.js"

const MSG_BYTES = 64
const CONCURRENCY = 64

const quantile = (xs: Array<number>, q: number): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] as number
}

interface Latency {
  readonly median: number
  readonly p99: number
}

/** A `node:net` client of the floor echo server: one frame out, the same frame back. */
const floorClient = (port: number) =>
  Effect.acquireRelease(
    Effect.async<{ socket: Net.Socket; onFrame: (f: () => void) => void }>((resume) => {
      const socket = Net.createConnection({ host: "127.0.0.1", port, noDelay: true }, () =>
        resume(Effect.succeed({ socket, onFrame: (f) => (handler = f) }))
      )
      let handler: () => void = () => {}
      socket.on(
        "data",
        frameSplitter(() => handler())
      )
    }),
    ({ socket }) => Effect.sync(() => socket.destroy())
  )

const frame = (() => {
  const f = Buffer.alloc(4 + MSG_BYTES, 1)
  f.writeUInt32LE(MSG_BYTES, 0)
  return f
})()

const floorLatency = (port: number, calls: number, warmup: number): Effect.Effect<Latency, never, Scope.Scope> =>
  Effect.flatMap(floorClient(port), ({ socket, onFrame }) =>
    Effect.promise(
      () =>
        new Promise<Latency>((resolve) => {
          const samples: Array<number> = []
          let i = 0
          let t0 = 0
          onFrame(() => {
            if (i >= warmup) samples.push((performance.now() - t0) * 1000)
            i++
            if (i === warmup + calls) return resolve({ median: quantile(samples, 0.5), p99: quantile(samples, 0.99) })
            t0 = performance.now()
            socket.write(frame)
          })
          t0 = performance.now()
          socket.write(frame)
        })
    )
  )

const floorThroughput = (port: number, calls: number): Effect.Effect<number, never, Scope.Scope> =>
  Effect.flatMap(floorClient(port), ({ socket, onFrame }) =>
    Effect.promise(
      () =>
        new Promise<number>((resolve) => {
          let sent = 0
          let done = 0
          const t0 = performance.now()
          onFrame(() => {
            done++
            if (done === calls) return resolve(calls / ((performance.now() - t0) / 1000))
            if (sent < calls) {
              sent++
              socket.write(frame)
            }
          })
          for (; sent < CONCURRENCY; sent++) socket.write(frame)
        })
    )
  )

/** Median and p99 of `calls` sequential runs of `call`, after `warmup`. */
const latencyOf = <E>(call: Effect.Effect<unknown, E>, calls: number, warmup: number): Effect.Effect<Latency, E> =>
  Effect.gen(function* () {
    for (let i = 0; i < warmup; i++) yield* call
    const samples = new Array<number>(calls)
    for (let i = 0; i < calls; i++) {
      const t0 = performance.now()
      yield* call
      samples[i] = (performance.now() - t0) * 1000
    }
    return { median: quantile(samples, 0.5), p99: quantile(samples, 0.99) }
  })

/** Calls per second with {@link CONCURRENCY} callers looping over `call`. */
const throughputOf = <E>(call: Effect.Effect<unknown, E>, calls: number): Effect.Effect<number, E> =>
  Effect.gen(function* () {
    const per = Math.ceil(calls / CONCURRENCY)
    const loop = Effect.gen(function* () {
      for (let i = 0; i < per; i++) yield* call
    })
    const t0 = performance.now()
    yield* Effect.all(
      Array.from({ length: CONCURRENCY }, () => loop),
      { concurrency: "unbounded", discard: true }
    )
    return (per * CONCURRENCY) / ((performance.now() - t0) / 1000)
  })

interface Ports {
  readonly floor: number
  readonly lean: number
  readonly auth: number
  readonly stock: number
}

/** Runs the suite; see the module comment for what each figure is. */
export const run = (options: BenchOptions): Promise<ReadonlyArray<BenchResult>> => {
  const { log, quick } = options
  const calls = quick ? 10_000 : 30_000
  const warmup = quick ? 2_000 : 5_000
  const tputCalls = quick ? 20_000 : 100_000
  // the stock path is ~10× slower under load: fewer calls keep --quick under 30 s
  const stockTputCalls = quick ? 5_000 : 20_000
  const program = Effect.gen(function* () {
    const profileDir = process.env.TENT_BENCH_PROFILE_DIR
    const nodeArgs = profileDir ? ["--cpu-prof", `--cpu-prof-dir=${profileDir}`] : []
    const server = yield* spawnChild<Ports>(
      fileURLToPath(new URL("./server.ts", import.meta.url)),
      [],
      30_000,
      nodeArgs
    )
    if (profileDir) {
      // SIGTERM lets the server exit on its own, which is when Node writes the profile
      yield* Effect.addFinalizer(() =>
        Effect.promise(() => {
          server.signal("SIGTERM")
          return server.exited
        })
      )
    }
    const ports = server.ready
    log(
      `rpc bench: server pid ${server.pid}, ports ${JSON.stringify(ports)}; ${calls} sequential calls, ${tputCalls} at ${CONCURRENCY} concurrent`
    )
    const note = makeNotification("bench", Buffer.alloc(MSG_BYTES, 1))
    const fiberNote = makeNotification("fiber", Buffer.alloc(MSG_BYTES, 1))
    const results: Array<BenchResult> = []

    const floorAround = <A, E>(measure: Effect.Effect<A, E, Scope.Scope>) =>
      Effect.gen(function* () {
        const before = yield* Effect.scoped(floorLatency(ports.floor, calls, warmup))
        const beforeT = yield* Effect.scoped(floorThroughput(ports.floor, tputCalls))
        const a = yield* Effect.scoped(measure)
        const after = yield* Effect.scoped(floorLatency(ports.floor, calls, warmup))
        const afterT = yield* Effect.scoped(floorThroughput(ports.floor, tputCalls))
        return {
          a,
          median: (before.median + after.median) / 2,
          p99: (before.p99 + after.p99) / 2,
          tput: (beforeT + afterT) / 2
        }
      })

    const push = (suffix: string, lat: Latency, tput: number, floor: { median: number; p99: number; tput: number }) => {
      results.push(
        {
          name: `notify_rtt_us${suffix}`,
          unit: "us",
          value: lat.median,
          better: "lower",
          floor: floor.median,
          ratio: lat.median / floor.median
        },
        {
          name: `notify_rtt_p99_us${suffix}`,
          unit: "us",
          value: lat.p99,
          better: "lower",
          floor: floor.p99,
          ratio: lat.p99 / floor.p99
        },
        {
          name: `notify_calls_per_s${suffix}`,
          unit: "1/s",
          value: tput,
          better: "higher",
          floor: floor.tput,
          ratio: tput / floor.tput
        }
      )
      log(
        `  ${suffix || "lean"}: rtt ${lat.median.toFixed(1)} us (floor ${floor.median.toFixed(1)}, ×${(lat.median / floor.median).toFixed(2)}), p99 ${lat.p99.toFixed(1)} us, ${tput.toFixed(0)} calls/s (floor ${floor.tput.toFixed(0)})`
      )
    }

    log("measuring RpcAgent → lean server")
    const lean = yield* floorAround(
      Effect.gen(function* () {
        const agent = yield* RpcAgent.make.pipe(Effect.provide(RpcConfig.layer({ notify_timeout_ms: 10_000 })))
        const address = `127.0.0.1:${ports.lean}`
        const call = agent.notify(address, note)
        const lat = yield* latencyOf(call, calls, warmup)
        const tput = yield* throughputOf(call, tputCalls)
        const fiber = yield* latencyOf(agent.notify(address, fiberNote), calls, warmup)
        return { lat, tput, fiber }
      })
    )
    push("", lean.a.lat, lean.a.tput, lean)
    results.push({
      name: "notify_rtt_us_fiber_handler",
      unit: "us",
      value: lean.a.fiber.median,
      better: "lower",
      floor: lean.median,
      ratio: lean.a.fiber.median / lean.median
    })
    log(
      `  lean, handler in a fiber: rtt ${lean.a.fiber.median.toFixed(1)} us (floor ${lean.median.toFixed(1)}, ×${(lean.a.fiber.median / lean.median).toFixed(2)})`
    )

    log("measuring RpcAgent → the lean server with a shared secret, in blocks alternating with the one without")
    const both = yield* Effect.gen(function* () {
      const plain = yield* RpcAgent.make.pipe(Effect.provide(RpcConfig.layer({ notify_timeout_ms: 10_000 })))
      const authed = yield* RpcAgent.make.pipe(
        Effect.provide(RpcConfig.layer({ notify_timeout_ms: 10_000 }, { secret: BENCH_SECRET }))
      )
      const arms = {
        lean: plain.notify(`127.0.0.1:${ports.lean}`, note),
        auth: authed.notify(`127.0.0.1:${ports.auth}`, note)
      }
      const lat = { lean: [] as Array<Latency>, auth: [] as Array<Latency> }
      const tput = { lean: [] as Array<number>, auth: [] as Array<number> }
      for (const arm of ["lean", "auth", "auth", "lean"] as const) {
        lat[arm].push(yield* latencyOf(arms[arm], calls / 2, warmup))
        tput[arm].push(yield* throughputOf(arms[arm], tputCalls / 2))
      }
      const mean = (xs: Array<number>) => xs.reduce((a, b) => a + b, 0) / xs.length
      return {
        lean: { median: mean(lat.lean.map((l) => l.median)), tput: mean(tput.lean) },
        auth: { median: mean(lat.auth.map((l) => l.median)), tput: mean(tput.auth) }
      }
    }).pipe(Effect.scoped)
    results.push(
      {
        name: "notify_rtt_us_auth",
        unit: "us",
        value: both.auth.median,
        better: "lower",
        floor: both.lean.median,
        ratio: both.auth.median / both.lean.median
      },
      {
        name: "notify_calls_per_s_auth",
        unit: "1/s",
        value: both.auth.tput,
        better: "higher",
        floor: both.lean.tput,
        ratio: both.auth.tput / both.lean.tput
      }
    )
    log(
      `  with a secret: rtt ${both.auth.median.toFixed(1)} us (without ${both.lean.median.toFixed(1)}, ×${(both.auth.median / both.lean.median).toFixed(3)}), ${both.auth.tput.toFixed(0)} calls/s (without ${both.lean.tput.toFixed(0)}, ×${(both.auth.tput / both.lean.tput).toFixed(3)})`
    )

    log("measuring TentClient → the same server's port, TENT's own wire (coro_rpc, JSON Notify)")
    const tent = yield* floorAround(
      Effect.gen(function* () {
        const client = yield* TentClient.make({ host: "127.0.0.1", port: ports.lean })
        const call = client.notify("bench", "x".repeat(MSG_BYTES))
        const lat = yield* latencyOf(call, calls, warmup)
        const tput = yield* throughputOf(call, tputCalls)
        return { lat, tput }
      })
    )
    push("_tent_wire", tent.a.lat, tent.a.tput, tent)

    if (process.env.TENT_BENCH_RPC_LEAN_ONLY === "1") return results
    log("measuring stock RpcClient → stock server")
    const stock = yield* floorAround(
      Effect.gen(function* () {
        const client = yield* Stock.makeClient({ host: "127.0.0.1", port: ports.stock, disableTracing: true })
        const call = client.Notify(note)
        const lat = yield* latencyOf(call, calls, warmup)
        const tput = yield* throughputOf(call, stockTputCalls)
        return { lat, tput }
      })
    )
    push("_stock", stock.a.lat, stock.a.tput, stock)
    return results
  })
  return Effect.runPromise(Effect.scoped(program))
}
