/**
 * `pnpm bench engine --scale [--quick] [--json]`: how the notification path scales with the number of peers, from one
 * initiator engine in this process to N = 1, 8, 64 and 256 peer engines (one endpoint each), in one run. The peers are
 * `bench/scale-peer.ts` processes (two, the machine's cores; peer i is engine ⌊i / 2⌋ of process i % 2), each engine
 * light (one SoftVerbs device, one lane, one data CQ, one worker: {@link lightConfig}), the initiator too.
 *
 * Per arm — `transports/rdma/notify/lazy_slots` true (lazy) and false (TENT's 256 × 64 KiB each way at construction),
 * the same setting on the initiator and on every peer:
 *
 * - memory per idle endpoint: this process's `process.memoryUsage()` rss and arrayBuffers growth (after a full GC)
 *   while the initiator connects to every peer (`RdmaTransport.getEndpoint`, the bootstrap and nothing else: no
 *   notification), divided by the endpoints made; floor: the notify slot bytes each endpoint registered
 *   (`Diagnostics.endpoints` `notifyBytes`). The lazy arm adds `notify_bytes`: its registered bytes per endpoint
 *   beside TENT's (the floor, as counted by the TENT arm).
 * - one-way at N: median RTT / 2 of a ping-pong, ping i to peer i % N, one in flight (this engine's `subscribe` handler
 *   takes the echo and sends the next ping with `Runtime.runSync`; each peer engine echoes from `subscribe` the same
 *   way), after an untimed warm-up that touches every one of the N peers through `sendNotification` (twice), then
 *   untimed rounds of the same ping-pong; once before the first N, a longer one over all peers (JIT, both sides).
 * - msgs/s at N: `count` notifications sent back to back round-robin over the N peers (each `sendNotification`
 *   returns once posted; the per-endpoint window paces), timed until every send completed on this side (the RDMA
 *   transport's `sendsCompleted`), after an untimed round (and, once before the first N, one over all peers); the
 *   peers' counts are checked to hold every one.
 *
 * The sizes run in the order 1, 8, 64, 256, 1 (one-way first, then msgs/s): the floor of a figure at N > 1 is the mean
 * of the two N = 1 figures of the same arm (ratio: the cost of N peers over one); the N = 1 entry's value is the
 * second, its floor the first (ratio: how far the baseline drifted over the run). With `--quick` the TENT arm measures
 * memory only, over {@link QUICK_TENT_PEERS} peers.
 */
import { fileURLToPath } from "node:url"
import * as V8 from "node:v8"
import * as Vm from "node:vm"
import type { Notification } from "@tent/rpc"
import type { BenchOptions, BenchResult } from "@tent/verbs/bench"
import { Context, Deferred, Duration, Effect, Exit, Layer, Logger, LogLevel, Runtime } from "effect"
import { Diagnostics, TransferEngine } from "../src/index.js"
import { RdmaTransport, type RdmaTransportShape } from "../src/internal/rdma/RdmaTransport.js"
import { type Child, spawnChild } from "../test/fixtures/child.js"
import { engineLayer } from "../test/fixtures/engine.js"

const merge = (a: unknown, b: unknown): unknown => {
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object" || Array.isArray(b)) return b
  const out: Record<string, unknown> = { ...(a as Record<string, unknown>) }
  for (const [k, v] of Object.entries(b as Record<string, unknown>)) out[k] = merge(out[k], v)
  return out
}

/** A light engine's config, `json` over it: one data lane, one data CQ, one worker (and, by the caller, one device). */
export const lightConfig = (json: unknown): unknown =>
  merge({ transports: { rdma: { num_lanes: 1, device: { num_cq_list: 1 }, workers: { num_workers: 1 } } } }, json)

/** The config of an arm: lazy notify slots or TENT's. */
const armConfig = (lazy: boolean) => ({ transports: { rdma: { notify: { lazy_slots: lazy } } } })

/** The peer counts of the curve. */
const SIZES = [1, 8, 64, 256] as const
/** Peers of the TENT arm with `--quick` (memory only). */
const QUICK_TENT_PEERS = 64
/** Peer processes (the machine's cores), and the most engines one hosts. */
const PEER_PROCESSES = 2
const MAX_PER_PROCESS = 128
/** A peer process builds its engines within this (128 engines took 20–28 s at load 7–12, tsx's compile aside). */
const PEER_READY_MS = 300_000
/** How long one phase (a ping-pong, a round of sends, a peer check) may take before the suite fails. */
const PHASE_TIMEOUT = Duration.seconds(120)

const here = (f: string) => fileURLToPath(new URL(f, import.meta.url))
const median = (xs: ArrayLike<number>): number => {
  const s = Array.from(xs).sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)] as number
}

/** The ping: a 4-byte name and a 56-byte message (68 bytes in TENT's encoding), as the engine suite's. */
const ping: Notification = { name: new TextEncoder().encode("ping"), msg: new Uint8Array(56) }

/** Engine logs to the bench's log (stderr), warnings and worse: stdout carries the JSON. */
const logsTo = (log: (l: string) => void) =>
  Layer.merge(
    Logger.replace(Logger.defaultLogger, Logger.map(Logger.logfmtLogger, log)),
    Logger.minimumLogLevel(LogLevel.Warning)
  )

/** A full GC if V8 lets this process have one (`--expose-gc` set at run time). */
const fullGc = (): (() => void) | undefined => {
  try {
    V8.setFlagsFromString("--expose-gc")
    return Vm.runInNewContext("gc") as () => void
  } catch {
    return undefined
  }
}

type PeerEngine = { readonly segment: string; readonly address: string; readonly nic: string }
type PeerReady = { readonly engines: ReadonlyArray<PeerEngine>; readonly startupMs: number; readonly rss: number }
type PeerStats = { received: Array<number>; echoed: number; failed: number; lastError?: string }

/** One peer of the set: its engine and the process hosting it (index `slot` there). */
interface Peer extends PeerEngine {
  readonly child: Child<PeerReady>
  readonly slot: number
}

/** Spawns the peer processes of an arm, `total` engines in all; peer i is engine ⌊i / 2⌋ of process i % 2. */
const spawnPeers = (total: number, lazy: boolean, log: (l: string) => void) =>
  Effect.gen(function* () {
    const t0 = performance.now()
    const perProcess = Math.ceil(total / PEER_PROCESSES)
    if (perProcess > MAX_PER_PROCESS) return yield* Effect.fail(new Error(`scale: ${total} peers is too many`))
    const children = yield* Effect.forEach(
      Array.from({ length: PEER_PROCESSES }, (_, p) => p),
      (p) =>
        spawnChild<PeerReady>(
          here("scale-peer.ts"),
          [String(Math.min(perProcess, total - p * perProcess)), JSON.stringify(armConfig(lazy))],
          [],
          PEER_READY_MS
        ),
      { concurrency: "unbounded" }
    )
    const peers: Array<Peer> = []
    for (let i = 0; i < total; i++) {
      const child = children[i % PEER_PROCESSES] as Child<PeerReady>
      const slot = Math.floor(i / PEER_PROCESSES)
      const engine = child.ready.engines[slot]
      if (engine === undefined) return yield* Effect.fail(new Error(`scale: peer ${i} missing`))
      peers.push({ ...engine, child, slot })
    }
    log(
      `scale ${lazy ? "lazy" : "TENT"}: ${total} peer engines in ${PEER_PROCESSES} processes ready in ` +
        `${((performance.now() - t0) / 1000).toFixed(1)} s (engines built in ` +
        `${children.map((c) => (c.ready.startupMs / 1000).toFixed(1)).join(" / ")} s; rss ` +
        `${children.map((c) => (c.ready.rss / 2 ** 20).toFixed(0)).join(" / ")} MiB)`
    )
    return { peers, children }
  })

/** Every peer process's counts, per peer of the set. */
const peerCounts = (peers: ReadonlyArray<Peer>, children: ReadonlyArray<Child<PeerReady>>) =>
  Effect.gen(function* () {
    const stats = yield* Effect.forEach(children, (c) =>
      Effect.tryPromise({ try: () => c.request<PeerStats>({ cmd: "stats" }), catch: (e) => e as Error })
    )
    const failed = stats.reduce((a, s) => a + s.failed, 0)
    if (failed > 0) {
      const last = stats.find((s) => s.failed > 0)?.lastError
      return yield* Effect.fail(new Error(`scale: ${failed} echoes failed in the peers; the last: ${last}`))
    }
    return peers.map((p) => (stats[children.indexOf(p.child)] as PeerStats).received[p.slot] as number)
  })

/** Tells every peer engine to echo to `target` (or, undefined, only to count). */
const setEcho = (children: ReadonlyArray<Child<PeerReady>>, target: string | undefined) =>
  Effect.forEach(children, (c) =>
    Effect.tryPromise({ try: () => c.request({ cmd: "echo", target: target ?? null }), catch: (e) => e as Error })
  )

/**
 * `rounds` untimed ping-pongs through `sendNotification` (the full path where it is needed: the first send to a peer
 * fetches its descriptor), ping i to peer i % n, each awaited before the next.
 */
const warmUp = (engine: TransferEngine.TransferEngineShape, segments: ReadonlyArray<string>, rounds: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      let waiting: Deferred.Deferred<void> | undefined
      yield* engine.subscribe(() => {
        if (waiting !== undefined) Deferred.unsafeDone(waiting, Exit.void)
      })
      for (let i = 0; i < rounds; i++) {
        waiting = yield* Deferred.make<void>()
        yield* engine.sendNotification(segments[i % segments.length] as string, ping)
        yield* Deferred.await(waiting).pipe(
          Effect.timeoutFail({
            duration: PHASE_TIMEOUT,
            onTimeout: () => new Error(`scale warm-up: no echo from peer ${i % segments.length}`)
          })
        )
      }
      yield* engine.receiveNotifications
    })
  )

/**
 * `total` timed ping-pongs, ping i to peer i % n, one in flight: this engine's `subscribe` handler records the RTT and
 * sends the next ping with `Runtime.runSync` (every endpoint READY after {@link warmUp}). The RTTs in ms.
 */
const pingPong = (engine: TransferEngine.TransferEngineShape, segments: ReadonlyArray<string>, total: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const rtts = new Float64Array(total)
      const sends = segments.map((s) => engine.sendNotification(s, ping))
      const n = sends.length
      const done = yield* Deferred.make<void, unknown>()
      const runSync = Runtime.runSync(yield* Effect.runtime<never>())
      let got = 0
      let t0 = 0
      yield* engine.subscribe(() => {
        if (got >= total) return
        rtts[got++] = performance.now() - t0
        if (got >= total) {
          Deferred.unsafeDone(done, Exit.void)
          return
        }
        t0 = performance.now()
        try {
          runSync(sends[got % n] as Effect.Effect<void, unknown>)
        } catch (e) {
          Deferred.unsafeDone(done, Exit.fail(e))
        }
      })
      t0 = performance.now()
      yield* sends[0] as Effect.Effect<void, unknown>
      yield* Deferred.await(done).pipe(
        Effect.timeoutFail({
          duration: PHASE_TIMEOUT,
          onTimeout: () => new Error(`scale ping-pong over ${n} peers: ${got} of ${total} echoes`)
        })
      )
      const queued = (yield* engine.receiveNotifications).length
      if (queued !== total) {
        return yield* Effect.fail(new Error(`scale ping-pong: ${queued} notifications queued, ${total} expected`))
      }
      return rtts
    })
  )

/**
 * One round of `count` notifications back to back, notification i to peer i % n: each `sendNotification` returns once
 * posted (the per-endpoint window paces), timed until this side's `sendsCompleted` counted every one, looked at every
 * millisecond. The round's ms.
 */
const sendRound = (
  engine: TransferEngine.TransferEngineShape,
  rdma: { readonly sendsCompleted: number },
  segments: ReadonlyArray<string>,
  count: number
) =>
  Effect.gen(function* () {
    const n = segments.length
    const done0 = rdma.sendsCompleted
    const t0 = performance.now()
    for (let i = 0; i < count; i++) yield* engine.sendNotification(segments[i % n] as string, ping)
    while (rdma.sendsCompleted - done0 < count) yield* Effect.sleep("1 millis")
    return performance.now() - t0
  }).pipe(
    Effect.timeoutFail({
      duration: PHASE_TIMEOUT,
      onTimeout: () => new Error(`scale sends over ${segments.length} peers: a round timed out`)
    })
  )

/** Waits (bounded) until every peer's count grew by what `want` says; fails with the shortfall otherwise. */
const expectCounts = (
  peers: ReadonlyArray<Peer>,
  children: ReadonlyArray<Child<PeerReady>>,
  before: ReadonlyArray<number>,
  want: ReadonlyArray<number>,
  what: string
) =>
  Effect.gen(function* () {
    let got: ReadonlyArray<number> = []
    for (let attempt = 0; attempt < 500; attempt++) {
      got = (yield* peerCounts(peers, children)).map((c, i) => c - (before[i] as number))
      if (got.every((g, i) => g >= (want[i] as number))) break
      yield* Effect.sleep("20 millis")
    }
    const wrong = got.flatMap((g, i) => (g === want[i] ? [] : [`peer ${i}: ${g} of ${want[i]}`]))
    if (wrong.length > 0) {
      return yield* Effect.fail(new Error(`scale ${what}: the peers' counts differ: ${wrong.slice(0, 8).join(", ")}`))
    }
  })

/** The figures of one arm. */
interface ArmFigures {
  readonly lazy: boolean
  readonly peers: number
  readonly connectMs: number
  readonly rssPerEndpoint: number
  readonly arrayBuffersPerEndpoint: number
  readonly notifyBytesPerEndpoint: number
  /** One-way µs and msgs/s per entry of {@link ORDER}. */
  readonly oneWayUs: ReadonlyArray<number>
  readonly msgsPerS: ReadonlyArray<number>
}

/** The order the sizes run in: the curve, then N = 1 again (the floor is the mean of both N = 1). */
const ORDER = [...SIZES, 1] as const

/** One arm: peers, the initiator engine, its idle endpoints' memory, and (when `curve`) the curve. */
const arm = (
  lazy: boolean,
  curve: boolean,
  total: number,
  sizes: { rounds: number; warmup: number; jit: number; count: number; timedRounds: number },
  log: (l: string) => void
) =>
  Effect.gen(function* () {
    const name = lazy ? "lazy" : "TENT"
    const { peers, children } = yield* spawnPeers(total, lazy, log)
    const gc = fullGc()
    const settle = () => {
      gc?.()
      gc?.()
      return process.memoryUsage()
    }
    const ctx = yield* Layer.build(engineLayer(lightConfig(armConfig(lazy)), [`i${process.pid}`]))
    const engine = Context.get(ctx, TransferEngine.TransferEngine)
    const diagnostics = Context.get(ctx, Diagnostics.Diagnostics)
    // The internal transport (not in the Layer's type, in its context): its `getEndpoint` connects without sending.
    const rdma = ctx.unsafeMap.get(RdmaTransport.key) as RdmaTransportShape | undefined
    const sent = diagnostics.counters.rdma
    if (rdma === undefined || sent === undefined) return yield* Effect.fail(new Error("scale: no RDMA transport"))
    const device = rdma.devices[0]
    if (device === undefined) return yield* Effect.fail(new Error("scale: the initiator has no device"))
    // Memory per idle endpoint: connected (the bootstrap), no notification carried.
    const before = settle()
    const c0 = performance.now()
    yield* Effect.forEach(
      peers,
      (p) =>
        rdma
          .getEndpoint(device, { server: p.segment, address: p.address }, p.nic)
          .pipe(Effect.timeoutFail({ duration: PHASE_TIMEOUT, onTimeout: () => new Error(`connect ${p.segment}`) })),
      { concurrency: 8, discard: true }
    )
    const connectMs = performance.now() - c0
    const after = settle()
    const eps = yield* diagnostics.endpoints
    const connected = eps.filter((e) => e.connected && e.status === "READY")
    if (connected.length !== total || sent.sent !== 0) {
      return yield* Effect.fail(
        new Error(
          `scale: ${connected.length} of ${eps.length} endpoints connected (${total} expected), ${sent.sent} sent`
        )
      )
    }
    const notifyBytes = eps.reduce((a, e) => a + e.notifyBytes, 0)
    const slots = eps[0]?.notifySlots
    const rssPerEndpoint = (after.rss - before.rss) / total
    const arrayBuffersPerEndpoint = (after.arrayBuffers - before.arrayBuffers) / total
    const notifyBytesPerEndpoint = notifyBytes / total
    const kib = (b: number) => `${(b / 1024).toFixed(1)} KiB`
    log(
      `scale ${name}: ${total} idle endpoints connected in ${(connectMs / 1000).toFixed(1)} s; per endpoint rss ` +
        `${kib(rssPerEndpoint)}, arrayBuffers ${kib(arrayBuffersPerEndpoint)}, notify slots ${kib(notifyBytesPerEndpoint)} ` +
        `registered (${slots?.send} send + ${slots?.recv} receive slots); process rss ${(after.rss / 2 ** 20).toFixed(0)} MiB` +
        (gc === undefined ? " (no full GC available: noisy)" : "")
    )
    const oneWayUs: Array<number> = []
    const msgsPerS: Array<number> = []
    if (curve) {
      const segments = peers.map((p) => p.segment)
      yield* setEcho(children, engine.segmentName)
      // JIT first, both sides: every peer touched through the full path, then untimed rounds of the timed path over
      // all of them (without it the first N = 1 measured the code being compiled: 376 µs, 57 µs at its second run).
      const j0 = performance.now()
      yield* warmUp(engine, segments, 2 * total)
      yield* pingPong(engine, segments, sizes.jit)
      log(`scale ${name}: JIT warm-up over all ${total} peers ${((performance.now() - j0) / 1000).toFixed(1)} s`)
      for (const n of ORDER) {
        const set = segments.slice(0, n)
        const w0 = performance.now()
        yield* warmUp(engine, set, 2 * n)
        yield* pingPong(engine, set, sizes.warmup)
        const t0 = performance.now()
        const rtts = yield* pingPong(engine, set, sizes.rounds)
        const us = (median(rtts) / 2) * 1000
        oneWayUs.push(us)
        log(
          `scale ${name} one-way N=${n}: ${us.toFixed(1)} µs (p90 RTT/2 ${((Array.from(rtts).sort((a, b) => a - b)[Math.floor(rtts.length * 0.9)] as number) * 500).toFixed(1)} µs; ` +
            `warm-up ${((t0 - w0) / 1000).toFixed(1)} s, timed ${((performance.now() - t0) / 1000).toFixed(1)} s)`
        )
      }
      const eps2 = yield* diagnostics.endpoints
      if (eps2.length !== total) {
        return yield* Effect.fail(new Error(`scale: ${eps2.length} endpoints after the ping-pongs, ${total} expected`))
      }
      yield* setEcho(children, undefined)
      // Notification i of a round of `count` goes to peer i % n: peer i's share of `rounds` rounds.
      const share = (n: number, rounds: number) =>
        peers.map((_, i) => (i >= n ? 0 : rounds * (Math.floor(sizes.count / n) + (i < sizes.count % n ? 1 : 0))))
      // JIT first, as for the one-way figures: an untimed round over all peers.
      const base0 = yield* peerCounts(peers, children)
      yield* sendRound(engine, sent, segments, sizes.count)
      yield* expectCounts(peers, children, base0, share(total, 1), `sends over all ${total} peers`)
      for (const n of ORDER) {
        const set = segments.slice(0, n)
        const base = yield* peerCounts(peers, children)
        yield* sendRound(engine, sent, set, sizes.count)
        let ms = 0
        for (let r = 0; r < sizes.timedRounds; r++) ms += yield* sendRound(engine, sent, set, sizes.count)
        yield* expectCounts(peers, children, base, share(n, 1 + sizes.timedRounds), `sends over ${n} peers`)
        const rate = (sizes.timedRounds * sizes.count) / (ms / 1000)
        msgsPerS.push(rate)
        log(
          `scale ${name} msgs/s N=${n}: ${(rate / 1000).toFixed(1)} k/s (${sizes.timedRounds} × ${sizes.count} timed, one ` +
            `round untimed; every peer received its share)`
        )
      }
    }
    return {
      lazy,
      peers: total,
      connectMs,
      rssPerEndpoint,
      arrayBuffersPerEndpoint,
      notifyBytesPerEndpoint,
      oneWayUs,
      msgsPerS
    } satisfies ArmFigures
  })

/** A bar of `width` cells for `v` of `max`. */
const bar = (v: number, max: number, width = 30) => "█".repeat(Math.max(1, Math.round((v / max) * width)))

/** The curve as a small text chart. */
const chart = (a: ArmFigures): ReadonlyArray<string> => {
  const name = a.lazy ? "lazy slots" : "TENT's slots"
  const maxUs = Math.max(...a.oneWayUs)
  const maxRate = Math.max(...a.msgsPerS)
  const lines = [`scale curve (${name}); N=1 is the mean of its two runs:`]
  lines.push(`  ${"N".padStart(4)}  ${"one-way µs".padEnd(42)}  msgs/s`)
  SIZES.forEach((n, i) => {
    const us = i === 0 ? ((a.oneWayUs[0] as number) + (a.oneWayUs[4] as number)) / 2 : (a.oneWayUs[i] as number)
    const rate = i === 0 ? ((a.msgsPerS[0] as number) + (a.msgsPerS[4] as number)) / 2 : (a.msgsPerS[i] as number)
    lines.push(
      `  ${String(n).padStart(4)}  ${us.toFixed(1).padStart(7)} ${bar(us, maxUs).padEnd(34)}  ` +
        `${(rate / 1000).toFixed(1).padStart(6)} k ${bar(rate, maxRate)}`
    )
  })
  lines.push(
    `  idle endpoint: rss ${(a.rssPerEndpoint / 1024).toFixed(1)} KiB, arrayBuffers ` +
      `${(a.arrayBuffersPerEndpoint / 1024).toFixed(1)} KiB, notify slots ${(a.notifyBytesPerEndpoint / 1024).toFixed(1)} KiB`
  )
  return lines
}

/** The results of an arm: the memory figures, and the curve's when it ran. */
const results = (a: ArmFigures): Array<BenchResult> => {
  const suffix = a.lazy ? "lazy" : "tent"
  const out: Array<BenchResult> = [
    {
      name: `scale_idle_endpoint_rss_bytes_${suffix}`,
      unit: "B",
      value: a.rssPerEndpoint,
      better: "lower",
      floor: a.notifyBytesPerEndpoint,
      ratio: a.rssPerEndpoint / a.notifyBytesPerEndpoint
    },
    {
      name: `scale_idle_endpoint_array_buffers_bytes_${suffix}`,
      unit: "B",
      value: a.arrayBuffersPerEndpoint,
      better: "lower",
      floor: a.notifyBytesPerEndpoint,
      ratio: a.arrayBuffersPerEndpoint / a.notifyBytesPerEndpoint
    }
  ]
  if (a.oneWayUs.length === 0) return out
  const first = (xs: ReadonlyArray<number>) => xs[0] as number
  const last = (xs: ReadonlyArray<number>) => xs[xs.length - 1] as number
  const oneFloor = (first(a.oneWayUs) + last(a.oneWayUs)) / 2
  const rateFloor = (first(a.msgsPerS) + last(a.msgsPerS)) / 2
  SIZES.forEach((n, i) => {
    const us = i === 0 ? last(a.oneWayUs) : (a.oneWayUs[i] as number)
    const usFloor = i === 0 ? first(a.oneWayUs) : oneFloor
    const rate = i === 0 ? last(a.msgsPerS) : (a.msgsPerS[i] as number)
    const rFloor = i === 0 ? first(a.msgsPerS) : rateFloor
    out.push(
      {
        name: `scale_one_way_us_n${n}_${suffix}`,
        unit: "us",
        value: us,
        better: "lower",
        floor: usFloor,
        ratio: us / usFloor
      },
      {
        name: `scale_msgs_per_s_n${n}_${suffix}`,
        unit: "msg/s",
        value: rate,
        better: "higher",
        floor: rFloor,
        ratio: rate / rFloor
      }
    )
  })
  return out
}

/** Runs the scale suite. */
export const run = async (options: BenchOptions): Promise<ReadonlyArray<BenchResult>> => {
  // Sends per round stay small: with lazy slots a round runs at 0.3–2 k/s (see the README).
  const sizes = options.quick
    ? { rounds: 1000, warmup: 500, jit: 3000, count: 2000, timedRounds: 1 }
    : { rounds: 3000, warmup: 1000, jit: 5000, count: 5000, timedRounds: 2 }
  const all = SIZES[SIZES.length - 1] as number
  const t0 = performance.now()
  const runArm = (lazy: boolean, curve: boolean, total: number) =>
    Effect.runPromise(
      Effect.scoped(arm(lazy, curve, total, sizes, options.log)).pipe(Effect.provide(logsTo(options.log)))
    )
  const lazy = await runArm(true, true, all)
  for (const line of chart(lazy)) options.log(line)
  // --quick: TENT's memory figure over QUICK_TENT_PEERS idle endpoints (connecting one takes 0.3–0.7 s), no curve.
  const tent = options.quick ? await runArm(false, false, QUICK_TENT_PEERS) : await runArm(false, true, all)
  if (tent.oneWayUs.length > 0) for (const line of chart(tent)) options.log(line)
  options.log(`scale suite: ${((performance.now() - t0) / 1000).toFixed(1)} s`)
  return [
    ...results(lazy),
    {
      name: "scale_idle_endpoint_notify_bytes_lazy",
      unit: "B",
      value: lazy.notifyBytesPerEndpoint,
      better: "lower",
      floor: tent.notifyBytesPerEndpoint,
      ratio: lazy.notifyBytesPerEndpoint / tent.notifyBytesPerEndpoint
    },
    ...results(tent)
  ]
}
