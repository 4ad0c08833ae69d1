/**
 * An endpoint's notify channel (TENT's notify members of `RdmaEndPoint`): the notify QP's send and receive slots
 * (TENT: 256 × 64 KiB each way, registered when the endpoint is made), at most `slots` sends in flight, the window's
 * waiters, the pending table of sends the `Resend` seam tracks, and the receipts (`CTRL_ACK`) this side owes.
 *
 * With `transports/rdma/notify/lazy_slots` (RFC open question 3) nothing is allocated for sending until the first
 * send, and the send slots double when every allocated one is in flight; the posted receive ring starts at
 * `initial_recv_slots` and doubles when more than half of it completed in one drain of the poller (the peer's sends
 * meanwhile are RNR-NAKed and retried by its NIC, `rnr_retry` 7). With `shared_recv` the receives are the device's
 * (`SharedRecv.ts`): the channel has none of its own.
 *
 * Hot path: `postNotification`, `repost` and `onSendComplete` are plain synchronous code on slots looked up in
 * typed arrays and one reused work request; a chunk is allocated only when a ring grows.
 */
import type { Notification } from "@tent/rpc"
import {
  Errno,
  type ProtectionDomain,
  type QueuePair,
  RdmaError,
  type RecvWr,
  SendFlags,
  type SendWr,
  WrOpcode
} from "@tent/verbs"
import { Duration, Effect, Exit, type Scope } from "effect"
import * as CtrlFrame from "../CtrlFrame.js"
import type { DedupShape, Stamp } from "../Dedup.js"
import type { NotifySlotSettings } from "../EngineConfig.js"
import type { EndpointUnavailable } from "../Errors.js"
import * as Metrics from "../Metrics.js"
import { SLOT_BYTES } from "../NotifyFrame.js"
import type { PeerHealthPolicyShape } from "../PeerHealth.js"
import type { PendingNotification, ResendShape } from "../Resend.js"
import { type Hold, makeHeld } from "./HeldRecord.js"
import type { Ledger } from "./Ledger.js"
import { type ChunkAllocator, chunkAllocator, NONE, SlotRing } from "./SlotRing.js"

/** TENT's `kNotifyBufferSize`: bytes of one slot, and the most `transports/rdma/notify/slot_bytes` may be. */
export const NOTIFY_SLOT_BYTES = SLOT_BYTES
/** TENT's `kNotifyMaxPendingSends`: slots, the send window and the receive depth. */
export const NOTIFY_SLOTS = 256

export type { NotifySlotSettings }

/** TENT's allocation: 256 × 64 KiB each way, at construction. */
export const TENT_SLOTS: NotifySlotSettings = { lazy: false, slots: 256, slotBytes: SLOT_BYTES, initialRecvSlots: 256 }

export { type ChunkAllocator, chunkAllocator, type SlotChunk } from "./SlotRing.js"

/** What a channel needs from the engine's seams. */
export interface NotifyChannelPolicies {
  readonly dedup: DedupShape
  readonly resend: ResendShape
  readonly peerHealth: PeerHealthPolicyShape
  /** The engine's delivery receipts (its ledger and ack table). */
  readonly receipts: Ledger
}

/**
 * Send work requests carry `SEND_WR_BASE + counter` as their id, receives their slot index: a failed completion's
 * opcode is undefined in verbs, its `wr_id` is not (the poller tells a flushed send from a flushed receive by it).
 */
export const SEND_WR_BASE = 0x1_0000_0000

/** `postNotification`'s results besides 0 and a post errno. */
export const TOO_LARGE = -1
export const NO_SLOT = -2
/** The peer's ledger holds `notification/max_unreceipted` already: nothing accepted. */
export const LEDGER_FULL = -3

/** The send and receive rings of one notify QP. */
export class NotifyChannel {
  /** The notify QP (created by the endpoint). */
  qp: QueuePair | undefined
  /** Sends posted and not successfully completed (TENT `notify_pending_count_`). */
  pending = 0
  /** Sends posted (TENT `notify_send_wr_id_`). */
  sendCounter = 0
  /** Receives posted and not completed (the notify QP's side `finishDestroy` waits for under RFC PR 1). */
  recvPosted = 0
  /** TENT `notify_connected_`. */
  connected = false
  /** The peer's `notify_proto` from its `BootstrapDesc`. */
  peerProto = 0
  /** The peer takes a receipt carried with a notification (`notify_ack_carry`): an owed ack rides the next one. */
  peerCarriesAcks = false
  /** The peer's receive slot size from its `BootstrapDesc` (`notify_slot_bytes`; TENT's 64 KiB when absent). */
  peerSlotBytes = NOTIFY_SLOT_BYTES
  /** The peer's RPC address, set by the sending side (`""` until then): whose health the slot wait consults. */
  peerAddress = ""
  /** The peer's segment name (set by the endpoint): its ledger, for receipted notifications. */
  segment = ""
  /** The sender session this side owes a `CTRL_ACK`, and how many admitted notifications it has not acknowledged. */
  private ackSession = 0n
  private ackOwed = 0
  /** An ack found no free send slot: it goes at the next send completion. */
  private ackPending = false
  private ackTimer: ReturnType<typeof setTimeout> | undefined = undefined
  private readonly flushAckNow = () => {
    this.ackTimer = undefined
    this.flushAck()
  }
  /** Sends posted and not completed, oldest first, when the resend policy tracks them. */
  readonly inFlight: Array<PendingNotification> = []
  /** Times a ring could not grow (the allocation failed): sends fail with the error, receives stay as they are. */
  growFailures = 0
  /** The poller's drain of the last receive, and how many completed in it (a lazy receive ring's demand). */
  private drain = -1
  private drainRecvs = 0
  /** Slot memory: allocated by {@link attach}'s allocator, at construction or (lazy) on demand. */
  private alloc: ChunkAllocator | undefined
  private readonly send: SlotRing
  private readonly recv: SlotRing
  /** Receives come from the device's shared queue (`notify/shared_recv`, set before `attach`): none of its own. */
  sharedRecv = false
  /**
   * Every send slot, in the order of use: the `pending` ones from `head` are in flight, oldest first (an RC QP
   * completes its sends in posting order, flushed or not), the rest free, in the order they were freed. A completion
   * moves `head` on, and the slot it frees is thereby the last free one. While nothing grows this is TENT's
   * `counter % 256`.
   */
  private order: Int32Array = NONE.i32
  private head = 0
  private readonly waiters = new Set<() => void>()
  private readonly sge = { addr: 0, length: 0, lkey: 0 }
  private readonly sendWr: SendWr = {
    wrId: 0,
    opcode: WrOpcode.SEND,
    sendFlags: SendFlags.SIGNALED,
    sgList: [this.sge]
  }
  private readonly recvSge = { addr: 0, length: 0, lkey: 0 }
  private readonly recvWr: RecvWr = { wrId: 0, sgList: [this.recvSge] }

  constructor(
    readonly policies: NotifyChannelPolicies,
    private readonly unavailable: (message: string) => EndpointUnavailable,
    readonly settings: NotifySlotSettings = TENT_SLOTS
  ) {
    this.send = new SlotRing(settings.slots, settings.slotBytes)
    this.recv = new SlotRing(settings.slots, settings.slotBytes)
    this.recvSge.length = settings.slotBytes
  }

  /** The send window and the receive ring's full depth: the notify QP's `max_send_wr` and `max_recv_wr`. */
  get slots(): number {
    return this.settings.slots
  }

  /** Bytes of one slot. */
  get slotBytes(): number {
    return this.settings.slotBytes
  }

  /** The largest frame sent to the peer: this side's slot or the peer's receive slot, the smaller. */
  get frameBytes(): number {
    return Math.min(this.settings.slotBytes, this.peerSlotBytes)
  }

  /** Receive slots allocated (posted or being handled). */
  get recvCapacity(): number {
    return this.recv.capacity
  }

  /** Send slots allocated. */
  get sendCapacity(): number {
    return this.send.capacity
  }

  /** Bytes of slot memory allocated and registered (what a NIC pins for this channel). */
  get registeredBytes(): number {
    return (this.send.capacity + this.recv.capacity) * this.settings.slotBytes
  }

  /**
   * Takes the chunk allocator and allocates what construction allocates: TENT's, every slot each way; lazy, the
   * first `initial_recv_slots` receive slots and nothing for sending.
   */
  attach(alloc: ChunkAllocator): Effect.Effect<void, RdmaError> {
    return Effect.suspend(() => {
      this.alloc = alloc
      const { lazy, slots, initialRecvSlots } = this.settings
      const recv = this.sharedRecv ? 0 : this.recv.grow(alloc, lazy ? initialRecvSlots : slots)
      if (recv instanceof RdmaError) return Effect.fail(recv)
      if (!lazy) {
        const send = this.growSend(slots)
        if (send !== 0) return Effect.fail(send)
      }
      return Effect.void
    })
  }

  /** Allocates and registers the slots in `pd` (deregistered when the scope closes). */
  allocate(pd: ProtectionDomain): Effect.Effect<void, RdmaError, Scope.Scope> {
    return Effect.flatMap(Effect.scope, (scope) => this.attach(chunkAllocator(pd, scope)))
  }

  /**
   * Adds up to `count` send slots, after the ones there are in their order of use; 0 or the allocation's error.
   */
  private growSend(count: number): 0 | RdmaError {
    const first = this.send.grow(this.alloc, count)
    if (first instanceof RdmaError) {
      this.growFailures++
      return first
    }
    const size = this.send.capacity
    const order = new Int32Array(size)
    for (let i = 0; i < first; i++) order[i] = this.order[(this.head + i) % first] as number
    for (let i = first; i < size; i++) order[i] = i
    this.order = order
    this.head = 0
    return 0
  }

  /** Forgets the QP and the slots (the endpoint's scope closes them). */
  release(): void {
    this.connected = false
    this.clearAckTimer()
    this.qp = undefined
    this.alloc = undefined
    this.send.clear()
    this.recv.clear()
    this.order = NONE.i32
    this.head = 0
  }

  /** The notify QP's number, 0 without one (TENT `notifyQpNum()`). */
  get qpNum(): number {
    return this.qp?.qpNum ?? 0
  }

  /** Connected: every allocated receive slot posted (TENT `setupNotifyQp`'s tail). */
  open(): void {
    this.connected = true
    if (!this.sharedRecv) for (let i = 0; i < this.recv.capacity; i++) this.postRecv(i)
  }

  /** Posts receive slot `index` (TENT `postNotifyRecv`); returns 0 or the errno. */
  postRecv(index: number): number {
    const qp = this.qp
    const buf = this.recv.bufs[index]
    if (qp === undefined || buf === undefined) return -1
    this.recvWr.wrId = index
    this.recvSge.addr = this.recv.addrs[index] as number
    this.recvSge.lkey = this.recv.lkeys[index] as number
    const rc = qp.postRecv(this.recvWr)
    if (rc === 0) this.recvPosted++
    return rc
  }

  /**
   * Reposts receive slot `index` after its completion was handled, in the poller's drain `drain` (the passes from one
   * arming of the CQ to the next). A lazy ring that has had more than half its slots complete in one drain doubles
   * first, up to `slots`, and posts its new slots: every one of those was taken before the poller could repost it, so
   * the peer's next sends were (or were about to be) RNR-NAKed. (The posted count cannot tell: each completion is
   * counted out and its slot reposted before the next is polled.) A ring of one slot thus grows to two at its first
   * receive and stays there under a ping-pong; a burst doubles it drain after drain.
   */
  repost(index: number, drain: number): number {
    if (this.settings.lazy) {
      if (drain !== this.drain) {
        this.drain = drain
        this.drainRecvs = 0
      }
      this.drainRecvs++
      if (this.drainRecvs * 2 > this.recv.capacity && this.recv.capacity < this.recv.max) {
        const first = this.recv.grow(this.alloc, this.recv.capacity)
        if (first instanceof RdmaError) this.growFailures++
        else for (let i = first; i < this.recv.capacity; i++) this.postRecv(i)
      }
    }
    return this.postRecv(index)
  }

  /** A receive completed (copied out, or flushed). */
  onRecvDone(): void {
    if (this.recvPosted > 0) this.recvPosted--
  }

  /** Receive slot `index`'s buffer (undefined if not allocated, or released). */
  recvBuffer(index: number): Buffer | undefined {
    return this.recv.bufs[index]
  }

  /** Receive slot `index`'s offset in {@link recvBuffer}. */
  recvOffset(index: number): number {
    return this.recv.offsets[index] as number
  }

  /**
   * Frames and posts one notification into the next send slot: the synchronous core of TENT's `sendNotification`.
   * A resend passes the stamp it was first sent with; a held record (transfer-bound, `Immediates.ts`) its hold. Returns 0, {@link TOO_LARGE} (larger than this side's or the
   * peer's slot), {@link NO_SLOT} (not connected, or no window unit), `ENOMEM` (a lazy send ring could not grow), or
   * the post's errno.
   */
  postNotification(n: Notification, resent?: Stamp, hold?: Hold): number {
    const qp = this.qp
    if (!this.connected || qp === undefined) return NO_SLOT
    if (this.pending >= this.settings.slots) return NO_SLOT
    // Lazy: every allocated slot is in flight (or none is allocated yet) and the window has room: double.
    if (this.pending === this.send.capacity && this.growSend(Math.max(1, this.pending)) !== 0) return Errno.ENOMEM
    const slot = this.order[(this.head + this.pending) % this.order.length] as number
    const buf = this.send.bufs[slot]
    if (buf === undefined) return NO_SLOT
    const offset = this.send.offsets[slot] as number
    const { dedup, resend, receipts } = this.policies
    // To a peer that offers receipts the ledger draws the stamp (dense per destination) and keeps the notification
    // until a receipt; a post that fails at once gives the stamp back.
    const receipted = receipts.capable(this.peerProto)
    let stamp: Stamp | undefined
    if (resent !== undefined) stamp = resent
    else if (receipted) {
      stamp = receipts.accept(this.segment, n, true)
      if (stamp === undefined) return LEDGER_FULL
    } else stamp = dedup.stamp(this.peerProto)
    // An ack owed to this peer rides in front of the frame (one SEND), when the peer takes it and both fit.
    let carry = this.peerCarriesAcks && hold === undefined && (this.ackOwed > 0 || this.ackPending)
    const at = carry ? offset + CtrlFrame.HEADER_BYTES : offset
    let len = dedup.encode(buf, at, n, stamp, this.peerProto, this.frameBytes - (at - offset))
    if (carry && len < 0) {
      carry = false
      len = dedup.encode(buf, offset, n, stamp, this.peerProto, this.frameBytes)
    } else if (carry) len += this.writeAck(buf, offset)
    if (hold !== undefined && len >= 0) len = makeHeld(buf, offset, len, this.frameBytes, hold)
    if (len < 0) {
      if (receipted && resent === undefined) receipts.rollback(this.segment, stamp as Stamp)
      return TOO_LARGE
    }
    const rc = this.postSlot(qp, slot, len)
    if (rc !== 0) {
      if (receipted && resent === undefined) receipts.rollback(this.segment, stamp as Stamp)
      return rc
    }
    if (carry) this.ackDone(true)
    if (resend.track && !receipted) this.inFlight.push({ notification: n, stamp, peerProto: this.peerProto })
    return 0
  }

  /** Posts send slot `slot` (its first `len` bytes); 0 or the errno. */
  private postSlot(qp: QueuePair, slot: number, len: number): number {
    this.sge.addr = this.send.addrs[slot] as number
    this.sge.lkey = this.send.lkeys[slot] as number
    this.sge.length = len
    this.sendWr.wrId = SEND_WR_BASE + (this.sendCounter++ % SEND_WR_BASE)
    const rc = qp.postSend(this.sendWr)
    if (rc === 0) this.pending++
    return rc
  }

  /**
   * A notification of `session` that asked for a receipt (`NeedsAck`) was handled: a cumulative `CTRL_ACK` goes back
   * after `ackEvery` of them, or `ackDelayMs` after the first one not yet acknowledged (one timer per channel).
   */
  owesAck(session: bigint): void {
    if (session !== this.ackSession && this.ackOwed > 0) this.flushAck()
    this.ackSession = session
    this.ackOwed++
    const { ackEvery, ackDelayMs } = this.policies.receipts.settings
    if (this.ackOwed >= ackEvery) this.flushAck()
    else if (this.ackTimer === undefined) {
      this.ackTimer = setTimeout(this.flushAckNow, ackDelayMs)
      this.ackTimer.unref?.()
    }
  }

  /** Sends the ack still owed, if any (the engine is closing: a receipt must not wait for a timer). */
  flushOwedAck(): boolean {
    if (this.ackOwed === 0 && !this.ackPending) return false
    this.flushAck()
    return true
  }

  /**
   * Sends the ack owed now: a header-only `CTRL_ACK` in the next free send slot. Acks never queue behind senders
   * waiting for the window: without a free slot the ack is marked and goes at the next send completion, ahead of them.
   */
  flushAck(): void {
    this.clearAckTimer()
    if (this.ackOwed === 0 && !this.ackPending) return
    const qp = this.qp
    if (!this.connected || qp === undefined) return
    if (this.pending >= this.settings.slots) {
      this.ackPending = true
      return
    }
    if (this.pending === this.send.capacity && this.growSend(Math.max(1, this.pending)) !== 0) {
      this.ackPending = true
      return
    }
    const slot = this.order[(this.head + this.pending) % this.order.length] as number
    const buf = this.send.bufs[slot]
    if (buf === undefined) return
    if (this.postSlot(qp, slot, this.writeAck(buf, this.send.offsets[slot] as number)) !== 0) {
      this.ackPending = true
      return
    }
    this.ackDone(false)
  }

  /** Writes the owed ack, a header-only `CTRL_ACK` with the cumulative `ack_seq`, at `offset`; its length, 44. */
  private writeAck(buf: Buffer, offset: number): number {
    const r = this.policies.receipts
    return CtrlFrame.encodeAckInto(buf, offset, this.ackSession, r.incarnation, r.prefix(this.ackSession))
  }

  /** The owed ack was posted: alone, or `carried` in front of a notification. */
  private ackDone(carried: boolean): void {
    this.clearAckTimer()
    this.ackOwed = 0
    this.ackPending = false
    const counters = this.policies.receipts.counters
    counters.acksSent++
    if (carried) counters.acksCarried++
    Metrics.ackSent.update(1)
  }

  private clearAckTimer(): void {
    if (this.ackTimer === undefined) return
    clearTimeout(this.ackTimer)
    this.ackTimer = undefined
  }

  /**
   * Waits for a free send slot (TENT: a condition variable without timeout; the `PeerHealth` seam may bound it, and
   * may say the peer is unreachable, when it fails at once): succeeds when a slot is free or the channel stopped
   * being connected. Each wait is observed in `tent_notify_slot_wait_seconds` (outcome `ok` or `timeout`).
   */
  readonly awaitSlot: Effect.Effect<void, EndpointUnavailable> = Effect.suspend(() => this.waitSlot(undefined))

  /** {@link awaitSlot}, giving up at `deadline` (`performance.now()` ms) at the latest. */
  awaitSlotBy(deadline: number): Effect.Effect<void, EndpointUnavailable> {
    return Effect.suspend(() => this.waitSlot(deadline))
  }

  private waitSlot(deadline: number | undefined): Effect.Effect<void, EndpointUnavailable> {
    if (!this.connected || this.pending < this.settings.slots) return Effect.void
    const { peerHealth } = this.policies
    if (this.peerAddress !== "" && peerHealth.unreachable(this.peerAddress)) {
      return Effect.fail(
        this.unavailable(
          `no free notify send slot, and the peer ${this.peerAddress} is marked unreachable: not waiting`
        )
      )
    }
    const wait = Effect.async<void>((resume) => {
      const wake = () => {
        this.waiters.delete(wake)
        resume(Effect.void)
      }
      this.waiters.add(wake)
      return Effect.sync(() => void this.waiters.delete(wake))
    })
    const start = performance.now()
    const seam = peerHealth.slotWait === undefined ? undefined : Duration.toMillis(peerHealth.slotWait)
    const left = deadline === undefined ? undefined : Math.max(0, deadline - start)
    const boundMs = seam === undefined ? left : left === undefined ? seam : Math.min(seam, left)
    const bounded =
      boundMs === undefined
        ? wait
        : wait.pipe(
            Effect.timeoutFail({
              duration: boundMs,
              onTimeout: () => this.unavailable(`no free notify send slot within ${boundMs} ms`)
            })
          )
    const observed = Effect.onExit(bounded, (exit) =>
      Effect.sync(() => {
        const seconds = (performance.now() - start) / 1000
        if (Exit.isSuccess(exit)) Metrics.slotWaitOk.update(seconds)
        else if (!Exit.isInterrupted(exit)) {
          Metrics.slotWaitTimedOut.update(seconds)
          Metrics.slotTimeout.update(1)
        }
      })
    )
    return Effect.zipRight(
      observed,
      Effect.suspend(() => this.waitSlot(deadline))
    )
  }

  /**
   * A SEND completion (TENT `handleNotifySendComplete`, which sees only successful ones; under RFC PR 1 a flushed one
   * too): frees a unit, wakes one waiter.
   */
  onSendComplete(): void {
    if (this.pending > 0) {
      this.pending--
      this.head = (this.head + 1) % this.order.length
    }
    if (this.policies.resend.track) this.inFlight.shift()
    if (this.ackPending) this.flushAck()
    for (const w of this.waiters) {
      w()
      break
    }
  }

  /** Every send slot in flight is free again (the QP went to ERR and its window was given up: `disableNotify`). */
  freeAll(): void {
    if (this.order.length > 0) this.head = (this.head + this.pending) % this.order.length
    this.pending = 0
  }

  /** The channel stops: not connected any more, every waiter wakes (and fails), the pending table is handed over. */
  close(): Array<PendingNotification> {
    this.connected = false
    this.clearAckTimer()
    this.ackOwed = 0
    this.ackPending = false
    for (const w of Array.from(this.waiters)) w()
    return this.inFlight.splice(0)
  }
}
