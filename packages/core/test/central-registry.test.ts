/**
 * Engines under `metadata_type: "redis"` (TENT's central registry), against a real `redis-server` child process:
 * lookup by segment name, publication on start / registration / shutdown, and RFC PR 5's rule for a failed
 * control-plane call under a central registry: refetch once, run the call again only if the address changed.
 * Both engines run in this process (each on its own SoftVerbs devices and control-plane port); the peer is stopped by
 * closing its scope and started again with the same `local_segment_name` on a new port.
 */
import * as net from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, Registry, TransportFailure } from "@tent/rpc"
import { commandCalls, type RedisServer, skipRedis, startRedis } from "@tent/rpc/testing/redis"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import type { ConfigError } from "effect/ConfigError"
import { DescriptorPolicy, Series, TransferEngine } from "../src/index.js"
import { engineLayer } from "./fixtures/engine.js"

/** The legacy series with RFC PR 5's `DescriptorPolicy` (keepOnFailure) in place of its twin. */
const withPr5: Layer.Layer<Series.Policies, ConfigError> = Layer.merge(Series.legacy, Series.DescriptorPolicy)
/** TENT `main`: every legacy twin, `DescriptorPolicy.layerLegacy` included. */
const legacy: Layer.Layer<Series.Policies, ConfigError> = Layer.merge(Series.legacy, DescriptorPolicy.layerLegacy)

/**
 * An engine under the Redis registry, in its own scope (closed by the returned `stop`, or by the test's scope).
 * RDMA is off unless `rdma`: a notification then goes through the TCP transport's `Notify` to the peer's cached
 * `rpc_server_addr`, the call PR 5 is about.
 */
const startEngine = (
  redis: RedisServer,
  options: {
    readonly name?: string
    readonly rdma?: boolean
    readonly series?: Layer.Layer<Series.Policies, ConfigError>
    readonly devices?: ReadonlyArray<string>
  } = {}
) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    const json = {
      metadata_type: "redis",
      metadata_servers: redis.address,
      local_segment_name: options.name ?? "",
      rpc_server_hostname: "127.0.0.1",
      transports: { rdma: { enable: options.rdma ?? false } }
    }
    const ctx = yield* Scope.extend(
      Layer.build(engineLayer(json, options.devices ?? ["mlx0", "mlx1"], options.series ?? withPr5)),
      scope
    )
    const engine = Context.get(ctx, TransferEngine.TransferEngine)
    return { engine, stop: Scope.close(scope, Exit.void) }
  })

/** A Redis registry of the test's own, to look at what the engines published. */
const lookAt = (redis: RedisServer) =>
  Registry.makeRedis({ address: redis.address, connectTimeoutMs: 2000, commandTimeoutMs: 2000 })

/** Waits (at most `ms` of wall time: generous, for a loaded machine) until `f` returns something. */
const eventually = <A>(what: string, f: Effect.Effect<A | undefined>, ms = 20_000) =>
  Effect.gen(function* () {
    const deadline = Date.now() + ms
    for (;;) {
      const got = yield* f
      if (got !== undefined) return got
      if (Date.now() > deadline) return yield* Effect.die(new Error(`${what}: not within ${ms} ms`))
      yield* Effect.sleep("20 millis")
    }
  })

/**
 * A listener on a dead peer's old port that counts the connections made to it and closes each at once: a control
 * plane that is gone, where every call fails at the transport level and can be counted.
 */
const deadPeerAt = (address: string) =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: net.Server; readonly connections: () => number }, Error>((resume) => {
      let count = 0
      const server = net.createServer((socket) => {
        count++
        socket.destroy()
      })
      const [host, port] = address.split(":") as [string, string]
      server.once("error", (e) => resume(Effect.fail(e)))
      server.listen(Number(port), host, () => resume(Effect.succeed({ server, connections: () => count })))
    }),
    ({ server }) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  )

const received = (engine: TransferEngine.TransferEngineShape, got: Array<string>) =>
  Effect.map(engine.receiveNotifications, (ns) => {
    for (const n of ns) got.push(new TextDecoder().decode(n.name))
    return got
  })

// Above the sum of a test's bounded waits: Redis's start (30 s), two notifications awaited (20 s each), the engines.
describe.skipIf(skipRedis("central-registry"))("engines under metadata_type redis", { timeout: 120_000 }, () => {
  it.scopedLive("a segment is found by its name (not its address), with its devices and registered memory", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis()
      const registry = yield* lookAt(redis)
      const b = yield* startEngine(redis, { name: "decode-0", rdma: true, devices: ["mlx2", "mlx3"] })
      const a = yield* startEngine(redis, { rdma: true })
      expect(b.engine.segmentName).toBe("decode-0")
      expect(b.engine.address).not.toBe("decode-0")

      const published = yield* registry.getSegmentDesc("decode-0")
      expect(published.rpc_server_addr).toBe(b.engine.address)
      expect(published.devices.map((d) => d.name)).toEqual(["mlx2", "mlx3"])
      expect(published.buffers).toEqual([])
      // An engine without local_segment_name is published under its address.
      expect((yield* registry.getSegmentDesc(a.engine.address)).rpc_server_addr).toBe(a.engine.address)

      // Registering memory publishes the descriptor again.
      const memory = yield* b.engine.registerSegment(Buffer.alloc(8192))
      const after = yield* registry.getSegmentDesc("decode-0")
      expect(after.buffers).toEqual([
        { addr: memory.addr, length: 8192, rkey: expect.any(Array), transports: ["rdma", "tcp"] }
      ])

      expect(yield* a.engine.openSegment("decode-0")).toBeGreaterThan(0)
      yield* a.engine.probePeerAlive("decode-0")
      const error = yield* Effect.flip(a.engine.openSegment("nobody"))
      expect(error).toMatchObject({ _tag: "InvalidEntry", segment: "nobody" })
    })
  )

  it.scopedLive("an engine deletes its key when it stops", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis()
      const registry = yield* lookAt(redis)
      const b = yield* startEngine(redis, { name: "decode-0" })
      expect((yield* registry.getSegmentDesc("decode-0")).rpc_server_addr).toBe(b.engine.address)
      yield* b.stop
      expect(yield* Effect.flip(registry.getSegmentDesc("decode-0"))).toMatchObject({ _tag: "InvalidEntry" })
    })
  )

  it.scopedLive("an engine does not start when its Redis cannot be reached (a TransportFailure, bounded)", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis()
      yield* redis.kill
      const error = yield* Effect.flip(Effect.scoped(startEngine(redis))).pipe(Effect.timeout("10 seconds"))
      expect(error).toBeInstanceOf(TransportFailure)
      expect(error).toMatchObject({ address: redis.address })
    })
  )

  it.scopedLive(
    "RFC PR 5 (negative control: DescriptorPolicy.layerLegacy): address changed → one refetch, one retry at the new address; address unchanged → the call's own failure, no second call",
    () =>
      Effect.gen(function* () {
        const redis = yield* startRedis()
        const registry = yield* lookAt(redis)
        const a = yield* startEngine(redis, { series: withPr5 })

        // The peer restarts on a new port under the same name; A still holds the old descriptor.
        const b1 = yield* startEngine(redis, { name: "decode-0" })
        yield* a.engine.openSegment("decode-0")
        yield* b1.stop
        const b2 = yield* startEngine(redis, { name: "decode-0" })
        expect(b2.engine.address).not.toBe(b1.engine.address)
        expect((yield* registry.getSegmentDesc("decode-0")).rpc_server_addr).toBe(b2.engine.address)

        const getsBefore = yield* commandCalls(redis, "get")
        yield* a.engine.sendNotification("decode-0", makeNotification("moved-1", "m"))
        expect((yield* commandCalls(redis, "get")) - getsBefore).toBe(1) // one refetch from Redis
        const inbox: Array<string> = []
        yield* eventually(
          "the notification at the new address",
          Effect.map(received(b2.engine, inbox), (got) => (got.length > 0 ? got : undefined))
        )
        // Later calls go straight to the new address.
        yield* a.engine.sendNotification("decode-0", makeNotification("moved-2", "m"))
        yield* a.engine.probePeerAlive("decode-0")
        expect((yield* commandCalls(redis, "get")) - getsBefore).toBe(1)
        yield* eventually(
          "the second notification",
          Effect.map(received(b2.engine, inbox), (got) => (got.length > 1 ? got : undefined))
        )
        expect(inbox).toEqual(["moved-1", "moved-2"]) // each once

        // The peer dies without deleting its key (a crash): the refetch returns the same address. PR 5 keeps the
        // call's own failure and does not call the dead address again.
        const old = yield* registry.getSegmentDesc("decode-0")
        yield* b2.stop
        yield* registry.putSegmentDesc(old)
        const dead = yield* deadPeerAt(old.rpc_server_addr)
        const getsAtCrash = yield* commandCalls(redis, "get")
        const error = yield* Effect.flip(a.engine.sendNotification("decode-0", makeNotification("lost", "m")))
        expect(error).toBeInstanceOf(TransportFailure)
        expect(error).toMatchObject({ address: old.rpc_server_addr })
        expect((yield* commandCalls(redis, "get")) - getsAtCrash).toBe(1)
        expect(dead.connections()).toBe(1)
      })
  )

  it.scopedLive(
    "TENT main (DescriptorPolicy.layerLegacy) under Redis: a moved peer is reached too, but a dead one is called twice and reported InvalidEntry",
    () =>
      Effect.gen(function* () {
        const redis = yield* startRedis()
        const registry = yield* lookAt(redis)
        const a = yield* startEngine(redis, { series: legacy })

        const b1 = yield* startEngine(redis, { name: "decode-0" })
        yield* a.engine.openSegment("decode-0")
        yield* b1.stop
        const b2 = yield* startEngine(redis, { name: "decode-0" })
        const getsBefore = yield* commandCalls(redis, "get")
        yield* a.engine.sendNotification("decode-0", makeNotification("moved-1", "m"))
        expect((yield* commandCalls(redis, "get")) - getsBefore).toBe(1)
        const inbox: Array<string> = []
        yield* eventually(
          "the notification at the new address",
          Effect.map(received(b2.engine, inbox), (got) => (got.length > 0 ? got : undefined))
        )
        expect(inbox).toEqual(["moved-1"])

        const old = yield* registry.getSegmentDesc("decode-0")
        yield* b2.stop
        yield* registry.putSegmentDesc(old)
        const dead = yield* deadPeerAt(old.rpc_server_addr)
        const error = yield* Effect.flip(a.engine.sendNotification("decode-0", makeNotification("lost", "m")))
        expect(error).toMatchObject({ _tag: "InvalidEntry", segment: "decode-0" })
        expect(dead.connections()).toBe(2)
      })
  )
})
