/**
 * A SoftVerbs shared receive queue (`ibv_create_srq`): a {@link RecvQueue} that the QPs created with it take their
 * RECVs from. It belongs to a protection domain; a QP of another is refused it.
 */
import { Effect, type Scope } from "effect"
import { Errno } from "../Constants.js"
import { RdmaError } from "../Errors.js"
import type { RecvWr, SharedReceiveQueue, SrqInitAttr } from "../Verbs.js"
import { RecvQueue, type SrqHost } from "./RecvQueue.js"

export class SoftSrq implements SharedReceiveQueue {
  readonly queue: RecvQueue
  badRecvWr: RecvWr | null = null
  destroyed = false

  constructor(
    readonly pdId: number,
    maxWr: number,
    maxSge: number,
    /** The device it was created on (a QP of another is refused it). */
    readonly host: SrqHost
  ) {
    this.queue = new RecvQueue(maxWr, maxSge, host)
  }

  /** `ibv_post_srq_recv`: the chain up to the first bad WR (left in `badRecvWr`). */
  postRecv(wr: RecvWr): number {
    let w: RecvWr | null | undefined = wr
    let err = 0
    while (w) {
      err = this.destroyed ? Errno.EINVAL : this.queue.post(w)
      if (err !== 0) break
      w = w.next
    }
    this.badRecvWr = err === 0 ? null : (w ?? null)
    return err
  }

  armLimit(limit: number): Effect.Effect<void, RdmaError> {
    return Effect.suspend(() => {
      if (!Number.isInteger(limit) || limit < 0 || limit > this.queue.cap || this.destroyed) {
        return Effect.fail(
          new RdmaError({
            op: "ibv_modify_srq",
            errno: Errno.EINVAL,
            message: `srq_limit must be in 0..${this.queue.cap} (the SRQ's max_wr), got ${limit}`
          })
        )
      }
      this.queue.limit = limit
      return Effect.void
    })
  }

  get destroy(): Effect.Effect<void, RdmaError> {
    return Effect.suspend(() => {
      if (this.queue.attached > 0) {
        return Effect.fail(
          new RdmaError({
            op: "ibv_destroy_srq",
            errno: Errno.EBUSY,
            message: `${this.queue.attached} QP(s) still use this SRQ: destroy them first`
          })
        )
      }
      this.destroyed = true
      this.queue.clear()
      return Effect.void
    })
  }
}

const invalid = (message: string) => new RdmaError({ op: "ibv_create_srq", errno: Errno.EINVAL, message })

/** `ibv_create_srq` on a SoftVerbs device: checked against the device's limits, destroyed when the scope closes. */
export const createSrq = (
  device: SrqHost & { readonly isClosed: boolean },
  pdId: number,
  init: SrqInitAttr,
  limits: { readonly maxQpWr: number; readonly maxSge: number }
): Effect.Effect<SharedReceiveQueue, RdmaError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const within = (v: number, hi: number) => Number.isInteger(v) && v >= 1 && v <= hi
      if (!within(init.maxWr, limits.maxQpWr)) return Effect.fail(invalid(`max_wr must be in 1..${limits.maxQpWr}`))
      if (!within(init.maxSge, limits.maxSge)) return Effect.fail(invalid(`max_sge must be in 1..${limits.maxSge}`))
      if (device.isClosed) {
        return Effect.fail(new RdmaError({ op: "ibv_create_srq", errno: Errno.ENODEV, message: "device closed" }))
      }
      return Effect.succeed(new SoftSrq(pdId, init.maxWr, init.maxSge, device))
    }),
    // The scope closes its QPs first (created later); what is still posted goes with the SRQ.
    (srq) =>
      Effect.sync(() => {
        srq.destroyed = true
        srq.queue.clear()
      })
  )

/** An SRQ a QP of `pdId` on `device` may be created with: a live SoftVerbs SRQ of that device and PD. */
export const usableSrq = (srq: SharedReceiveQueue, device: SrqHost, pdId: number): srq is SoftSrq =>
  srq instanceof SoftSrq && srq.host === device && srq.pdId === pdId && !srq.destroyed
