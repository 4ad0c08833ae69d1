/**
 * The `notify_fallback_rtt_us` floor's peer: a plain `node:net` server on 127.0.0.1 that echoes every `[u32 len]
 * [bytes]` frame back as it came. Prints `{port}` once it listens; exits when stdin closes.
 */
import * as Net from "node:net"

const server = Net.createServer((socket) => {
  socket.setNoDelay(true)
  let pending = Buffer.alloc(0) as Buffer
  socket.on("data", (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk])
    let off = 0
    while (pending.length - off >= 4) {
      const len = pending.readUInt32LE(off)
      if (pending.length - off - 4 < len) break
      off += 4 + len
    }
    if (off > 0) socket.write(pending.subarray(0, off))
    pending = pending.subarray(off)
  })
  socket.on("error", () => {})
})

server.listen({ host: "127.0.0.1", port: 0 }, () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as Net.AddressInfo).port })}\n`)
})
process.stdin.on("data", () => {})
process.stdin.on("end", () => process.exit(0))
