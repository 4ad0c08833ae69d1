import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import {
  BootstrapRejected,
  ControlPlane,
  InvalidEntry,
  makeNotification,
  NotificationTooLarge,
  notificationText,
  Server,
  Stock,
  TransportFailure
} from "../src/index.js"
import { makeHandlers } from "./fixtures/handlers.js"
import { READY_WITHIN_MS, spawnPeer } from "./fixtures/process.js"
import { bootstrapDesc, eventually, makeAgent, startServer } from "./helpers.js"

describe("live peer (its own process)", { timeout: READY_WITHIN_MS + 30_000 }, () => {
  it.scopedLive("every RPC round-trips and a typed error arrives as its class", () =>
    Effect.gen(function* () {
      const peer = yield* spawnPeer()
      const address = peer.ready.address
      const agent = yield* makeAgent({ request_timeout_ms: 5000, bootstrap_timeout_ms: 5000, notify_timeout_ms: 5000 })

      yield* agent.probe(address)
      yield* agent.notify(address, makeNotification("req-1", Buffer.from([0, 255, 0, 1])))

      const reply = yield* agent.bootstrap(address, bootstrapDesc("me@soft0"))
      expect(reply.local_nic_path).toBe("peer@soft1")
      expect(reply.qp_num).toEqual([1011, 1012])
      expect(reply.notify_proto).toBe(1)

      const seg = yield* agent.getSegmentDesc(address)
      expect(seg.name).toBe(address)
      expect(seg.buffers[0]?.rkey).toEqual([42])

      const rejected = yield* Effect.flip(agent.bootstrap(address, bootstrapDesc("reject")))
      expect(rejected).toBeInstanceOf(BootstrapRejected)
      expect(rejected.message).toContain("NOT_READY")

      const died = yield* Effect.flip(agent.notify(address, makeNotification("die", "")))
      expect(died).toBeInstanceOf(TransportFailure)
      expect((died as TransportFailure).reason).toBe("Protocol")
      expect(died.message).toContain("handler died on purpose")

      // one connection per peer, reused by every call above
      expect(yield* agent.connections).toEqual([address])
    })
  )
})

describe("in-process server", () => {
  it.scopedLive("Notify delivers bytes as sent; the group's typed errors keep their class", () =>
    Effect.gen(function* () {
      const server = yield* startServer()
      const agent = yield* makeAgent()
      const msg = Buffer.alloc(70_000, 7) // larger than a 64 KiB notify slot: fine over RPC
      yield* agent.notify(server.address, makeNotification("big", msg))
      expect(server.received).toHaveLength(1)
      expect(notificationText(server.received[0] as never).name).toBe("big")
      expect(Buffer.from((server.received[0] as { msg: Uint8Array }).msg).equals(msg)).toBe(true)

      const none = yield* startServer({}, (_) => makeHandlers(() => ""))
      const missing = yield* Effect.flip(agent.getSegmentDesc(none.address))
      expect(missing).toBeInstanceOf(InvalidEntry)
    })
  )

  it.scopedLive("a Notify above the agent's maximum is refused with NotificationTooLarge without a connection", () =>
    Effect.gen(function* () {
      const server = yield* startServer()
      const agent = yield* makeAgent({ max_notify_bytes: 1024 })
      const error = yield* Effect.flip(agent.notify(server.address, makeNotification("n", Buffer.alloc(1024))))
      expect(error).toBeInstanceOf(NotificationTooLarge)
      expect((error as NotificationTooLarge).size).toBe(1025)
      expect(yield* agent.connections).toEqual([])
      expect(server.received).toHaveLength(0)
    })
  )

  it.scopedLive("a Notify above the server's maximum is refused by the server with NotificationTooLarge", () =>
    Effect.gen(function* () {
      const server = yield* startServer({ maxNotifyBytes: 1024 })
      const agent = yield* makeAgent()
      const error = yield* Effect.flip(agent.notify(server.address, makeNotification("n", Buffer.alloc(2000))))
      expect(error).toBeInstanceOf(NotificationTooLarge)
      expect(error).toMatchObject({ size: 2001, max: 1024 })
      expect(server.received).toHaveLength(0)
      // the connection survives a refused call
      yield* agent.notify(server.address, makeNotification("n", "small"))
      expect(server.received).toHaveLength(1)
    })
  )

  it.scopedLive("an invalid payload or address is a typed TransportFailure, not a defect", () =>
    Effect.gen(function* () {
      const server = yield* startServer()
      const agent = yield* makeAgent()
      const bad = yield* Effect.flip(agent.bootstrap(server.address, { ...bootstrapDesc("x"), qp_num: [-1] }))
      expect(bad).toMatchObject({ _tag: "TransportFailure", reason: "Protocol" })
      const addr = yield* Effect.flip(agent.probe("not-an-address"))
      expect(addr).toMatchObject({ _tag: "TransportFailure", reason: "Refused" })
    })
  )

  it.scopedLive("a call abandoned by its timeout interrupts the handler on the server", () =>
    Effect.gen(function* () {
      let interrupted = 0
      const server = yield* startServer({}, (address) =>
        ControlPlane.toLayer({
          Bootstrap: (d) => Effect.succeed(d),
          Notify: () =>
            Effect.never.pipe(
              Effect.onInterrupt(() =>
                Effect.sync(() => {
                  interrupted++
                })
              )
            ),
          GetSegmentDesc: () => Effect.fail(new InvalidEntry({ segment: address(), message: "none" })),
          Probe: () => Effect.void
        })
      )
      const agent = yield* makeAgent()
      const error = yield* Effect.flip(agent.notify(server.address, makeNotification("n", "m"), { timeout: 200 }))
      expect(error).toMatchObject({ reason: "Timeout" })
      yield* eventually(() => interrupted > 0)
      expect(interrupted).toBe(1)
      yield* agent.probe(server.address)
    })
  )
})

describe("stock @effect/rpc path (NodeSocketServer, msgpack)", () => {
  it.scopedLive("the same group and handlers round-trip, typed errors included", () =>
    Effect.gen(function* () {
      let address = ""
      const ctx = yield* Layer.build(
        Stock.layerServer({ disableTracing: true }).pipe(Layer.provide(makeHandlers(() => address)))
      )
      const bound = ctx.unsafeMap.get(Server.ServerAddress.key) as Server.ServerAddressShape
      address = bound.address
      expect(bound.port).toBeGreaterThan(0)
      const client = yield* Stock.makeClient({ host: bound.host, port: bound.port, disableTracing: true })
      yield* client.Notify(makeNotification("a", "b"))
      const reply = yield* client.Bootstrap(bootstrapDesc("me@soft0"))
      expect(reply.qp_num).toEqual([1011, 1012])
      const rejected = yield* Effect.flip(client.Bootstrap(bootstrapDesc("reject")))
      expect(rejected).toBeInstanceOf(BootstrapRejected)
      expect((yield* client.GetSegmentDesc()).name).toBe(address)
    })
  )
})
