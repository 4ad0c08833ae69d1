/**
 * A SoftVerbs receive queue: a QP's own, or a shared receive queue (SRQ) that many QPs of a protection domain take
 * their RECVs from (`ibv_create_srq`). A ring of posted RECV WQEs (slot = absolute index % `ring`), grown by doubling
 * from {@link INITIAL_RING} slots up to `cap` (the QP's `max_recv_wr`, the SRQ's `max_wr`) as posts need it.
 *
 * A QP takes the head WQE when a SEND's first packet (or a WRITE with immediate) arrives; with an SRQ the next QP's
 * message may take the next one meanwhile, so a QP copies the WQE it is filling into its own open-receive fields
 * (`SoftQp.cur*`) and the ring moves on at once. With an SRQ's limit armed (`srq_limit`, `ibv_modify_srq`), taking a
 * WQE that leaves fewer posted raises `IBV_EVENT_SRQ_LIMIT_REACHED` once and disarms it, as verbs does.
 */
import { Errno, EventType } from "../Constants.js"
import type { RecvWr } from "../Verbs.js"
import { storeSgl } from "./qp/Sge.js"

/** Slots a QP's send and receive rings start with (each doubles on demand up to the QP's max_send_wr / max_recv_wr). */
export const INITIAL_RING = 8

export type Ring = Float64Array | Uint32Array | Uint8Array

/**
 * The rings of a queue nothing was posted to yet: shared, never written (length 0), so an idle QP allocates no typed
 * array for them. The first post grows each into one of its own.
 */
export const EMPTY = {
  f64: new Float64Array(0),
  u32: new Uint32Array(0),
  u8: new Uint8Array(0),
  buf: Buffer.alloc(0)
} as const

/**
 * The live entries `head..tail` (`stride` elements each) of a ring of `from` slots, moved to a new ring of the same
 * kind with `to` slots.
 */
export const regrow = <A extends Ring>(
  old: A,
  from: number,
  to: number,
  head: number,
  tail: number,
  stride: number
): A => {
  const length = to * stride
  const next = (
    Buffer.isBuffer(old) ? Buffer.alloc(length) : new (old.constructor as new (n: number) => A)(length)
  ) as A
  for (let i = head; i < tail; i++) {
    const a = (i % from) * stride
    next.set(old.subarray(a, a + stride), (i % to) * stride)
  }
  return next
}

/** Where a shared queue raises its limit event. */
export interface SrqHost {
  raise(event: { readonly eventType: EventType; readonly detail: string }): void
}

/** Posted RECV WQEs, in order (the rings allocated at the first post). */
export class RecvQueue {
  ring = 0
  wrId = EMPTY.f64
  numSge = EMPTY.u8
  sgeAddr = EMPTY.f64
  sgeLen = EMPTY.u32
  sgeLkey = EMPTY.u32
  head = 0
  tail = 0
  /** An SRQ's armed limit (0: not armed). */
  limit = 0
  /** QPs attached to this SRQ (it may not be destroyed while any is). */
  attached = 0

  constructor(
    /** The most WQEs posted at once. */
    readonly cap: number,
    readonly maxSge: number,
    /** Shared (an SRQ): its host raises the limit event. */
    readonly srq: SrqHost | undefined = undefined
  ) {}

  /** WQEs posted and not taken. */
  get depth(): number {
    return this.tail - this.head
  }

  /** Doubles the ring (from nothing: INITIAL_RING slots, at the first post), at most to `cap`; the posted WQEs move. */
  grow(): void {
    const from = this.ring
    const to = Math.min(this.cap, Math.max(INITIAL_RING, from * 2))
    const move = <A extends Ring>(a: A, stride = 1): A => regrow(a, from, to, this.head, this.tail, stride)
    this.wrId = move(this.wrId)
    this.numSge = move(this.numSge)
    this.sgeAddr = move(this.sgeAddr, this.maxSge)
    this.sgeLen = move(this.sgeLen, this.maxSge)
    this.sgeLkey = move(this.sgeLkey, this.maxSge)
    this.ring = to
  }

  /** Posts one WQE (hot path): 0, `EINVAL` (too many SGEs) or `ENOMEM` (full). */
  post(w: RecvWr): number {
    const numSge = w.numSge ?? w.sgList.length
    if (numSge > this.maxSge || numSge > w.sgList.length) return Errno.EINVAL
    if (this.tail - this.head >= this.cap) return Errno.ENOMEM
    if (this.tail - this.head >= this.ring) this.grow()
    const s = this.tail % this.ring
    storeSgl(w.sgList, numSge, this.sgeAddr, this.sgeLen, this.sgeLkey, s * this.maxSge)
    this.wrId[s] = w.wrId
    this.numSge[s] = numSge
    this.tail++
    return 0
  }

  /** Takes the head WQE (the caller read its slot `head % ring` first); an SRQ checks its armed limit. */
  take(): void {
    this.head++
    if (this.limit > 0 && this.tail - this.head < this.limit && this.srq !== undefined) {
      this.limit = 0
      this.srq.raise({ eventType: EventType.SRQ_LIMIT_REACHED, detail: "fewer WQEs posted than the SRQ's limit" })
    }
  }

  /** Forgets every WQE (a QP's RESET). */
  clear(): void {
    this.head = this.tail = 0
  }
}
