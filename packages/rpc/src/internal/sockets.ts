import type * as Net from "node:net"
import { Effect } from "effect"

/** Destroys every socket not closed yet; completes once each has emitted `close`. */
export const destroyAll = (sockets: Iterable<Net.Socket>): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    const open = Array.from(sockets).filter((s) => !s.closed)
    let left = open.length
    if (left === 0) return resume(Effect.void)
    for (const socket of open) {
      socket.once("close", () => {
        if (--left === 0) resume(Effect.void)
      })
      socket.destroy()
    }
  })
