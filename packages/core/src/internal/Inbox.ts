/**
 * A transport's queue of received notifications (TENT `notify_list_` under `notify_mutex_`), with a wake-up for the
 * engine's notification stream. `push` is plain synchronous code called by the pollers.
 */
import type { Notification } from "@tent/rpc"
import { Effect } from "effect"

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

/** Received notifications of one transport. */
export class Inbox {
  private list: Array<Notification> = []
  constructor(readonly signal: Signal) {}

  push(n: Notification): void {
    this.list.push(n)
    this.signal.notify()
  }

  /** Takes everything queued (TENT `receiveNotification`); the returned array is the caller's. */
  drain(): Array<Notification> {
    if (this.list.length === 0) return []
    const out = this.list
    this.list = []
    return out
  }

  get size(): number {
    return this.list.length
  }
}
