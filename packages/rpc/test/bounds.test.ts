import * as Fs from "node:fs"
import * as Net from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, type Scope } from "effect"
import { ControlPlane, type ControlPlaneHandlers, RpcAgent, RpcConfig, Server } from "../src/index.js"
import { dataSpecByTag } from "../src/internal/codec.js"
import { FrameWriter, Kind } from "../src/internal/frame.js"
import { spawnPeer } from "./fixtures/process.js"

/** The peer fixture's memory base (see fixtures/peer.ts). */
const BASE = 0x10000
const MiB = 1024 * 1024

/** A process's resident set in bytes, from the kernel (the child's own, not this process's). */
const rssOf = (pid: number): number => {
  const m = /VmRSS:\s+(\d+) kB/.exec(Fs.readFileSync(`/proc/${pid}/status`, "utf8"))
  if (m === null) throw new Error(`no VmRSS for ${pid}`)
  return Number(m[1]) * 1024
}

/** `count` pipelined `RecvData` requests of `length` bytes at `BASE`, as one buffer. */
const recvRequests = (count: number, length: number): Buffer => {
  const w = new FrameWriter()
  const spec = dataSpecByTag.RecvData
  const parts: Array<Buffer> = []
  for (let id = 1; id <= count; id++) {
    w.begin(Kind.Request, id)
    w.u8(spec.index)
    spec.payload.encode(w, { addr: BASE, length })
    w.end()
    if (w.length > MiB) parts.push(w.take())
  }
  parts.push(w.take())
  return Buffer.concat(parts)
}

/** A connection that sends `bytes` and never reads a reply; destroyed with the scope. */
const neverReads = (port: number, bytes: Buffer): Effect.Effect<Net.Socket, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const socket = Net.createConnection({ host: "127.0.0.1", port })
      socket.on("error", () => {})
      socket.pause()
      socket.write(bytes)
      return socket
    }),
    (s) => Effect.sync(() => s.destroy())
  )

/** `n` sequential `Probe`s: their latencies in ms, sorted. */
const probes = (agent: RpcAgent.RpcAgentShape, address: string, n: number) =>
  Effect.gen(function* () {
    const ms: Array<number> = []
    for (let i = 0; i < n; i++) {
      const t0 = performance.now()
      yield* agent.probe(address)
      ms.push(performance.now() - t0)
      yield* Effect.sleep("2 millis")
    }
    return ms.sort((a, b) => a - b)
  })

const p99 = (sorted: ReadonlyArray<number>) => sorted[Math.floor(sorted.length * 0.99)] as number

/** The peer with 64 KiB of memory, `extra` args; 10^5 pipelined 4 KiB `RecvData` from a client that never reads. */
const flood = (extra: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const peer = yield* spawnPeer(["--memory", "65536", ...extra])
    const address = peer.ready.address
    const agent = yield* RpcAgent.make.pipe(Effect.provide(RpcConfig.layer({ request_timeout_ms: 10_000 })))
    yield* probes(agent, address, 50) // warm: the peer's code paths compiled, its heap settled
    const before = rssOf(peer.pid)
    yield* neverReads(peer.ready.port, recvRequests(100_000, 4096))
    // the server reads what it may and replies into a socket nobody reads: give it time to do all it will
    yield* Effect.sleep("1500 millis")
    const latencies = yield* probes(agent, address, 300)
    const grown = rssOf(peer.pid) - before
    return { grown, p99: p99(latencies) }
  })

describe("bounded against a client that pipelines and never reads", { timeout: 120_000 }, () => {
  it.scopedLive(
    "10^5 pipelined RecvData, never read: the server's rss grows < 64 MiB; another client's Probe p99 < 10 ms",
    () =>
      Effect.gen(function* () {
        const { grown, p99: p } = yield* flood([])
        console.log(
          `rss grown ${(grown / MiB).toFixed(1)} MiB, Probe p99 ${p.toFixed(2)} ms (budgets at their defaults)`
        )
        expect(grown).toBeLessThan(64 * MiB)
        expect(p).toBeLessThan(10)
      })
  )

  it.scopedLive("negative control: with the budgets lifted, the same client makes the server hold its replies", () =>
    Effect.gen(function* () {
      const { grown } = yield* flood(["--max-unread-reply", String(2 ** 40), "--max-inflight", String(1e9)])
      console.log(`rss grown ${(grown / MiB).toFixed(1)} MiB with the budgets lifted`)
      expect(grown).toBeGreaterThan(64 * MiB)
    })
  )
})

/** A server whose `Notify` handler holds each call `ms` and records how many run at once. */
const holding = (ms: number) => {
  const seen = { running: 0, most: 0, done: 0 }
  const handlers: Layer.Layer<ControlPlaneHandlers> = ControlPlane.toLayer({
    Bootstrap: (d) => Effect.succeed(d),
    Notify: () =>
      Effect.acquireUseRelease(
        Effect.sync(() => {
          seen.running++
          seen.most = Math.max(seen.most, seen.running)
        }),
        () => Effect.sleep(ms),
        () =>
          Effect.sync(() => {
            seen.running--
            seen.done++
          })
      ),
    GetSegmentDesc: () => Effect.die("unused"),
    Probe: () => Effect.void
  })
  return { seen, handlers }
}

const serveWith = (options: Server.ServerOptions, handlers: Layer.Layer<ControlPlaneHandlers>) =>
  Effect.map(
    Layer.build(Server.layer(options).pipe(Layer.provide(handlers))),
    (ctx) => ctx.unsafeMap.get(Server.ServerAddress.key) as Server.ServerAddressShape
  )

const notifyAll = (address: string, n: number) =>
  Effect.gen(function* () {
    const agent = yield* RpcAgent.make.pipe(Effect.provide(RpcConfig.layer({ notify_timeout_ms: 20_000 })))
    const one = { name: new Uint8Array([110]), msg: new Uint8Array([109]) }
    yield* Effect.all(
      Array.from({ length: n }, () => agent.notify(address, one)),
      { concurrency: "unbounded", discard: true }
    )
  })

describe("rpc/max_inflight and rpc/max_connections", () => {
  it.scopedLive("one connection's requests in hand stay at rpc/max_inflight; every one is answered", () =>
    Effect.gen(function* () {
      const { seen, handlers } = holding(20)
      const server = yield* serveWith({ maxInflight: 4 }, handlers)
      yield* notifyAll(server.address, 100)
      expect(seen.done).toBe(100)
      expect(seen.most).toBe(4)
    })
  )

  it.scopedLive("negative control: without the limit, the same 100 run at once", () =>
    Effect.gen(function* () {
      const { seen, handlers } = holding(20)
      const server = yield* serveWith({}, handlers)
      yield* notifyAll(server.address, 100)
      expect(seen.done).toBe(100)
      expect(seen.most).toBe(100)
    })
  )

  it.scopedLive("beyond rpc/max_connections a connection is closed unread and counted; once they leave, served", () =>
    Effect.gen(function* () {
      const { handlers } = holding(1)
      const server = yield* serveWith({ maxConnections: 8 }, handlers)
      const held = yield* Effect.acquireRelease(
        Effect.sync(() =>
          Array.from({ length: 20 }, () => {
            const s = Net.createConnection({ host: "127.0.0.1", port: server.port })
            s.on("error", () => {})
            return s
          })
        ),
        (all) =>
          Effect.sync(() => {
            for (const s of all) s.destroy()
          })
      )
      const start = Date.now()
      while ((server.rejected?.max_connections ?? 0) < 12 && Date.now() - start < 5000) yield* Effect.sleep("10 millis")
      expect(server.rejected?.max_connections).toBe(12)
      for (const s of held) s.destroy()
      yield* Effect.sleep("100 millis")
      yield* notifyAll(server.address, 1)
    })
  )
})

describe("an idle connection's frame writer", () => {
  it("starts at 4 KiB (one per peer an engine has an endpoint with), grows for a large frame and keeps it intact", () => {
    const w = new FrameWriter()
    expect(w.buffer.length).toBe(4096)
    const body = Buffer.alloc(100_000, 7)
    w.begin(Kind.Request, 1)
    w.bytes(body)
    w.end()
    expect(w.buffer.length).toBeGreaterThanOrEqual(100_009)
    const out = w.take()
    expect(out.readUInt32LE(0)).toBe(out.length - 4)
    expect(out.subarray(out.length - body.length).equals(body)).toBe(true)
  })
})
