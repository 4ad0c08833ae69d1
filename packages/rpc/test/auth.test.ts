import * as Crypto from "node:crypto"
import * as Net from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, type Scope } from "effect"
import {
  ControlPlane,
  type ControlPlaneHandlers,
  type Notification,
  RpcAgent,
  RpcConfig,
  Server,
  TentClient
} from "../src/index.js"
import { AuthKind } from "../src/internal/auth.js"
import { dataSpecByTag, specByTag } from "../src/internal/codec.js"
import { FrameWriter, Kind } from "../src/internal/frame.js"
import { bootstrapDesc } from "./helpers.js"

const SECRET = "correct horse battery staple 42"
const BASE = 0x10000
const SIZE = 64 * 1024

/** What reached the handlers: notifications, bootstraps, descriptors served, and the `x-tent-peer` each call saw. */
interface Seen {
  readonly notifications: Array<Notification>
  bootstraps: number
  descriptors: number
  readonly peers: Array<string | undefined>
}

const recording = (seen: Seen): Layer.Layer<ControlPlaneHandlers> =>
  ControlPlane.toLayer({
    Bootstrap: (desc, { headers }) =>
      Effect.sync(() => {
        seen.bootstraps++
        seen.peers.push(headers[Server.PEER_HEADER])
        return { ...desc, local_nic_path: desc.peer_nic_path, peer_nic_path: desc.local_nic_path }
      }),
    Notify: (n, { headers }) =>
      Effect.sync(() => {
        seen.notifications.push(n)
        seen.peers.push(headers[Server.PEER_HEADER])
      }),
    GetSegmentDesc: () =>
      Effect.sync(() => {
        seen.descriptors++
        return { name: "s", rpc_server_addr: "s", devices: [], buffers: [{ addr: BASE, length: SIZE, rkey: [7] }] }
      }),
    Probe: () => Effect.void
  })

/** A served server with `SIZE` bytes of memory at `BASE`, and what its handlers saw. */
const serve = (options: Server.ServerOptions) =>
  Effect.gen(function* () {
    const memory = Buffer.alloc(SIZE)
    for (let i = 0; i < SIZE; i++) memory[i] = (i * 13 + 5) & 0xff
    const seen: Seen = { notifications: [], bootstraps: 0, descriptors: 0, peers: [] }
    const ctx = yield* Layer.build(
      Server.layer({
        ...options,
        memory: {
          lookup: (a, n) => (a >= BASE && a + n <= BASE + SIZE ? { buffer: memory, offset: a - BASE } : undefined)
        }
      }).pipe(Layer.provide(recording(seen)))
    )
    const server = ctx.unsafeMap.get(Server.ServerAddress.key) as Server.ServerAddressShape
    const digest = () => Crypto.createHash("sha256").update(memory).digest("hex")
    return { server, seen, digest, memory }
  })

const agent = (secret?: string, name?: string): Effect.Effect<RpcAgent.RpcAgentShape, never, Scope.Scope> =>
  RpcAgent.make.pipe(
    Effect.provide(RpcConfig.layer({ connect_timeout_ms: 5000, request_timeout_ms: 5000 }, { secret })),
    name === undefined ? (e) => e : Effect.provideService(RpcAgent.AgentName, name)
  )

/** Every kind of call a peer can make, each one's exit. */
const everyCall = (a: RpcAgent.RpcAgentShape, address: string) =>
  Effect.all(
    [
      a.getSegmentDesc(address),
      a.sendData(address, BASE, new Uint8Array(256).fill(0xee)),
      a.recvData(address, BASE, 256),
      a.bootstrap(address, bootstrapDesc("evil:1@soft0")),
      a.notify(address, { name: new TextEncoder().encode("n"), msg: new TextEncoder().encode("m") }),
      a.probe(address)
    ] as const,
    { mode: "either" }
  )

describe("control-plane authentication: a peer without the secret gets nothing", () => {
  it.scopedLive("without the secret: no byte read or written, no descriptor, bootstrap or notification; counted", () =>
    Effect.gen(function* () {
      const { server, seen, digest } = yield* serve({ secret: SECRET })
      const before = digest()
      const outsider = yield* agent()
      const results = yield* everyCall(outsider, server.address)
      for (const r of results) {
        expect(r._tag).toBe("Left")
        expect(String((r as { left: unknown }).left)).toMatch(/authentication required|closed/)
      }
      // a wrong secret: the server's proof does not check out, the caller leaves; a forged proof is refused
      const wrong = yield* agent("another secret of sixteen+ bytes")
      const wrongResults = yield* everyCall(wrong, server.address)
      for (const r of wrongResults) expect(r._tag).toBe("Left")
      expect(String((wrongResults[0] as { left: unknown }).left)).toContain("did not prove the shared secret")
      yield* forgedProof(server.port)
      expect(digest()).toBe(before)
      expect([seen.notifications.length, seen.bootstraps, seen.descriptors]).toEqual([0, 0, 0])
      expect(server.data).toMatchObject({ sent: 0, received: 0 })
      expect(server.rejected?.auth_required).toBeGreaterThanOrEqual(1)
      // (the wrong-secret caller's leaving is seen when the server reads its close)
      yield* waitUntil(() => (server.rejected?.auth_failed ?? 0) >= 2)

      // with it: every call is served, and the handlers learn the name the caller proved
      const member = yield* agent(SECRET, "10.0.0.7:15000")
      const ok = yield* everyCall(member, server.address)
      for (const r of ok) expect(r._tag).toBe("Right")
      expect(digest()).not.toBe(before)
      expect([seen.notifications.length, seen.bootstraps, seen.descriptors]).toEqual([1, 1, 1])
      expect(seen.peers).toEqual(["10.0.0.7:15000", "10.0.0.7:15000"])
    })
  )

  it.scopedLive("negative control: the same outsider against a server without a secret reads and writes", () =>
    Effect.gen(function* () {
      const { server, seen, digest } = yield* serve({})
      const before = digest()
      const results = yield* everyCall(yield* agent(), server.address)
      for (const r of results) expect(r._tag).toBe("Right")
      expect(digest()).not.toBe(before)
      expect([seen.notifications.length, seen.bootstraps, seen.descriptors]).toEqual([1, 1, 1])
      expect(seen.peers).toEqual([undefined, undefined])
    })
  )

  it.scopedLive("requests pipelined behind a Hello and a forged Proof are never served", () =>
    Effect.gen(function* () {
      const { server, seen, digest } = yield* serve({ secret: SECRET })
      const before = digest()
      const w = new FrameWriter()
      w.begin(AuthKind.Hello, 0)
      w.u8(1)
      w.bytes(Crypto.randomBytes(32))
      w.end()
      w.begin(AuthKind.Proof, 0)
      w.bytes(Crypto.randomBytes(32))
      w.end()
      // SendData of 64 bytes at BASE, and GetSegmentDesc, encoded by the wire's own codecs
      for (let id = 1; id <= 50; id++) {
        const spec = id % 2 === 0 ? dataSpecByTag.SendData : specByTag.GetSegmentDesc
        w.begin(Kind.Request, id)
        w.u8(spec.index)
        spec.payload.encode(w, spec === specByTag.GetSegmentDesc ? undefined : { addr: BASE, data: new Uint8Array(64) })
        w.end()
      }
      const reply = yield* rawExchange(server.port, w.take())
      expect(reply.toString("latin1")).toContain("authentication failed")
      expect(digest()).toBe(before)
      expect(seen.bootstraps + seen.descriptors + seen.notifications.length).toBe(0)
    })
  )

  it.scopedLive("a caller holding a secret refuses a server without one, saying what to set", () =>
    Effect.gen(function* () {
      const { server, seen } = yield* serve({})
      const e = yield* Effect.flip((yield* agent(SECRET)).probe(server.address))
      expect(e.message).toContain("no shared secret")
      expect(seen.peers).toEqual([])
    })
  )

  it.scopedLive("with a secret set, TENT's wire (no authentication) is refused and counted", () =>
    Effect.gen(function* () {
      const { server, seen } = yield* serve({ secret: SECRET })
      const client = yield* TentClient.make({ host: "127.0.0.1", port: server.port })
      const exit = yield* Effect.exit(client.notify("x", "y"))
      expect(Exit.isFailure(exit)).toBe(true)
      expect(server.rejected?.tent_wire).toBe(1)
      expect(seen.notifications.length).toBe(0)
    })
  )
})

describe("control-plane allow-list", () => {
  it.scopedLive("a connection from outside rpc/allow_cidrs is closed unread and counted; inside it is served", () =>
    Effect.gen(function* () {
      const outside = yield* serve({ allowCidrs: ["10.0.0.0/8", "fd00::/8"] })
      const before = outside.digest()
      const results = yield* everyCall(yield* agent(), outside.server.address)
      for (const r of results) expect(r._tag).toBe("Left")
      expect(outside.digest()).toBe(before)
      expect(outside.seen.notifications.length + outside.seen.bootstraps + outside.seen.descriptors).toBe(0)
      expect(outside.server.rejected?.not_allowed).toBeGreaterThanOrEqual(1)

      const inside = yield* serve({ allowCidrs: ["127.0.0.0/8"] })
      for (const r of yield* everyCall(yield* agent(), inside.server.address)) expect(r._tag).toBe("Right")
      expect(inside.server.rejected?.not_allowed).toBe(0)
    })
  )

  it.effect("a list entry that is not an address or CIDR fails at start naming the key", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(Effect.scoped(Server.makeListener({ allowCidrs: ["10.0.0.0/40"] })))
      expect(e.message).toContain("rpc/allow_cidrs")
    })
  )
})

/** Sends `bytes` on a fresh connection and collects what comes back until the server closes it (bounded: 5 s). */
const rawExchange = (port: number, bytes: Buffer): Effect.Effect<Buffer, Error, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => Net.createConnection({ host: "127.0.0.1", port })),
    (s) => Effect.sync(() => s.destroy())
  ).pipe(
    Effect.flatMap((socket) =>
      Effect.async<Buffer, Error>((resume) => {
        const got: Array<Buffer> = []
        const timer = setTimeout(() => resume(Effect.fail(new Error("the server did not close in 5 s"))), 5000)
        socket.on("data", (c: Buffer) => got.push(c))
        socket.on("error", () => {})
        socket.on("close", () => {
          clearTimeout(timer)
          resume(Effect.succeed(Buffer.concat(got)))
        })
        socket.write(bytes)
      })
    )
  )

/** A Hello, then a Proof of random bytes once the challenge came: refused with `authentication failed`. */
const forgedProof = (port: number) =>
  Effect.gen(function* () {
    const w = new FrameWriter()
    w.begin(AuthKind.Hello, 0)
    w.u8(1)
    w.bytes(Crypto.randomBytes(32))
    w.end()
    w.begin(AuthKind.Proof, 0)
    w.bytes(Crypto.randomBytes(32))
    w.end()
    const reply = yield* rawExchange(port, w.take())
    expect(reply.toString("latin1")).toContain("authentication failed")
  })

const waitUntil = (cond: () => boolean, ms = 5000) =>
  Effect.gen(function* () {
    const start = Date.now()
    while (!cond()) {
      if (Date.now() - start > ms) return yield* Effect.die(new Error("condition not met in time"))
      yield* Effect.sleep("5 millis")
    }
  })
