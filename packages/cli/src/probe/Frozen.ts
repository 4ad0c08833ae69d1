/**
 * The probe's frozen-peer rows: two `sendNotification` calls to a frozen peer with no endpoint yet (4), a
 * `submitTransfer` to one (5), and the time until a notification gets through once it resumes (recovery).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { ChildFailure } from "./Children.js"
import { type Counts, pair, type RowLive, s, session, setFrozen, settle } from "./Pair.js"
import { type Arm, type Freeze, type Plan, type RowResult, rpcTimeout } from "./Plan.js"

/** `transports/tcp/max_retry_count` (TENT's default, kept by the probe): SendData attempts after failover to TCP. */
const TCP_ATTEMPTS = 3

export const frozenSends = (
  freeze: Freeze,
  arm: Arm,
  plan: Plan,
  live: RowLive
): Effect.Effect<RowResult, ChildFailure> =>
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

export const frozenTransfer = (
  freeze: Freeze,
  arm: Arm,
  plan: Plan,
  live: RowLive
): Effect.Effect<RowResult, ChildFailure> =>
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

export const recovery = (freeze: Freeze, arm: Arm, plan: Plan, live: RowLive): Effect.Effect<RowResult, ChildFailure> =>
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
