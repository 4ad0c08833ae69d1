/**
 * The probe's fault matrix: the RFC's six scenarios plus recovery, each between a fresh receiver and initiator
 * process (two SoftVerbs NICs each), each stream scenario as `count` transfer-bound plus `count` standalone
 * notifications followed by an END marker, counted by the receiver per `(session, seq)`.
 *
 * @since 0.1.0
 */
import { Effect, Either, Exit, Fiber } from "effect"
import { type Child, type ChildFailure, spawnChild } from "./Children.js"
import { combine, type Figures, fallbacks, noFigures, resent } from "./Live.js"
import { restartRow } from "./Restart.js"

/** An arm of the matrix: `legacy` is TENT `main` (`Series.legacy`); `series` is the RFC's Layers. */
export type Arm = "legacy" | "series"
/**
 * A row's scenario: the RFC's six, numbered as in its Motivation table, recovery, and the resend storm (the receiver's
 * notify QP forced to ERR after every 200 notifications: resends cross the next fault).
 */
export type Scenario = 1 | 2 | 3 | 4 | 5 | 6 | "recovery" | "storm" | "restart"

/**
 * How a frozen peer is frozen. `application`: its engine stops polling its CQs and its control-plane server stops
 * reading, while its SoftVerbs NICs run on — what `SIGSTOP` does to a process whose NIC is hardware or the kernel's
 * rxe (the NIC ACKs SENDs into the receives already posted, then RNR-NAKs; the kernel completes TCP handshakes),
 * which is what the RFC froze. `host`: a real `SIGSTOP` of the SoftVerbs process, which freezes its NIC too (no ACKs:
 * the sender's QP runs out its retry budget), a fault of its own.
 */
export type Freeze = "application" | "host"

/** One row of the matrix to run: a scenario, and for the frozen-peer ones how the peer is frozen. */
export interface Entry {
  readonly scenario: Scenario
  readonly freeze: Freeze | null
}

/** The scenarios whose peer is frozen. */
export const frozenScenarios: ReadonlyArray<Scenario> = [4, 5, 6, "recovery"]

/**
 * The matrix in order: the RFC's seven rows (frozen peers: the application freeze), the resend storm, then the
 * host-freeze rows.
 */
export const entries: ReadonlyArray<Entry> = [
  ...([1, 2, 3, 4, 5, 6, "recovery", "storm"] as const).map((scenario) => ({
    scenario,
    freeze: frozenScenarios.includes(scenario) ? ("application" as const) : null
  })),
  ...frozenScenarios.map((scenario) => ({ scenario, freeze: "host" as const })),
  { scenario: "restart", freeze: null }
]

/** An entry's name for `--only` and the live lines: `4`, …, `recovery`; the host-freeze rows `4-host`, …. */
export const entryName = (e: Entry): string => `${e.scenario}${e.freeze === "host" ? "-host" : ""}`

/** The RFC's wording of each scenario. */
export const titles: Record<Scenario, string> = {
  1: "Sender's notify channel disabled mid-stream",
  2: "Receiver's notify QP moved to ERR mid-stream",
  3: "Endpoint retired by a fiber other than the notify poller",
  4: "Frozen peer, no endpoint yet, sendNotification twice",
  5: "Frozen peer, submitTransfer",
  6: "Peer freezes mid-stream while the initiator sends",
  recovery: "Frozen peer resumes: time until a notification gets through",
  storm: "Resend storm: receiver's notify QP forced to ERR after every 200 notifications",
  restart: "Receiver killed mid-stream (SIGKILL) and restarted on the same address and segment name"
}

/** A row's title: the RFC's wording, and how the peer was frozen. */
export const title = (scenario: Scenario, freeze: Freeze | null): string =>
  freeze === null
    ? titles[scenario]
    : `${titles[scenario]} (${freeze === "application" ? "application frozen, NIC alive" : "host frozen: SIGSTOP, soft NIC too"})`

/** Freezes the peer (`true`) or resumes it, as `freeze` says. */
const setFrozen = (r: Child, freeze: Freeze, frozen: boolean): Effect.Effect<void, ChildFailure> =>
  freeze === "host"
    ? Effect.sync(() => r.signal(frozen ? "SIGSTOP" : "SIGCONT"))
    : Effect.asVoid(r.request({ cmd: "fault", kind: "freezeApp", frozen }))

/** One row of the matrix (`--json` prints `rows` of these, without `note`). */
export interface Row extends RowResult {
  /** Copies the receiver's dedup window dropped (RFC PR 6; 0 under legacy). */
  readonly duplicatesDropped: number
  /** The initiator's notifications that fell back to a later transport, in all and by `from→to`. */
  readonly fallbacks: number
  readonly fallbacksVia: Readonly<Record<string, number>>
  /** Pending notifications of the initiator's retired channels resent (RFC PR 7), in all and by path. */
  readonly resent: number
  readonly resentVia: Figures["resentVia"]
  /** NIC-pair resends that went out, by `local NIC→peer NIC`. */
  readonly resentPairs: Readonly<Record<string, number>>
  /** Pending notifications the resend could not send. */
  readonly resendFailed: number
  /** The initiator's `Undelivered` events (delivery receipts), in all and by reason. */
  readonly undelivered: number
  readonly undeliveredBy: Readonly<Record<string, number>>
  /** Notifications the initiator's ledger still held without a receipt when the row ended. */
  readonly unreceipted: number
  /** Notifications the initiator's ledger sent over the control plane; notify channels it rebuilt. */
  readonly ledgerSent: number
  readonly rebuilt: number
  /**
   * Calls that returned ok and were neither received nor reported: `ok − received − undelivered` (at least 0). The
   * promise is 0: an ok call ends received or as an `Undelivered` event.
   */
  readonly silent: number
  /** Seconds from the start of the row's two processes to its end. */
  readonly elapsed: number
}

/** What a scenario itself reports; {@link runRow} adds the children's figures ({@link Row}). */
export interface RowResult {
  readonly scenario: Scenario
  /** How the peer was frozen (scenarios 4-6 and recovery); null for the others. */
  readonly freeze: Freeze | null
  readonly arm: Arm
  /** The notifications the scenario sends (its plan). */
  readonly sent: number
  /** What the sender attempted: calls that returned success, calls that failed, never attempted (the run stalled). */
  readonly ok: number
  readonly failed: number
  readonly notAttempted: number
  /** Sends posted on the sender's notify QP and not completed when the fault hit (-1: no fault, or not measured). */
  readonly inFlightAtFault: number
  /** Sends the sender had in flight on notify channels it retired or disabled: lost unless resent (RFC PR 7). */
  readonly closedInFlight: number
  /**
   * Scenario 6: the sender's notify sends that completed while the peer was frozen (its NIC ACKed them: > 0 only when
   * the NIC stayed alive); -1 elsewhere.
   */
  readonly completedWhileFrozen: number
  readonly received: number
  /** Whether the END marker arrived (stream scenarios; true elsewhere). */
  readonly end: boolean
  /** What the receiver dropped as "unknown QP". */
  readonly unknownQp: number
  readonly duplicates: number
  readonly seconds: ReadonlyArray<number>
  /** What else the probe saw, for a person. */
  readonly note: string
  /**
   * A row that counts by seq from its receivers' own logs (`restart`): its silent and undelivered figures, which
   * {@link runRow} then takes instead of the children's live figures.
   */
  readonly counted?: {
    readonly silent: number
    readonly undelivered: number
    readonly undeliveredBy: Readonly<Record<string, number>>
    readonly elapsed: number
  }
}

/** The timing of a run: what `--quick` scales. */
export interface Plan {
  readonly quick: boolean
  /** Notifications per kind (transfer-bound, standalone) in a stream scenario. */
  readonly count: number
  /** `rpc/{request,bootstrap,notify,connect}_timeout_ms`; -1 = the library default, 30 s. */
  readonly rpcTimeoutMs: number
  /** How long a peer stays frozen mid-stream (scenario 6) and before recovery. */
  readonly holdMs: number
  /** A stream that makes no progress this long is stopped (the sender is blocked for good). */
  readonly stallMs: number
  /** `workers/max_retry_count`: attempts of a transfer slice before its batch fails (TENT's 8 in both plans). */
  readonly maxRetry: number
  /** How long the receiver is given for the END marker and what is still in flight. */
  readonly graceMs: number
}

/** The real defaults: the library's 30 s control-plane timeout, the RFC's ~60 s freeze. */
export const fullPlan = (count: number): Plan => ({
  quick: false,
  count,
  rpcTimeoutMs: -1,
  maxRetry: 8,
  holdMs: 60_000,
  stallMs: 75_000,
  graceMs: 15_000
})

/** `--quick` divides the times the RFC's rows are made of (the control-plane timeouts and the freeze) by this. */
export const QUICK_FACTOR = 15

/** `--quick`: the control-plane timeouts and the freeze ÷ {@link QUICK_FACTOR}; counts and fixed times unchanged. */
export const quickPlan = (count: number): Plan => ({
  quick: true,
  count,
  rpcTimeoutMs: 30_000 / QUICK_FACTOR,
  maxRetry: 8,
  holdMs: 60_000 / QUICK_FACTOR,
  stallMs: 6000,
  graceMs: 3000
})

/** What `--quick` changes, as printed. */
export const quickFactors = `control-plane timeouts rpc/{request,bootstrap,notify,connect}_timeout_ms and the frozen-peer hold ÷${QUICK_FACTOR} (30 s → ${30 / QUICK_FACTOR} s, 60 s → ${60 / QUICK_FACTOR} s), so a row made of timeouts reads ×1/${QUICK_FACTOR} of its full-length value; counts unchanged (workers/max_retry_count 8, TCP 3 attempts); times the RFC fixes unchanged (the 1 s notify slot wait, the prober's 1 s interval and 2 s probe timeout, QP retry timers); the probe's own bounds: 6 s without progress = stalled, 3 s for END`

/** The resend storm's period: the receiver's notify QP goes to ERR after every this many notifications. */
const STORM_EVERY = 200

/** `transports/tcp/max_retry_count` (TENT's default, kept by the probe): SendData attempts after failover to TCP. */
const TCP_ATTEMPTS = 3

/** The effective control-plane timeout of a plan. */
export const rpcTimeout = (plan: Plan) => (plan.rpcTimeoutMs === -1 ? 30_000 : plan.rpcTimeoutMs)

/** The engine configuration of the probe's nodes. */
export const nodeConfig = (plan: Plan) => ({
  transports: {
    rdma: { num_lanes: 2, device: { num_cq_list: 1 }, workers: { num_workers: 2, max_retry_count: plan.maxRetry } }
  },
  ...(plan.rpcTimeoutMs === -1
    ? {}
    : {
        rpc: {
          request_timeout_ms: plan.rpcTimeoutMs,
          bootstrap_timeout_ms: plan.rpcTimeoutMs,
          notify_timeout_ms: plan.rpcTimeoutMs,
          connect_timeout_ms: plan.rpcTimeoutMs
        }
      })
})

interface Progress {
  readonly attempted: number
  readonly standalone: number
  readonly held: boolean
  readonly closedInFlight: number
  readonly failed: number
  readonly lastError: string
  readonly done: boolean
  readonly endSent: boolean
  readonly aborted: boolean
  readonly pendingNotify: number
  /** Notify sends the initiator posted (its `rdma.sent`), and those that completed successfully. */
  readonly notifySent: number
  readonly sendsCompleted: number
  readonly maxCallMs: number
  readonly nextCallsMs: ReadonlyArray<number>
}
interface Counts {
  readonly received: number
  readonly total: number
  readonly duplicates: number
  readonly end: boolean
  readonly unknownQp: number
  readonly notifyErrors: number
  readonly deferredPasses: number
}

/** What a stream scenario's fault reports. */
interface FaultResult {
  readonly note: string
  readonly completedWhileFrozen?: number
}

/** Reports what a row is doing now (a phase of the live line). */
export type Report = (line: string) => void

/** Where a row reports while it runs: its phase, and its figures every `everyMs`. */
export interface Live {
  readonly report: Report
  readonly figures: (f: Figures) => void
  /** How often the figures are read from the children (a pipe shows a line a second: no need to read more). */
  readonly everyMs: number
}

/** {@link Live} of one row, and where its last figures go. */
interface RowLive extends Live {
  readonly final: (f: Figures) => void
}

type ChildFigures = Omit<Figures, "elapsed">

/** One `figures` reply (bounded: a frozen child does not answer). */
const childFigures = (c: Child, timeoutMs: number) => c.request<ChildFigures>({ cmd: "figures" }, timeoutMs)

const s = (ms: number) => Math.round(ms) / 1000

/**
 * The receiver's counts once every notification the initiator accepted (`ok` calls) has ended: received, or reported
 * `Undelivered`, and none left awaiting a receipt (delivery receipts: a call returns once its notification is
 * accepted, and the ledger delivers it when the peer runs again). Bounded: two control-plane timeouts and 15 s.
 */
const settle = (r: Child, i: Child, ok: number, plan: Plan): Effect.Effect<Counts, ChildFailure> =>
  Effect.gen(function* () {
    const deadline = Date.now() + rpcTimeout(plan) * 2 + 15_000
    for (;;) {
      const c = yield* r.request<Counts>({ cmd: "counts" })
      const f = yield* childFigures(i, 5000)
      if ((c.received + f.undelivered >= ok && f.unreceipted === 0) || Date.now() >= deadline) return c
      yield* Effect.sleep(200)
    }
  })
const session = () => (Math.random() * 0xffffffff) >>> 0

/**
 * A row's two children, with the live figures read from them until the row ends (a child that does not answer
 * keeps its last figures: a SIGSTOPped receiver), and their last figures read as the row ends, before they stop.
 */
const pair = (arm: Arm, plan: Plan, live: RowLive) =>
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

/**
 * A stream scenario: the fault runs once the initiator has attempted `at` notifications (of both kinds, or of the
 * standalone ones with `standaloneAt`, when the standalone stream is not paced by the transfer-bound one).
 */
const streamRow = (
  scenario: 1 | 2 | 3 | 6 | "storm",
  freeze: Freeze | null,
  arm: Arm,
  plan: Plan,
  live: RowLive,
  fault:
    | {
        readonly at: number
        readonly standaloneAt?: boolean
        /** The initiator stops both streams at `at` until the fault, run with both children, sends `release`. */
        readonly hold?: boolean
        readonly run: (r: Child, i: Child) => Effect.Effect<FaultResult, ChildFailure>
      }
    | undefined,
  disableAt?: number
): Effect.Effect<RowResult, ChildFailure> =>
  Effect.scoped(
    Effect.gen(function* () {
      const [r, i] = yield* pair(arm, plan, live)
      const total = 2 * plan.count
      yield* i.request({ cmd: "open", target: r.segment, warm: true }, rpcTimeout(plan) * 3 + 10_000)
      yield* i.request({
        cmd: "stream",
        target: r.segment,
        remoteAddr: r.addr,
        count: plan.count,
        session: session(),
        ...(fault?.standaloneAt === true ? { lead: plan.count } : {}),
        ...(fault?.hold === true ? { holdAt: fault.at } : {}),
        ...(disableAt === undefined ? {} : { disableAt })
      })
      let faultFiber: Fiber.RuntimeFiber<FaultResult, ChildFailure> | undefined
      let faultEnded = 0
      let inFlightAtFault = -1
      let last = -1
      let lastChange = Date.now()
      let stalled = false
      let p: Progress
      for (;;) {
        p = yield* i.request<Progress>({ cmd: "progress" })
        const now = Date.now()
        if (p.attempted !== last) {
          last = p.attempted
          lastChange = now
        }
        if (
          fault !== undefined &&
          faultFiber === undefined &&
          (fault.hold === true ? p.held : (fault.standaloneAt === true ? p.standalone : p.attempted) >= fault.at)
        ) {
          faultFiber = yield* Effect.fork(
            Effect.tap(fault.run(r, i), () =>
              Effect.gen(function* () {
                faultEnded = Date.now()
                // What the sender had in flight on its notify QPs right after the fault went in.
                inFlightAtFault = (yield* i.request<Progress>({ cmd: "progress" })).pendingNotify
              })
            )
          )
        }
        live.report(
          `scenario ${scenario} ${arm}: attempted ${p.attempted}/${total}, failed ${p.failed}, notify sends in flight ${p.pendingNotify}${faultFiber === undefined ? "" : faultEnded === 0 ? ", fault running" : ", fault done"}`
        )
        if (p.done) break
        const faultBusy = faultFiber !== undefined && faultEnded === 0
        if (!faultBusy && now - Math.max(lastChange, faultEnded) > plan.stallMs) {
          stalled = true
          p = yield* i.request<Progress>({ cmd: "progress" })
          yield* i.request({ cmd: "abort" })
          break
        }
        yield* Effect.sleep(100)
      }
      const faultResult: FaultResult = faultFiber === undefined ? { note: "" } : yield* Fiber.join(faultFiber)
      const faultNote = faultResult.note
      // The receiver's last word, within the grace: END and then nothing new for a second (resends of what a dead
      // notify QP lost land after the stream's last send: RFC PR 7), or nothing new for a second when END was not
      // sent, or everything.
      const deadline = Date.now() + plan.graceMs
      let c = yield* r.request<Counts>({ cmd: "counts" })
      let quietSince = Date.now()
      while (Date.now() < deadline && c.received < total) {
        yield* Effect.sleep(100)
        const next = yield* r.request<Counts>({ cmd: "counts" })
        if (next.total !== c.total || next.end !== c.end) quietSince = Date.now()
        c = next
        if ((c.end || !p.endSent) && Date.now() - quietSince > 1000) break
      }
      const notes = [
        c.end ? "END arrived" : "END never arrived",
        stalled
          ? `initiator blocked for good (${p.pendingNotify} notify sends in flight), stopped after ${s(plan.stallMs)} s without progress`
          : undefined,
        p.failed > 0 ? `${p.failed} calls failed (${p.lastError})` : undefined,
        inFlightAtFault >= 0 ? `${inFlightAtFault} notify sends in flight at the sender after the fault` : undefined,
        p.closedInFlight > 0
          ? `${p.closedInFlight} sends reported ok were in flight on notify channels the sender closed (the series resends them, PR 7; the legacy arm loses them)`
          : undefined,
        c.unknownQp > 0 ? `${c.unknownQp} dropped as unknown QP at the receiver` : undefined,
        `${c.deferredPasses} receiver poller passes left completions for the next turn`,
        faultNote === "" ? undefined : faultNote
      ].filter((x): x is string => x !== undefined)
      const seconds = [s(p.maxCallMs), ...p.nextCallsMs.map(s)]
      return {
        scenario,
        freeze,
        arm,
        sent: total,
        ok: p.attempted - p.failed,
        failed: p.failed,
        notAttempted: total - p.attempted,
        inFlightAtFault,
        closedInFlight: p.closedInFlight,
        completedWhileFrozen: faultResult.completedWhileFrozen ?? -1,
        received: c.received,
        end: c.end,
        unknownQp: c.unknownQp,
        duplicates: c.duplicates,
        seconds,
        note: `longest standalone call, then the next ones; ${notes.join("; ")}`
      } satisfies RowResult
    })
  )

const frozenSends = (freeze: Freeze, arm: Arm, plan: Plan, live: RowLive): Effect.Effect<RowResult, ChildFailure> =>
  Effect.scoped(
    Effect.gen(function* () {
      const [r, i] = yield* pair(arm, plan, live)
      yield* i.request({ cmd: "open", target: r.segment }, rpcTimeout(plan) * 3 + 10_000)
      live.report(`scenario 4 ${arm}: receiver frozen (${freeze}), two sendNotification calls`)
      yield* setFrozen(r, freeze, true)
      const reply = yield* i
        .request<{ calls: ReadonlyArray<{ ms: number; error: string | null }> }>(
          { cmd: "timedSends", target: r.segment, n: 2, session: session() },
          rpcTimeout(plan) * 4 + 10_000
        )
        .pipe(Effect.ensuring(Effect.ignore(setFrozen(r, freeze, false))))
      yield* Effect.sleep(500)
      const c = yield* settle(r, i, reply.calls.filter((x) => x.error === null).length, plan)
      const errors = reply.calls.map((x) => x.error ?? "ok").join(", ")
      return {
        scenario: 4,
        freeze,
        arm,
        sent: reply.calls.length,
        ok: reply.calls.filter((x) => x.error === null).length,
        failed: reply.calls.filter((x) => x.error !== null).length,
        notAttempted: 0,
        inFlightAtFault: -1,
        closedInFlight: 0,
        completedWhileFrozen: -1,
        received: c.received,
        end: true,
        unknownQp: c.unknownQp,
        duplicates: c.duplicates,
        seconds: reply.calls.map((x) => s(x.ms)),
        note: `each call: ${errors} (control-plane timeout ${s(rpcTimeout(plan))} s)`
      } satisfies RowResult
    })
  )

const frozenTransfer = (freeze: Freeze, arm: Arm, plan: Plan, live: RowLive): Effect.Effect<RowResult, ChildFailure> =>
  Effect.scoped(
    Effect.gen(function* () {
      const [r, i] = yield* pair(arm, plan, live)
      yield* i.request({ cmd: "open", target: r.segment }, rpcTimeout(plan) * 3 + 10_000)
      live.report(`scenario 5 ${arm}: receiver frozen (${freeze}), submitTransfer of 4 KiB with a notification`)
      yield* setFrozen(r, freeze, true)
      // RDMA slice attempts, then (failover on poll, TENT's default) the TCP attempts, each bounded by the timeout.
      const bound = rpcTimeout(plan) * (plan.maxRetry + TCP_ATTEMPTS + 2) + 10_000
      const reply = yield* i
        .request<{ submitMs: number; settledMs: number; status: string }>(
          { cmd: "frozenTransfer", target: r.segment, remoteAddr: r.addr, session: session(), boundMs: bound },
          bound + 10_000
        )
        .pipe(Effect.ensuring(Effect.ignore(setFrozen(r, freeze, false))))
      yield* Effect.sleep(500)
      const c = yield* r.request<Counts>({ cmd: "counts" })
      return {
        scenario: 5,
        freeze,
        arm,
        sent: 1,
        ok: reply.status === "COMPLETED" ? 1 : 0,
        failed: reply.status === "COMPLETED" ? 0 : 1,
        notAttempted: 0,
        inFlightAtFault: -1,
        closedInFlight: 0,
        completedWhileFrozen: -1,
        received: c.received,
        end: true,
        unknownQp: c.unknownQp,
        duplicates: c.duplicates,
        seconds: [s(reply.submitMs), s(reply.settledMs)],
        note: `submitTransfer returned, then the batch ended ${reply.status} (up to ${plan.maxRetry} RDMA attempts, each a ${s(rpcTimeout(plan))} s bootstrap timeout, then failover to TCP: up to ${TCP_ATTEMPTS} SendData calls of ${s(rpcTimeout(plan))} s)`
      } satisfies RowResult
    })
  )

const recovery = (freeze: Freeze, arm: Arm, plan: Plan, live: RowLive): Effect.Effect<RowResult, ChildFailure> =>
  Effect.scoped(
    Effect.gen(function* () {
      const [r, i] = yield* pair(arm, plan, live)
      yield* i.request({ cmd: "open", target: r.segment, warm: true }, rpcTimeout(plan) * 3 + 10_000)
      yield* setFrozen(r, freeze, true)
      yield* i.request({ cmd: "loop", target: r.segment, session: session() })
      live.report(
        `recovery ${arm}: receiver frozen (${freeze}) for ${s(plan.holdMs)} s while the initiator keeps sending`
      )
      yield* Effect.sleep(plan.holdMs)
      const t0 = Date.now()
      yield* setFrozen(r, freeze, false)
      // Recovery: the first notification the initiator sent after the resume arrives (one that waited out the freeze
      // in a queue or a socket does not count; when the first arrival after the resume was one, it is noted).
      let first: number | null = null
      let fresh: number | null = null
      let fromSeq: number | null = null
      const deadline = t0 + plan.stallMs + rpcTimeout(plan)
      while (fresh === null && Date.now() < deadline) {
        if (fromSeq === null) fromSeq = (yield* i.request<{ seq: number | null }>({ cmd: "sentAfter", t: t0 })).seq
        const got = yield* r.request<{ at: number | null; fresh: number | null }>({
          cmd: "recoveryAfter",
          t: t0,
          fromSeq
        })
        first = got.at
        fresh = got.fresh
        if (fresh === null) yield* Effect.sleep(20)
      }
      const { sent, failed, closedInFlight } = yield* i.request<{
        sent: number
        failed: number
        closedInFlight: number
      }>({ cmd: "stopLoop" })
      yield* Effect.sleep(500)
      const c = yield* settle(r, i, sent - failed, plan)
      const queued =
        first !== null && fresh !== null && first < fresh
          ? `; notifications sent during the freeze began arriving ${s(first - t0)} s after the resume`
          : ""
      return {
        scenario: "recovery",
        freeze,
        arm,
        sent,
        ok: sent - failed,
        failed,
        notAttempted: 0,
        inFlightAtFault: -1,
        closedInFlight,
        completedWhileFrozen: -1,
        received: c.received,
        end: true,
        unknownQp: c.unknownQp,
        duplicates: c.duplicates,
        seconds: fresh === null ? [] : [s(fresh - t0)],
        note:
          fresh === null
            ? `no notification sent after the resume got through within ${s(deadline - t0)} s`
            : `the first notification sent after the resume arrived, after a ${s(plan.holdMs)} s freeze; the initiator sent every 20 ms throughout${queued}${closedInFlight > 0 ? `; ${closedInFlight} sends reported ok were in flight on notify channels the sender closed` : ""}`
      } satisfies RowResult
    })
  )

/** Runs one row, reporting to `live` while it runs; the row comes with its children's last figures. */
export const runRow = (entry: Entry, arm: Arm, plan: Plan, live: Live): Effect.Effect<Row, ChildFailure> =>
  Effect.suspend(() => {
    let last: Figures = noFigures
    return Effect.map(
      rowResult(entry, arm, plan, {
        ...live,
        final: (f) => {
          last = f
        }
      }),
      (result): Row => ({
        ...result,
        duplicatesDropped: last.duplicatesDropped,
        fallbacks: fallbacks(last),
        fallbacksVia: last.fallbacksVia,
        resent: resent(last),
        resentVia: last.resentVia,
        resentPairs: last.resentPairs,
        resendFailed: last.resendFailed,
        undelivered: result.counted?.undelivered ?? last.undelivered,
        undeliveredBy: result.counted?.undeliveredBy ?? last.undeliveredBy,
        unreceipted: last.unreceipted,
        ledgerSent: last.ledgerSent,
        rebuilt: last.rebuilt,
        silent: result.counted?.silent ?? Math.max(0, result.ok - result.received - last.undelivered),
        elapsed: Math.round((result.counted?.elapsed ?? last.elapsed) * 10) / 10
      })
    )
  })

/** Waits (at most 10 s, polling every 20 ms) until every notify send the initiator posted has completed. */
const settled = (i: Child): Effect.Effect<void, ChildFailure> =>
  Effect.gen(function* () {
    const deadline = Date.now() + 10_000
    for (;;) {
      const p = yield* i.request<Progress>({ cmd: "progress" })
      if ((p.pendingNotify === 0 && p.sendsCompleted >= p.notifySent) || Date.now() >= deadline) return
      yield* Effect.sleep("20 millis")
    }
  })

const rowResult = (entry: Entry, arm: Arm, plan: Plan, live: RowLive): Effect.Effect<RowResult, ChildFailure> => {
  const total = 2 * plan.count
  const freeze: Freeze = entry.freeze ?? "application"
  switch (entry.scenario) {
    case 1:
      return streamRow(1, null, arm, plan, live, undefined, Math.floor(total / 8))
    case 2:
      return streamRow(2, null, arm, plan, live, {
        at: plan.count,
        run: (r) =>
          Effect.map(r.request<{ endpoints: number }>({ cmd: "fault", kind: "notifyQpError" }), (x) => ({
            note: `receiver's notify QP (${x.endpoints} endpoint) forced to ERR after ${plan.count} of ${total} sends`
          }))
      })
    case 3:
      return streamRow(3, null, arm, plan, live, {
        at: plan.count,
        run: (r) =>
          Effect.map(
            r.request<{ retired: number; unknownQp: number }>({ cmd: "fault", kind: "retire", holdMs: 1000 }),
            (x) => ({
              note: `receiver retired ${x.retired} endpoint(s) from another fiber with 1 s of completions unpolled`
            })
          )
      })
    case 6:
      // A quarter in: what is left (3/4 of the standalone sends) must outlast what a frozen application's NIC
      // takes (the 256 receives it has posted) plus the sender's window of 256, or no call would ever wait.
      return streamRow(6, freeze, arm, plan, live, {
        at: Math.floor(plan.count / 4),
        standaloneAt: true,
        hold: true,
        run: (r, i) =>
          Effect.gen(function* () {
            // The held sender's sends so far complete first (at most 10 s): an ACK the receiver sent before the
            // freeze but the sender polled after it would count as a completion while frozen.
            yield* settled(i)
            yield* setFrozen(r, freeze, true)
            const before = yield* i.request<Progress>({ cmd: "progress" })
            yield* i.request({ cmd: "release" })
            const after = yield* Effect.sleep(plan.holdMs).pipe(
              Effect.zipRight(i.request<Progress>({ cmd: "progress" })),
              Effect.ensuring(Effect.ignore(setFrozen(r, freeze, false)))
            )
            const completed = after.sendsCompleted - before.sendsCompleted
            const how =
              freeze === "application"
                ? "an application freeze: its soft NICs ran on"
                : "a host freeze: SIGSTOP, its soft NIC stopped too"
            return {
              note: `receiver frozen ${s(plan.holdMs)} s after ${Math.floor(plan.count / 4)} standalone sends, the transfers done (${how}); during the freeze the sender posted ${after.notifySent - before.notifySent} notify sends and ${completed} completed successfully`,
              completedWhileFrozen: completed
            }
          })
      })
    case "storm":
      return streamRow("storm", null, arm, plan, live, {
        at: STORM_EVERY,
        run: (r, i) =>
          Effect.gen(function* () {
            // Each time the initiator has attempted another 200, the receiver's notify QPs (a new endpoint's, after
            // the last fault) go to ERR. Ends with the stream, or when it stops moving (the legacy sender blocks).
            let faults = 0
            let endpoints = 0
            let next = STORM_EVERY
            let last = -1
            let since = Date.now()
            for (;;) {
              const p = yield* i.request<Progress>({ cmd: "progress" })
              if (p.attempted !== last) {
                last = p.attempted
                since = Date.now()
              }
              if (p.done || p.attempted >= total || Date.now() - since > plan.stallMs) break
              if (p.attempted >= next) {
                const x = yield* r.request<{ endpoints: number }>({ cmd: "fault", kind: "notifyQpError" })
                faults++
                endpoints += x.endpoints
                next += STORM_EVERY
              }
              yield* Effect.sleep(20)
            }
            return {
              note: `${faults} faults, one after every ${STORM_EVERY} attempted (±20 ms of sends), ${endpoints} notify QPs forced to ERR in all`
            }
          })
      })
    case 4:
      return frozenSends(freeze, arm, plan, live)
    case 5:
      return frozenTransfer(freeze, arm, plan, live)
    case "recovery":
      return recovery(freeze, arm, plan, live)
    case "restart":
      return Effect.map(
        restartRow({
          arm,
          config: nodeConfig(plan),
          count: plan.count,
          everyMs: 5,
          settleMs: plan.quick ? 30_000 : 60_000,
          report: live.report
        }),
        (r): RowResult => ({
          scenario: "restart",
          freeze: null,
          arm,
          sent: r.sent,
          ok: r.ok,
          failed: r.failed,
          notAttempted: r.notAttempted,
          inFlightAtFault: -1,
          closedInFlight: 0,
          completedWhileFrozen: -1,
          received: r.received,
          end: true,
          unknownQp: 0,
          duplicates: r.duplicates,
          seconds: [r.maxCallMs / 1000, r.lastUndeliveredS, r.rdmaBackS],
          note: r.note,
          counted: { silent: r.silent, undelivered: r.undelivered, undeliveredBy: r.undeliveredBy, elapsed: r.elapsed }
        })
      )
  }
}
