/**
 * `TentClient` ↔ `TentServer` over real sockets on 127.0.0.1: TENT's calls round-trip, TCP chunking of any size is
 * reassembled, malformed input closes only the offending connection, and every wait is bounded.
 */
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as Bodies from "../../src/tent/Bodies.js"
import * as CoroRpc from "../../src/tent/CoroRpc.js"
import * as TentClient from "../../src/tent/TentClient.js"
import * as TentServer from "../../src/tent/TentServer.js"

const fixture = Fs.readFileSync(Path.join(import.meta.dirname, "fixtures", "segment-desc.memory.json"))

const handlers = (received: Array<Bodies.TentNotification>) =>
  new Map<number, TentServer.TentHandler>([
    [CoroRpc.TentFuncId.GetSegmentDesc, () => Effect.succeed(fixture)],
    [
      CoroRpc.TentFuncId.Notify,
      (req) =>
        Effect.map(Bodies.decodeNotify(req), (n) => {
          received.push(n)
          return undefined
        })
    ],
    [CoroRpc.TentFuncId.Probe, () => Effect.succeed(undefined)],
    [
      CoroRpc.TentFuncId.BootstrapRdma,
      (req) =>
        Effect.flatMap(Bodies.decodeBootstrapDesc(req), (d) =>
          Bodies.encodeBootstrapDesc({ ...d, peer_nic_path: d.local_nic_path, notify_qp_num: 77 })
        )
    ],
    [
      CoroRpc.TentFuncId.SendData,
      () => Effect.fail(new Error("SendData failed: target address not in registered buffer"))
    ],
    [CoroRpc.TentFuncId.RecvData, () => Effect.die("boom")]
  ])

/** Opens a raw socket to the server and collects decoded response frames. */
const rawPeer = (port: number) =>
  Effect.acquireRelease(
    Effect.async<{ socket: Net.Socket; frames: Array<CoroRpc.ResponseFrame>; closed: () => boolean }>((resume) => {
      const socket = Net.connect({ host: "127.0.0.1", port })
      const frames: Array<CoroRpc.ResponseFrame> = []
      const decoder = new CoroRpc.FrameDecoder("response")
      let closed = false
      socket.on("data", (c) => {
        const r = decoder.push(c)
        if (Either.isRight(r)) frames.push(...r.right)
      })
      socket.on("error", () => undefined)
      socket.on("close", () => {
        closed = true
      })
      socket.once("connect", () => resume(Effect.succeed({ socket, frames, closed: () => closed })))
    }),
    (p) => Effect.sync(() => p.socket.destroy())
  )

const waitUntil = (cond: () => boolean, ms = 5000) =>
  Effect.gen(function* () {
    const start = Date.now()
    while (!cond()) {
      if (Date.now() - start > ms) return yield* Effect.die(new Error("condition not met in time"))
      yield* Effect.sleep("5 millis")
    }
  })

describe("TentClient ↔ TentServer", () => {
  it.scopedLive("Notify, GetSegmentDesc, BootstrapRdma, Probe round-trip; unknown func id answers empty", () =>
    Effect.gen(function* () {
      const received: Array<Bodies.TentNotification> = []
      const server = yield* TentServer.make({ handlers: handlers(received) })
      const client = yield* TentClient.make({ host: "127.0.0.1", port: server.port })
      yield* client.notify("127.0.0.1:1", "hello é\n")
      expect(received).toEqual([{ name: "127.0.0.1:1", msg: "hello é\n" }])
      const seg = yield* client.getSegmentDesc()
      expect(Either.getOrThrow(Bodies.encodeSegmentDesc(seg)).toString()).toBe(fixture.toString())
      const b = yield* client.bootstrap({ ...Bodies.emptyBootstrapDesc, local_nic_path: "a@mlx5_0", notify_proto: 1 })
      expect([b.peer_nic_path, b.notify_qp_num, b.notify_proto]).toEqual(["a@mlx5_0", 77, 1])
      yield* client.probe()
      expect((yield* client.call(42, Buffer.from("ignored"))).length).toBe(0)
      // pipelined calls resolve by seq_num
      const many = yield* Effect.all(
        Array.from({ length: 20 }, (_, k) => client.notify("n", `m${k}`)),
        { concurrency: "unbounded" }
      )
      expect(many.length).toBe(20)
      expect(received.length).toBe(21)
      expect(server.stats()).toMatchObject({ unknownFuncId: 1, malformed: 0 })
    })
  )

  it.scopedLive("a failing handler is err_code 10 with its message (router.hpp:254-261); a defect too", () =>
    Effect.gen(function* () {
      const server = yield* TentServer.make({ handlers: handlers([]) })
      const client = yield* TentClient.make({ host: "127.0.0.1", port: server.port })
      const e = yield* Effect.flip(
        client.call(CoroRpc.TentFuncId.SendData, Bodies.encodeXferData({ peerMemAddr: 1n, length: 0n }))
      )
      expect([e.reason, e.errCode, e.message]).toEqual([
        "Remote",
        10,
        "SendData failed: target address not in registered buffer"
      ])
      const d = yield* Effect.flip(client.call(CoroRpc.TentFuncId.RecvData))
      expect([d.reason, d.errCode, d.message]).toEqual(["Remote", 10, "boom"])
      // the connection survives an error response
      yield* client.probe()
    })
  )

  it.scopedLive("requests delivered 1..N bytes at a time are reassembled; answers keep request order", () =>
    Effect.gen(function* () {
      const server = yield* TentServer.make({ handlers: handlers([]) })
      const peer = yield* rawPeer(server.port)
      const wire = Buffer.concat([
        CoroRpc.encodeRequest({ seqNum: 10, funcId: CoroRpc.TentFuncId.Probe }),
        CoroRpc.encodeRequest({ seqNum: 11, funcId: CoroRpc.TentFuncId.GetSegmentDesc }),
        CoroRpc.encodeRequest({
          seqNum: 12,
          funcId: CoroRpc.TentFuncId.Notify,
          attachment: Either.getOrThrow(Bodies.encodeNotify({ name: "x", msg: "y".repeat(5000) }))
        }),
        // another coro_rpc function id: err 11 (router.hpp:263-266)
        CoroRpc.encodeRequest({ seqNum: 13, funcId: 6, functionId: 0x12345678 })
      ])
      let i = 0
      let step = 1
      while (i < wire.length) {
        peer.socket.write(wire.subarray(i, i + step))
        i += step
        step = (step * 3 + 1) % 997 || 1
        if (i % 7 === 0) yield* Effect.sleep("1 millis")
      }
      yield* waitUntil(() => peer.frames.length === 4)
      expect(peer.frames.map((f) => f.header.seqNum)).toEqual([10, 11, 12, 13])
      expect(peer.frames[1]?.attachment.toString()).toBe(fixture.toString())
      expect(peer.frames[3]?.header.errCode).toBe(CoroRpc.Errc.function_not_registered)
      expect(Either.getOrThrow(CoroRpc.decodeErrorBody(11, peer.frames[3]?.body ?? Buffer.alloc(0))).message).toBe(
        "the rpc function not registered"
      )
      expect(server.stats()).toMatchObject({ requests: 4, unknownFunction: 1, malformed: 0 })
    })
  )

  it.scopedLive("a response delivered 1 byte at a time is reassembled by the client", () =>
    Effect.gen(function* () {
      const reply = Buffer.from("z".repeat(300))
      const raw = yield* Effect.acquireRelease(
        Effect.async<Net.Server>((resume) => {
          const s = Net.createServer((sock) => {
            const d = new CoroRpc.FrameDecoder("request")
            sock.on("error", () => undefined)
            sock.on("data", async (c) => {
              const r = d.push(c)
              if (Either.isLeft(r)) return
              for (const f of r.right) {
                const out = CoroRpc.encodeResponse({ seqNum: f.header.seqNum, attachment: reply })
                for (const byte of out) {
                  sock.write(Buffer.from([byte]))
                  await new Promise((ok) => setImmediate(ok))
                }
              }
            })
          })
          s.listen(0, "127.0.0.1", () => resume(Effect.succeed(s)))
        }),
        (s) => Effect.sync(() => s.close())
      )
      const port = (raw.address() as Net.AddressInfo).port
      const client = yield* TentClient.make({ host: "127.0.0.1", port })
      expect((yield* client.call(CoroRpc.TentFuncId.RecvData)).toString()).toBe(reply.toString())
    })
  )

  it.scopedLive("malformed frames close only that connection and are counted; the server keeps serving", () =>
    Effect.gen(function* () {
      const server = yield* TentServer.make({
        handlers: handlers([]),
        limits: { maxBody: 1024, maxAttachment: 1024 * 1024 }
      })
      const cases: Array<Buffer> = [
        Buffer.from("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), // bad magic
        (() => {
          const b = CoroRpc.encodeRequest({ seqNum: 1, funcId: 6 })
          b[1] = 1 // version 1
          return b
        })(),
        (() => {
          const b = Buffer.alloc(20)
          CoroRpc.writeRequestHeader(b, 0, {
            seqNum: 1,
            functionId: CoroRpc.PROCESS_FUNCTION_ID,
            length: 8,
            attachLength: 0xffffffff
          })
          return b // 4 GiB attachment: refused before allocating
        })()
      ]
      for (const bytes of cases) {
        const peer = yield* rawPeer(server.port)
        peer.socket.write(bytes)
        yield* waitUntil(peer.closed)
      }
      expect(server.stats().malformed).toBe(3)
      // an int argument that is not an int: err 4, connection kept (rpc_execute.hpp:204-208)
      const peer = yield* rawPeer(server.port)
      const bad = CoroRpc.encodeRequest({ seqNum: 5, funcId: 6 })
      bad[20] = 0x00
      peer.socket.write(bad)
      yield* waitUntil(() => peer.frames.length === 1)
      expect(peer.frames[0]?.header.errCode).toBe(CoroRpc.Errc.invalid_rpc_arguments)
      const client = yield* TentClient.make({ host: "127.0.0.1", port: server.port })
      yield* client.probe()
    })
  )

  it.scopedLive(
    "bounded waits: a silent peer times out, a closed port is Refused, a dropped connection is Closed",
    () =>
      Effect.gen(function* () {
        const sockets: Array<Net.Socket> = []
        const silent = yield* Effect.acquireRelease(
          Effect.async<Net.Server>((resume) => {
            const s = Net.createServer((sock) => {
              sockets.push(sock)
              sock.on("error", () => undefined)
            })
            s.listen(0, "127.0.0.1", () => resume(Effect.succeed(s)))
          }),
          (s) =>
            Effect.sync(() => {
              for (const x of sockets) x.destroy()
              s.close()
            })
        )
        const port = (silent.address() as Net.AddressInfo).port
        const client = yield* TentClient.make({ host: "127.0.0.1", port, requestTimeout: "200 millis" })
        const start = Date.now()
        const t = yield* Effect.flip(client.probe())
        expect(t.reason).toBe("Timeout")
        expect(Date.now() - start).toBeLessThan(5000)
        // the peer drops the connection: calls in flight fail Closed
        const inFlight = yield* Effect.fork(Effect.flip(client.call(6)))
        yield* waitUntil(() => sockets.length === 1)
        yield* Effect.sleep("20 millis")
        for (const x of sockets) x.destroy()
        const closed = yield* inFlight
        expect(closed.reason).toBe("Closed")
        expect(client.closed()).toBe(true)
        // nothing listens on a port we just freed
        const free = yield* Effect.async<number>((resume) => {
          const s = Net.createServer()
          s.listen(0, "127.0.0.1", () => {
            const p = (s.address() as Net.AddressInfo).port
            s.close(() => resume(Effect.succeed(p)))
          })
        })
        const refused = yield* Effect.flip(TentClient.make({ host: "127.0.0.1", port: free }))
        expect(refused.reason).toBe("Refused")
      })
  )
})
