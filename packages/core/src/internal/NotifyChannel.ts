/**
 * An endpoint's notify channel (TENT's notify members of `RdmaEndPoint`): the notify QP's 256 × 64 KiB send slots
 * and 256 × 64 KiB receive slots, at most 256 sends in flight, the window's waiters, and — when the `Resend` seam
 * tracks them — the pending table of sends not yet completed, with their stamps.
 *
 * Hot path: `postNotification`, `postRecv` and `onSendComplete` are plain synchronous code on the preallocated
 * slots and one reused work request.
 */
import type { Notification } from "@tent/rpc"
import {
  AccessFlags,
  type MemoryRegion,
  type ProtectionDomain,
  type QueuePair,
  type RdmaError,
  type RecvWr,
  SendFlags,
  type SendWr,
  WrOpcode
} from "@tent/verbs"
import { Duration, Effect, Exit, type Scope } from "effect"
import type { DedupShape, Stamp } from "../Dedup.js"
import type { EndpointUnavailable } from "../Errors.js"
import * as Metrics from "../Metrics.js"
import { SLOT_BYTES } from "../NotifyFrame.js"
import type { PeerHealthPolicyShape } from "../PeerHealth.js"
import type { PendingNotification, ResendShape } from "../Resend.js"

/** TENT's `kNotifyBufferSize`: bytes of one slot. */
export const NOTIFY_SLOT_BYTES = SLOT_BYTES
/** TENT's `kNotifyMaxPendingSends`: slots, the send window and the receive depth. */
export const NOTIFY_SLOTS = 256

/** What a channel needs from the engine's seams. */
export interface NotifyChannelPolicies {
  readonly dedup: DedupShape
  readonly resend: ResendShape
  readonly peerHealth: PeerHealthPolicyShape
}

/**
 * Send work requests carry `SEND_WR_BASE + counter` as their id, receives their slot index (< 256): a failed
 * completion's opcode is undefined in verbs, its `wr_id` is not, so the poller tells a flushed send from a flushed
 * receive by the id alone.
 */
export const SEND_WR_BASE = 0x1_0000_0000

/** `postNotification`'s results besides 0 and a post errno. */
export const TOO_LARGE = -1
export const NO_SLOT = -2

/** The send and receive rings of one notify QP. */
export class NotifyChannel {
  /** The notify QP (created by the endpoint). */
  qp: QueuePair | undefined
  /** Sends posted and not successfully completed (TENT `notify_pending_count_`). */
  pending = 0
  /** TENT `notify_send_wr_id_`: slot = counter % 256. */
  sendCounter = 0
  /** Receives posted and not completed (the notify QP's side `finishDestroy` waits for under RFC PR 1). */
  recvPosted = 0
  /** TENT `notify_connected_`. */
  connected = false
  /** The peer's `notify_proto` from its `BootstrapDesc`. */
  peerProto = 0
  /** The peer's RPC address, set by the sending side (`""` until then): whose health the slot wait consults. */
  peerAddress = ""
  /** Sends posted and not completed, oldest first, when the resend policy tracks them. */
  readonly inFlight: Array<PendingNotification> = []
  private sendBuf: Buffer | undefined
  private sendMr: MemoryRegion | undefined
  private recvBuf: Buffer | undefined
  private recvMr: MemoryRegion | undefined
  private readonly waiters = new Set<() => void>()
  private readonly sge = { addr: 0, length: 0, lkey: 0 }
  private readonly sendWr: SendWr = {
    wrId: 0,
    opcode: WrOpcode.SEND,
    sendFlags: SendFlags.SIGNALED,
    sgList: [this.sge]
  }
  private readonly recvSge = { addr: 0, length: NOTIFY_SLOT_BYTES, lkey: 0 }
  private readonly recvWr: RecvWr = { wrId: 0, sgList: [this.recvSge] }

  constructor(
    readonly policies: NotifyChannelPolicies,
    private readonly unavailable: (message: string) => EndpointUnavailable
  ) {}

  /** Allocates and registers the slots in `pd` (deregistered when the scope closes). */
  allocate(pd: ProtectionDomain): Effect.Effect<void, RdmaError, Scope.Scope> {
    return Effect.gen(this, function* () {
      this.sendBuf = Buffer.allocUnsafeSlow(NOTIFY_SLOTS * NOTIFY_SLOT_BYTES)
      this.sendMr = yield* pd.regMr(this.sendBuf, AccessFlags.LOCAL_WRITE)
      this.recvBuf = Buffer.allocUnsafeSlow(NOTIFY_SLOTS * NOTIFY_SLOT_BYTES)
      this.recvMr = yield* pd.regMr(this.recvBuf, AccessFlags.LOCAL_WRITE)
      this.sge.lkey = this.sendMr.lkey
      this.recvSge.lkey = this.recvMr.lkey
    })
  }

  /** Forgets the QP and the slots (the endpoint's scope closes them). */
  release(): void {
    this.connected = false
    this.qp = undefined
    this.sendMr = undefined
    this.recvMr = undefined
    this.sendBuf = undefined
    this.recvBuf = undefined
  }

  /** The notify QP's number, 0 without one (TENT `notifyQpNum()`). */
  get qpNum(): number {
    return this.qp?.qpNum ?? 0
  }

  /** Connected: every receive slot posted (TENT `setupNotifyQp`'s tail). */
  open(): void {
    this.connected = true
    for (let i = 0; i < NOTIFY_SLOTS; i++) this.postRecv(i)
  }

  /** Posts receive slot `index` (TENT `postNotifyRecv`); returns 0 or the errno. */
  postRecv(index: number): number {
    const qp = this.qp
    const mr = this.recvMr
    if (qp === undefined || mr === undefined) return -1
    this.recvWr.wrId = index
    this.recvSge.addr = mr.addr + index * NOTIFY_SLOT_BYTES
    const rc = qp.postRecv(this.recvWr)
    if (rc === 0) this.recvPosted++
    return rc
  }

  /** A receive completed (copied out, or flushed). */
  onRecvDone(): void {
    if (this.recvPosted > 0) this.recvPosted--
  }

  /** The receive slots' memory (undefined once released). */
  get receiveBuffer(): Buffer | undefined {
    return this.recvBuf
  }

  /**
   * Frames and posts one notification into the next send slot: the synchronous core of TENT's `sendNotification`.
   * A resend passes the stamp it was first sent with. Returns 0, {@link TOO_LARGE}, {@link NO_SLOT} (not connected, or no window unit), or the post's errno.
   */
  postNotification(n: Notification, resent?: Stamp): number {
    const qp = this.qp
    const mr = this.sendMr
    const buf = this.sendBuf
    if (!this.connected || qp === undefined || mr === undefined || buf === undefined) return NO_SLOT
    if (this.pending >= NOTIFY_SLOTS) return NO_SLOT
    const offset = (this.sendCounter % NOTIFY_SLOTS) * NOTIFY_SLOT_BYTES
    const { dedup, resend } = this.policies
    const stamp = resent ?? dedup.stamp(this.peerProto)
    const len = dedup.encode(buf, offset, n, stamp, this.peerProto)
    if (len < 0) return TOO_LARGE
    this.sge.addr = mr.addr + offset
    this.sge.length = len
    this.sendWr.wrId = SEND_WR_BASE + (this.sendCounter++ % SEND_WR_BASE)
    const rc = qp.postSend(this.sendWr)
    if (rc !== 0) return rc
    this.pending++
    if (resend.track) this.inFlight.push({ notification: n, stamp, peerProto: this.peerProto })
    return 0
  }

  /**
   * Waits for a free send slot (TENT: a condition variable without timeout; the `PeerHealth` seam may bound it, and
   * may say the peer is unreachable, when it fails at once): succeeds when a slot is free or the channel stopped
   * being connected. Each wait is observed in `tent_notify_slot_wait_seconds` (outcome `ok` or `timeout`).
   */
  readonly awaitSlot: Effect.Effect<void, EndpointUnavailable> = Effect.suspend(() => {
    if (!this.connected || this.pending < NOTIFY_SLOTS) return Effect.void
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
    const bound = peerHealth.slotWait
    const bounded =
      bound === undefined
        ? wait
        : wait.pipe(
            Effect.timeoutFail({
              duration: bound,
              onTimeout: () => this.unavailable(`no free notify send slot within ${Duration.format(bound)}`)
            })
          )
    const start = performance.now()
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
    return Effect.zipRight(observed, this.awaitSlot)
  })

  /**
   * A SEND completion (TENT `handleNotifySendComplete`, which sees only successful ones; under RFC PR 1 a flushed one
   * too): frees a unit, wakes one waiter.
   */
  onSendComplete(): void {
    if (this.pending > 0) this.pending--
    if (this.policies.resend.track) this.inFlight.shift()
    for (const w of this.waiters) {
      w()
      break
    }
  }

  /** The channel stops: not connected any more, every waiter wakes (and fails), the pending table is handed over. */
  close(): Array<PendingNotification> {
    this.connected = false
    for (const w of Array.from(this.waiters)) w()
    return this.inFlight.splice(0)
  }
}
