/**
 * Target `rpc-frames`: raw bytes to a real engine's control-plane port (a `TransferEngine` in a child process) over
 * many TCP connections — lean frames of every RPC with mutated framing, `Bootstrap` JSON and `BootstrapDesc` fields,
 * `Notify` lengths and trailers, `SendData`/`RecvData` headers at the edges of the registered regions and the limits;
 * coro_rpc requests of TENT's wire; several frames at once, random bytes, truncated frames and length prefixes above
 * the limit. Each worker has its own connections and its own random stream (`rpc-frames/<w>`), so a connection's
 * inputs replay exactly from the seed. A real client (`RpcAgent`) is served throughout: every round a `Notify`, a
 * `SendData` into the client region, a `RecvData` of it back (the bytes must match) and a `GetSegmentDesc`.
 */
import { makeNotification, RpcAgent, RpcConfig } from "@tent/rpc"
import { Effect, Fiber } from "effect"
import * as Corpus from "./Corpus.js"
import * as EngineRun from "./EngineRun.js"
import { Prng } from "./Prng.js"
import type { Range } from "./Regions.js"
import { RpcConn, replyCounters, type Shared } from "./RpcConn.js"
import * as RpcInputs from "./RpcInputs.js"
import type { TargetOptions, TargetResult } from "./Target.js"
import {
  CLIENT_PREFIX,
  type EngineStats,
  LANES,
  MAX_DATA_BYTES,
  MAX_NOTIFY_BYTES,
  REGION_BYTES
} from "./victimEngine.js"
import * as Wire from "./Wire.js"

const range = (r: { readonly addr: number; readonly length: number }): Range => ({
  start: r.addr,
  end: r.addr + r.length
})

/** Concurrent fuzzing workers, each with a lean and a coro_rpc connection. */
const WORKERS = 8

/** One worker: `quota` inputs from its own stream, on its own connections. */
const worker = async (
  w: number,
  quota: number,
  o: TargetOptions,
  corpus: RpcInputs.Corpus,
  layout: RpcInputs.Layout,
  shared: Shared,
  progress: { done: number; stop: boolean; refused: number; classes: Record<string, number> }
): Promise<void> => {
  const rng = Prng.forTarget(o.seed, `rpc-frames/${w}`)
  // one connection per wire; a closed one is opened again by the next input of its wire
  const conns = { lean: new RpcConn(shared), tent: new RpcConn(shared) }
  let id = 1
  let failures = 0
  try {
    for (let i = 0; i < quota && !progress.stop; i++) {
      const input = RpcInputs.next(rng, corpus, layout, id)
      const kind = input.what.split("/")[0] as string
      progress.classes[kind] = (progress.classes[kind] ?? 0) + 1
      id = (id + 8) % 0x40000000
      const conn = input.fresh ? new RpcConn(shared) : conns[input.wire]
      try {
        if (conn.closed) await conn.fresh(input.bytes)
        else await conn.input(input.bytes)
        failures = 0
      } catch {
        // the connection was refused: the input is tried again, a while later
        progress.refused++
        if (++failures > 20) {
          progress.stop = true
          return
        }
        await new Promise((r) => setTimeout(r, 50 * failures))
        i--
        continue
      } finally {
        if (input.fresh) conn.close()
      }
      progress.done++
    }
  } finally {
    conns.lean.close()
    conns.tent.close()
  }
}

/** The real client: rounds until stopped; every error is kept. */
const clientLoop = (
  agent: RpcAgent.RpcAgentShape,
  address: string,
  region: { readonly addr: number },
  client: { rounds: number; errors: Array<string>; asked: Array<Range> },
  stop: { done: boolean }
) =>
  Effect.gen(function* () {
    while (!stop.done && client.errors.length < 20) {
      const k = client.rounds
      const off = (k * 256) % (REGION_BYTES - 256)
      const data = Buffer.alloc(256, (k * 37 + 1) & 0xff)
      client.asked.push({ start: region.addr + off, end: region.addr + off + 256 })
      const round = Effect.gen(function* () {
        yield* agent.notify(address, makeNotification(`${CLIENT_PREFIX}${k}`, `round ${k}`))
        yield* agent.sendData(address, region.addr + off, data)
        const back = yield* agent.recvData(address, region.addr + off, 256)
        if (!Buffer.from(back).equals(data)) client.errors.push(`round ${k}: RecvData read back other bytes`)
        const desc = yield* agent.getSegmentDesc(address)
        if (desc.buffers.length !== 3)
          client.errors.push(`round ${k}: GetSegmentDesc lists ${desc.buffers.length} buffers`)
      })
      yield* round.pipe(
        Effect.catchAll((e) =>
          Effect.sync(() => client.errors.push(`round ${k}: ${String((e as Error).message ?? e)}`))
        )
      )
      client.rounds++
      yield* Effect.sleep("20 millis")
    }
  })

/** Runs the target. */
export const run = (o: TargetOptions): Effect.Effect<TargetResult, unknown> =>
  Effect.scoped(
    Effect.gen(function* () {
      const e = yield* EngineRun.start(o, "notify_qp")
      const { victim, ready, port } = e
      const layout: RpcInputs.Layout = {
        target: ready.regions.target as { addr: number; length: number },
        canary: ready.regions.canary as { addr: number; length: number },
        maxNotifyBytes: MAX_NOTIFY_BYTES,
        maxDataBytes: MAX_DATA_BYTES,
        maxFrame: Wire.maxFrameBytes(MAX_NOTIFY_BYTES, MAX_DATA_BYTES),
        segment: ready.segment,
        device: ready.device
      }
      const captured = yield* Corpus.captureLean(port, layout, LANES)
      const corpus = Corpus.corpus(captured.lean, layout)
      const baseline = yield* victim.request<EngineStats>({ cmd: "stats" })
      const shared: Shared = {
        port,
        maxFrame: layout.maxFrame,
        tentLimits: { maxBody: 64 * 1024, maxAttachment: Math.max(MAX_DATA_BYTES + 16, MAX_NOTIFY_BYTES * 6 + 64) },
        counters: replyCounters(),
        registered: Object.values(ready.regions).map((r) => ({ start: r.addr, end: r.addr + r.length })),
        target: range(layout.target),
        protected: [range(layout.canary), range(ready.regions.client as { addr: number; length: number })],
        asked: [captured.asked],
        samples: [],
        stallMs: 5000
      }
      const agent = yield* Effect.provide(
        RpcAgent.make,
        RpcConfig.layer({ request_timeout_ms: 10_000, notify_timeout_ms: 10_000, connect_timeout_ms: 5000 })
      )
      const stop = { done: false }
      const client = { rounds: 0, errors: [] as Array<string>, asked: [] as Array<Range> }
      const clientFiber = yield* Effect.fork(
        clientLoop(agent, ready.address, ready.regions.client as { addr: number }, client, stop)
      )
      const progress = { done: 0, stop: false, refused: 0, classes: {} as Record<string, number> }
      const watching = yield* EngineRun.watch(
        "rpc-frames",
        o,
        victim,
        progress,
        baseline.memory.rss,
        () => `${shared.counters.connections} connections`
      )
      const started = performance.now()
      const workers = Math.max(1, Math.min(WORKERS, Math.ceil(o.count / 100)))
      yield* Effect.async<void>((resume) => {
        const all = Array.from({ length: workers }, (_, w) =>
          worker(
            w,
            Math.floor(o.count / workers) + (w < o.count % workers ? 1 : 0),
            o,
            corpus,
            layout,
            shared,
            progress
          )
        )
        Promise.allSettled(all).then(() => resume(Effect.void))
        return Effect.sync(() => {
          progress.stop = true
        })
      })
      const seconds = (performance.now() - started) / 1000
      yield* watching.stop
      // one more round once the fuzz is over, then the client stops
      yield* Effect.sleep("100 millis")
      stop.done = true
      yield* Fiber.join(clientFiber)
      const end = yield* EngineRun.finish(
        e,
        baseline,
        watching.state.peakRss,
        { target: shared.asked, client: client.asked },
        { rounds: client.rounds, errors: client.errors },
        client.rounds
      )
      const c = shared.counters
      const violations = end.violations
      if (c.defect > 0) violations.push(`${c.defect} request(s) answered with a Defect (a handler died)`)
      if (c.tentHandlerErrors > 0)
        violations.push(`${c.tentHandlerErrors} coro_rpc request(s) answered rpc_throw_exception`)
      if (c.stalled > 0) violations.push(`${c.stalled} input(s) neither answered nor closed within 5 s`)
      if (progress.done < o.count)
        violations.push(
          `only ${progress.done} of ${o.count} inputs were sent (${progress.refused} connections refused)`
        )
      return {
        target: "rpc-frames",
        seed: o.seed,
        inputs: progress.done,
        seconds,
        rate: progress.done / seconds,
        connections: c.connections,
        counters: {
          inputs: progress.classes,
          replies: { ...c },
          engine: end.final?.counters,
          endpoints: end.final?.endpoints,
          nic: end.final === undefined ? undefined : { malformed: end.final.soft.malformed },
          fuzzNotificationsDelivered: end.final?.otherNotifications,
          askedWrites: shared.asked.length,
          injected: watching.state.injected ? o.inject : undefined,
          victimLog: victim.logLines()
        },
        memory: end.memory,
        regions: end.regions,
        client: { rounds: client.rounds, errors: client.errors },
        violations,
        samples: [...shared.samples, ...(violations.length > 0 ? [victim.stderr().slice(-2000)] : [])]
      } satisfies TargetResult
    })
  )
