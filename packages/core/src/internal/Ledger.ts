/**
 * The engine's delivery receipts, both sides (the `Receipts` seam's state):
 *
 * - **Sender: the ledger.** Per destination segment, every notification accepted for a peer that offers receipts, in
 *   seq order (seqs dense per destination, from 1 for each incarnation of it), until a receipt covers it — a
 *   cumulative `CTRL_ACK` on the notify QP, or the reply to a `Notify` the ledger's worker sent — or it becomes
 *   `Undelivered`: its deadline passed (`Timeout`), the peer came back as a new incarnation (`PeerRestarted`), the peer
 *   refused it (`Rejected`).
 * - **Receiver: the ack table.** Per sender session, the highest seq up to which every notification was admitted (the
 *   cumulative `ack_seq`), and the admitted seqs above it; a seq at or below it is a duplicate whatever the dedup
 *   window remembers.
 *
 * Plain synchronous code on the notification path (`accept`, `onAck`, `admitted`); the worker that resends lives in
 * `ReceiptWorker`. Events go to the `onUndelivered` handlers (synchronously) and to a `PubSub` for the stream.
 */
import type { Notification, NotificationStamp } from "@tent/rpc"
import { Context, Effect, Layer, PubSub } from "effect"
import { Dedup } from "../Dedup.js"
import * as Metrics from "../Metrics.js"
import { PROTO, Receipts, type ReceiptsShape, Undelivered, type UndeliveredReason } from "../Receipts.js"
import { PROTO as FAILURE_PROTO, SubmitHooks } from "../SubmitHooks.js"
import { HELD_TTL_MS, holdActive } from "./HeldRecord.js"

/** A stamp with the destination's incarnation. */
export type Stamp = NotificationStamp

/** One accepted notification awaiting its receipt; it is its own stamp (`session`, `seq`, `epoch`: one object). */
export interface Entry {
  readonly session: bigint
  readonly seq: bigint
  readonly epoch: bigint
  readonly n: Notification
  readonly acceptedAt: number
  /** When it was last handed to a path (-1: not yet: the worker sends it). */
  sentAt: number
  done: boolean
  /** `sendNotificationReceipted`'s resume: undefined = receipted, else why not. */
  waiter: ((outcome: Undelivered | undefined) => void) | undefined
}

/** The ledger of one destination. */
export class Destination {
  /** The destination's incarnation the stamps are for (0: not known yet). */
  incarnation = 0n
  /** The last seq drawn for {@link incarnation}. */
  seq = 0n
  /** Entries in seq order; those before `head` are gone. */
  entries: Array<Entry> = []
  head = 0
  /** Entries not done. */
  live = 0
  /** A worker is sending this destination's entries. */
  busy = false
  /** Until when (`performance.now()` ms) calls skip the notify QP: a wait for it just failed. */
  stalledUntil = 0

  constructor(readonly segment: string) {}

  /** Drops done entries from the front (and compacts the array now and then). */
  trim(): void {
    const es = this.entries
    while (this.head < es.length && (es[this.head] as Entry).done) this.head++
    if (this.head === es.length) {
      this.entries = []
      this.head = 0
    } else if (this.head > 1024 && this.head * 2 > es.length) {
      this.entries = es.slice(this.head)
      this.head = 0
    }
  }
}

/** What the receipts counted. */
export interface ReceiptCounters {
  /** Notifications accepted into a ledger. */
  accepted: number
  /** Receipted: by a `CTRL_ACK`, or by a `Notify` reply. */
  receipted: number
  /** Undelivered events, by reason. */
  undelivered: Record<UndeliveredReason, number>
  /** Entries the worker sent over the control plane. */
  resent: number
  /** `CTRL_ACK`s sent and received (those carried with a notification included). */
  acksSent: number
  acksReceived: number
  /** Of {@link acksSent}, those carried in the SEND of a notification to the same peer (`notify_ack_carry`). */
  acksCarried: number
  /** Acks for another session or incarnation (ignored). */
  acksStale: number
  /** Frames and `Notify`s refused: stamped for another incarnation of this engine. */
  refusedStale: number
  /** New incarnations of peers seen. */
  peerRestarts: number
  /** Undelivered events in all (the sum of {@link undelivered}). */
  readonly undeliveredTotal: number
  /** Accepted notifications still awaiting a receipt or an `Undelivered`, over every destination. */
  readonly unreceipted: number
}

/**
 * The admission state of one sender session at this receiver: seqs as numbers (dense from 1 per destination, they
 * stay far below 2^53; a larger one is left to the dedup window).
 */
interface AckState {
  prefix: number
  above: Set<number>
  /** Seqs admitted as held records (transfer-bound, waiting for their data): the prefix never jumps past one. */
  held?: Map<number, number>
}

/** The most sender sessions the ack table keeps (the least recently added is dropped first). */
const MAX_ACK_SESSIONS = 4096
/** The most admitted seqs above a session's prefix kept (a gap this wide is not waited for: the prefix jumps). */
const MAX_ABOVE = 8192

/** Seqs above this are not recorded in the ack table (the dedup window alone judges them). */
const MAX_TRACKED_SEQ = Number.MAX_SAFE_INTEGER

/** Both sides of the receipts. */
export class Ledger {
  readonly destinations = new Map<string, Destination>()
  readonly counters: ReceiptCounters = Ledger.makeCounters(this.destinations)
  /** Whether receipts are in use: the seam is on and the dedup seam stamps (a session). */
  readonly enabled: boolean
  /** Whether failure notices are offered and sent (`SubmitHooks`, over receipts: `notify_proto` 3). */
  readonly failureNotices: boolean
  readonly incarnation: bigint
  private readonly incarnationLo: number
  private readonly incarnationHi: number
  private readonly acks = new Map<bigint, AckState>()
  private lastSession = -1n
  private lastAck: AckState | undefined = undefined
  private handlers: ReadonlyArray<(u: Undelivered) => void> = []
  /** `sendNotificationReceipted`'s waiters, by the notification object it passed, until `accept` takes them. */
  readonly waiters = new WeakMap<Notification, (outcome: Undelivered | undefined) => void>()
  /** Wakes the worker (set by `ReceiptWorker`). */
  kick: (d: Destination) => void = () => {}
  /** Wakes the worker's ticker, set while it is parked (no entry was live at its last tick): {@link accept} calls it. */
  wake: (() => void) | undefined = undefined

  /** Whether the worker's ticker is parked. */
  get parked(): boolean {
    return this.wake !== undefined
  }

  constructor(
    readonly settings: ReceiptsShape,
    readonly session: bigint | undefined,
    readonly events: PubSub.PubSub<Undelivered> | undefined,
    readonly clock: () => number = () => performance.now(),
    failureNotices = false
  ) {
    this.enabled = settings.enabled && session !== undefined
    this.failureNotices = this.enabled && failureNotices
    this.incarnation = this.enabled ? settings.incarnation : 0n
    this.incarnationLo = Number(this.incarnation & 0xffffffffn)
    this.incarnationHi = Number(this.incarnation >> 32n)
  }

  /** The `notify_proto` to advertise, given the dedup seam's. */
  advertise(dedupProto: number): number {
    return this.enabled && dedupProto >= 1 ? (this.failureNotices ? FAILURE_PROTO : PROTO) : dedupProto
  }

  /** Whether a peer that advertised `peerProto` gets receipted notifications from this engine. */
  capable(peerProto: number): boolean {
    return this.enabled && peerProto >= PROTO
  }

  /**
   * Whether `segment` was seen to offer receipts (an incarnation learnt from it), even if no endpoint to it is left:
   * notifications to it keep going through the ledger while it is unreachable.
   */
  known(segment: string): boolean {
    return this.enabled && (this.destinations.get(segment)?.incarnation ?? 0n) !== 0n
  }

  destination(segment: string): Destination {
    let d = this.destinations.get(segment)
    if (d === undefined) {
      d = new Destination(segment)
      this.destinations.set(segment, d)
    }
    return d
  }

  // -------------------------------------------------------------------------------------------------------------------
  // Sender
  // -------------------------------------------------------------------------------------------------------------------

  /**
   * Accepts `n` for `segment`: draws its stamp (the next seq for the destination's incarnation) and keeps it until a
   * receipt. `sent`: it is being posted now (false: the worker sends it). Undefined when the destination already
   * holds `notification/max_unreceipted` (nothing accepted).
   */
  accept(segment: string, n: Notification, sent: boolean): Stamp | undefined {
    const d = this.destination(segment)
    if (d.live >= this.settings.maxUnreceipted) return undefined
    const now = this.clock()
    const waiter = this.waiters.get(n)
    if (waiter !== undefined) this.waiters.delete(n)
    const e: Entry = {
      session: this.session as bigint,
      seq: ++d.seq,
      epoch: d.incarnation,
      n,
      acceptedAt: now,
      sentAt: sent ? now : -1,
      done: false,
      waiter
    }
    d.entries.push(e)
    d.live++
    this.counters.accepted++
    const wake = this.wake
    if (wake !== undefined) {
      this.wake = undefined
      wake()
    }
    if (!sent) this.kick(d)
    return e
  }

  /** Takes back the stamp `accept` just drew (the post that followed failed at once: nothing was sent). */
  rollback(segment: string, stamp: Stamp): void {
    const d = this.destinations.get(segment)
    if (d === undefined || d.entries.length === 0) return
    const last = d.entries[d.entries.length - 1] as Entry
    if (last !== stamp || d.seq !== stamp.seq) return
    d.entries.pop()
    d.seq--
    d.live--
    this.counters.accepted--
    if (last.waiter !== undefined) this.waiters.set(last.n, last.waiter)
  }

  /**
   * What a rebuilt notify channel to `segment` sends first: the entries without a receipt (the old channel may have
   * lost any of them with its QP), oldest first, at most `max`, not those held for their data; each marked sent now,
   * so the worker leaves it to the new channel for `receipt_resend_ms`.
   */
  takeForRebuild(segment: string, max: number): Array<Entry> {
    const d = this.destinations.get(segment)
    const out: Array<Entry> = []
    if (d === undefined) return out
    const now = this.clock()
    for (let i = d.head; i < d.entries.length && out.length < max; i++) {
      const e = d.entries[i] as Entry
      if (e.done || holdActive(e.n)) continue
      e.sentAt = now
      out.push(e)
    }
    return out
  }

  /** Gives an entry taken by {@link takeForRebuild} back to the worker, unsent: it goes at the worker's next tick. */
  giveBack(e: Entry): void {
    e.sentAt = -1
  }

  /** A `CTRL_ACK` from `segment`: receipts every entry up to `ackSeq`, if it is for this session and incarnation. */
  onAck(segment: string, session: bigint, epoch: bigint, ackSeq: bigint): void {
    this.counters.acksReceived++
    const d = this.destinations.get(segment)
    if (d === undefined || session !== this.session || epoch !== d.incarnation || d.incarnation === 0n) {
      this.counters.acksStale++
      return
    }
    const es = d.entries
    let newest: Entry | undefined
    for (let i = d.head; i < es.length; i++) {
      const e = es[i] as Entry
      if (e.seq > ackSeq) break
      if (!e.done) {
        this.finish(d, e)
        newest = e
      }
    }
    // One observation per receipt: the newest notification it covers (a cumulative ack covers up to 32 at once).
    if (newest !== undefined) Metrics.receiptLatency.update((this.clock() - newest.acceptedAt) / 1000)
    d.trim()
  }

  /** `e` was receipted (a `Notify` reply, or an ack). */
  receipted(d: Destination, e: Entry): void {
    if (e.done) return
    this.finish(d, e)
    Metrics.receiptLatency.update((this.clock() - e.acceptedAt) / 1000)
    d.trim()
  }

  private finish(d: Destination, e: Entry): void {
    e.done = true
    d.live--
    this.counters.receipted++
    e.waiter?.(undefined)
  }

  /**
   * The peer `segment` is incarnation `incarnation` (from a bootstrap, its descriptor, or a refusal). A change from a
   * known one ends every entry for the old one as `Undelivered{PeerRestarted}`, at once, and seqs start over.
   */
  onIncarnation(segment: string, incarnation: bigint): void {
    if (!this.enabled || incarnation === 0n) return
    const d = this.destination(segment)
    if (d.incarnation === incarnation) return
    const old = d.incarnation
    d.incarnation = incarnation
    d.seq = 0n
    if (old === 0n) return
    this.counters.peerRestarts++
    const es = d.entries
    for (let i = d.head; i < es.length; i++) {
      const e = es[i] as Entry
      if (!e.done && e.epoch === old) {
        this.fail(d, e, "PeerRestarted", `the peer ${segment} restarted (a new incarnation) before receipting it`)
      }
    }
    d.trim()
  }

  /**
   * What a fetched descriptor says of `segment`: its incarnation, when it offers receipts. Taken only while none is
   * known (a cached descriptor may be older than what a bootstrap or a refusal told).
   */
  learn(segment: string, incarnation: string | undefined): void {
    if (!this.enabled || incarnation === undefined) return
    if ((this.destinations.get(segment)?.incarnation ?? 0n) !== 0n) return
    this.onIncarnation(segment, parseIncarnation(incarnation))
  }

  /** Ends `e` as undelivered for `reason`. */
  fail(d: Destination, e: Entry, reason: UndeliveredReason, message: string): void {
    if (e.done) return
    e.done = true
    d.live--
    const stamp = { session: e.session, seq: e.seq, epoch: e.epoch }
    const u = new Undelivered({ segment: d.segment, name: e.n.name, msg: e.n.msg, stamp, reason, message })
    e.waiter?.(u)
    this.emit(u)
  }

  /** Ends every entry whose deadline passed as `Undelivered{Timeout}`; returns how many. */
  expire(now: number = this.clock()): number {
    let n = 0
    const limit = this.settings.deliveryTimeoutMs
    for (const d of this.destinations.values()) {
      if (d.live === 0) continue
      const es = d.entries
      for (let i = d.head; i < es.length; i++) {
        const e = es[i] as Entry
        if (now - e.acceptedAt < limit) break // accepted in time order
        if (!e.done) {
          this.fail(d, e, "Timeout", `no receipt from ${d.segment} within ${limit} ms`)
          n++
        }
      }
      d.trim()
    }
    return n
  }

  /**
   * A notification the RFC's resend gave up (a peer without receipts): `NotResendable` (unstamped) or `Unconfirmed`.
   */
  reportGiveUp(segment: string, n: Notification, stamp: Stamp | undefined, reason: UndeliveredReason): void {
    if (!this.enabled) return
    const message =
      reason === "NotResendable"
        ? `lost with a notify QP to ${segment}; the peer cannot deduplicate a copy, so it was not resent`
        : `lost with a notify QP to ${segment}; every path of the resend failed, and the peer offers no receipts`
    this.emit(new Undelivered({ segment, name: n.name, msg: n.msg, stamp, reason, message }))
  }

  private emit(u: Undelivered): void {
    this.counters.undelivered[u.reason]++
    Metrics.undelivered(u.reason).update(1, u.segment)
    const hs = this.handlers
    for (let i = 0; i < hs.length; i++) {
      try {
        ;(hs[i] as (u: Undelivered) => void)(u)
      } catch {
        // a handler's throw must not stop the others, nor the ledger
      }
    }
    if (this.events !== undefined) this.events.unsafeOffer(u)
  }

  /** Calls `handler` with every `Undelivered` from now on; returns the unsubscribe. */
  onUndelivered(handler: (u: Undelivered) => void): () => void {
    this.handlers = [...this.handlers, handler]
    return () => {
      this.handlers = this.handlers.filter((h) => h !== handler)
    }
  }

  // -------------------------------------------------------------------------------------------------------------------
  // Receiver
  // -------------------------------------------------------------------------------------------------------------------

  /** Live counters; the totals are read off the live state, never kept in step by hand. */
  private static makeCounters(destinations: ReadonlyMap<string, Destination>): ReceiptCounters {
    return {
      accepted: 0,
      receipted: 0,
      undelivered: { PeerRestarted: 0, Timeout: 0, NotResendable: 0, Rejected: 0, Unconfirmed: 0 },
      resent: 0,
      acksSent: 0,
      acksReceived: 0,
      acksCarried: 0,
      acksStale: 0,
      refusedStale: 0,
      peerRestarts: 0,
      get undeliveredTotal() {
        let n = 0
        for (const k in this.undelivered) n += this.undelivered[k as UndeliveredReason]
        return n
      },
      get unreceipted() {
        let n = 0
        for (const d of destinations.values()) n += d.live
        return n
      }
    }
  }

  /** A stamp's epoch, judged here: no epoch (any incarnation), this incarnation, or another one (refused). */
  static readonly NO_EPOCH = 0
  static readonly THIS = 1
  static readonly OTHER = 2

  /** {@link Ledger.NO_EPOCH}, {@link Ledger.THIS} or {@link Ledger.OTHER} (counted as refused) for `epoch`. */
  epochState(epoch: bigint | undefined): number {
    if (epoch === undefined || epoch === 0n) return Ledger.NO_EPOCH
    return this.judged(epoch === this.incarnation)
  }

  /** {@link epochState} of an epoch read as its low and high u32 (a frame's: no BigInt made). */
  epochStateWords(lo: number, hi: number): number {
    if (lo === 0 && hi === 0) return Ledger.NO_EPOCH
    return this.judged(lo === this.incarnationLo && hi === this.incarnationHi)
  }

  private judged(ours: boolean): number {
    if (!ours) this.counters.refusedStale++
    return ours ? Ledger.THIS : Ledger.OTHER
  }

  /** The ack state of `session` (the last one looked up is kept: a stream comes from one session at a time). */
  private ackState(session: bigint, create: boolean): AckState | undefined {
    if (session === this.lastSession && this.lastAck !== undefined) return this.lastAck
    let a = this.acks.get(session)
    if (a === undefined) {
      if (!create) return undefined
      if (this.acks.size >= MAX_ACK_SESSIONS) {
        const oldest = this.acks.keys().next()
        if (!oldest.done) {
          this.acks.delete(oldest.value)
          if (oldest.value === this.lastSession) this.lastAck = undefined
        }
      }
      a = { prefix: 0, above: new Set() }
      this.acks.set(session, a)
    }
    this.lastSession = session
    this.lastAck = a
    return a
  }

  /** Whether `(session, seq)` was admitted already (at or below the prefix, or recorded above it). */
  delivered(session: bigint, seq: bigint): boolean {
    const a = this.ackState(session, false)
    if (a === undefined) return false
    const s = Number(seq)
    return s <= MAX_TRACKED_SEQ && (s <= a.prefix || a.above.has(s))
  }

  /** Records `(session, seq)` as admitted (stamped for this incarnation). */
  admitted(session: bigint, seq: bigint): void {
    const s = Number(seq)
    if (s > MAX_TRACKED_SEQ) return
    const a = this.ackState(session, true) as AckState
    if (s === a.prefix + 1) {
      a.prefix = s
      if (a.above.size > 0) {
        while (a.above.delete(a.prefix + 1)) a.prefix++
      }
    } else if (s > a.prefix) {
      a.above.add(s)
      if (a.above.size > MAX_ABOVE) {
        // A gap this wide is not a reordering: move the prefix to the smallest seq held and continue from there —
        // unless a held record's seq lies in the gap (for at most its hold's time to live).
        let min = s
        for (const x of a.above) if (x < min) min = x
        const stale = performance.now() - HELD_TTL_MS
        for (const [x, at] of a.held ?? []) if (at > stale && x > a.prefix && x < min) return
        a.prefix = min
        a.above.delete(min)
        while (a.above.delete(a.prefix + 1)) a.prefix++
      }
    }
  }

  /** A held record's stamp waits for its data (`held`), or no longer does: meanwhile the prefix never jumps past it. */
  holding(session: bigint, seq: bigint, held: boolean): void {
    const a = this.ackState(session, true) as AckState
    if (!held) return void a.held?.delete(Number(seq))
    if (a.held === undefined) a.held = new Map()
    a.held.set(Number(seq), performance.now())
  }

  /** The cumulative `ack_seq` for `session`: every seq up to it was admitted here. */
  prefix(session: bigint): bigint {
    return BigInt(this.ackState(session, false)?.prefix ?? 0)
  }
}

/** The engine's receipts state as a service. */
export class EngineReceipts extends Context.Tag("@tent/core/internal/Ledger")<EngineReceipts, Ledger>() {}

/** The ledger over the `Receipts` seam and the `Dedup` seam's session; `Undelivered` events on a `PubSub`. */
export const layer: Layer.Layer<EngineReceipts, never, Receipts | Dedup | SubmitHooks> = Layer.scoped(
  EngineReceipts,
  Effect.gen(function* () {
    const settings = yield* Receipts
    const dedup = yield* Dedup
    const hooks = yield* SubmitHooks
    const events = yield* Effect.acquireRelease(PubSub.unbounded<Undelivered>(), PubSub.shutdown)
    return new Ledger(settings, dedup.session, events, undefined, hooks.failureNotices)
  })
)

/** An incarnation as a descriptor or a refusal carries it (decimal u64); 0 for anything else. */
export const parseIncarnation = (text: string): bigint => {
  if (!/^[0-9]{1,20}$/.test(text)) return 0n
  const v = BigInt(text)
  return v < 2n ** 64n ? v : 0n
}
