/**
 * `struct ibv_qp` of type RC. Each QP owns a preallocated chain of `ibv_send_wr` (and `ibv_recv_wr`) sized by its
 * granted capabilities, each slot with its own `ibv_sge` array; `sg_list` and `next` are written once, so a post writes
 * only the work request's own fields and calls the provider's `ops.post_send` on the chain in place.
 *
 * @internal
 */
import { Effect } from "effect"
import { Errno, QpState } from "../Constants.js"
import { RdmaError } from "../Errors.js"
import type { QpAttr, QueuePair, RecvWr, SendWr, Sge } from "../Verbs.js"
import {
  addressOf,
  decodeFields,
  encodeFields,
  fieldsOf,
  readBytes,
  readU64,
  stableBuffer,
  viewAt,
  writeU64
} from "./Codec.js"
import { ibv_qp_attr, ibv_qp_init_attr, Off, Size } from "./Layout.js"
import { errnoOf, errnoText, type Library } from "./Library.js"

/** The decoded `ops` functions a QP (and an SRQ) calls. */
export interface QpOps {
  readonly postSend: (qp: number, wr: number, badWr: number) => number
  readonly postRecv: (qp: number, wr: number, badWr: number) => number
  readonly postSrqRecv: (srq: number, wr: number, badWr: number) => number
}

/**
 * A preallocated chain of `slots` work requests of `wrSize` bytes, followed by `slots × maxSge` SGEs. Slot i's
 * `sg_list` points at its SGEs and its `next` at slot i+1; a post terminates the chain at its last WR and restores the
 * link afterwards.
 */
export class WrChain<W extends { readonly sgList: ReadonlyArray<Sge>; readonly numSge?: number }> {
  readonly view: DataView
  readonly address: number
  readonly posted: Array<W | null>
  /** The WR the last post did not post (its `bad_wr`), or null. */
  bad: W | null = null
  /** Where the provider writes `bad_wr` for a post of this chain. */
  readonly badAddr: number
  readonly badView: DataView
  readonly #buffer: Buffer

  constructor(
    readonly slots: number,
    readonly maxSge: number,
    readonly wrSize: number,
    readonly nextOffset: number,
    sgListOffset: number
  ) {
    const sgeBase = slots * wrSize
    this.#buffer = stableBuffer(sgeBase + slots * Math.max(1, maxSge) * Size.sge)
    this.view = new DataView(this.#buffer.buffer)
    this.address = addressOf(this.#buffer)
    this.posted = new Array<W | null>(slots).fill(null)
    const bad = stableBuffer(8)
    this.badAddr = addressOf(bad)
    this.badView = new DataView(bad.buffer)
    for (let i = 0; i < slots; i++) {
      writeU64(this.view, i * wrSize + sgListOffset, this.address + sgeBase + i * Math.max(1, maxSge) * Size.sge)
      this.link(i)
    }
  }

  /** Writes slot i's SGEs; returns false when the WR has more than the QP's `max_*_sge` or fewer than it claims. */
  writeSges(i: number, wr: W, numSgeOffset: number): boolean {
    const n = wr.numSge ?? wr.sgList.length
    if (n > this.maxSge || n > wr.sgList.length || n < 0) return false
    const v = this.view
    const base = this.slots * this.wrSize + i * Math.max(1, this.maxSge) * Size.sge
    for (let j = 0; j < n; j++) {
      const sge = wr.sgList[j] as Sge
      const o = base + j * Size.sge
      writeU64(v, o + Off.sge.addr, sge.addr)
      v.setUint32(o + Off.sge.length, sge.length >>> 0, true)
      v.setUint32(o + Off.sge.lkey, sge.lkey >>> 0, true)
    }
    v.setInt32(i * this.wrSize + numSgeOffset, n, true)
    return true
  }

  /** Restores slot i's `next` to slot i+1 (NULL for the last slot). */
  link(i: number): void {
    writeU64(
      this.view,
      i * this.wrSize + this.nextOffset,
      i + 1 < this.slots ? this.address + (i + 1) * this.wrSize : 0
    )
  }

  /** Ends the chain at slot i. */
  terminate(i: number): void {
    writeU64(this.view, i * this.wrSize + this.nextOffset, 0)
  }

  /** The WR object a provider's `bad_wr` points at, or null if it points elsewhere. */
  objectAt(bad: number): W | null {
    const index = (bad - this.address) / this.wrSize
    return Number.isInteger(index) && index >= 0 && index < this.slots ? (this.posted[index] ?? null) : null
  }
}

const S = Off.sendWr
const R = Off.recvWr
const qpAttrFields = fieldsOf(ibv_qp_attr)
const qpInitFields = fieldsOf(ibv_qp_init_attr)

const scalarKeys = [
  "qpState",
  "curQpState",
  "pathMtu",
  "qkey",
  "rqPsn",
  "sqPsn",
  "destQpNum",
  "qpAccessFlags",
  "pkeyIndex",
  "enSqdAsyncNotify",
  "sqDraining",
  "maxRdAtomic",
  "maxDestRdAtomic",
  "minRnrTimer",
  "portNum",
  "timeout",
  "retryCnt",
  "rnrRetry"
] as const
const capKeys = ["maxSendWr", "maxRecvWr", "maxSendSge", "maxRecvSge", "maxInlineData"] as const
const ahKeys = ["dlid", "sl", "srcPathBits", "isGlobal", "portNum"] as const
const grhKeys = ["flowLabel", "sgidIndex", "hopLimit", "trafficClass"] as const

const stateNames = Object.keys(QpState)

/** An RC `ibv_qp` created by {@link IbvProtectionDomain.createQp}. */
export class IbvQueuePair implements QueuePair {
  readonly qpNum: number
  badSendWr: SendWr | null = null
  badRecvWr: RecvWr | null = null
  /** The `struct ibv_qp *`. */
  readonly address: number
  readonly #lib: Library
  readonly #ops: QpOps
  readonly #qpView: DataView
  readonly #send: WrChain<SendWr>
  readonly #recv: WrChain<RecvWr>
  readonly #postRecv = (wrs: number): number => this.#ops.postRecv(this.address, wrs, this.#recv.badAddr)
  readonly #attrBuf = stableBuffer(Size.qpAttr)
  readonly #attrView = new DataView(this.#attrBuf.buffer)
  readonly #initBuf = stableBuffer(Size.qpInitAttr)
  #destroyed = false
  #lastState: QpState = QpState.RESET

  constructor(lib: Library, ops: QpOps, qp: number, cap: { readonly [K in (typeof capKeys)[number]]: number }) {
    this.#lib = lib
    this.#ops = ops
    this.address = qp
    this.#qpView = viewAt(qp, Size.qp)
    this.qpNum = this.#qpView.getUint32(Off.qp.qpNum, true)
    this.#send = new WrChain(Math.max(1, cap.maxSendWr), cap.maxSendSge, Size.sendWr, S.next, S.sgList)
    this.#recv = new WrChain(Math.max(1, cap.maxRecvWr), cap.maxRecvSge, Size.recvWr, R.next, R.sgList)
  }

  get state(): QpState {
    if (!this.#destroyed) this.#lastState = this.#qpView.getUint32(Off.qp.state, true) as QpState
    return this.#lastState
  }

  postSend(wr: SendWr): number {
    if (this.#destroyed) {
      this.badSendWr = wr
      return Errno.EINVAL
    }
    const chain = this.#send
    const v = chain.view
    let k = 0
    let cur: SendWr | null | undefined = wr
    let stopErrno = 0
    for (; cur; cur = cur.next) {
      if (k === chain.slots) {
        stopErrno = Errno.ENOMEM
        break
      }
      const o = k * Size.sendWr
      if (!chain.writeSges(k, cur, S.numSge)) {
        stopErrno = Errno.EINVAL
        break
      }
      writeU64(v, o + S.wrId, cur.wrId)
      v.setUint32(o + S.opcode, cur.opcode, true)
      v.setUint32(o + S.sendFlags, cur.sendFlags >>> 0, true)
      v.setUint32(o + S.immData, (cur.immData ?? 0) >>> 0, false)
      writeU64(v, o + S.remoteAddr, cur.remoteAddr ?? 0)
      v.setUint32(o + S.rkey, (cur.rkey ?? 0) >>> 0, true)
      chain.posted[k] = cur
      k++
    }
    if (k > 0) {
      chain.terminate(k - 1)
      const rc = this.#ops.postSend(this.address, chain.address, chain.badAddr)
      chain.link(k - 1)
      if (rc !== 0) {
        this.badSendWr = chain.objectAt(readU64(chain.badView, 0))
        return rc
      }
    }
    this.badSendWr = stopErrno === 0 ? null : (cur ?? null)
    return stopErrno
  }

  postRecv(wr: RecvWr): number {
    if (this.#destroyed) {
      this.badRecvWr = wr
      return Errno.EINVAL
    }
    const rc = postRecvs(this.#recv, wr, this.#postRecv)
    this.badRecvWr = this.#recv.bad
    return rc
  }

  modifyQp(attr: QpAttr, mask: number): Effect.Effect<void, RdmaError> {
    return Effect.suspend(() => {
      if (this.#destroyed) return Effect.fail(destroyedError("ibv_modify_qp"))
      const from = this.state
      this.#attrBuf.fill(0)
      encodeFields(this.#attrView, qpAttrFields, attr)
      const rc = this.#lib.modifyQp(this.address, addressOf(this.#attrBuf), mask)
      if (rc === 0) return Effect.void
      const errno = errnoOf(rc)
      const to = attr.qpState === undefined ? "" : ` → ${stateNames[attr.qpState]}`
      return Effect.fail(
        new RdmaError({
          op: "ibv_modify_qp",
          errno,
          message: `ibv_modify_qp on QP ${this.qpNum} (${stateNames[from]}${to}, mask 0x${mask.toString(16)}) failed: ${errnoText(errno)}`
        })
      )
    })
  }

  queryQp(mask: number): Effect.Effect<QpAttr & { readonly qpState: QpState }, RdmaError> {
    return Effect.suspend(() => {
      if (this.#destroyed) return Effect.fail(destroyedError("ibv_query_qp"))
      this.#attrBuf.fill(0)
      this.#initBuf.fill(0)
      const rc = this.#lib.queryQp(this.address, addressOf(this.#attrBuf), mask, addressOf(this.#initBuf))
      if (rc !== 0) {
        const errno = errnoOf(rc)
        return Effect.fail(
          new RdmaError({ op: "ibv_query_qp", errno, message: `ibv_query_qp on QP ${this.qpNum}: ${errnoText(errno)}` })
        )
      }
      const v = this.#attrView
      const scalars = decodeFields(v, qpAttrFields, scalarKeys)
      return Effect.succeed({
        ...scalars,
        qpState: scalars.qpState as QpState,
        curQpState: scalars.curQpState as QpState,
        pathMtu: scalars.pathMtu as QpAttr["pathMtu"] & number,
        cap: decodeFields(v, qpAttrFields, capKeys, "cap."),
        ahAttr: {
          ...decodeFields(v, qpAttrFields, ahKeys, "ah_attr."),
          grh: {
            ...decodeFields(v, qpAttrFields, grhKeys, "ah_attr.grh."),
            dgid: readBytes(v, qpAttrFields, "ah_attr.grh.dgid")
          }
        }
      })
    })
  }

  readonly destroy: Effect.Effect<void, RdmaError> = Effect.suspend(() => {
    if (this.#destroyed) return Effect.void
    this.#lastState = this.state
    const rc = this.#lib.destroyQp(this.address)
    if (rc !== 0) {
      const errno = errnoOf(rc)
      return Effect.fail(
        new RdmaError({
          op: "ibv_destroy_qp",
          errno,
          message: `ibv_destroy_qp on QP ${this.qpNum}: ${errnoText(errno)}`
        })
      )
    }
    this.#destroyed = true
    return Effect.void
  })
}

/**
 * Posts the RECV chain `wr` through `post` (the provider's `post_recv` or `post_srq_recv` on the chain's first WR, its
 * `bad_wr` into `chain.badAddr`): 0 or the errno, the first WR not posted left in `chain.bad`.
 */
export const postRecvs = (chain: WrChain<RecvWr>, wr: RecvWr, post: (wrs: number) => number): number => {
  let k = 0
  let cur: RecvWr | null | undefined = wr
  let stopErrno = 0
  for (; cur; cur = cur.next) {
    if (k === chain.slots) {
      stopErrno = Errno.ENOMEM
      break
    }
    if (!chain.writeSges(k, cur, R.numSge)) {
      stopErrno = Errno.EINVAL
      break
    }
    writeU64(chain.view, k * Size.recvWr + R.wrId, cur.wrId)
    chain.posted[k] = cur
    k++
  }
  if (k > 0) {
    chain.terminate(k - 1)
    const rc = post(chain.address)
    chain.link(k - 1)
    if (rc !== 0) {
      chain.bad = chain.objectAt(readU64(chain.badView, 0))
      return rc
    }
  }
  chain.bad = stopErrno === 0 ? null : (cur ?? null)
  return stopErrno
}

const destroyedError = (op: string) =>
  new RdmaError({ op, errno: Errno.EINVAL, message: `${op} on a destroyed QP: EINVAL` })

/** Writes `struct ibv_qp_init_attr` for `ibv_create_qp` and reads back the capabilities the provider granted. */
export const qpInitAttr = {
  encode: (
    buffer: Buffer,
    sendCq: number,
    recvCq: number,
    value: { readonly cap: object; readonly qpType: number; readonly sqSigAll?: boolean },
    srq = 0
  ): void => {
    const v = new DataView(buffer.buffer, buffer.byteOffset, buffer.length)
    buffer.fill(0)
    writeU64(v, (qpInitFields.get("send_cq") as { offset: number }).offset, sendCq)
    writeU64(v, (qpInitFields.get("recv_cq") as { offset: number }).offset, recvCq)
    writeU64(v, (qpInitFields.get("srq") as { offset: number }).offset, srq)
    encodeFields(v, qpInitFields, { cap: value.cap, qpType: value.qpType, sqSigAll: value.sqSigAll ?? false })
  },
  cap: (buffer: Buffer) =>
    decodeFields(new DataView(buffer.buffer, buffer.byteOffset, buffer.length), qpInitFields, capKeys, "cap.")
}
