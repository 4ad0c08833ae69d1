/**
 * "k of N frozen" of `pnpm bench engine --scale` (`bench/scale.ts`): the one-way latency and msgs/s to the healthy
 * peers while the frozen group's peers (a process of their own, {@link Layout}) are frozen, beside the same figures
 * with all of them healthy. Two faces, kept apart:
 *
 * - application frozen, NICs live: the group's process freezes every engine's application
 *   (`Diagnostics.freezeApplication`: pollers and control-plane servers stop) while its SoftVerbs NICs keep answering
 *   (ACK into the receives posted, then RNR NAK);
 * - host frozen: `SIGSTOP` of the group's process (its NICs too), `SIGCONT` to thaw it (and at the latest when the
 *   arm's scope closes, which then kills it).
 *
 * Each face alternates: all healthy, then `frozenRounds` times frozen and (thawed, its burst settled) all healthy
 * again, so every frozen set has a healthy set just before and just after it. A round's ratio is its frozen set over
 * the mean of those two healthy sets: a drift of these shared cores over the face (the peers warm up: healthy sets
 * rose from 9.95 to 18.67 k msgs/s over one face) weighs on both sides alike. The face's figure, per measure, is the
 * round whose ratio is the median of the face's (an odd `frozenRounds`: the middle one), beside that round's two
 * healthy sets' mean as its floor. (One set of each read 0.52 to 1.81 × for msgs/s from run to run; medians of the
 * frozen and of the healthy sets, as before, let the drift weigh on one side.) Each freeze starts with a burst
 * of `burst` notifications to every frozen peer (forked: each `sendNotification` may wait on the window), so the
 * engine holds sends towards the frozen peers — retrying, failing, resending — while the healthy ones are measured;
 * after the thaw the burst completes (at most 30 s) or is interrupted, before the healthy set.
 */
import { Duration, Effect, Fiber } from "effect"
import type { Diagnostics, TransferEngine } from "../src/index.js"
import { measureSet, ping, type RoundCounters, type SetFigures, type Sizes } from "./scale-measure.js"
import { freezeApplication, type PeerSet, setEcho } from "./scale-peers.js"

/** A face's figures: the two the bench reports (a set's p90 is logged only). */
export type FaceFigures = Pick<SetFigures, "oneWayUs" | "msgsPerS">

/** The frozen phases' figures: each face (its median round's frozen set, per measure) beside that round's healthy mean. */
export interface FrozenFigures {
  readonly healthy: number
  readonly frozen: number
  readonly healthyApp: FaceFigures
  readonly app: FaceFigures
  readonly healthyHost: FaceFigures
  readonly host: FaceFigures
}

/**
 * A measure's rounds (frozen set, the mean of the healthy sets around it, their ratio) and its median round, as the
 * suite's `median` picks it: the one at ⌊n / 2⌋ by ratio.
 */
const bracketed = (frozen: ReadonlyArray<SetFigures>, healthy: ReadonlyArray<SetFigures>, m: keyof FaceFigures) => {
  const rounds = frozen.map((f, r) => {
    const floor = ((healthy[r] as SetFigures)[m] + (healthy[r + 1] as SetFigures)[m]) / 2
    return { value: f[m], floor, ratio: f[m] / floor }
  })
  const at = [...rounds].sort((a, b) => a.ratio - b.ratio)[Math.floor(rounds.length / 2)] as (typeof rounds)[number]
  return { value: at.value, floor: at.floor, ratios: rounds.map((x) => x.ratio.toFixed(2)).join(" / ") }
}

/**
 * A face's figures and floors (`frozen[r]` between `healthy[r]` and `healthy[r + 1]`), each measure on its own, and
 * the rounds' ratios as a line for the log.
 */
export const faceFigures = (frozen: ReadonlyArray<SetFigures>, healthy: ReadonlyArray<SetFigures>) => {
  const oneWay = bracketed(frozen, healthy, "oneWayUs")
  const msgs = bracketed(frozen, healthy, "msgsPerS")
  return {
    frozen: { oneWayUs: oneWay.value, msgsPerS: msgs.value } satisfies FaceFigures,
    healthy: { oneWayUs: oneWay.floor, msgsPerS: msgs.floor } satisfies FaceFigures,
    ratios: `one-way ${oneWay.ratios}, msgs/s ${msgs.ratios}`
  }
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
        const cpu0 = process.cpuUsage()
        const f = yield* measureSet(engine, rdma, healthy, set.healthy, sizes, echo)
        const cpu = process.cpuUsage(cpu0)
        const wall = performance.now() - t0
        log(
          `scale frozen, ${what}: to the ${healthy.length} healthy one-way ${f.oneWayUs.toFixed(1)} µs (p90 ` +
            `${f.p90Us.toFixed(1)}), ${(f.msgsPerS / 1000).toFixed(2)} k msgs/s; ${(wall / 1000).toFixed(1)} s, this ` +
            `process's CPU ${(((cpu.user + cpu.system) / 1000 / wall) * 100).toFixed(0)} % of a core; counters changed: ${changes(before, snapshot(diagnostics.counters, nic()))}`
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
    // A face: all healthy, then `frozenRounds` × (frozen, thawed and settled, all healthy).
    const face = (
      name: string,
      frozenAs: string,
      freeze: (frozen: boolean) => Effect.Effect<void, unknown>
    ): Effect.Effect<{ healthy: FaceFigures; frozen: FaceFigures }, unknown> =>
      Effect.gen(function* () {
        const healthySets = [yield* measure(`all healthy (before the ${name} face)`)]
        const frozenSets: Array<SetFigures> = []
        for (let r = 1; r <= sizes.frozenRounds; r++) {
          yield* freeze(true)
          const b = yield* startBurst
          const f = yield* measure(`${frozen.length} ${frozenAs}, round ${r}`).pipe(
            Effect.tap(() => frozenEndpoints(`${frozenAs}, round ${r}, after the set`)),
            Effect.ensuring(Effect.ignore(freeze(false)))
          )
          frozenSets.push(f)
          // Thawed: the burst completes (bounded) or is interrupted, before the healthy set.
          const done = yield* Fiber.join(b.fiber).pipe(Effect.timeout(Duration.seconds(30)), Effect.option)
          if (done._tag === "None") yield* Fiber.interrupt(b.fiber)
          log(
            `scale frozen, ${name} face, round ${r}: burst of ${burst} to each of ${frozen.length}: ` +
              `${b.tally.posted} posted, ${b.tally.failed} failed` +
              `${done._tag === "None" ? ", the rest interrupted 30 s after the thaw" : ""}`
          )
          healthySets.push(yield* measure(`all healthy (${name} face, after thaw ${r})`))
        }
        const figures = faceFigures(frozenSets, healthySets)
        log(
          `scale frozen, ${name} face: each round's frozen set ÷ the mean of the healthy sets around it: ${figures.ratios}`
        )
        return figures
      })
    const appFace = yield* face("application", "applications frozen, NICs live", (f) => freezeApplication(group, f))
    // SIGCONT when the scope closes too (then SIGKILL: the child's finalizer), should a round be interrupted.
    yield* Effect.addFinalizer(() => Effect.sync(() => group.signal("SIGCONT")))
    const hostFace = yield* face("host", "hosts frozen (SIGSTOP)", (f) =>
      Effect.sync(() => group.signal(f ? "SIGSTOP" : "SIGCONT"))
    )
    return {
      healthy: healthy.length,
      frozen: frozen.length,
      healthyApp: appFace.healthy,
      app: appFace.frozen,
      healthyHost: hostFace.healthy,
      host: hostFace.frozen
    } satisfies FrozenFigures
  })
