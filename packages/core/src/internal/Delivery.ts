/**
 * The engine's one delivery point: every transport's notifications arrive here — the RDMA notify poller's decoded
 * frames, the control plane's `Notify` (queued as the TCP transport's, as TENT's `TcpTransport` does) — with the
 * sender's identity and the stamp the frame or request carried. Each passes the `Dedup` seam's admission once, then
 * is handed to every subscriber (the engine's `subscribe`: a synchronous callback, called here), then lands in the
 * queue of the transport that carried it (TENT's `notify_list_` per transport, which the `NotificationRouting` seam's
 * `drainOrder` chooses from), and the consumers waiting on the engine's stream wake. A notification admission refuses
 * (a duplicate) reaches neither. A failure notice (a batch that ended FAILED, `Notification.failure` set) passes the
 * same way and keeps its `failure` key, so every consumer tells it from a success.
 *
 * Two guards against hostile peers run first, before anything moves: the queues hold at most
 * `notification/max_queued_bytes` of names and messages (a notification that does not fit is not admitted: see
 * {@link Delivery.deliver}), and a stamp's session must belong to its sender's segment (`Dedup.claim`).
 *
 * Plain synchronous code, called where the completion or the request is handled.
 */
import type { Notification } from "@tent/rpc"
import { Cause, Channel, Chunk, Context, Effect, Layer, Runtime, Stream } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { type DecodedFrame, Dedup, type DedupShape, type Stamp } from "../Dedup.js"
import * as Metrics from "../Metrics.js"
import type { QueueKind } from "../NotificationRouting.js"
import { engineKeys } from "./config/engineKeys.js"
import { maxQueuedBytesConfig } from "./config/guards.js"
import { inboxFull } from "./GuardMetrics.js"
import { EngineReceipts, Ledger } from "./Ledger.js"

type Resume = (effect: Effect.Effect<void>) => void

/**
 * One consumer's wake-up slot, from {@link Signal.subscribe}: it holds at most one parked fiber, so a wait that was
 * interrupted leaves nothing behind but a resume the next wait overwrites (the fiber ignores a second resume).
 */
export class Waiter {
  /** The parked fiber's resume, if one is waiting. */
  resume: Resume | undefined = undefined
  /** The signal's version when the consumer last looked at the queues. */
  seen = 0
  /** Parks the calling fiber until the signal's version moves past `seen`. */
  readonly wait: Effect.Effect<void>

  constructor(readonly signal: Signal) {
    // No canceller: with one, `Effect.async` wraps the wait in an interruption handler, several more run-loop steps
    // per wake-up on the notification path.
    this.wait = Effect.async<void>((resume) => {
      if (signal.current !== this.seen) resume(Effect.void)
      else this.resume = resume
    })
  }

  /** Stops receiving wake-ups (the consumer is done). */
  close(): void {
    this.resume = undefined
    this.signal.unsubscribe(this)
  }
}

/**
 * Wakes every subscribed consumer on `notify()`; a consumer that waits after a `notify()` it has not seen returns at
 * once.
 */
export class Signal {
  /** Replaced, never mutated, on (un)subscribe: `notify` may iterate it while a consumer it wakes unsubscribes. */
  private waiters: ReadonlyArray<Waiter> = []
  private version = 0

  notify(): void {
    this.version++
    const ws = this.waiters
    for (let i = 0; i < ws.length; i++) {
      const w = ws[i] as Waiter
      const resume = w.resume
      if (resume !== undefined) {
        w.resume = undefined
        resume(Effect.void)
      }
    }
  }

  /** The current version, to compare with a {@link Waiter}'s `seen`. */
  get current(): number {
    return this.version
  }

  /** A wake-up slot for one consumer; {@link Waiter.close} it when the consumer ends. */
  subscribe(): Waiter {
    const w = new Waiter(this)
    this.waiters = [...this.waiters, w]
    return w
  }

  /** Removes `w` (see {@link Waiter.close}). */
  unsubscribe(w: Waiter): void {
    this.waiters = this.waiters.filter((x) => x !== w)
  }
}

/** Received notifications of one transport (TENT `notify_list_` under `notify_mutex_`), and their bytes. */
export class Inbox {
  private list: Array<Notification> = []
  /** `name.length + msg.length` of everything queued. */
  bytes = 0

  push(n: Notification): void {
    this.list.push(n)
    this.bytes += n.name.length + n.msg.length
  }

  /** Takes everything queued (TENT `receiveNotification`); the returned array is the caller's. */
  drain(): Array<Notification> {
    if (this.list.length === 0) return []
    const out = this.list
    this.list = []
    this.bytes = 0
    return out
  }

  get size(): number {
    return this.list.length
  }
}

/** A subscriber's callback: called synchronously with each admitted notification (see {@link Delivery.subscribe}). */
export type Handler = (n: Notification) => void

/** One subscription; `active` turns false when it ends, so a pass already iterating the old list skips it. */
interface Subscription {
  readonly handler: Handler
  readonly consume: boolean
  active: boolean
}

/** What the delivery point counted. */
export interface DeliveryCounters {
  /** Calls of a subscriber's handler that threw (each caught, logged, and the next subscriber called). */
  handlerErrors: number
  /** Notifications not admitted because the queues held `notification/max_queued_bytes` (since 0.3.0). */
  inboxFull: number
}

/**
 * Why the delivery point refused the last notification ({@link Delivery.lastReason}) when it was not a duplicate: the
 * refusals for which no receipt is owed (the notify poller sends no `CTRL_ACK`) and the control plane answers a
 * `Notify` with `NotificationRefused`.
 */
export const Refusal = {
  /** Not refused (admitted, or dropped as a duplicate). */
  None: 0,
  /** Stamped for another incarnation of this engine. */
  StaleIncarnation: 1,
  /** Stamped with a session bound to another sender segment (`Dedup.claim`). */
  ForeignSession: 2,
  /** The queues hold `notification/max_queued_bytes`: the sender may send it again later. */
  InboxFull: 3
} as const
/** A {@link Refusal}. */
export type Refusal = (typeof Refusal)[keyof typeof Refusal]

/** The end of a sender's segment in its name: a NIC path's last `@`, else the whole name; -1: an unknown sender. */
const segmentEnd = (sender: string, nicPath: boolean): number => {
  if (nicPath) {
    const at = sender.lastIndexOf("@")
    return at > 0 ? at : sender.length
  }
  return sender.startsWith(UNKNOWN_SENDER) ? -1 : sender.length
}

/**
 * How the control plane names a `Notify`'s sender whose segment it does not know (`rpc#<clientId>`: a connection
 * that did not authenticate).
 */
export const UNKNOWN_SENDER = "rpc#"

/** The delivery point. */
export class Delivery {
  /** Wakes the consumers of the engine's notification stream. */
  readonly signal = new Signal()
  /** One queue per transport. */
  readonly queues: Readonly<Record<QueueKind, Inbox>> = { rdma: new Inbox(), tcp: new Inbox() }
  /** Live counters. */
  readonly counters: DeliveryCounters = { handlerErrors: 0, inboxFull: 0 }
  /** Replaced, never mutated, on (un)subscribe: a handler may (un)subscribe while a notification is being handed out. */
  private subscriptions: ReadonlyArray<Subscription> = []
  /** Whether one of `subscriptions` consumes (then an admitted notification is not queued); set with the list. */
  private consumed = false

  /**
   * Whether the last notification was refused, not admitted nor dropped as a duplicate ({@link lastReason} says why):
   * no receipt is owed for it, and the control plane answers its `Notify` with `NotificationRefused`.
   */
  lastRefused = false
  /** Why the last notification was refused ({@link Refusal.None} when it was not). */
  lastReason: Refusal = Refusal.None

  /**
   * `onHandlerError` reports a handler's throw (the engine logs it); it must not throw itself. `receipts`: the
   * engine's receipts, whose ack table admission records into and whose incarnation it checks (absent: none).
   * `maxQueuedBytes`: `notification/max_queued_bytes`.
   */
  constructor(
    private readonly dedup: DedupShape,
    private readonly onHandlerError: (error: unknown) => void = () => {},
    private readonly receipts?: Ledger | undefined,
    readonly maxQueuedBytes: number = engineKeys["notification/max_queued_bytes"].default as number
  ) {}

  /** Bytes (`name.length + msg.length`) the queues hold now. */
  get queuedBytes(): number {
    return this.queues.rdma.bytes + this.queues.tcp.bytes
  }

  /**
   * Whether a notification of `size` bytes finds no room in the queues: they hold `notification/max_queued_bytes`
   * already with it (one larger than the bound is taken into empty queues, so it is not refused forever). A consuming
   * subscriber queues nothing: never full then.
   */
  private full(size: number): boolean {
    if (this.consumed) return false
    const queued = this.queuedBytes
    if (queued === 0 || queued + size <= this.maxQueuedBytes) return false
    this.counters.inboxFull++
    inboxFull.update(1)
    return this.refuse(Refusal.InboxFull)
  }

  /** Records a refusal (see {@link lastRefused}); true, for {@link full}. */
  private refuse(reason: Refusal): true {
    this.lastRefused = true
    this.lastReason = reason
    return true
  }

  /**
   * Admission: an epoch for another incarnation of this engine is refused; a stamp whose session is bound to another
   * sender segment is refused (`Dedup.claim`; `end`: where `sender`'s segment ends, -1 for a sender whose segment is not
   * known); a stamp for this incarnation is a duplicate if the ack table has it (even when the dedup window forgot the
   * session), else it passes the `Dedup` seam and is recorded. `epoch`: the ledger's judgement of the stamp's epoch
   * (`Ledger.NO_EPOCH`, `THIS`, `OTHER`).
   *
   * A sender whose segment is not known (`rpc#<clientId>`: a control-plane connection that did not authenticate) is
   * admitted as before the binding, neither checked nor binding, even on a session bound to a segment. Such senders
   * exist only while the control plane is unauthenticated (with a secret set every connection proves a name, TENT's
   * wire included: it is refused), and then any peer can bootstrap under another's NIC paths and send as it over RDMA,
   * so a check here would stop no one; refusing them, or admitting them without recording, would break the RFC's
   * fallback, whose control-plane copies of a session's notifications come from such a sender while its RDMA copies
   * bound the session (a copy not recorded is delivered twice when the other copy is polled after it).
   */
  private admit(
    sender: string,
    end: number,
    stamp: { readonly session: bigint; readonly seq: bigint } | undefined,
    epoch: number,
    now?: number,
    held = false
  ): boolean {
    const r = this.receipts
    if (epoch === Ledger.OTHER && r !== undefined && stamp !== undefined) return !this.refuse(Refusal.StaleIncarnation)
    const claim = this.dedup.claim
    if (stamp !== undefined && end >= 0 && claim !== undefined && !claim(stamp.session, sender, end, now)) {
      return !this.refuse(Refusal.ForeignSession)
    }
    if (r === undefined || stamp === undefined || epoch === Ledger.NO_EPOCH) {
      return this.dedup.admit(sender, stamp, now)
    }
    if (r.delivered(stamp.session, stamp.seq)) {
      this.dedup.admit(sender, stamp, now) // counted as the window counts a duplicate
      return false
    }
    // A held record released after its data: the ack table alone judges it (it may have waited past the window).
    if (!this.dedup.admit(sender, stamp, now) && !held) return false
    r.admitted(stamp.session, stamp.seq)
    return true
  }

  /**
   * Calls `handler` with every notification admitted from now on, before it is queued, in subscription order; returns
   * the unsubscribe (after it returns, `handler` is not called again, even by a pass already under way). With
   * `consume`, the notifications admitted while the subscription lasts are not queued at all (the handler took them).
   */
  subscribe(handler: Handler, consume = false): () => void {
    const sub: Subscription = { handler, consume, active: true }
    this.setSubscriptions([...this.subscriptions, sub])
    return () => {
      sub.active = false
      this.setSubscriptions(this.subscriptions.filter((x) => x !== sub))
    }
  }

  private setSubscriptions(list: ReadonlyArray<Subscription>): void {
    this.subscriptions = list
    this.consumed = list.some((s) => s.consume)
  }

  /** How many subscribers there are. */
  get subscribers(): number {
    return this.subscriptions.length
  }

  /** Hands `n` to every subscriber; a throw is counted and reported, and the next subscriber is called. */
  private dispatch(n: Notification): void {
    const subs = this.subscriptions
    for (let i = 0; i < subs.length; i++) {
      const sub = subs[i] as Subscription
      if (!sub.active) continue
      try {
        sub.handler(n)
      } catch (error) {
        this.counters.handlerErrors++
        Metrics.handlerError.update(1)
        try {
          this.onHandlerError(error)
        } catch {
          // a failing report must not stall the poller either
        }
      }
    }
  }

  /**
   * A notification carried by `via`, from `sender` (a NIC path when `nicPath`, else a segment name or an unknown
   * sender); false when it was not admitted: a duplicate, or refused ({@link lastRefused}). One that finds the queues
   * full is refused before anything moves — its stamp's window, the ack table, the session's binding — so the copy
   * its sender sends again later (a receipted one: no receipt was owed) is admitted then.
   */
  deliver(via: QueueKind, sender: string, n: Notification, stamp?: Stamp | undefined, nicPath = false): boolean {
    this.lastRefused = false
    this.lastReason = Refusal.None
    if (this.full(n.name.length + n.msg.length)) return false
    const r = this.receipts
    const epoch = r?.enabled === true ? r.epochState(stamp?.epoch) : Ledger.NO_EPOCH
    if (!this.admit(sender, segmentEnd(sender, nicPath), stamp, epoch)) return false
    if (this.subscriptions.length > 0) this.dispatch(n)
    this.queue(via, n)
    return true
  }

  /**
   * A control-plane `Notify` from the caller `sender` — its segment name when the connection proved it, else
   * `rpc#<clientId>` ({@link UNKNOWN_SENDER}) — with the stamp its request carried (queued as TCP's).
   */
  fromNotify(sender: string, n: Notification): boolean {
    return this.deliver("tcp", sender, n, n.stamp)
  }

  /**
   * A decoded frame in `buf` (copied out here, before its slot is reposted) from the NIC path `sender`; false when
   * not admitted (see {@link deliver}). `now`: the clock read once for the poller's pass (see `Dedup.admit`).
   * `acks`: the channel that owes the sender a receipt for a `NeedsAck` frame admitted or dropped as a copy (a refused
   * one gets none), told before the subscribers run, so that a reply they send at once carries it (`notify_ack_carry`).
   */
  fromFrame(
    via: QueueKind,
    sender: string,
    buf: Buffer,
    frame: DecodedFrame,
    now?: number,
    held = false,
    acks?: { owesAck(session: bigint): void }
  ): boolean {
    // The frame is its own stamp (`session`, `seq`): no object per notification.
    this.lastRefused = false
    this.lastReason = Refusal.None
    if (this.full(frame.nameEnd - frame.nameStart + (frame.msgEnd - frame.msgStart))) return false
    const r = this.receipts
    const epoch =
      frame.stamped && r?.enabled === true ? r.epochStateWords(frame.epochLo, frame.epochHi) : Ledger.NO_EPOCH
    const admitted = this.admit(sender, segmentEnd(sender, true), frame.stamped ? frame : undefined, epoch, now, held)
    if (frame.needsAck && !this.lastRefused) acks?.owesAck(frame.session)
    if (!admitted) return false
    const name = new Uint8Array(buf.subarray(frame.nameStart, frame.nameEnd))
    const msg = new Uint8Array(buf.subarray(frame.msgStart, frame.msgEnd))
    // A failure notice (`CtrlFrame.FLAG_FAILURE`, taken only at `notify_proto` 3) keeps its reason: the key tells it.
    const n: Notification =
      frame.failureStart < 0
        ? { name, msg }
        : { name, msg, failure: buf.toString("utf8", frame.failureStart, frame.failureEnd) }
    if (this.subscriptions.length > 0) this.dispatch(n)
    this.queue(via, n)
    return true
  }

  /** Queues `n` and wakes the stream's consumers, unless a consuming subscriber took it. */
  private queue(via: QueueKind, n: Notification): void {
    if (this.consumed) return
    this.queues[via].push(n)
    this.signal.notify()
  }

  /** Takes what the queues `order` hold, in that order. */
  drain(order: ReadonlyArray<QueueKind>): Array<Notification> {
    if (order.length === 1) return this.queues[order[0] as QueueKind].drain()
    const out: Array<Notification> = []
    for (const k of order) if (this.queues[k].size > 0) for (const n of this.queues[k].drain()) out.push(n)
    return out
  }
}

/**
 * The engine's notification stream over `delivery`'s queues `order`: one channel step per chunk, run in the consumer's
 * fiber: take what is queued and emit it, or park on this run's wake-up slot and look again. A notification leaves its
 * queue only in the step that emits it, so a consumer interrupted while parked takes nothing with it. (`Channel.repeated`
 * over an effect that drains or waits, with a canceller per wait, cost about a dozen more run-loop steps per chunk.)
 */
export const stream = (delivery: Delivery, order: ReadonlyArray<QueueKind>): Stream.Stream<Notification> => {
  const signal = delivery.signal
  return Stream.fromChannel(
    Channel.suspend(() => {
      const waiter = signal.subscribe()
      const again = () => next
      const next: Channel.Channel<Chunk.Chunk<Notification>> = Channel.suspend(() => {
        waiter.seen = signal.current
        const got = delivery.drain(order)
        return got.length > 0 ? Channel.flatMap(Channel.write(Chunk.unsafeFromArray(got)), again) : park
      })
      const park = Channel.flatMap(Channel.fromEffect(waiter.wait), again)
      return Channel.ensuring(
        next,
        Effect.sync(() => waiter.close())
      )
    })
  )
}

/** The engine's delivery point as a service. */
export class EngineDelivery extends Context.Tag("@tent/core/internal/Delivery")<EngineDelivery, Delivery>() {}

/**
 * The delivery point, admitting through the `Dedup` seam, its queues bounded by `notification/max_queued_bytes`; a
 * subscriber's throw is logged (a warning with the throw as
 * its cause) with the logger of the fiber that built the engine.
 */
export const layer: Layer.Layer<EngineDelivery, ConfigError, Dedup | EngineReceipts> = Layer.effect(
  EngineDelivery,
  Effect.gen(function* () {
    const maxQueuedBytes = yield* maxQueuedBytesConfig
    const dedup = yield* Dedup
    const receipts = yield* EngineReceipts
    const runtime = yield* Effect.runtime<never>()
    const log = (error: unknown) =>
      Runtime.runSync(
        runtime,
        Effect.logWarning(
          "a notification subscriber threw: caught and counted (Diagnostics counters.delivery.handlerErrors)",
          Cause.die(error)
        )
      )
    return new Delivery(dedup, log, receipts, maxQueuedBytes)
  })
)
