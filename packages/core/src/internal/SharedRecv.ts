/**
 * A device's shared notify receive ring (`transports/rdma/notify/shared_recv`): one shared receive queue (SRQ) that
 * every notify QP of the device takes its receives from, so an endpoint holds no receive slot of its own and an idle
 * one costs no receive memory. Its slots are the device's (registered in its protection domain for the engine's life):
 * a receive completion names its QP (`qpNum`, the endpoint) and its slot (`wrId`), and the slot goes back to the SRQ
 * whatever became of the endpoint.
 *
 * It posts `shared_recv_slots` at start and doubles, up to `shared_recv_max_slots`, when fewer than a quarter of it
 * stay posted: the SRQ's limit (`ibv_modify_srq` `srq_limit`) raises `IBV_EVENT_SRQ_LIMIT_REACHED`, the device's event
 * watch marks the ring low ({@link SharedRecv.onLimit}), and the poller's next repost doubles it, posts every new slot
 * and arms the limit again. The growth waits for the poller: a consumer that has stopped (its application frozen, the
 * NIC live) leaves the queue empty and its peers RNR-NAKed, as its own receive ring would, instead of registering
 * more memory for what nobody takes. Meanwhile a burst from many peers is RNR-NAKed and retried by their NICs
 * (`rnr_retry` 7), the flow control of a lazy ring. A poller that reposts each slot as it completes never lets the
 * queue run low, and it stays as it is.
 *
 * Nor does it grow past one sender's window (`notify/slots`) per notify QP attached: TENT's receives per endpoint,
 * shared. A sender's window frees as this NIC takes each SEND, not as the consumer does, so without the bound a consumer
 * slower than one peer's burst had the queue grow to hold the burst (every message then waits behind a longer queue,
 * and a NIC that shares its host's CPU takes more of it from the consumer: `bench engine`'s 2000-notification burst
 * went from 33–36 ms to 64–93 ms); bounded, the rest of the burst is RNR-NAKed and waits at the sender, as with TENT's
 * rings. Hot path: `repost` is plain synchronous code on one reused work request.
 */
import type { ProtectionDomain, RecvWr, SharedReceiveQueue } from "@tent/verbs"
import { RdmaError } from "@tent/verbs"
import { Effect, type Scope } from "effect"
import { type ChunkAllocator, chunkAllocator, SlotRing } from "./SlotRing.js"

/** How a device's shared ring is sized. */
export interface SharedRecvSettings {
  readonly slots: number
  readonly maxSlots: number
  readonly slotBytes: number
  /** A sender's window (`notify/slots`): the ring holds at most this many per notify QP attached. */
  readonly perQp: number
}

export class SharedRecv {
  /** The slots (a notify channel reads its receives from this ring). */
  readonly ring: SlotRing
  /** Times the ring could not grow (the allocation failed): it stays as it is. */
  growFailures = 0
  /** The SRQ's limit was reached: the next repost grows the ring. */
  private low = false
  /** The SRQ's limit is armed (it fires once). */
  private armed = false
  /** Notify QPs created with the SRQ and not yet destroyed. */
  private qps = 0
  private readonly sge = { addr: 0, length: 0, lkey: 0 }
  private readonly wr: RecvWr = { wrId: 0, sgList: [this.sge] }

  constructor(
    readonly srq: SharedReceiveQueue,
    private readonly alloc: ChunkAllocator,
    readonly settings: SharedRecvSettings
  ) {
    this.ring = new SlotRing(settings.maxSlots, settings.slotBytes)
    this.sge.length = settings.slotBytes
  }

  /** Allocates and posts the first `slots` slots. */
  open(): RdmaError | undefined {
    const first = this.ring.grow(this.alloc, this.settings.slots)
    if (first instanceof RdmaError) return first
    for (let i = first; i < this.ring.capacity; i++) {
      const rc = this.post(i)
      if (rc !== 0) return new RdmaError({ op: "ibv_post_srq_recv", errno: rc, message: `notify slot ${i} not posted` })
    }
    this.arm()
    return undefined
  }

  /** The most the ring may hold now: `shared_recv_max_slots`, and a window per notify QP attached. */
  get bound(): number {
    return Math.min(this.ring.max, this.settings.perQp * this.qps)
  }

  /** Arms the SRQ's limit at a quarter of the ring, while it may still grow. */
  private arm(): void {
    if (this.ring.capacity >= this.bound) return
    this.armed = true
    Effect.runSync(Effect.ignore(this.srq.armLimit(Math.max(1, this.ring.capacity >> 2))))
  }

  /** A notify QP was created with the SRQ: the ring may grow by one more window (the limit is armed if it was not). */
  attach(): void {
    this.qps++
    if (!this.armed && !this.low) this.arm()
  }

  /** A notify QP created with the SRQ was destroyed. */
  detach(): void {
    this.qps--
  }

  /** The SRQ ran low (its limit event): the poller's next repost grows the ring. */
  onLimit(): void {
    this.armed = false
    this.low = true
  }

  /** Doubles the ring (up to {@link bound}), posts its new slots and arms the limit again. */
  private grow(): void {
    this.low = false
    const by = Math.min(this.ring.capacity, this.bound - this.ring.capacity)
    if (by <= 0) return
    const first = this.ring.grow(this.alloc, by)
    if (first instanceof RdmaError) {
      this.growFailures++
      return
    }
    for (let i = first; i < this.ring.capacity; i++) this.post(i)
    this.arm()
  }

  /** Posts slot `index`; 0 or the errno. */
  post(index: number): number {
    this.wr.wrId = index
    this.sge.addr = this.ring.addrs[index] as number
    this.sge.lkey = this.ring.lkeys[index] as number
    return this.srq.postRecv(this.wr)
  }

  /** Puts slot `index` back after its completion (handled, flushed, or of a QP no longer known). */
  repost(index: number): number {
    if (this.low) this.grow()
    return index >= 0 && index < this.ring.capacity ? this.post(index) : -1
  }

  /** Bytes of slot memory registered. */
  get registeredBytes(): number {
    return this.ring.capacity * this.settings.slotBytes
  }
}

/**
 * The shared ring of a device, in `pd` (released with the scope); undefined when the provider has no SRQs (the
 * endpoints then keep receive slots of their own).
 */
export const makeSharedRecv = (
  pd: ProtectionDomain,
  settings: SharedRecvSettings
): Effect.Effect<SharedRecv | undefined, RdmaError, Scope.Scope> =>
  Effect.gen(function* () {
    const createSrq = pd.createSrq
    if (createSrq === undefined) return undefined
    const srq = yield* createSrq({ maxWr: settings.maxSlots, maxSge: 1 })
    const shared = new SharedRecv(srq, chunkAllocator(pd, yield* Effect.scope), settings)
    const failed = shared.open()
    if (failed !== undefined) return yield* Effect.fail(failed)
    return shared
  })
