/**
 * A SoftVerbs completion queue: a ring of completions in typed arrays (no object per completion), with a completion
 * channel. A completion is never dropped: when the ring is full it grows, and the CQ raises `IBV_EVENT_CQ_ERR` once
 * per overflow episode (counted in `overflows`), so a consumer that sized its CQ too small learns it and loses nothing.
 */
import { Effect } from "effect"
import { EventType } from "../Constants.js"
import type { AsyncEvent, CompletionQueue, WorkCompletion } from "../Verbs.js"

/** What a CQ needs from its device: deferred channel delivery and the async event sink. */
export interface CqHost {
  /** Delivers `cq`'s channel event after the current packet or call finishes (never re-entrantly). */
  scheduleNotify(cq: SoftCq): void
  raise(event: AsyncEvent): void
}

/** A SoftVerbs CQ. */
export class SoftCq implements CompletionQueue {
  readonly cqe: number
  private capacity: number
  private head = 0
  private count = 0
  private wrId: Float64Array
  private status: Uint8Array
  private opcode: Uint8Array
  private byteLen: Uint32Array
  private imm: Uint32Array
  private qpNum: Uint32Array
  private srcQp: Uint32Array
  private flags: Uint8Array
  private armed = false
  private notifyPending = false
  private listener: (() => void) | null = null
  private waiters: Array<() => void> = []
  private inOverflow = false
  /** Times the CQ outgrew `cqe`. */
  overflows = 0
  destroyed = false

  constructor(
    cqe: number,
    private readonly host: CqHost
  ) {
    this.cqe = cqe
    this.capacity = cqe
    this.wrId = new Float64Array(cqe)
    this.status = new Uint8Array(cqe)
    this.opcode = new Uint8Array(cqe)
    this.byteLen = new Uint32Array(cqe)
    this.imm = new Uint32Array(cqe)
    this.qpNum = new Uint32Array(cqe)
    this.srcQp = new Uint32Array(cqe)
    this.flags = new Uint8Array(cqe)
  }

  /** Completions waiting to be polled. */
  get depth(): number {
    return this.count
  }

  /** Adds a completion (provider side). */
  push(
    wrId: number,
    status: number,
    opcode: number,
    byteLen: number,
    imm: number,
    qpNum: number,
    srcQp: number,
    flags: number
  ): void {
    if (this.destroyed) return
    if (this.count === this.capacity) this.grow()
    let i = this.head + this.count
    if (i >= this.capacity) i -= this.capacity
    this.wrId[i] = wrId
    this.status[i] = status
    this.opcode[i] = opcode
    this.byteLen[i] = byteLen
    this.imm[i] = imm
    this.qpNum[i] = qpNum
    this.srcQp[i] = srcQp
    this.flags[i] = flags
    this.count++
    if ((this.armed || this.waiters.length > 0) && !this.notifyPending) {
      this.notifyPending = true
      this.host.scheduleNotify(this)
    }
  }

  private grow(): void {
    const cap = this.capacity * 2
    const order = <T extends Float64Array | Uint32Array | Uint8Array>(a: T, make: (n: number) => T): T => {
      const b = make(cap)
      for (let k = 0; k < this.count; k++) b[k] = a[(this.head + k) % this.capacity] as number
      return b
    }
    this.wrId = order(this.wrId, (n) => new Float64Array(n))
    this.status = order(this.status, (n) => new Uint8Array(n))
    this.opcode = order(this.opcode, (n) => new Uint8Array(n))
    this.byteLen = order(this.byteLen, (n) => new Uint32Array(n))
    this.imm = order(this.imm, (n) => new Uint32Array(n))
    this.qpNum = order(this.qpNum, (n) => new Uint32Array(n))
    this.srcQp = order(this.srcQp, (n) => new Uint32Array(n))
    this.flags = order(this.flags, (n) => new Uint8Array(n))
    this.head = 0
    this.capacity = cap
    this.overflows++
    if (!this.inOverflow) {
      this.inOverflow = true
      this.host.raise({
        eventType: EventType.CQ_ERR,
        cq: this,
        detail: `CQ overflow: more than ${this.cqe} completions unpolled; kept them all`
      })
    }
  }

  /** Runs the channel listener and waiters (called by the device, outside packet processing). */
  deliverNotify(): void {
    this.notifyPending = false
    if (this.destroyed) return
    const waiters = this.waiters
    if (waiters.length > 0) {
      this.waiters = []
      for (const w of waiters) w()
    }
    if (this.armed) {
      this.armed = false
      this.listener?.()
    }
  }

  pollCq(n: number, wc: ReadonlyArray<WorkCompletion>): number {
    if (this.destroyed) return -22
    let got = 0
    const max = Math.min(n, this.count, wc.length)
    while (got < max) {
      const i = this.head
      const w = wc[got] as WorkCompletion
      w.wrId = this.wrId[i] as number
      w.status = this.status[i] as WorkCompletion["status"]
      w.opcode = this.opcode[i] as WorkCompletion["opcode"]
      w.byteLen = this.byteLen[i] as number
      w.immData = this.imm[i] as number
      w.qpNum = this.qpNum[i] as number
      w.srcQp = this.srcQp[i] as number
      w.wcFlags = this.flags[i] as number
      w.vendorErr = 0
      this.head = i + 1 === this.capacity ? 0 : i + 1
      this.count--
      got++
    }
    if (this.inOverflow && this.count < this.cqe) this.inOverflow = false
    return got
  }

  reqNotifyCq(_solicitedOnly?: boolean): number {
    if (this.destroyed) return 22
    this.armed = true
    return 0
  }

  setNotify(listener: (() => void) | null): void {
    this.listener = listener
  }

  readonly awaitNotify: Effect.Effect<void> = Effect.async<void>((resume) => {
    if (this.count > 0 || this.destroyed) {
      resume(Effect.void)
      return
    }
    const waiter = () => resume(Effect.void)
    this.waiters.push(waiter)
    return Effect.sync(() => {
      const k = this.waiters.indexOf(waiter)
      if (k >= 0) this.waiters.splice(k, 1)
    })
  })

  /** Removes every unpolled completion of `qpNum` (what a move to RESET or a destroy does on mlx5). */
  removeQp(qpNum: number): number {
    let kept = 0
    let removed = 0
    for (let k = 0; k < this.count; k++) {
      const i = (this.head + k) % this.capacity
      if (this.qpNum[i] === qpNum) {
        removed++
        continue
      }
      const j = (this.head + kept) % this.capacity
      if (j !== i) {
        this.wrId[j] = this.wrId[i] as number
        this.status[j] = this.status[i] as number
        this.opcode[j] = this.opcode[i] as number
        this.byteLen[j] = this.byteLen[i] as number
        this.imm[j] = this.imm[i] as number
        this.qpNum[j] = this.qpNum[i] as number
        this.srcQp[j] = this.srcQp[i] as number
        this.flags[j] = this.flags[i] as number
      }
      kept++
    }
    this.count = kept
    return removed
  }

  /** Destroys the CQ: pending waiters are released, polls fail with EINVAL. */
  destroy(): void {
    this.destroyed = true
    const waiters = this.waiters
    this.waiters = []
    for (const w of waiters) w()
  }
}
