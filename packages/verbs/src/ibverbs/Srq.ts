/**
 * `struct ibv_srq`: a shared receive queue (`ibv_create_srq`), posted to through the provider's `ops.post_srq_recv`
 * on a preallocated chain of `ibv_recv_wr` as a QP's receives are; `ibv_modify_srq` arms its limit.
 *
 * @internal
 */
import { Effect, type Scope } from "effect"
import { Errno } from "../Constants.js"
import { RdmaError } from "../Errors.js"
import type { RecvWr, SharedReceiveQueue, SrqInitAttr } from "../Verbs.js"
import { addressOf, stableBuffer } from "./Codec.js"
import { Off, Size } from "./Layout.js"
import { address, errnoOf, errnoText, type Library } from "./Library.js"
import { postRecvs, type QpOps, WrChain } from "./QueuePair.js"

/** `IBV_SRQ_LIMIT`: the `ibv_modify_srq` mask bit of `srq_limit`. */
const SRQ_LIMIT = 1 << 1

const failure = (op: string, errno: number, what: string) =>
  new RdmaError({ op, errno, message: `${op}${what}: ${errnoText(errno)}` })

/** An SRQ made by {@link createSrq}. */
export class IbvSrq implements SharedReceiveQueue {
  badRecvWr: RecvWr | null = null
  readonly #lib: Library
  readonly #chain: WrChain<RecvWr>
  readonly #attr = stableBuffer(Size.srqAttr)
  readonly #post: (wrs: number) => number
  #destroyed = false

  constructor(
    lib: Library,
    ops: QpOps,
    /** The `struct ibv_srq *`. */
    readonly address: number,
    maxWr: number,
    maxSge: number
  ) {
    this.#lib = lib
    const R = Off.recvWr
    this.#chain = new WrChain<RecvWr>(Math.max(1, maxWr), maxSge, Size.recvWr, R.next, R.sgList)
    this.#post = (wrs) => ops.postSrqRecv(this.address, wrs, this.#chain.badAddr)
  }

  postRecv(wr: RecvWr): number {
    if (this.#destroyed) {
      this.badRecvWr = wr
      return Errno.EINVAL
    }
    const rc = postRecvs(this.#chain, wr, this.#post)
    this.badRecvWr = this.#chain.bad
    return rc
  }

  armLimit(limit: number): Effect.Effect<void, RdmaError> {
    return Effect.suspend(() => {
      if (this.#destroyed || !Number.isInteger(limit) || limit < 0) {
        return Effect.fail(failure("ibv_modify_srq", Errno.EINVAL, ` (srq_limit ${limit})`))
      }
      this.#attr.fill(0)
      this.#attr.writeUInt32LE(limit, Off.srqAttr.srqLimit)
      const rc = this.#lib.modifySrq(this.address, addressOf(this.#attr), SRQ_LIMIT)
      return rc === 0 ? Effect.void : Effect.fail(failure("ibv_modify_srq", errnoOf(rc), ` (srq_limit ${limit})`))
    })
  }

  get destroy(): Effect.Effect<void, RdmaError> {
    return Effect.suspend(() => {
      if (this.#destroyed) return Effect.void
      const rc = this.#lib.destroySrq(this.address)
      if (rc !== 0) return Effect.fail(failure("ibv_destroy_srq", errnoOf(rc), ""))
      this.#destroyed = true
      return Effect.void
    })
  }
}

/** `ibv_create_srq` in the PD at `pd`; destroyed when the scope closes (a failure then is logged). */
export const createSrq = (
  lib: Library,
  ops: QpOps,
  pd: number,
  init: SrqInitAttr
): Effect.Effect<SharedReceiveQueue, RdmaError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const buf = stableBuffer(Size.srqInitAttr)
      buf.writeUInt32LE(init.maxWr >>> 0, Off.srqInit.maxWr)
      buf.writeUInt32LE(init.maxSge >>> 0, Off.srqInit.maxSge)
      const srq = address(lib.createSrq(pd, addressOf(buf)))
      if (srq === 0) {
        return Effect.fail(failure("ibv_create_srq", errnoOf(-1), ` (max_wr ${init.maxWr}, max_sge ${init.maxSge})`))
      }
      // The provider writes back what it granted (at least what was asked).
      const maxWr = buf.readUInt32LE(Off.srqInit.maxWr)
      const maxSge = buf.readUInt32LE(Off.srqInit.maxSge)
      return Effect.succeed(new IbvSrq(lib, ops, srq, Math.max(init.maxWr, maxWr), Math.max(init.maxSge, maxSge)))
    }),
    (srq) => Effect.catchAll(srq.destroy, (e) => Effect.logWarning(e.message))
  )
