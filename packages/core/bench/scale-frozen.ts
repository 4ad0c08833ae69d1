/**
 * "k of N frozen" of `pnpm bench engine --scale` (`bench/scale.ts`): the one-way latency and msgs/s to the healthy
 * peers while the frozen group's peers (a process of their own, {@link Layout}) are frozen, beside the same figures
 * with all of them healthy, measured just before each face. Two faces, kept apart:
 *
 * - application frozen, NICs live: the group's process freezes every engine's application
 *   (`Diagnostics.freezeApplication`: pollers and control-plane servers stop) while its SoftVerbs NICs keep answering
 *   (ACK into the receives posted, then RNR NAK);
 * - host frozen: `SIGSTOP` of the group's process (its NICs too). It stays stopped until the arm's scope closes, which
 *   sends it `SIGCONT` and then kills it.
 *
 * Each face starts with a burst of `burst` notifications to every frozen peer (forked: each `sendNotification` may
 * wait on the window), so the engine holds sends towards the frozen peers — retrying, failing, resending — while the
 * healthy ones are measured; the burst is interrupted after the face (the application face: after the thaw, which
 * lets it complete).
 */
import { Duration, Effect, Fiber } from "effect"
import type { Diagnostics, TransferEngine } from "../src/index.js"
import { measureSet, ping, type RoundCounters, type SetFigures, type Sizes } from "./scale-measure.js"
import { freezeApplication, type PeerSet, setEcho } from "./scale-peers.js"

/** The frozen phases' figures: each face beside the all-healthy run just before it. */
export interface FrozenFigures {
  readonly healthy: number
  readonly frozen: number
  readonly healthyBeforeApp: SetFigures
  readonly app: SetFigures
  readonly healthyBeforeHost: SetFigures
  readonly host: SetFigures
}

/**
 * The numeric counters of the diagnostics and of this engine's SoftVerbs device, flattened (`rdma.notifyErrors`,
 * `peerHealth.marks`, `nic.rnrRetries`, …).
 */
export const snapshot = (counters: Diagnostics.Counters, nic: Record<string, unknown> = {}): Map<string, number> => {
  const out = new Map<string, number>()
  for (const [group, value] of [...Object.entries(counters), ["nic", nic] as const]) {
    if (value === undefined || value === null || typeof value !== "object") continue
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
      if (typeof v === "number") out.set(`${group}.${k}`, v)
    }
  }
  return out
}

/** What changed between two snapshots, as `key +n` (the sends and receipts of the measurement itself left out). */
export const changes = (a: Map<string, number>, b: Map<string, number>): string => {
  const skip = new Set(["rdma.sent", "rdma.sendsCompleted", "rdma.received", "dedup.accepted", "nic.rxPackets"])
  const out: Array<string> = []
  for (const [k, v] of b) {
    const d = v - (a.get(k) ?? 0)
    if (d !== 0 && !skip.has(k)) out.push(`${k} ${d > 0 ? "+" : ""}${d}`)
  }
  return out.length === 0 ? "none" : out.join(", ")
}

/** The frozen phases over `set` (whose `frozen` group is the last peers), each face beside its all-healthy run. */
export const frozenPhases = (
  engine: TransferEngine.TransferEngineShape,
  diagnostics: Diagnostics.DiagnosticsShape,
  rdma: RoundCounters,
  set: PeerSet,
  sizes: Sizes,
  burst: number,
  nic: () => Record<string, unknown>,
  log: (l: string) => void
) =>
  Effect.gen(function* () {
    const group = set.frozen
    if (group === undefined) return yield* Effect.fail(new Error("scale frozen: no frozen group"))
    const healthy = set.peers.filter((p) => p.child !== group)
    const frozen = set.peers.filter((p) => p.child === group)
    const echo = (target: string | undefined) => setEcho(set.healthy, target)
    yield* setEcho([group], undefined)
    const measure = (what: string) =>
      Effect.gen(function* () {
        const before = snapshot(diagnostics.counters, nic())
        const t0 = performance.now()
        const f = yield* measureSet(engine, rdma, healthy, set.healthy, sizes, echo)
        log(
          `scale frozen, ${what}: to the ${healthy.length} healthy one-way ${f.oneWayUs.toFixed(1)} µs (p90 ` +
            `${f.p90Us.toFixed(1)}), ${(f.msgsPerS / 1000).toFixed(2)} k msgs/s; ` +
            `${((performance.now() - t0) / 1000).toFixed(1)} s; counters changed: ${changes(before, snapshot(diagnostics.counters, nic()))}`
        )
        return f
      })
    // The frozen peers' endpoints on this side: how many in each status, and their notify sends not completed.
    const nics = new Set(frozen.map((p) => p.nic))
    const frozenEndpoints = (what: string) =>
      Effect.gen(function* () {
        const eps = (yield* diagnostics.endpoints).filter((e) => nics.has(e.peerNicPath.split("@").pop() ?? ""))
        const by = new Map<string, number>()
        for (const e of eps) by.set(e.status, (by.get(e.status) ?? 0) + 1)
        log(
          `scale frozen, ${what}: the frozen peers' endpoints ${[...by].map(([k, v]) => `${v} ${k}`).join(", ") || "none"}; ` +
            `pending sends ${eps.reduce((a, e) => a + e.pending, 0)}; counters ${changes(new Map(), snapshot(diagnostics.counters, nic()))}`
        )
      })
    // Sends towards the frozen peers, forked; how many were posted and how many failed, when interrupted.
    const startBurst = Effect.gen(function* () {
      const tally = { posted: 0, failed: 0 }
      const fiber = yield* Effect.fork(
        Effect.forEach(
          frozen,
          (p) =>
            Effect.forEach(
              Array.from({ length: burst }),
              () =>
                engine.sendNotification(p.segment, ping).pipe(
                  Effect.match({
                    onFailure: () => tally.failed++,
                    onSuccess: () => tally.posted++
                  })
                ),
              { discard: true }
            ),
          { concurrency: "unbounded", discard: true }
        )
      )
      // The burst posted (or stuck on the windows) before the healthy peers are measured.
      yield* Effect.sleep(Duration.millis(200))
      return { fiber, tally }
    })
    const healthyBeforeApp = yield* measure("all healthy (before the application freeze)")
    yield* freezeApplication(group, true)
    const appBurst = yield* startBurst
    const app = yield* measure(`${frozen.length} applications frozen, NICs live`).pipe(
      Effect.tap(() => frozenEndpoints("applications frozen, after the face")),
      Effect.ensuring(Effect.ignore(freezeApplication(group, false)))
    )
    // Thawed: the burst completes (bounded) or is interrupted.
    const appDone = yield* Fiber.join(appBurst.fiber).pipe(Effect.timeout(Duration.seconds(30)), Effect.option)
    if (appDone._tag === "None") yield* Fiber.interrupt(appBurst.fiber)
    log(
      `scale frozen, application face: burst of ${burst} to each of ${frozen.length}: ${appBurst.tally.posted} posted, ` +
        `${appBurst.tally.failed} failed${appDone._tag === "None" ? ", the rest interrupted 30 s after the thaw" : ""}`
    )
    const healthyBeforeHost = yield* measure("all healthy (before the host freeze)")
    // SIGSTOP until the scope closes (SIGCONT, then SIGKILL: the child's finalizer).
    yield* Effect.addFinalizer(() => Effect.sync(() => group.signal("SIGCONT")))
    group.signal("SIGSTOP")
    const hostBurst = yield* startBurst
    const host = yield* measure(`${frozen.length} hosts frozen (SIGSTOP)`)
    yield* frozenEndpoints("hosts frozen, after the face")
    yield* Fiber.interrupt(hostBurst.fiber)
    log(
      `scale frozen, host face: burst of ${burst} to each of ${frozen.length}: ${hostBurst.tally.posted} posted, ` +
        `${hostBurst.tally.failed} failed by the end of the face, the rest interrupted`
    )
    return {
      healthy: healthy.length,
      frozen: frozen.length,
      healthyBeforeApp,
      app,
      healthyBeforeHost,
      host
    } satisfies FrozenFigures
  })
