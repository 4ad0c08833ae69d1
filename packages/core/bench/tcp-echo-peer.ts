/**
 * The `notify_fallback_rtt_us` floor's peer: a plain `node:net` server on 127.0.0.1 that echoes every `[u32 len]
 * [bytes]` frame back as it came. Prints `{port}` once it listens; exits when stdin closes.
 */
import type * as Net from "node:net"
import { echoServer } from "@tent/verbs/bench/frames"

const server = echoServer()

server.listen({ host: "127.0.0.1", port: 0 }, () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as Net.AddressInfo).port })}\n`)
})
process.stdin.on("data", () => {})
process.stdin.on("end", () => process.exit(0))
