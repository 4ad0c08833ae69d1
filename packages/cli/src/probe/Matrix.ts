/**
 * The probe's fault matrix: the RFC's six scenarios plus recovery, each between a fresh receiver and initiator
 * process (two SoftVerbs NICs each), each stream scenario as `count` transfer-bound plus `count` standalone
 * notifications followed by an END marker, counted by the receiver per `(session, seq)`.
 *
 * @since 0.1.0
 */
import { Effect, Fiber } from "effect"
import type { Child, ChildFailure } from "./Children.js"
import { frozenSends, frozenTransfer, recovery } from "./Frozen.js"
import { type Figures, fallbacks, noFigures, resent } from "./Live.js"
import { type Counts, pair, type RowLive, s, session, setFrozen } from "./Pair.js"
import {
  type Arm,
  type Entry,
  type Freeze,
  type Live,
  nodeConfig,
  type Plan,
  type Row,
  type RowResult,
  rpcTimeout
} from "./Plan.js"
import { restartRow } from "./Restart.js"

export * from "./Plan.js"

/** The resend storm's period: the receiver's notify QP goes to ERR after every this many notifications. */
const STORM_EVERY = 200

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

/** What a stream scenario's fault reports. */
interface FaultResult {
  readonly note: string
  readonly completedWhileFrozen?: number
}

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
          stallMs: plan.stallMs,
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
