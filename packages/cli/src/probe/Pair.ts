/**
 * What the probe's rows share: the two children of a row with their live figures, the freeze of either kind, the
 * receiver's counts, and the wait for every accepted notification to end.
 *
 * @since 0.1.0
 */
import { Effect, Either, Exit } from "effect"
import { type Child, type ChildFailure, spawnChild } from "./Children.js"
import { combine, type Figures, noFigures } from "./Live.js"
import { type Arm, type Freeze, type Live, nodeConfig, type Plan, rpcTimeout } from "./Plan.js"

/** Freezes the peer (`true`) or resumes it, as `freeze` says. */
export const setFrozen = (r: Child, freeze: Freeze, frozen: boolean): Effect.Effect<void, ChildFailure> =>
  freeze === "host"
    ? Effect.sync(() => r.signal(frozen ? "SIGSTOP" : "SIGCONT"))
    : Effect.asVoid(r.request({ cmd: "fault", kind: "freezeApp", frozen }))

/** A receiver's counts (its `counts` reply): distinct stamps received, copies, the END marker, its drops. */
export interface Counts {
  readonly received: number
  readonly total: number
  readonly duplicates: number
  readonly end: boolean
  readonly unknownQp: number
  readonly notifyErrors: number
  readonly deferredPasses: number
}

/** {@link Live} of one row, and where its last figures go. */
export interface RowLive extends Live {
  readonly final: (f: Figures) => void
}

/** A child's `figures` reply. */
export type ChildFigures = Omit<Figures, "elapsed">

/** One `figures` reply (bounded: a frozen child does not answer). */
export const childFigures = (c: Child, timeoutMs: number) => c.request<ChildFigures>({ cmd: "figures" }, timeoutMs)

/** Milliseconds as seconds, to the millisecond. */
export const s = (ms: number) => Math.round(ms) / 1000

/**
 * The receiver's counts once every notification the initiator accepted (`ok` calls) has ended: received, or reported
 * `Undelivered`, and none left awaiting a receipt (delivery receipts: a call returns once its notification is
 * accepted, and the ledger delivers it when the peer runs again). Bounded: two control-plane timeouts and 15 s.
 */
export const settle = (r: Child, i: Child, ok: number, plan: Plan): Effect.Effect<Counts, ChildFailure> =>
  Effect.gen(function* () {
    const deadline = Date.now() + rpcTimeout(plan) * 2 + 15_000
    for (;;) {
      const c = yield* r.request<Counts>({ cmd: "counts" })
      const f = yield* childFigures(i, 5000)
      if ((c.received + f.undelivered >= ok && f.unreceipted === 0) || Date.now() >= deadline) return c
      yield* Effect.sleep(200)
    }
  })

/** A new probe session id (u32). */
export const session = () => (Math.random() * 0xffffffff) >>> 0

/**
 * A row's two children, with the live figures read from them until the row ends (a child that does not answer
 * keeps its last figures: a SIGSTOPped receiver), and their last figures read as the row ends, before they stop.
 */
export const pair = (arm: Arm, plan: Plan, live: RowLive) =>
  Effect.gen(function* () {
    const t0 = performance.now()
    const [r, i] = yield* Effect.all(
      [
        spawnChild("receiver", { arm, config: nodeConfig(plan), segmentSize: 1 << 20 }),
        spawnChild("initiator", { arm, config: nodeConfig(plan), segmentSize: 1 << 20 })
      ],
      { concurrency: 2 }
    )
    let fromI: ChildFigures = noFigures
    let fromR: ChildFigures = noFigures
    const read = (timeoutMs: number) =>
      Effect.map(
        Effect.all([Effect.either(childFigures(i, timeoutMs)), Effect.either(childFigures(r, timeoutMs))], {
          concurrency: 2
        }),
        ([a, b]) => {
          if (Either.isRight(a)) fromI = a.right
          if (Either.isRight(b)) fromR = b.right
          return combine(fromI, fromR, (performance.now() - t0) / 1000)
        }
      )
    // Finalizers run last first: the live reads stop, then the last figures are read, then the children stop.
    // (Not when the row failed or was interrupted: its children may not answer, and nothing shows the figures.)
    yield* Effect.addFinalizer((exit) =>
      Exit.isSuccess(exit) ? Effect.map(read(5000), (f) => live.final(f)) : Effect.void
    )
    yield* Effect.forkScoped(
      Effect.forever(Effect.zipRight(Effect.map(read(1000), live.figures), Effect.sleep(live.everyMs)))
    )
    return [r, i] as const
  })
