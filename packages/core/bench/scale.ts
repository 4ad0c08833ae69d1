/**
 * `pnpm bench engine --scale [--quick] [--json]`: how the notification path scales with the number of peers, from one
 * initiator engine in this process to N = 1, 8, 64, 256 and 1000 peer engines (one endpoint each), in one run, and
 * how 10 frozen peers of 1000 weigh on the 990 healthy ones. The peers are `bench/scale-peer.ts` processes
 * (`bench/scale-peers.ts` lays them out: {@link LAZY_LAYOUT}, {@link TENT_LAYOUT}), each engine light (one SoftVerbs
 * device, one lane, one data CQ, one worker: `lightConfig`), the initiator too.
 *
 * Per arm — the engine's defaults, `transports/rdma/notify/lazy_slots` and `shared_recv` true ("lazy", 1000 peers),
 * and both false (TENT's 256 × 64 KiB each way at construction: 256 peers, since 1000 would register ~32 GiB), the
 * same settings on the initiator and on every peer:
 *
 * - memory per idle endpoint: this process's `process.memoryUsage()` rss and arrayBuffers growth (after a full GC)
 *   while the initiator connects to its peers (`RdmaTransport.getEndpoint`, the bootstrap and nothing else: no
 *   notification) past the first {@link WARM_PEERS} (half, if fewer), divided by those endpoints: what one more idle
 *   endpoint costs (the first ones also pay once for the code they run and the young generation's growth; the log
 *   gives the figure over all of them too); floor: the notify slot bytes each endpoint registered
 *   (`Diagnostics.endpoints` `notifyBytes`), at least one slot (64 KiB). The lazy arm adds `notify_bytes`: its
 *   registered bytes per endpoint beside TENT's (the floor, as counted by the TENT arm).
 * - connect: the seconds those connections took, 8 at a time; floor: the first 8's time, scaled to all the peers
 *   (ratio: how much slower an endpoint connects when there are many).
 * - one-way at N: median RTT / 2 of a ping-pong, ping i to peer i % N, one in flight (this engine's `subscribe` handler
 *   takes the echo and sends the next ping with `Runtime.runSync`; each peer engine echoes from `subscribe` the same
 *   way), after an untimed warm-up that touches every one of the N peers through `sendNotification` (twice), then
 *   untimed rounds of the same ping-pong; once before the first N, a longer one over all peers (JIT, both sides).
 * - one-way to 8 peers of one process (when there are several): as at N = 8, the 8 engines all in the first process,
 *   beside the same floor: whether the N > 1 cost is the peer processes woken in turn or the peer engines.
 * - msgs/s at N: `count` notifications sent back to back round-robin over the N peers (each `sendNotification`
 *   returns once posted; the per-endpoint window paces), timed until every send completed on this side (the RDMA
 *   transport's `sendsCompleted`), after an untimed round (and, once before the first N, one over all peers); the
 *   peers' counts are checked to hold every one.
 * - frozen (lazy arm): both figures over the 990 healthy peers with the 10 of the frozen group frozen, application
 *   or host: `frozenRounds` frozen sets, each between two all-healthy sets; each round's frozen set over the mean of
 *   its two healthy ones, the figure that of the median round (`bench/scale-frozen.ts`).
 *
 * The sizes run in the order 1, 8, 64, 256, (1000,) 1 (one-way first, then msgs/s): the floor of a figure at N > 1 is
 * the mean of the two N = 1 figures of the same arm (ratio: the cost of N peers over one); the N = 1 entry's value is
 * the second, its floor the first (ratio: how far the baseline drifted over the run). With `--quick` the TENT arm
 * measures memory only, over {@link QUICK_TENT_PEERS} peers.
 */
import * as V8 from "node:v8"
import * as Vm from "node:vm"
import { SoftVerbs } from "@tent/verbs"
import { type BenchOptions, type BenchResult, quantile } from "@tent/verbs/bench"
import { Context, Effect, Layer, Logger, LogLevel } from "effect"
import { Diagnostics, NotifyFrame, Series, TransferEngine } from "../src/index.js"
import { RdmaTransport, type RdmaTransportShape } from "../src/internal/rdma/RdmaTransport.js"
import { engineLayer } from "../test/fixtures/engine.js"
import { changes, type FrozenFigures, frozenPhases, snapshot } from "./scale-frozen.js"
import {
  expectCounts,
  PHASE_TIMEOUT,
  pingPong,
  type Sizes,
  sendRound,
  share,
  touchAll,
  warmUp
} from "./scale-measure.js"
import { armConfig, type Layout, lightConfig, peerCounts, peersCpuUs, setEcho, spawnPeers } from "./scale-peers.js"

export { lightConfig } from "./scale-peers.js"

/** The peer counts of the curve. */
const SIZES = [1, 8, 64, 256, 1000] as const
/** The lazy arm's peers, and TENT's (1000 of TENT's endpoints would register ~32 GiB each way). */
const LAZY_PEERS = 1000
const TENT_PEERS = 256
/** Peers of the TENT arm with `--quick` (memory only). */
const QUICK_TENT_PEERS = 64
/** The lazy arm: 990 peers round-robin over 6 processes, the frozen group of 10 in a 7th. */
const LAZY_LAYOUT: Layout = { processes: 6, frozenGroup: 10 }
/** The TENT arm: as the suite had it before the lazy arm reached 1000 (two processes, the machine's cores). */
const TENT_LAYOUT: Layout = { processes: 2, frozenGroup: 0 }
/** Notifications sent to each frozen peer as a face starts. */
const FROZEN_BURST = 64
/** Peers of one process in the one-way figure beside N = 8 spread over the processes. */
const ONE_PROCESS_PEERS = 8
/** The idle endpoint's memory is measured per endpoint past this many (the first ones pay one-time costs). */
const WARM_PEERS = 100
/** The connect figure's floor: the time of the first this many endpoints, connected together. */
const CONNECT_FLOOR_PEERS = 8

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

/** The figures of one arm. */
interface ArmFigures {
  readonly lazy: boolean
  readonly peers: number
  readonly connectMs: number
  readonly connectFloorMs: number
  readonly rssPerEndpoint: number
  readonly arrayBuffersPerEndpoint: number
  readonly notifyBytesPerEndpoint: number
  /** The sizes of the curve (those up to `peers`), and one-way µs and msgs/s per entry of `[...sizes, 1]`. */
  readonly sizes: ReadonlyArray<number>
  readonly oneWayUs: ReadonlyArray<number>
  readonly msgsPerS: ReadonlyArray<number>
  readonly frozen: FrozenFigures | undefined
  /** One-way µs to the first {@link ONE_PROCESS_PEERS} peers of the first process (all of them in one process). */
  readonly oneProcessUs: number | undefined
  /** CPU µs per timed round trip (per entry of `[...sizes, 1]`): this process's, and the peer processes' (net). */
  readonly cpuPerRoundTripUs: ReadonlyArray<number>
  readonly peersCpuPerRoundTripUs: ReadonlyArray<number>
  /** CPU µs per timed notification of the msgs/s rounds: this process's, and the peer processes' (net). */
  readonly cpuPerMsgUs: ReadonlyArray<number>
  readonly peersCpuPerMsgUs: ReadonlyArray<number>
}

/** What a measured effect cost in CPU: this process's µs, the peer processes' µs net of their idle rate, its wall s. */
interface Cpu<A> {
  readonly value: A
  readonly ownUs: number
  readonly peersUs: number
  readonly wallS: number
}

/** One arm: peers, the initiator engine, its idle endpoints' memory, and (when `curve`) the curve and frozen phases. */
const arm = (lazy: boolean, curve: boolean, total: number, layout: Layout, sizes: Sizes, log: (l: string) => void) =>
  Effect.gen(function* () {
    const name = lazy ? "lazy" : "TENT"
    const set = yield* spawnPeers(total, lazy, layout, log)
    const { peers, children } = set
    const gc = fullGc()
    const settle = () => {
      gc?.()
      gc?.()
      return process.memoryUsage()
    }
    const ctx = yield* Layer.build(engineLayer(lightConfig(armConfig(lazy)), [`i${process.pid}`], Series.all))
    const engine = Context.get(ctx, TransferEngine.TransferEngine)
    const diagnostics = Context.get(ctx, Diagnostics.Diagnostics)
    // The internal transport (not in the Layer's type, in its context): its `getEndpoint` connects without sending.
    const rdma = ctx.unsafeMap.get(RdmaTransport.key) as RdmaTransportShape | undefined
    const sent = diagnostics.counters.rdma
    if (rdma === undefined || sent === undefined) return yield* Effect.fail(new Error("scale: no RDMA transport"))
    const device = rdma.devices[0]
    if (device === undefined) return yield* Effect.fail(new Error("scale: the initiator has no device"))
    // The SoftVerbs device's counters (packets, retransmits, RNR retries): where a round's time went, on the wire.
    const soft = Context.get(ctx, SoftVerbs.SoftVerbsControl).devices[0]
    const nic = (): Record<string, unknown> => ({ ...(soft?.counters ?? {}) })
    // Memory per idle endpoint: connected (the bootstrap), no notification carried.
    const connect = (ps: typeof peers) =>
      Effect.forEach(
        ps,
        (p) =>
          rdma
            .getEndpoint(device, { server: p.segment, address: p.address }, p.nic)
            .pipe(Effect.timeoutFail({ duration: PHASE_TIMEOUT, onTimeout: () => new Error(`connect ${p.segment}`) })),
        { concurrency: 8, discard: true }
      )
    const before = settle()
    const c0 = performance.now()
    yield* connect(peers.slice(0, CONNECT_FLOOR_PEERS))
    const firstMs = performance.now() - c0
    // The memory figures are per endpoint past the first WARM_PEERS (what one more idle endpoint costs): the first ones
    // also pay once for the code the connection runs and the young generation's growth, which do not scale with N.
    const warmPeers = Math.min(WARM_PEERS, Math.floor(total / 2))
    yield* connect(peers.slice(CONNECT_FLOOR_PEERS, warmPeers))
    const g0 = performance.now()
    const warm = settle()
    const settleMs = performance.now() - g0
    yield* connect(peers.slice(Math.max(CONNECT_FLOOR_PEERS, warmPeers)))
    const connectMs = performance.now() - c0 - settleMs
    const connectFloorMs = (firstMs * total) / Math.min(total, CONNECT_FLOOR_PEERS)
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
    const marginal = total - warmPeers
    const rssPerEndpoint = (after.rss - warm.rss) / marginal
    const arrayBuffersPerEndpoint = (after.arrayBuffers - warm.arrayBuffers) / marginal
    const heapPerEndpoint = (after.heapUsed - warm.heapUsed) / marginal
    const notifyBytesPerEndpoint = notifyBytes / total
    const kib = (b: number) => `${(b / 1024).toFixed(1)} KiB`
    log(
      `scale ${name}: ${total} idle endpoints connected in ${(connectMs / 1000).toFixed(1)} s (the first ` +
        `${CONNECT_FLOOR_PEERS} in ${(firstMs / 1000).toFixed(2)} s); per endpoint past the first ${warmPeers}: rss ` +
        `${kib(rssPerEndpoint)}, arrayBuffers ${kib(arrayBuffersPerEndpoint)}, heapUsed ${kib(heapPerEndpoint)} (over all ` +
        `${total}: rss ${kib((after.rss - before.rss) / total)}, arrayBuffers ` +
        `${kib((after.arrayBuffers - before.arrayBuffers) / total)}); notify slots ${kib(notifyBytesPerEndpoint)} ` +
        `registered (${slots?.send} send + ${slots?.recv} receive slots; the device's shared receive ring ` +
        `${kib(device.sharedRecv?.registeredBytes ?? 0)}); process rss ${(after.rss / 2 ** 20).toFixed(0)} MiB` +
        (gc === undefined ? " (no full GC available: noisy)" : "")
    )
    const curveSizes = SIZES.filter((n) => n <= total)
    const order = [...curveSizes, 1]
    const oneWayUs: Array<number> = []
    const msgsPerS: Array<number> = []
    let frozen: FrozenFigures | undefined
    let oneProcessUs: number | undefined
    const cpuPerRoundTripUs: Array<number> = []
    const peersCpuPerRoundTripUs: Array<number> = []
    const cpuPerMsgUs: Array<number> = []
    const peersCpuPerMsgUs: Array<number> = []
    // The peer processes' CPU while nothing is sent to them (their engines' timers): µs per second, measured once.
    let peersIdleUsPerS = 0
    // Where a figure's time goes: this process's CPU and the peer processes' over `eff` (theirs net of the idle rate:
    // the idle engines' timers run whatever the bench does, for as long as it takes).
    const cpuOf = <A, E, R>(eff: Effect.Effect<A, E, R>) =>
      Effect.gen(function* () {
        const p0 = yield* peersCpuUs(children)
        const c0 = process.cpuUsage()
        const t0 = performance.now()
        const value = yield* eff
        const wallS = (performance.now() - t0) / 1000
        const c = process.cpuUsage(c0)
        const p1 = yield* peersCpuUs(children)
        return { value, ownUs: c.user + c.system, peersUs: p1 - p0 - peersIdleUsPerS * wallS, wallS } as Cpu<A>
      })
    if (curve) {
      const segments = peers.map((p) => p.segment)
      yield* setEcho(children, engine.segmentName)
      // JIT first, both sides: every peer touched through the full path (first in parallel: the descriptor fetches),
      // then untimed rounds of the timed path over all of them (without it the first N = 1 measured the code being
      // compiled: 376 µs, 57 µs at its second run).
      const j0 = performance.now()
      yield* touchAll(engine, segments)
      yield* warmUp(engine, segments, 2 * total)
      yield* pingPong(engine, segments, sizes.jit)
      log(`scale ${name}: JIT warm-up over all ${total} peers ${((performance.now() - j0) / 1000).toFixed(1)} s`)
      yield* Effect.sleep("200 millis")
      peersIdleUsPerS = (yield* cpuOf(Effect.sleep("1 second"))).peersUs
      log(
        `scale ${name}: the ${children.length} peer processes idle (${total} engines, nothing sent): ` +
          `${(peersIdleUsPerS / 1000).toFixed(0)} ms of CPU a second`
      )
      for (const n of order) {
        const subset = segments.slice(0, n)
        const w0 = performance.now()
        yield* warmUp(engine, subset, 2 * n)
        // The first N = 1 comes right after the JIT pass over every peer: `warmup` rounds left it reading 2–3 × the
        // last N = 1 (which inflated the floor of every N > 1), so it gets the JIT pass's length.
        yield* pingPong(engine, subset, n === 1 && oneWayUs.length === 0 ? sizes.jit : sizes.warmup)
        const t0 = performance.now()
        const timed = yield* cpuOf(pingPong(engine, subset, sizes.rounds))
        const rtts = timed.value
        const us = (quantile(rtts, 0.5) / 2) * 1000
        oneWayUs.push(us)
        cpuPerRoundTripUs.push(timed.ownUs / sizes.rounds)
        peersCpuPerRoundTripUs.push(timed.peersUs / sizes.rounds)
        log(
          `scale ${name} one-way N=${n}: ${us.toFixed(1)} µs (p90 RTT/2 ${(quantile(rtts, 0.9) * 500).toFixed(1)} µs; ` +
            `warm-up ${((t0 - w0) / 1000).toFixed(1)} s, timed ${timed.wallS.toFixed(1)} s; CPU per round trip: ` +
            `this process ${(timed.ownUs / sizes.rounds).toFixed(1)} µs, the peer processes ` +
            `${(timed.peersUs / sizes.rounds).toFixed(1)} µs net, wall ${((timed.wallS * 1e6) / sizes.rounds).toFixed(1)} µs)`
        )
      }
      // Where N peers' extra latency is: the same number of peer engines all in one process (one wakes per ping).
      const local = peers.filter((p) => p.child === children[0]).map((p) => p.segment)
      if (children.length > 1 && local.length >= ONE_PROCESS_PEERS) {
        const subset = local.slice(0, ONE_PROCESS_PEERS)
        yield* warmUp(engine, subset, 2 * ONE_PROCESS_PEERS)
        yield* pingPong(engine, subset, sizes.warmup)
        const rtts = yield* pingPong(engine, subset, sizes.rounds)
        oneProcessUs = (quantile(rtts, 0.5) / 2) * 1000
        log(
          `scale ${name} one-way to ${ONE_PROCESS_PEERS} peers of one process: ${oneProcessUs.toFixed(1)} µs (p90 RTT/2 ` +
            `${(quantile(rtts, 0.9) * 500).toFixed(1)} µs)`
        )
      }
      const eps2 = yield* diagnostics.endpoints
      if (eps2.length !== total) {
        return yield* Effect.fail(new Error(`scale: ${eps2.length} endpoints after the ping-pongs, ${total} expected`))
      }
      yield* setEcho(children, undefined)
      // JIT first, as for the one-way figures: an untimed round over all peers.
      const base0 = yield* peerCounts(peers, children)
      yield* sendRound(engine, sent, segments, sizes.count)
      yield* expectCounts(peers, children, base0, share(total, total, sizes.count, 1), `sends over all ${total} peers`)
      for (const n of order) {
        const subset = segments.slice(0, n)
        const base = yield* peerCounts(peers, children)
        yield* sendRound(engine, sent, subset, sizes.count)
        const before = snapshot({}, nic())
        const runs0 = sent.runs
        const completions0 = sent.sendsCompleted + sent.received
        const timed = yield* cpuOf(
          Effect.gen(function* () {
            let ms = 0
            for (let r = 0; r < sizes.timedRounds; r++) ms += yield* sendRound(engine, sent, subset, sizes.count)
            return ms
          })
        )
        const ms = timed.value
        const msgs = sizes.timedRounds * sizes.count
        cpuPerMsgUs.push(timed.ownUs / msgs)
        peersCpuPerMsgUs.push(timed.peersUs / msgs)
        const wire = changes(before, snapshot({}, nic()))
        const perRun = (sent.sendsCompleted + sent.received - completions0) / Math.max(1, sent.runs - runs0)
        yield* expectCounts(
          peers,
          children,
          base,
          share(total, n, sizes.count, 1 + sizes.timedRounds),
          `sends over ${n} peers`
        )
        const rate = (sizes.timedRounds * sizes.count) / (ms / 1000)
        msgsPerS.push(rate)
        log(
          `scale ${name} msgs/s N=${n}: ${(rate / 1000).toFixed(1)} k/s (${sizes.timedRounds} × ${sizes.count} timed, one ` +
            `round untimed; every peer received its share; notify completions per poller run ${perRun.toFixed(2)}; ` +
            `this NIC over the timed rounds: ${wire}; CPU per notification: this process ` +
            `${(timed.ownUs / msgs).toFixed(1)} µs, the peer processes ${(timed.peersUs / msgs).toFixed(1)} µs net)`
        )
      }
      if (set.frozen !== undefined) {
        const f0 = performance.now()
        frozen = yield* frozenPhases(engine, diagnostics, sent, set, sizes, FROZEN_BURST, nic, log)
        log(`scale ${name}: frozen phases ${((performance.now() - f0) / 1000).toFixed(1)} s`)
      }
    }
    return {
      lazy,
      peers: total,
      connectMs,
      connectFloorMs,
      rssPerEndpoint,
      arrayBuffersPerEndpoint,
      notifyBytesPerEndpoint,
      sizes: curveSizes,
      oneWayUs,
      msgsPerS,
      frozen,
      oneProcessUs,
      cpuPerRoundTripUs,
      peersCpuPerRoundTripUs,
      cpuPerMsgUs,
      peersCpuPerMsgUs
    } satisfies ArmFigures
  })

/** A bar of `width` cells for `v` of `max`. */
const bar = (v: number, max: number, width = 30) => "█".repeat(Math.max(1, Math.round((v / max) * width)))

/** The curve as a small text chart. */
const chart = (a: ArmFigures): ReadonlyArray<string> => {
  const name = a.lazy ? "lazy slots" : "TENT's slots"
  const last = a.sizes.length
  const maxUs = Math.max(...a.oneWayUs)
  const maxRate = Math.max(...a.msgsPerS)
  const lines = [`scale curve (${name}); N=1 is the mean of its two runs:`]
  lines.push(`  ${"N".padStart(4)}  ${"one-way µs".padEnd(42)}  msgs/s`)
  a.sizes.forEach((n, i) => {
    const us = i === 0 ? ((a.oneWayUs[0] as number) + (a.oneWayUs[last] as number)) / 2 : (a.oneWayUs[i] as number)
    const rate = i === 0 ? ((a.msgsPerS[0] as number) + (a.msgsPerS[last] as number)) / 2 : (a.msgsPerS[i] as number)
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

const figure = (name: string, unit: string, better: "lower" | "higher", value: number, floor: number): BenchResult => ({
  name,
  unit,
  value,
  better,
  floor,
  ratio: value / floor
})

/** The results of an arm: the memory and connect figures, and the curve's and frozen phases' when they ran. */
const results = (a: ArmFigures): Array<BenchResult> => {
  const suffix = a.lazy ? "lazy" : "tent"
  // The floor of an idle endpoint's memory: its registered notify slots, at least one slot (64 KiB, what a lazy ring
  // of its own registers; with receives shared per device an idle endpoint registers none).
  const memFloor = Math.max(a.notifyBytesPerEndpoint, NotifyFrame.SLOT_BYTES)
  const out: Array<BenchResult> = [
    figure(`scale_idle_endpoint_rss_bytes_${suffix}`, "B", "lower", a.rssPerEndpoint, memFloor),
    figure(`scale_idle_endpoint_array_buffers_bytes_${suffix}`, "B", "lower", a.arrayBuffersPerEndpoint, memFloor),
    figure(`scale_connect_s_n${a.peers}_${suffix}`, "s", "lower", a.connectMs / 1000, a.connectFloorMs / 1000)
  ]
  if (a.oneWayUs.length === 0) return out
  const first = (xs: ReadonlyArray<number>) => xs[0] as number
  const last = (xs: ReadonlyArray<number>) => xs[xs.length - 1] as number
  const mean = (xs: ReadonlyArray<number>) => (first(xs) + last(xs)) / 2
  // An entry of `[...sizes, 1]` beside its floor: N = 1's second run beside its first, any other beside their mean.
  const curve = (xs: ReadonlyArray<number>, i: number): [number, number] =>
    i === 0 ? [last(xs), first(xs)] : [xs[i] as number, mean(xs)]
  a.sizes.forEach((n, i) => {
    out.push(
      figure(`scale_one_way_us_n${n}_${suffix}`, "us", "lower", ...curve(a.oneWayUs, i)),
      figure(`scale_msgs_per_s_n${n}_${suffix}`, "msg/s", "higher", ...curve(a.msgsPerS, i)),
      figure(`scale_cpu_us_per_round_trip_n${n}_${suffix}`, "us", "lower", ...curve(a.cpuPerRoundTripUs, i)),
      figure(`scale_peers_cpu_us_per_round_trip_n${n}_${suffix}`, "us", "lower", ...curve(a.peersCpuPerRoundTripUs, i)),
      figure(`scale_cpu_us_per_msg_n${n}_${suffix}`, "us", "lower", ...curve(a.cpuPerMsgUs, i)),
      figure(`scale_peers_cpu_us_per_msg_n${n}_${suffix}`, "us", "lower", ...curve(a.peersCpuPerMsgUs, i))
    )
  })
  if (a.oneProcessUs !== undefined) {
    out.push(
      figure(
        `scale_one_way_us_n${ONE_PROCESS_PEERS}_one_process_${suffix}`,
        "us",
        "lower",
        a.oneProcessUs,
        mean(a.oneWayUs)
      )
    )
  }
  const f = a.frozen
  if (f !== undefined) {
    out.push(
      figure(`scale_frozen_app_one_way_us_${suffix}`, "us", "lower", f.app.oneWayUs, f.healthyApp.oneWayUs),
      figure(`scale_frozen_app_msgs_per_s_${suffix}`, "msg/s", "higher", f.app.msgsPerS, f.healthyApp.msgsPerS),
      figure(`scale_frozen_host_one_way_us_${suffix}`, "us", "lower", f.host.oneWayUs, f.healthyHost.oneWayUs),
      figure(`scale_frozen_host_msgs_per_s_${suffix}`, "msg/s", "higher", f.host.msgsPerS, f.healthyHost.msgsPerS)
    )
  }
  return out
}

/** The goals against the results: one line each, met or not. */
const goals = (rs: ReadonlyArray<BenchResult>, suiteS: number, quick: boolean): ReadonlyArray<string> => {
  const get = (n: string) => rs.find((r) => r.name === n)
  const line = (what: string, r: BenchResult | undefined, ok: (r: BenchResult) => boolean, show: string) =>
    r === undefined ? `  ${what}: not measured` : `  ${what}: ${ok(r) ? "met" : "NOT met"} (${show})`
  const ratio = (n: string, le: number | undefined, ge: number | undefined, what: string) => {
    const r = get(n)
    return line(
      what,
      r,
      (x) => (le === undefined || x.ratio <= le) && (ge === undefined || x.ratio >= ge),
      r === undefined ? "" : `${r.ratio.toFixed(2)}`
    )
  }
  const rss = get("scale_idle_endpoint_rss_bytes_lazy")
  const ab = get("scale_idle_endpoint_array_buffers_bytes_lazy")
  const connect = get("scale_connect_s_n1000_lazy")
  return [
    "scale goals:",
    ratio("scale_one_way_us_n1000_lazy", 1.3, undefined, "one-way N=1000 ≤ 1.3 × N=1"),
    ratio("scale_msgs_per_s_n1000_lazy", undefined, 0.8, "msgs/s N=1000 ≥ 0.8 × N=1"),
    ratio("scale_frozen_app_one_way_us_lazy", 1.1, undefined, "10 applications frozen: healthy one-way ≤ 1.1 ×"),
    ratio("scale_frozen_app_msgs_per_s_lazy", undefined, 0.9, "10 applications frozen: healthy msgs/s ≥ 0.9 ×"),
    ratio("scale_frozen_host_one_way_us_lazy", 1.1, undefined, "10 hosts frozen: healthy one-way ≤ 1.1 ×"),
    ratio("scale_frozen_host_msgs_per_s_lazy", undefined, 0.9, "10 hosts frozen: healthy msgs/s ≥ 0.9 ×"),
    line(
      "idle endpoint ≤ 64 KiB (rss and arrayBuffers)",
      rss,
      (r) => r.value <= 65536 && (ab?.value ?? Infinity) <= 65536,
      `${((rss?.value ?? 0) / 1024).toFixed(1)} / ${((ab?.value ?? 0) / 1024).toFixed(1)} KiB`
    ),
    line("connecting 1000 endpoints ≤ 10 s", connect, (r) => r.value <= 10, `${connect?.value.toFixed(1)} s`),
    quick
      ? `  --scale --quick ≤ 3 min: ${suiteS <= 180 ? "met" : "NOT met"} (${suiteS.toFixed(0)} s)`
      : `  (the suite took ${suiteS.toFixed(0)} s; the 3-minute goal is --quick's)`
  ]
}

/** Runs the scale suite. */
export const run = async (options: BenchOptions): Promise<ReadonlyArray<BenchResult>> => {
  // Sends per round stay small: with lazy slots a round runs at 0.3–10 k/s (see the README).
  const sizes: Sizes = options.quick
    ? { rounds: 1000, warmup: 500, jit: 3000, count: 2000, timedRounds: 1, frozenRounds: 3, setRounds: 5 }
    : { rounds: 3000, warmup: 1000, jit: 5000, count: 5000, timedRounds: 2, frozenRounds: 5, setRounds: 5 }
  const t0 = performance.now()
  const runArm = (lazy: boolean, curve: boolean, total: number, layout: Layout) =>
    Effect.runPromise(
      Effect.scoped(arm(lazy, curve, total, layout, sizes, options.log)).pipe(Effect.provide(logsTo(options.log)))
    )
  const lazy = await runArm(true, true, LAZY_PEERS, LAZY_LAYOUT)
  for (const line of chart(lazy)) options.log(line)
  // --quick: TENT's memory figure over QUICK_TENT_PEERS idle endpoints (connecting one takes 0.3–0.7 s), no curve.
  const tent = options.quick
    ? await runArm(false, false, QUICK_TENT_PEERS, TENT_LAYOUT)
    : await runArm(false, true, TENT_PEERS, TENT_LAYOUT)
  if (tent.oneWayUs.length > 0) for (const line of chart(tent)) options.log(line)
  const suiteS = (performance.now() - t0) / 1000
  options.log(`scale suite: ${suiteS.toFixed(1)} s`)
  const rs = [
    ...results(lazy),
    figure(
      "scale_idle_endpoint_notify_bytes_lazy",
      "B",
      "lower",
      lazy.notifyBytesPerEndpoint,
      tent.notifyBytesPerEndpoint
    ),
    ...results(tent)
  ]
  for (const line of goals(rs, suiteS, options.quick)) options.log(line)
  return rs
}
