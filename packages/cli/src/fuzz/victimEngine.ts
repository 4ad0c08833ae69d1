/**
 * The `engine` victim: a real `TransferEngine` on one SoftVerbs NIC (`mlx0`, 127.0.0.1), its control plane on
 * 127.0.0.1, under `Series.all` and the configuration the fuzzer passes. It registers three regions between guards
 * (`Regions.ts`): `target`, which fuzzed `SendData` may write; `canary`, which nothing is aimed at; `client`, which the
 * real client writes and reads back. It consumes every notification: the real client's (named `fuzz-client-<k>`) are
 * counted by `k`, the others only counted.
 *
 * Requests: `stats` (memory after GC, the engine's and the NIC's counters, the `tent_*` counters that count drops,
 * the client's notifications seen), `memory` (the regions' bytes, guards included), `inject` (a negative control:
 * `canary` flips a canary byte, `throw` makes the subscriber throw once, `crash` exits the process).
 */
import { Diagnostics, EngineConfig, Series, TransferEngine } from "@tent/core"
import { RailHealth } from "@tent/health"
import { SoftVerbs } from "@tent/verbs"
import { Context, Effect, Layer, Metric, MetricState, type Scope } from "effect"
import { afterGc, type Guarded, guarded } from "./Regions.js"
import type { Role } from "./role.js"

/** The name prefix of the real client's notifications; `k` follows. */
export const CLIENT_PREFIX = "fuzz-client-"
/** Bytes of each region. */
export const REGION_BYTES = 64 * 1024

/** The victim's limits: small enough that inputs just above them are cheap. */
export const MAX_NOTIFY_BYTES = 64 * 1024
export const MAX_DATA_BYTES = 256 * 1024
/** Data QPs per endpoint. */
export const LANES = 2

/**
 * The victim engine's configuration: few lanes, a small endpoint store and lazy notify slots (every bootstrap a
 * fuzzed peer gets accepted costs little), and the limits above. `transferBound`: held records on the notify QP are
 * taken (`transports/rdma/notify/transfer_bound` "immediate").
 */
export const engineConfig = (transferBound: "immediate" | "notify_qp") => ({
  transports: {
    rdma: {
      num_lanes: LANES,
      device: { num_cq_list: 1 },
      workers: { num_workers: 2 },
      endpoint: { endpoint_store_cap: 64 },
      notify: { lazy_slots: true, transfer_bound: transferBound }
    }
  },
  rpc: { max_notify_bytes: MAX_NOTIFY_BYTES, max_data_bytes: MAX_DATA_BYTES }
})

/** What `stats` answers. */
export interface EngineStats {
  readonly memory: { readonly rss: number; readonly heapUsed: number; readonly external: number }
  readonly counters: Record<string, unknown>
  readonly soft: Record<string, number>
  readonly framesRejected: Record<string, number>
  readonly handlerErrors: Record<string, number>
  readonly endpoints: number
  readonly client: { readonly count: number; readonly distinct: number; readonly duplicates: number }
  readonly otherNotifications: number
}

/** What `memory` answers: each region's address, length and bytes (guards included, base64). */
export type EngineRegions = Record<string, { readonly addr: number; readonly length: number; readonly bytes: string }>

/** The violations an engine's counters show: handler errors counted by the engine or by its NIC. */
export const engineViolations = (s: EngineStats): Array<string> => {
  const out: Array<string> = []
  const handler = Object.values(s.handlerErrors).reduce((a, b) => a + b, 0)
  const delivery = (s.counters.delivery as { handlerErrors?: number } | null)?.handlerErrors ?? 0
  if (handler + delivery > 0) out.push(`the engine counted ${Math.max(handler, delivery)} handler error(s)`)
  if ((s.soft.handlerErrors ?? 0) > 0) out.push(`the victim's NIC counted ${s.soft.handlerErrors} handler error(s)`)
  return out
}

const layer = (config: unknown) =>
  TransferEngine.layer.pipe(
    Layer.provideMerge(SoftVerbs.layer({ devices: [{ name: "mlx0", host: "127.0.0.1" }] })),
    Layer.provide(Series.all),
    Layer.provide(RailHealth.layerConfig),
    Layer.provide(EngineConfig.layerProvider({ json: config }))
  )

/** The counters named `name` in this process's registry, summed by their `reason` label (zeros left out). */
const byReason = (name: string): Record<string, number> => {
  const out: Record<string, number> = {}
  for (const { metricKey, metricState } of Metric.unsafeSnapshot()) {
    if (metricKey.name !== name || !MetricState.isCounterState(metricState)) continue
    const n = Number(metricState.count)
    if (n === 0) continue
    const reason = metricKey.tags.find((t) => t.key === "reason")?.value ?? "all"
    out[reason] = (out[reason] ?? 0) + n
  }
  return out
}

const plain = (v: unknown): unknown =>
  JSON.parse(JSON.stringify(v ?? null, (_k, x) => (typeof x === "bigint" ? x.toString() : x)))

const text = new TextDecoder()

/** The engine victim, built in the caller's scope. */
export const make = (opts: Record<string, unknown>): Effect.Effect<Role, unknown, Scope.Scope> =>
  Effect.gen(function* () {
    const ctx = yield* Layer.build(layer(opts.config ?? {}))
    const engine = Context.get(ctx, TransferEngine.TransferEngine)
    const diagnostics = Context.get(ctx, Diagnostics.Diagnostics)
    const control = Context.get(ctx, SoftVerbs.SoftVerbsControl)
    const seed = Number(opts.seed ?? 1)
    const regions: Record<string, Guarded> = {
      target: guarded(REGION_BYTES, seed ^ 0x7a11),
      canary: guarded(REGION_BYTES, seed ^ 0xca4a),
      client: guarded(REGION_BYTES, seed ^ 0xc11e)
    }
    const addrs: Record<string, { addr: number; length: number }> = {}
    for (const [name, r] of Object.entries(regions)) {
      const local = yield* engine.registerSegment(r.bytes)
      addrs[name] = { addr: local.addr, length: local.length }
    }
    const client = { count: 0, distinct: 0, duplicates: 0, seen: new Set<number>() }
    let others = 0
    let throwNext = false
    yield* engine.subscribe(
      (n) => {
        if (throwNext) {
          throwNext = false
          throw new Error("injected: the subscriber throws (negative control)")
        }
        const name = text.decode(n.name)
        if (!name.startsWith(CLIENT_PREFIX)) {
          others++
          return
        }
        const k = Number(name.slice(CLIENT_PREFIX.length))
        client.count++
        if (client.seen.has(k)) client.duplicates++
        else {
          client.seen.add(k)
          client.distinct++
        }
      },
      { consume: true }
    )

    const on = (m: Record<string, unknown>): Effect.Effect<Record<string, unknown>, unknown> =>
      Effect.gen(function* () {
        switch (m.cmd) {
          case "stats": {
            const memory = yield* Effect.promise(afterGc)
            const c = diagnostics.counters
            return {
              memory,
              counters: plain({
                rdma: c.rdma,
                tcp: c.tcp,
                delivery: c.delivery,
                dedup: c.dedup,
                receipts: c.receipts,
                immediates: c.immediates
              }),
              soft: yield* control.counters("mlx0"),
              framesRejected: byReason("tent_frames_rejected_total"),
              handlerErrors: byReason("tent_handler_errors_total"),
              endpoints: (yield* diagnostics.endpoints).length,
              client: { count: client.count, distinct: client.distinct, duplicates: client.duplicates },
              otherNotifications: others
            }
          }
          case "memory":
            return {
              regions: Object.fromEntries(
                Object.entries(regions).map(([name, r]) => [name, { ...addrs[name], bytes: r.all.toString("base64") }])
              )
            }
          case "inject": {
            if (m.kind === "canary") (regions.canary as Guarded).bytes[100] ^= 0xff
            else if (m.kind === "throw") throwNext = true
            else if (m.kind === "crash") setImmediate(() => process.exit(70))
            return { injected: m.kind }
          }
          default:
            return yield* Effect.fail(`unknown request ${String(m.cmd)}`)
        }
      })

    return {
      ready: {
        segment: engine.segmentName,
        address: engine.address,
        device: "mlx0",
        regions: addrs,
        pid: process.pid
      },
      on
    }
  })
