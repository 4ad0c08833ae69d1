/**
 * The peer processes of `pnpm bench engine --scale` (`bench/scale.ts`): how the peer engines are laid out over
 * `bench/scale-peer.ts` processes, and the requests the bench makes of them (counts, echo target, application freeze).
 */
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import { type Child, spawnChild } from "../test/fixtures/child.js"

const merge = (a: unknown, b: unknown): unknown => {
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object" || Array.isArray(b)) return b
  const out: Record<string, unknown> = { ...(a as Record<string, unknown>) }
  for (const [k, v] of Object.entries(b as Record<string, unknown>)) out[k] = merge(out[k], v)
  return out
}

/**
 * A light engine's config, `json` over it: one data lane, one data CQ, one worker (and, by the caller, one device),
 * and `endpoint/send_timeout` 18 (1.07 s, TENT's notify QP value) instead of 14 (67 ms). Under `Series.all` the
 * notify QP takes the data QPs' timeout (RFC PR 2), and a SoftVerbs NIC answers from its process's event loop: with
 * 165 engines a process on 2 shared cores, a peer's ACK often waits longer than 67 ms × 8 tries, and healthy peers'
 * channels failed (retransmits, notify errors, resends over the control plane) where a hardware NIC would have
 * answered at once. So the bench keeps TENT's timeout; a frozen host is then given up after ~8.6 s, as under TENT.
 */
export const lightConfig = (json: unknown): unknown =>
  merge(
    {
      transports: {
        rdma: {
          num_lanes: 1,
          device: { num_cq_list: 1 },
          workers: { num_workers: 1 },
          endpoint: { send_timeout: 18 }
        }
      }
    },
    json
  )

/**
 * The config of an arm: the engine's default (lazy send slots, receives shared per device: the "lazy" arm) or TENT's
 * allocation (256 × 64 KiB each way per endpoint, at construction).
 */
export const armConfig = (lazy: boolean) => ({
  transports: { rdma: { notify: { lazy_slots: lazy, shared_recv: lazy } } }
})

/** The most engines one peer process hosts. */
const MAX_PER_PROCESS = 256
/** The peer processes build their engines within this (1000 engines in 7 processes: 2–4 min at load 4–14). */
const PEER_READY_MS = 480_000

const here = (f: string) => fileURLToPath(new URL(f, import.meta.url))

type PeerEngine = { readonly segment: string; readonly address: string; readonly nic: string }
/** A peer process's ready line. */
export type PeerReady = {
  readonly engines: ReadonlyArray<PeerEngine>
  readonly startupMs: number
  readonly rss: number
}
type PeerStats = { received: Array<number>; echoed: number; failed: number; lastError?: string; cpuUs: number }

/** One peer of the set: its engine and the process hosting it (index `slot` there). */
export interface Peer extends PeerEngine {
  readonly child: Child<PeerReady>
  readonly slot: number
}

/**
 * How an arm's peers are laid out: `processes` processes share the first `total - frozenGroup` peers round-robin
 * (peer i is engine ⌊i / processes⌋ of process i % processes), and the last `frozenGroup` peers (if any) live in a
 * process of their own, so that a `SIGSTOP` of it freezes those peers' hosts and nothing else.
 */
export interface Layout {
  readonly processes: number
  readonly frozenGroup: number
}

/** The peers of an arm and their processes (`healthy`: every process but the frozen group's). */
export interface PeerSet {
  readonly peers: ReadonlyArray<Peer>
  readonly children: ReadonlyArray<Child<PeerReady>>
  readonly healthy: ReadonlyArray<Child<PeerReady>>
  readonly frozen: Child<PeerReady> | undefined
}

/** Spawns the peer processes of an arm, `total` engines in all, laid out as `layout` says. */
export const spawnPeers = (total: number, lazy: boolean, layout: Layout, log: (l: string) => void) =>
  Effect.gen(function* () {
    const t0 = performance.now()
    const shared = total - layout.frozenGroup
    const p = Math.min(layout.processes, shared)
    const counts = Array.from({ length: p }, (_, k) => Math.floor((shared - k + p - 1) / p))
    if (layout.frozenGroup > 0) counts.push(layout.frozenGroup)
    if (shared < 1 || Math.max(...counts) > MAX_PER_PROCESS) {
      return yield* Effect.fail(new Error(`scale: ${total} peers in ${p} processes is too many`))
    }
    const config = JSON.stringify(armConfig(lazy))
    const children = yield* Effect.forEach(
      counts,
      (n) => spawnChild<PeerReady>(here("scale-peer.ts"), [String(n), config], [], PEER_READY_MS),
      { concurrency: "unbounded" }
    )
    const frozen = layout.frozenGroup > 0 ? children[p] : undefined
    const healthy = children.slice(0, p)
    const peers: Array<Peer> = []
    for (let i = 0; i < total; i++) {
      const child = (i < shared ? children[i % p] : frozen) as Child<PeerReady>
      const slot = i < shared ? Math.floor(i / p) : i - shared
      const engine = child.ready.engines[slot]
      if (engine === undefined) return yield* Effect.fail(new Error(`scale: peer ${i} missing`))
      peers.push({ ...engine, child, slot })
    }
    log(
      `scale ${lazy ? "lazy" : "TENT"}: ${total} peer engines in ${children.length} processes ` +
        `(${counts.join(" + ")}${frozen === undefined ? "" : ", the last the frozen group"}) ready in ` +
        `${((performance.now() - t0) / 1000).toFixed(1)} s (engines built in ` +
        `${children.map((c) => (c.ready.startupMs / 1000).toFixed(1)).join(" / ")} s; rss ` +
        `${children.map((c) => (c.ready.rss / 2 ** 20).toFixed(0)).join(" / ")} MiB)`
    )
    return { peers, children, healthy, frozen } satisfies PeerSet
  })

const request = <A>(c: Child<PeerReady>, message: Record<string, unknown>) =>
  Effect.tryPromise({ try: () => c.request<A>(message), catch: (e) => e as Error })

/** Every peer's count, from its process (each process in `children`: a frozen host's is not asked). */
export const peerCounts = (peers: ReadonlyArray<Peer>, children: ReadonlyArray<Child<PeerReady>>) =>
  Effect.gen(function* () {
    const stats = yield* Effect.forEach(children, (c) => request<PeerStats>(c, { cmd: "stats" }))
    const failed = stats.reduce((a, s) => a + s.failed, 0)
    if (failed > 0) {
      const last = stats.find((s) => s.failed > 0)?.lastError
      return yield* Effect.fail(new Error(`scale: ${failed} echoes failed in the peers; the last: ${last}`))
    }
    return peers.map((p) => (stats[children.indexOf(p.child)] as PeerStats).received[p.slot] as number)
  })

/** The CPU (user and system, µs) the peer processes `children` have used since they started, summed. */
export const peersCpuUs = (children: ReadonlyArray<Child<PeerReady>>) =>
  Effect.map(
    Effect.forEach(children, (c) => request<PeerStats>(c, { cmd: "stats" })),
    (stats) => stats.reduce((a, s) => a + s.cpuUs, 0)
  )

/** Tells every peer engine of `children` to echo to `target` (or, undefined, only to count). */
export const setEcho = (children: ReadonlyArray<Child<PeerReady>>, target: string | undefined) =>
  Effect.forEach(children, (c) => request(c, { cmd: "echo", target: target ?? null }), { discard: true })

/** Freezes (or thaws) the application of every engine of `child` (`Diagnostics.freezeApplication`): NICs answer. */
export const freezeApplication = (child: Child<PeerReady>, frozen: boolean) =>
  Effect.asVoid(request(child, { cmd: "freeze", frozen }))
