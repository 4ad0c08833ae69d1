import * as Net from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { makeNotification } from "../src/index.js"
import { Kind } from "../src/internal/frame.js"
import { makeAgent, startServer } from "./helpers.js"

interface RawResult {
  readonly closed: boolean
  readonly received: Buffer
}

/**
 * Connects, sends `chunks`, and reports whether the server closed the connection within `waitMs` (generous when a close
 * is expected: a loaded machine may take seconds; short where the test is that it stays open).
 */
const sendRaw = (port: number, chunks: ReadonlyArray<Buffer>, waitMs = 20_000): Effect.Effect<RawResult> =>
  Effect.async<RawResult>((resume) => {
    const received: Array<Buffer> = []
    const socket = Net.createConnection({ host: "127.0.0.1", port })
    const finish = (closed: boolean) => {
      clearTimeout(timer)
      socket.destroy()
      resume(Effect.succeed({ closed, received: Buffer.concat(received) }))
    }
    const timer = setTimeout(() => finish(false), waitMs)
    socket.on("data", (c: Buffer) => received.push(c))
    socket.on("error", () => {})
    socket.on("close", () => finish(true))
    socket.on("connect", () => {
      for (const c of chunks) socket.write(c)
    })
    return Effect.sync(() => socket.destroy())
  })

const u32 = (n: number) => {
  const b = Buffer.alloc(4)
  b.writeUInt32LE(n)
  return b
}

describe("bad input to the server", () => {
  it.scopedLive(
    "garbage bytes, a bad frame kind, a truncated Notify body or an unknown RPC close that connection only",
    () =>
      Effect.gen(function* () {
        const server = yield* startServer()
        const agent = yield* makeAgent({ request_timeout_ms: 2000 })
        yield* agent.probe(server.address) // a well-behaved client, connected throughout

        const cases: Record<string, Buffer> = {
          http: Buffer.from("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
          random: Buffer.from(Array.from({ length: 256 }, (_, i) => (i * 131 + 7) & 0xff)),
          badKind: Buffer.concat([u32(5), Buffer.from([99, 1, 0, 0, 0])]),
          shortLength: Buffer.concat([u32(2), Buffer.from([1, 1])]),
          // a Notify frame whose name_len claims more bytes than the frame holds
          truncatedNotify: Buffer.concat([
            u32(5 + 1 + 8),
            Buffer.from([Kind.Request, 1, 0, 0, 0, 1]),
            u32(100),
            u32(0)
          ]),
          unknownRpc: Buffer.concat([u32(6), Buffer.from([Kind.Request, 1, 0, 0, 0, 200])])
        }
        for (const [name, bytes] of Object.entries(cases)) {
          const result = yield* sendRaw(server.port, [bytes])
          expect({ name, closed: result.closed }).toEqual({ name, closed: true })
          expect(result.received[4]).toBe(Kind.ProtocolError)
          yield* agent.probe(server.address)
        }
        expect(server.received).toHaveLength(0)
      })
  )

  it.scopedLive("a 1 GiB length prefix closes the connection at once and allocates nothing for it", () =>
    Effect.gen(function* () {
      const server = yield* startServer()
      const agent = yield* makeAgent({ request_timeout_ms: 2000 })
      const before = process.memoryUsage()
      const results = yield* Effect.forEach(
        Array.from({ length: 8 }),
        () => sendRaw(server.port, [u32(1 << 30), Buffer.from([Kind.Request, 1, 0, 0, 0, 1]), Buffer.alloc(4096)]),
        { concurrency: 8 }
      )
      expect(results.every((r) => r.closed)).toBe(true)
      const after = process.memoryUsage()
      expect(after.arrayBuffers - before.arrayBuffers).toBeLessThan(64 * 1024 * 1024)
      yield* agent.notify(server.address, makeNotification("still", "serving"))
      expect(server.received).toHaveLength(1)
    })
  )

  it.scopedLive(
    "a claimed length within the limit holds only the bytes that arrived, and a truncated frame then EOF is dropped",
    () =>
      Effect.gen(function* () {
        const server = yield* startServer()
        const agent = yield* makeAgent({ request_timeout_ms: 2000 })
        const before = process.memoryUsage()
        // 16 MiB claimed, 1 KiB sent, then nothing: the server waits, and holds 1 KiB
        const results = yield* Effect.forEach(
          Array.from({ length: 8 }),
          () => sendRaw(server.port, [u32(16 * 1024 * 1024), Buffer.alloc(1024)], 500),
          { concurrency: 8 }
        )
        expect(results.every((r) => !r.closed)).toBe(true)
        const after = process.memoryUsage()
        expect(after.arrayBuffers - before.arrayBuffers).toBeLessThan(32 * 1024 * 1024)
        // truncated then half-closed: the connection ends, nothing is delivered
        const truncated = yield* Effect.async<boolean>((resume) => {
          const s = Net.createConnection({ host: "127.0.0.1", port: server.port }, () => {
            s.end(Buffer.concat([u32(100), Buffer.from([Kind.Request, 1, 0, 0, 0, 1]), Buffer.alloc(10)]))
          })
          s.on("error", () => {})
          s.on("close", () => resume(Effect.succeed(true)))
          s.resume()
        })
        expect(truncated).toBe(true)
        yield* agent.notify(server.address, makeNotification("still", "serving"))
        expect(server.received).toHaveLength(1)
      })
  )
})
