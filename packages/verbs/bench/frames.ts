/**
 * The `node:net` floors of the benchmark suites: a stream of `[u32 len][bytes]` frames, split as it arrives, and a
 * server on 127.0.0.1 that echoes every frame back as it came.
 *
 * @since 0.1.0
 */
import * as Net from "node:net"

/** A `data` listener that calls `onFrame` with each complete frame (header included), in order. */
export const frameSplitter = (onFrame: (frame: Buffer) => void): ((chunk: Buffer) => void) => {
  let pending = Buffer.alloc(0) as Buffer
  return (chunk) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk])
    let off = 0
    while (pending.length - off >= 4) {
      const len = pending.readUInt32LE(off)
      if (pending.length - off - 4 < len) break
      onFrame(pending.subarray(off, off + 4 + len))
      off += 4 + len
    }
    pending = pending.subarray(off)
  }
}

/** A server (not yet listening) whose connections echo every frame back. */
export const echoServer = (): Net.Server =>
  Net.createServer((socket) => {
    socket.setNoDelay(true)
    socket.on(
      "data",
      frameSplitter((frame) => socket.write(frame))
    )
    socket.on("error", () => {})
  })
