import type * as Net from "node:net"
import type { RpcSpec } from "./codec.js"
import { FrameWriter, Kind } from "./frame.js"

/**
 * A socket with a frame writer: frames written during one tick leave in a single `socket.write` at the end of it
 * (a microtask), so 64 concurrent calls cost one syscall, and a lone call waits for nothing.
 */
export class FramedSocket {
  readonly writer = new FrameWriter()
  private scheduled = false

  constructor(readonly socket: Net.Socket) {}

  /** Sends what the writer holds at the end of this tick. */
  flushSoon(): void {
    if (this.scheduled) return
    this.scheduled = true
    queueMicrotask(this.flush)
  }

  /** Sends what the writer holds now. */
  readonly flush = (): void => {
    this.scheduled = false
    if (this.writer.length === 0) return
    const bytes = this.writer.take()
    if (!this.socket.destroyed) this.socket.write(bytes)
  }

  /** Tells the other side what was malformed, then closes (bounded: a peer that does not read is cut off). */
  protocolError(text: string): void {
    if (this.socket.destroyed) return
    this.writer.begin(Kind.ProtocolError, 0)
    this.writer.utf8(text.slice(0, 512))
    this.writer.end()
    const bytes = this.writer.take()
    const socket = this.socket
    const timer = setTimeout(() => socket.destroy(), 1000)
    timer.unref()
    socket.end(bytes, () => {
      clearTimeout(timer)
      socket.destroy()
    })
  }
}

/** A `Success` (or `Failure`) frame with `value` encoded; a `Defect` frame when it does not encode. */
export const writeBody = (w: FrameWriter, id: number, spec: RpcSpec, success: boolean, value: unknown): void => {
  const codec = success ? spec.success : spec.error
  w.begin(success ? Kind.Success : Kind.Failure, id)
  try {
    codec.encode(w, value)
  } catch (e) {
    w.abort()
    w.begin(Kind.Defect, id)
    w.utf8(`${spec.tag} ${success ? "reply" : "error"} does not encode: ${String(e)}`)
  }
}

/** Replies to request `id` with a typed error (the server's `Failure` frame, whichever handler refused). */
export const writeFailure = (framed: FramedSocket, id: number, spec: RpcSpec, error: unknown): void => {
  writeBody(framed.writer, id, spec, false, error)
  framed.writer.end()
  framed.flushSoon()
}
