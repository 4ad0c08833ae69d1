/**
 * A transport's queue of received notifications (TENT `notify_list_` under `notify_mutex_`), with a wake-up for the
 * engine's notification stream. `push` is plain synchronous code called by the pollers.
 */
import type { Notification } from "@tent/rpc"
import { Effect } from "effect"

/** Wakes every waiter on `notify()`; a waiter that arrives after a `notify()` it has not seen returns at once. */
export class Signal {
  private waiters = new Set<() => void>()
  private version = 0

  notify(): void {
    this.version++
    const ws = this.waiters
    if (ws.size === 0) return
    this.waiters = new Set()
    for (const w of ws) w()
  }

  /** The current version, to pass to {@link wait}. */
  get current(): number {
    return this.version
  }

  /** Waits until the version moves past `seen`. */
  wait(seen: number): Effect.Effect<void> {
    return Effect.async<void>((resume) => {
      if (this.version !== seen) return resume(Effect.void)
      const w = () => resume(Effect.void)
      this.waiters.add(w)
      return Effect.sync(() => void this.waiters.delete(w))
    })
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

  /** Takes everything queued (TENT `receiveNotification`). */
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
