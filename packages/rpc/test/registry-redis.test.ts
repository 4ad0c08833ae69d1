/**
 * The Redis registry against a real `redis-server` (a child process per test): TENT's key and JSON layout, the typed
 * errors of a missing key, a garbage value, a dead or frozen server, and the client quitting with its scope.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Redis } from "ioredis"
import { InvalidEntry, Registry, type SegmentDesc, TransportFailure } from "../src/index.js"
import { skipRedis, startRedis } from "./fixtures/redis.js"
import { besideTimer } from "./helpers.js"

const desc: SegmentDesc = {
  name: "prefill-0",
  rpc_server_addr: "127.0.0.1:17001",
  devices: [
    { name: "mlx0", lid: 0, gid: "00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:01" },
    { name: "mlx1", lid: 3, gid: "fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:02" }
  ],
  buffers: [
    { addr: 0x7f00_0000_1000, length: 65536, rkey: [17, 42], transports: ["rdma", "tcp"] },
    { addr: 0x10_0000_0000, length: 4096, rkey: [], transports: ["tcp"] }
  ]
}

/** A plain client, to look at (and spoil) what the registry stored. */
const plainClient = (port: number) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const c = new Redis({ host: "127.0.0.1", port, lazyConnect: true, maxRetriesPerRequest: 0 })
      c.on("error", () => {})
      await c.connect()
      return c
    }),
    (c) => Effect.sync(() => c.disconnect())
  )

const timeouts = { connectTimeoutMs: 1000, commandTimeoutMs: 1000 }

describe.skipIf(skipRedis("registry-redis"))("Redis registry", () => {
  it.scopedLive("stores a descriptor under TENT's key in TENT's JSON layout and reads it back", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis()
      const registry = yield* Registry.makeRedis({ address: redis.address, ...timeouts })
      expect(registry.kind).toBe("central")
      yield* registry.putSegmentDesc(desc)
      expect(yield* registry.getSegmentDesc("prefill-0")).toEqual(desc)

      const plain = yield* plainClient(redis.port)
      const raw = yield* Effect.promise(() => plain.get("mooncake/tent/prefill-0"))
      const json = JSON.parse(raw as string)
      expect(Object.keys(json).sort()).toEqual(["detail", "machine_id", "name", "rpc_server_addr", "type"])
      expect(json).toMatchObject({ name: "prefill-0", type: "memory", rpc_server_addr: "127.0.0.1:17001" })
      expect(typeof json.machine_id).toBe("string")
      expect(Object.keys(json.detail).sort()).toEqual([
        "buffers",
        "device_attrs",
        "devices",
        "topology",
        "transport_attrs"
      ])
      // TENT's RDMA path names a remote NIC by its id in the topology's NICs: ours are the devices, in order.
      expect(JSON.parse(json.detail.topology).nics.map((n: { name: string }) => n.name)).toEqual(["mlx0", "mlx1"])
      expect(json.detail.devices[1]).toEqual({
        name: "mlx1",
        lid: 3,
        gid: "fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:02",
        transport_attrs: []
      })
      // Every field of TENT's BufferDesc (its from_json needs them all); transports as TransportType numbers.
      expect(json.detail.buffers[0]).toEqual({
        addr: 0x7f00_0000_1000,
        length: 65536,
        location: "*",
        transports: [1, 7],
        regions: [],
        transport_attrs: [],
        rkey: [17, 42],
        shm_path: "",
        mnnvl_handle: "",
        internal: false
      })

      // A descriptor a TENT process wrote (with fields this engine does not use) reads too.
      yield* Effect.promise(() =>
        plain.set(
          "mooncake/tent/tent-node",
          JSON.stringify({
            name: "tent-node",
            type: "memory",
            machine_id: "b:m",
            rpc_server_addr: "10.0.0.2:12345",
            rdma_server_name: "10.0.1.2",
            detail: {
              device_attrs: {},
              topology: "{}",
              transport_attrs: [],
              devices: [{ name: "mlx5_0", lid: 1, gid: "fe:80::1", transport_attrs: [[1, "x"]] }],
              buffers: [
                {
                  addr: 4096,
                  length: 8192,
                  location: "cpu:0",
                  transports: [1, 3, 7],
                  regions: [{ size: 8192, location: "cpu:0" }],
                  transport_attrs: [],
                  rkey: [5],
                  shm_path: "/x",
                  mnnvl_handle: "",
                  internal: false
                }
              ]
            }
          })
        )
      )
      expect(yield* registry.getSegmentDesc("tent-node")).toEqual({
        name: "tent-node",
        rpc_server_addr: "10.0.0.2:12345",
        rdma_server_name: "10.0.1.2",
        devices: [{ name: "mlx5_0", lid: 1, gid: "fe:80::1" }],
        buffers: [{ addr: 4096, length: 8192, rkey: [5], transports: ["rdma", "shm", "tcp"] }]
      })

      yield* registry.deleteSegmentDesc("prefill-0")
      expect(yield* Effect.promise(() => plain.exists("mooncake/tent/prefill-0"))).toBe(0)
    })
  )

  it.scopedLive("a missing key is InvalidEntry", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis()
      const registry = yield* Registry.makeRedis({ address: redis.address, ...timeouts })
      const error = yield* Effect.flip(registry.getSegmentDesc("nobody"))
      expect(error).toBeInstanceOf(InvalidEntry)
      expect(error).toMatchObject({ segment: "nobody" })
    })
  )

  it.scopedLive(
    "a value that is not a segment descriptor is InvalidEntry (garbage, wrong shape, file segment, hash)",
    () =>
      Effect.gen(function* () {
        const redis = yield* startRedis()
        const registry = yield* Registry.makeRedis({ address: redis.address, ...timeouts })
        const plain = yield* plainClient(redis.port)
        const values = {
          garbage: "\u0000not json{",
          shape: JSON.stringify({ name: "shape", rpc_server_addr: 7 }),
          // well formed, so it reaches the check of its type
          file: JSON.stringify({
            name: "file",
            type: "file",
            machine_id: "",
            rpc_server_addr: "h:1",
            detail: { devices: [], buffers: [] }
          })
        }
        for (const [name, value] of Object.entries(values)) {
          yield* Effect.promise(() => plain.set(`mooncake/tent/${name}`, value))
          const error = yield* Effect.flip(registry.getSegmentDesc(name))
          expect(error, name).toBeInstanceOf(InvalidEntry)
          if (name === "file") expect(error.message).toContain("not a memory segment")
        }
        yield* Effect.promise(() => plain.hset("mooncake/tent/hash", "a", "b"))
        expect(yield* Effect.flip(registry.getSegmentDesc("hash"))).toBeInstanceOf(InvalidEntry)
      })
  )

  it.scopedLive("a killed server is a TransportFailure naming the Redis address, at once and not a hang", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis()
      const registry = yield* Registry.makeRedis({ address: redis.address, ...timeouts })
      yield* registry.putSegmentDesc(desc)
      yield* redis.kill
      const calls: ReadonlyArray<Effect.Effect<unknown, InvalidEntry | TransportFailure>> = [
        registry.getSegmentDesc("prefill-0"),
        registry.putSegmentDesc(desc),
        registry.deleteSegmentDesc("prefill-0")
      ]
      for (const call of calls) {
        const { value: error, late } = yield* besideTimer(
          timeouts.commandTimeoutMs,
          Effect.flip(call).pipe(Effect.timeout("5 seconds"))
        )
        expect(error).toBeInstanceOf(TransportFailure)
        expect(error).toMatchObject({ address: redis.address })
        expect(["Refused", "Closed"]).toContain((error as TransportFailure).reason)
        // The command timeout is 1 s; a call must not wait for the reconnect loop: it ends less than half a second
        // after a plain timer of the command timeout armed with it (which a loaded machine delays as much).
        expect(late).toBeLessThan(500)
      }
    })
  )

  it.scopedLive("a frozen server is a Timeout at the command timeout, not a retry's later one", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis()
      const registry = yield* Registry.makeRedis({ address: redis.address, ...timeouts })
      redis.signal("SIGSTOP")
      yield* Effect.addFinalizer(() => Effect.sync(() => redis.signal("SIGCONT")))
      const {
        value: error,
        took,
        late
      } = yield* besideTimer(
        timeouts.commandTimeoutMs,
        Effect.flip(registry.getSegmentDesc("prefill-0")).pipe(Effect.timeout("5 seconds"))
      )
      expect(error).toMatchObject({ _tag: "TransportFailure", reason: "Timeout", address: redis.address })
      // at the command's deadline: not before it, and not a whole second timeout later (a retried command), measured
      // against a plain timer of the command timeout armed with it
      expect(took).toBeGreaterThanOrEqual(timeouts.commandTimeoutMs - 1)
      expect(late).toBeLessThan(timeouts.commandTimeoutMs)
    })
  )

  it.scopedLive("no server at the address fails the registry's start with a TransportFailure, bounded", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis()
      const address = redis.address
      yield* redis.kill
      const error = yield* Effect.flip(Effect.scoped(Registry.makeRedis({ address, ...timeouts }))).pipe(
        Effect.timeout("5 seconds")
      )
      expect(error).toMatchObject({ _tag: "TransportFailure", reason: "Refused", address })
    })
  )

  it.scopedLive("the client quits when its scope closes", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis()
      const plain = yield* plainClient(redis.port)
      const clients = () => Effect.promise(() => plain.client("LIST") as Promise<string>)
      const before = (yield* clients()).trim().split("\n").length
      yield* Effect.scoped(
        Effect.gen(function* () {
          const registry = yield* Registry.makeRedis({ address: redis.address, ...timeouts })
          yield* registry.putSegmentDesc(desc)
          expect((yield* clients()).trim().split("\n").length).toBe(before + 1)
        })
      )
      // QUIT is answered before the server drops the connection; give it a moment to be gone from CLIENT LIST.
      let after = before + 1
      for (const deadline = Date.now() + 20_000; after !== before && Date.now() < deadline; ) {
        yield* Effect.sleep("20 millis")
        after = (yield* clients()).trim().split("\n").length
      }
      expect(after).toBe(before)
    })
  )
})

describe("Redis registry address", () => {
  it("parses metadata_servers as TENT does (default port 6379)", () => {
    expect(Registry.parseServer("127.0.0.1:6380")).toEqual({ host: "127.0.0.1", port: 6380, tls: false })
    expect(Registry.parseServer("redis.local")).toEqual({ host: "redis.local", port: 6379, tls: false })
    expect(Registry.parseServer("[::1]:7000")).toEqual({ host: "::1", port: 7000, tls: false })
    expect(Registry.parseServer("")).toBeUndefined()
    expect(Registry.parseServer("h:0")).toBeUndefined()
    expect(Registry.parseServer("h:99999")).toBeUndefined()
    expect(Registry.parseServer("a:b:c")).toBeUndefined()
  })
})
