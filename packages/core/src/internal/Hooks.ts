/**
 * Submit hooks (TENT `SubmitHook`): the notification given to `submitTransfer`, sent to each distinct target of the
 * batch once the batch ends, and how one firing sends it — TENT's way, or with the `SubmitHooks` seam's memory of the
 * targets served and its failure notices. `Transfers` decides when a hook is due and holds the progress lock.
 */
import type { Notification } from "@tent/rpc"
import { Effect } from "effect"
import { PROTO, type SubmitHooksShape } from "../SubmitHooks.js"
import type { ImmTrack } from "./rdma/Immediates.js"

/** One hook: a notification for the targets of the tasks `[start, end)` of its batch. */
export interface Hook {
  readonly start: number
  readonly end: number
  readonly notification: Notification
  readonly targets: ReadonlyArray<string>
  /**
   * Per target: served — sent its notification or failure notice, or (a failure notice) it takes none — and so not
   * sent to again. Kept under `SubmitHooks.rememberTargets` and for failure notices; TENT's hooks have no such memory.
   */
  readonly served: Array<boolean>
  fired: boolean
  /** Per target on the immediates path (`transfer_bound` immediate): the sender's track of its held record. */
  readonly imm?: ReadonlyMap<string, ImmTrack> | undefined
}

/** A new hook for `targets`, none served. */
export const make = (
  start: number,
  end: number,
  notification: Notification,
  targets: ReadonlyArray<string>,
  imm?: ReadonlyMap<string, ImmTrack>
): Hook => ({
  start,
  end,
  notification,
  targets,
  served: targets.map(() => false),
  fired: false,
  ...(imm === undefined || imm.size === 0 ? {} : { imm })
})

/**
 * Before a firing: the targets whose notification rode the data QPs are served by it (COMPLETED: a spoiled one's
 * record now goes unheld; FAILED: its record becomes the failure notice with the same stamp, see `ImmTrack.fail`).
 */
export const settleImmediates = (
  hooks: ReadonlyArray<Hook>,
  reason: string | undefined,
  swap: (target: string, record: Notification, by: Notification) => boolean
): void => {
  for (const hook of hooks) {
    if (hook.fired || hook.imm === undefined) continue
    for (let i = 0; i < hook.targets.length; i++) {
      const t = hook.imm.get(hook.targets[i] as string)
      if (t === undefined || hook.served[i]) continue
      if (reason === undefined) {
        t.done()
        if (t.served) hook.served[i] = true
      } else if (t.fail({ ...hook.notification, failure: reason }, swap)) hook.served[i] = true
    }
  }
}

/** Sends `n` to the segment `target`; fails when it was not sent (the engine's `sendNotification`). */
export type Send = (target: string, n: Notification) => Effect.Effect<void, unknown>

/** Whether an engine that offers failure notices (`offered`) sends one to a peer that advertised `peerProto`. */
export const failureCapable = (offered: boolean, peerProto: number): boolean => offered && peerProto >= PROTO

/** TENT `maybeFireSubmitHooks`'s loop: stops at the first failed send; fired only when every send succeeded. */
const fireWhole = (hook: Hook, send: Send): Effect.Effect<void> =>
  Effect.gen(function* () {
    for (const target of hook.targets) {
      const r = yield* Effect.either(send(target, hook.notification))
      if (r._tag === "Left") return
    }
    hook.fired = true
  })

/**
 * A hook with memory: every target not served yet is sent its notification, or with `reason` a failure notice (a
 * target that takes none, `capable` false, is served by sending nothing, as TENT sends nothing); a failed send leaves
 * that target for the next firing without holding up the others. Fired once every target is served.
 */
const fireEach = (
  hook: Hook,
  reason: string | undefined,
  send: Send,
  capable: (target: string) => boolean
): Effect.Effect<void> =>
  Effect.gen(function* () {
    let all = true
    for (let i = 0; i < hook.targets.length; i++) {
      if (hook.served[i]) continue
      const target = hook.targets[i] as string
      if (reason !== undefined && !capable(target)) {
        hook.served[i] = true
        continue
      }
      const n = reason === undefined ? hook.notification : { ...hook.notification, failure: reason }
      const r = yield* Effect.either(send(target, n))
      if (r._tag === "Left") all = false
      else hook.served[i] = true
    }
    if (all) hook.fired = true
  })

/**
 * Fires the unfired `hooks` of a batch (TENT `maybeFireSubmitHooks`): its notification when the batch COMPLETED, or
 * with `reason` the failure notices of a batch that ended FAILED. The caller holds the progress lock.
 */
export const fire = (
  hooks: ReadonlyArray<Hook>,
  reason: string | undefined,
  policy: SubmitHooksShape,
  send: Send,
  capable: (target: string) => boolean
): Effect.Effect<void> =>
  Effect.forEach(
    hooks.filter((h) => !h.fired),
    (hook) =>
      reason === undefined && !policy.rememberTargets ? fireWhole(hook, send) : fireEach(hook, reason, send, capable),
    { discard: true }
  )

/** Whether any of `hooks` has not fired. */
export const pending = (hooks: ReadonlyArray<Hook>): boolean => hooks.some((h) => !h.fired)
