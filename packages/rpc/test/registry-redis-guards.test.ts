/**
 * The Redis registry against a store it cannot trust (issue 31): a value's size bounded before it is read, a
 * descriptor bound to the name it was looked up by, `rediss://` (TLS through `node:tls`, the certificate checked),
 * and the password a `Redacted` that no error shows. Real `redis-server` children where Redis can do what the test
 * needs (TLS, `requirepass`, large values); a scripted RESP server over a real socket where it cannot (a value
 * announced and never sent, a password echoed back). Each guard has its control: the same input accepted, or
 * waited for, when the guard does not apply.
 */
import { inspect } from "node:util"
import { describe, expect, it } from "@effect/vitest"
import { Cause, ConfigProvider, Context, Effect, Layer, Redacted } from "effect"
import { Redis } from "ioredis"
import { InvalidEntry, Registry, type SegmentDesc, TransportFailure } from "../src/index.js"
import { skipRedis, startRedis } from "./fixtures/redis.js"
import { handshake, startRespServer } from "./fixtures/respServer.js"
import { makePki } from "./fixtures/tls.js"
import { besideTimer, eventually } from "./helpers.js"

const desc = (name: string): SegmentDesc => ({
  name,
  rpc_server_addr: "127.0.0.1:17001",
  devices: [{ name: "mlx0", lid: 0, gid: "00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:01" }],
  buffers: [{ addr: 0x7f00_0000_1000, length: 65536, rkey: [17], transports: ["rdma", "tcp"] }]
})

const timeouts = { connectTimeoutMs: 2000, commandTimeoutMs: 2000 }

/** A plain client of the test's own (on the server's plain port), to plant values. */
const plainClient = (port: number, password?: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const c = new Redis({ host: "127.0.0.1", port, lazyConnect: true, maxRetriesPerRequest: 0, password })
      c.on("error", () => {})
      await c.connect()
      return c
    }),
    (c) => Effect.sync(() => c.disconnect())
  )

/** Every way an error may be printed: String, JSON, util.inspect, the Cause's pretty form. */
const printed = (e: unknown): string =>
  [String(e), JSON.stringify(e), inspect(e, { depth: 10 }), Cause.pretty(Cause.fail(e))].join("\n")

describe("Redis registry: value size bound (scripted server)", () => {
  /** A server that answers GET with a bulk length of `announced` bytes and then sends nothing more. */
  const announcing = (announced: number) =>
    startRespServer((args) => handshake(args) ?? (args[0] === "GET" ? `$${announced}\r\n` : undefined))

  it.scopedLive(
    "a value announced over maxValueBytes is refused on its length prefix (InvalidEntry at once, connection closed); control: under a larger bound the same reply is waited for until the command timeout",
    () =>
      Effect.gen(function* () {
        const huge = 2 ** 40 // 1 TiB: more than a Buffer can hold, so reading it at all would fail differently
        const server = yield* announcing(huge)
        const registry = yield* Registry.makeRedis({
          address: server.address,
          connectTimeoutMs: 2000,
          commandTimeoutMs: 10_000
        })
        const { value: error, took } = yield* besideTimer(
          10_000,
          Effect.flip(registry.getSegmentDesc("prefill-0")).pipe(Effect.timeout("20 seconds"))
        )
        expect(error).toBeInstanceOf(InvalidEntry)
        expect(error.message).toContain(
          `a value of ${huge} bytes, over the registry's bound of 1048576 bytes (not read)`
        )
        // refused when the prefix came, not at the 10 s command timeout (a wide margin for a loaded machine)
        expect(took).toBeLessThan(5000)
        expect(yield* eventually(() => server.closed() === 1, 5000)).toBe(true)
        // the registry opens a new connection for the next call
        expect(yield* Effect.flip(registry.getSegmentDesc("prefill-0"))).toBeInstanceOf(InvalidEntry)
        expect(server.connections()).toBe(2)

        // Control: 64 MiB announced, 1 MiB bound: refused at once; 128 MiB bound: the client waits for the bytes.
        const mid = yield* announcing(64 * 1024 * 1024)
        const bounded = yield* Registry.makeRedis({
          address: mid.address,
          connectTimeoutMs: 2000,
          commandTimeoutMs: 1000
        })
        expect(yield* Effect.flip(bounded.getSegmentDesc("prefill-0"))).toBeInstanceOf(InvalidEntry)
        const roomy = yield* Registry.makeRedis({
          address: mid.address,
          connectTimeoutMs: 2000,
          commandTimeoutMs: 1000,
          maxValueBytes: 128 * 1024 * 1024
        })
        const waited = yield* Effect.flip(roomy.getSegmentDesc("prefill-0"))
        expect(waited).toMatchObject({ _tag: "TransportFailure", reason: "Timeout", address: mid.address })
      })
  )

  it.scopedLive("a reply line that never ends is refused at 64 KiB, not buffered until the timeout", () =>
    Effect.gen(function* () {
      const server = yield* startRespServer(
        (args) => handshake(args) ?? (args[0] === "GET" ? `+${"a".repeat(100 * 1024)}` : undefined)
      )
      const registry = yield* Registry.makeRedis({
        address: server.address,
        connectTimeoutMs: 2000,
        commandTimeoutMs: 10_000
      })
      const { value: error, took } = yield* besideTimer(10_000, Effect.flip(registry.getSegmentDesc("prefill-0")))
      expect(error).toMatchObject({ _tag: "TransportFailure", reason: "Protocol", address: server.address })
      expect(error.message).toContain("a reply line longer than 65536 bytes")
      expect(took).toBeLessThan(5000)
    })
  )

  it.scopedLive("a reply to no command closes the connection; the next call opens a new one", () =>
    Effect.gen(function* () {
      let sets = 0
      const server = yield* startRespServer(
        (args) => handshake(args) ?? (args[0] === "SET" ? (++sets === 1 ? "+OK\r\n+OK\r\n" : "+OK\r\n") : undefined)
      )
      const registry = yield* Registry.makeRedis({ address: server.address, ...timeouts })
      // the first SET is answered (the extra reply then closes the connection)
      yield* registry.putSegmentDesc(desc("a"))
      expect(yield* eventually(() => server.closed() === 1, 5000)).toBe(true)
      yield* registry.putSegmentDesc(desc("a"))
      expect(server.connections()).toBe(2)
    })
  )
})

describe("Redis registry: the password", () => {
  it("MC_REDIS_PASSWORD is read as a Redacted: the config value prints as <redacted>", () =>
    Effect.gen(function* () {
      const env = yield* Effect.withConfigProvider(
        Registry.redisEnv,
        ConfigProvider.fromMap(new Map([["MC_REDIS_PASSWORD", "hunter2-secret"]]))
      )
      expect(Redacted.value(env.password)).toBe("hunter2-secret")
      expect(printed(env)).not.toContain("hunter2-secret")
    }).pipe(Effect.runSync))

  it.scopedLive(
    "an AUTH refused with the password echoed back: the error names the refusal, never the password (control: the server did send it)",
    () =>
      Effect.gen(function* () {
        const secret = "hunter2-secret"
        const echoed: Array<string> = []
        const server = yield* startRespServer((args) => {
          if (args[0] !== "AUTH") return handshake(args)
          const reply = `-WRONGPASS no user with password ${args.slice(1).join(" ")}\r\n`
          echoed.push(reply)
          return reply
        })
        const options = {
          address: server.address,
          username: "tent",
          password: Redacted.make(secret),
          ...timeouts
        }
        const error = yield* Effect.flip(Effect.scoped(Registry.makeRedis(options)))
        expect(error).toMatchObject({ _tag: "TransportFailure", reason: "Refused", address: server.address })
        expect(error.message).toContain("redis AUTH: WRONGPASS no user with password tent <redacted>")
        expect(printed(error)).not.toContain(secret)
        expect(printed(options)).not.toContain(secret)
        // control: the password was on the wire to the server, and in the text it sent back
        expect(server.commands[0]).toEqual(["AUTH", "tent", secret])
        expect(echoed.join("")).toContain(secret)
      })
  )
})

describe.skipIf(skipRedis("registry-redis-guards"))("Redis registry against a real Redis: guards", () => {
  it.scopedLive(
    "a descriptor stored under another segment's key is refused, naming both (control: the same bytes under its own name read)",
    () =>
      Effect.gen(function* () {
        const redis = yield* startRedis()
        const registry = yield* Registry.makeRedis({ address: redis.address, ...timeouts })
        const plain = yield* plainClient(redis.port)
        yield* registry.putSegmentDesc(desc("attacker"))
        const value = yield* Effect.promise(() => plain.get("mooncake/tent/attacker"))
        yield* Effect.promise(() => plain.set("mooncake/tent/victim", value as string))

        const error = yield* Effect.flip(registry.getSegmentDesc("victim"))
        expect(error).toBeInstanceOf(InvalidEntry)
        expect(error).toMatchObject({ segment: "victim" })
        expect(error.message).toContain('holds the descriptor of segment "attacker", not of "victim"')
        expect(yield* registry.getSegmentDesc("attacker")).toEqual(desc("attacker"))
      })
  )

  it.scopedLive(
    "maxValueBytes is exact: a value of the bound is read, one byte more is InvalidEntry; the default bound refuses 2 MiB and the registry goes on",
    () =>
      Effect.gen(function* () {
        const redis = yield* startRedis()
        const plain = yield* plainClient(redis.port)
        const bound = 4096
        const registry = yield* Registry.makeRedis({ address: redis.address, ...timeouts, maxValueBytes: bound })
        yield* registry.putSegmentDesc(desc("edge"))
        const value = (yield* Effect.promise(() => plain.get("mooncake/tent/edge"))) as string
        expect(value.length).toBeLessThan(bound)
        yield* Effect.promise(() => plain.set("mooncake/tent/edge", value.padEnd(bound, " ")))
        expect(yield* registry.getSegmentDesc("edge")).toEqual(desc("edge"))
        yield* Effect.promise(() => plain.set("mooncake/tent/edge", value.padEnd(bound + 1, " ")))
        const over = yield* Effect.flip(registry.getSegmentDesc("edge"))
        expect(over).toBeInstanceOf(InvalidEntry)
        expect(over.message).toContain(`a value of ${bound + 1} bytes, over the registry's bound of ${bound} bytes`)

        const byDefault = yield* Registry.makeRedis({ address: redis.address, ...timeouts })
        yield* Effect.promise(() => plain.set("mooncake/tent/big", value.padEnd(2 * 1024 * 1024, " ")))
        const big = yield* Effect.flip(byDefault.getSegmentDesc("big"))
        expect(big.message).toContain(`over the registry's bound of ${Registry.REDIS_DEFAULT_MAX_VALUE_BYTES} bytes`)
        // control: the refused connection is replaced, and a value under the bound reads through it
        yield* byDefault.putSegmentDesc(desc("small"))
        expect(yield* byDefault.getSegmentDesc("small")).toEqual(desc("small"))
      })
  )

  it.scopedLive(
    "requirepass: the right password works; a wrong one is Refused (WRONGPASS) without the password in any printed form; none is Refused (NOAUTH)",
    () =>
      Effect.gen(function* () {
        const secret = "s3cret-for-the-registry"
        const redis = yield* startRedis(30_000, { requirepass: secret })
        const registry = yield* Registry.makeRedis({
          address: redis.address,
          ...timeouts,
          password: Redacted.make(secret)
        })
        yield* registry.putSegmentDesc(desc("a"))
        expect(yield* registry.getSegmentDesc("a")).toEqual(desc("a"))

        const wrong = "not-the-s3cret"
        const error = yield* Effect.flip(
          Effect.scoped(Registry.makeRedis({ address: redis.address, ...timeouts, password: Redacted.make(wrong) }))
        )
        expect(error).toMatchObject({ _tag: "TransportFailure", reason: "Refused", address: redis.address })
        expect(error.message).toContain("redis AUTH: WRONGPASS")
        expect(printed(error)).not.toContain(wrong)
        expect(printed(error)).not.toContain(secret)

        const none = yield* Effect.flip(Effect.scoped(Registry.makeRedis({ address: redis.address, ...timeouts })))
        expect(none).toMatchObject({ _tag: "TransportFailure", reason: "Refused" })
        expect(none.message).toContain("NOAUTH")
      })
  )
})

describe.skipIf(skipRedis("registry-redis-tls"))("Redis registry over TLS (rediss://)", () => {
  /** A Redis with a TLS port whose certificate (for 127.0.0.1 and redis.test) the test CA signed. */
  const tlsRedis = Effect.gen(function* () {
    const pki = yield* makePki
    const ca = pki.ca("tent test CA")
    const other = pki.ca("another CA")
    const cert = pki.server(ca, { ips: ["127.0.0.1"], dns: ["redis.test"] })
    const redis = yield* startRedis(30_000, { tls: cert, requirepass: "tls-pass" })
    const address = `rediss://127.0.0.1:${redis.tlsPort}`
    return { redis, ca, other, address, password: Redacted.make("tls-pass") }
  })

  it.scopedLive(
    "with the CA given, descriptors are stored and read over TLS (AUTH and SELECT inside it); the plain port is the control",
    () =>
      Effect.gen(function* () {
        const { redis, ca, address, password } = yield* tlsRedis
        const registry = yield* Registry.makeRedis({ address, ...timeouts, password, db: 3, tls: { ca: ca.cert } })
        expect(registry.address).toBe(address)
        yield* registry.putSegmentDesc(desc("secure-0"))
        expect(yield* registry.getSegmentDesc("secure-0")).toEqual(desc("secure-0"))
        // written through TLS to database 3: the plain port sees it there
        const plain = yield* plainClient(redis.port, "tls-pass")
        yield* Effect.promise(() => plain.select(3))
        expect(yield* Effect.promise(() => plain.exists("mooncake/tent/secure-0"))).toBe(1)
        // the TLS port does not speak plain RESP: host:port on it fails, bounded
        const cleartext = yield* Effect.flip(
          Effect.scoped(Registry.makeRedis({ address: `127.0.0.1:${redis.tlsPort}`, ...timeouts, password }))
        ).pipe(Effect.timeout("10 seconds"))
        expect(cleartext).toBeInstanceOf(TransportFailure)
      })
  )

  it.scopedLive(
    "the certificate is checked: refused without the CA (Node's default set), with another CA, and for another name (control: the right name via servername)",
    () =>
      Effect.gen(function* () {
        const { ca, other, address, password } = yield* tlsRedis
        const refused = (tls: Registry.RedisTlsOptions | undefined) =>
          Effect.flip(Effect.scoped(Registry.makeRedis({ address, ...timeouts, password, tls }))).pipe(
            Effect.timeout("10 seconds")
          )
        const noCa = yield* refused(undefined)
        expect(noCa).toMatchObject({ _tag: "TransportFailure", reason: "Refused", address })
        expect(noCa.message).toContain("TLS session with 127.0.0.1")
        expect(yield* refused({ ca: other.cert })).toMatchObject({ reason: "Refused" })
        const wrongName = yield* refused({ ca: ca.cert, servername: "elsewhere.test" })
        expect(wrongName).toMatchObject({ reason: "Refused" })
        expect(wrongName.message).toContain("ERR_TLS_CERT_ALTNAME_INVALID")

        const named = yield* Registry.makeRedis({
          address,
          ...timeouts,
          password,
          tls: { ca: ca.cert, servername: "redis.test" }
        })
        yield* named.putSegmentDesc(desc("named"))
        expect(yield* named.getSegmentDesc("named")).toEqual(desc("named"))
      })
  )

  it.scopedLive(
    "layerRedis takes the CA from TENT_REDIS_CA_FILE (control: unset, the same address is refused); set with a plain address it fails naming it",
    () =>
      Effect.gen(function* () {
        const { redis, ca, address } = yield* tlsRedis
        const saved = { ca: process.env.TENT_REDIS_CA_FILE, pw: process.env.MC_REDIS_PASSWORD }
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            for (const [k, v] of [
              ["TENT_REDIS_CA_FILE", saved.ca],
              ["MC_REDIS_PASSWORD", saved.pw]
            ] as const) {
              if (v === undefined) delete process.env[k]
              else process.env[k] = v
            }
          })
        )
        process.env.MC_REDIS_PASSWORD = "tls-pass"
        const build = (a: string) =>
          Effect.scoped(Layer.build(Registry.layerRedis({ address: a, ...timeouts }))).pipe(
            Effect.flip,
            Effect.timeout("10 seconds")
          )

        delete process.env.TENT_REDIS_CA_FILE
        expect(yield* build(address)).toMatchObject({ _tag: "TransportFailure", reason: "Refused" })

        process.env.TENT_REDIS_CA_FILE = ca.certFile
        yield* Effect.scoped(
          Effect.gen(function* () {
            const ctx = yield* Layer.build(Registry.layerRedis({ address, ...timeouts }))
            const registry = Context.get(ctx, Registry.Registry)
            yield* registry.putSegmentDesc(desc("env-ca"))
            expect(yield* registry.getSegmentDesc("env-ca")).toEqual(desc("env-ca"))
          })
        )
        const plain = yield* build(redis.address)
        expect(String(plain)).toContain("TENT_REDIS_CA_FILE")
        expect(String(plain)).toContain("is not a rediss:// address")
      })
  )
})

describe("Redis registry address: TLS and credentials", () => {
  it("rediss:// selects TLS; redis://, host:port and a bare host stay plain; credentials in the address are refused and redacted", () => {
    expect(Registry.parseServer("rediss://r.example:6380")).toEqual({ host: "r.example", port: 6380, tls: true })
    expect(Registry.parseServer("rediss://r.example/")).toEqual({ host: "r.example", port: 6379, tls: true })
    expect(Registry.parseServer("REDISS://[::1]:7000")).toEqual({ host: "::1", port: 7000, tls: true })
    expect(Registry.parseServer("redis://10.0.0.1:7001")).toEqual({ host: "10.0.0.1", port: 7001, tls: false })
    expect(Registry.parseServer("10.0.0.1:7001")).toEqual({ host: "10.0.0.1", port: 7001, tls: false })
    expect(Registry.parseServer("redis.local")).toEqual({ host: "redis.local", port: 6379, tls: false })
    expect(Registry.parseServer("rediss://user:pw@r.example:6380")).toBeUndefined()
    expect(Registry.parseServer("user:pw@r.example")).toBeUndefined()
    expect(Registry.parseServer("rediss://r.example:6380/2")).toBeUndefined()
    expect(Registry.parseServer("http://r.example:6380")).toBeUndefined()
    expect(Registry.redactServer("rediss://user:pw@r.example:6380")).toBe("rediss://<redacted>@r.example:6380")
    expect(Registry.redactServer("user:pw@r.example")).toBe("<redacted>@r.example")
    expect(Registry.redactServer("rediss://r.example:6380")).toBe("rediss://r.example:6380")
  })

  it.scopedLive("an address with credentials fails without printing them; TLS settings need rediss://", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(Effect.scoped(Registry.makeRedis({ address: "rediss://u:leaked@127.0.0.1:1" })))
      expect(error).toMatchObject({
        _tag: "TransportFailure",
        reason: "Refused",
        address: "rediss://<redacted>@127.0.0.1:1"
      })
      expect(printed(error)).not.toContain("leaked")
      const plain = yield* Effect.flip(Effect.scoped(Registry.makeRedis({ address: "127.0.0.1:1", tls: {} })))
      expect(plain.message).toContain("not a rediss:// address")
    })
  )
})
