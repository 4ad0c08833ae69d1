/**
 * The segment registry, which resolves a segment name to its descriptor: the peer registry (TENT's `p2p`, the
 * default), a central registry in memory, or one in Redis (TENT's `metadata_type: "redis"`).
 *
 * @since 0.1.0
 */
import { Config, type ConfigError, ConfigProvider, Context, Effect, Layer, type Scope } from "effect"
import type { Redis } from "ioredis"
import { InvalidEntry, TransportFailure, type TransportFailureReason } from "./Errors.js"
import { parseAddress } from "./internal/address.js"
import { connectFailureReason } from "./internal/connection.js"
import * as TentSegment from "./internal/tentSegment.js"
import type { SegmentDesc } from "./Models.js"
import { RpcAgent } from "./RpcAgent.js"

/**
 * Resolves a segment name to its descriptor.
 *
 * @since 0.1.0
 */
export interface RegistryShape {
  /**
   * `peer`: the name is the peer's `host:port` and a lookup asks that peer, so a refetch after a failed call goes to
   * the same address. `central`: a store that can hand out a new `rpc_server_addr` for the same name.
   */
  readonly kind: "peer" | "central"
  readonly getSegmentDesc: (name: string) => Effect.Effect<SegmentDesc, InvalidEntry | TransportFailure>
  /** Publishes this engine's descriptor under its name (TENT `putSegmentDesc`; the peer registry has nothing to do). */
  readonly putSegmentDesc: (desc: SegmentDesc) => Effect.Effect<void, TransportFailure>
  /** Removes a descriptor (TENT `deleteSegmentDesc`, at shutdown; a no-op for the peer registry). */
  readonly deleteSegmentDesc: (name: string) => Effect.Effect<void, TransportFailure>
}

/**
 * The segment registry of this engine.
 *
 * @since 0.1.0
 */
export class Registry extends Context.Tag("@tent/rpc/Registry")<Registry, RegistryShape>() {}

/**
 * The peer registry (TENT's `p2p`, the default): `GetSegmentDesc` sent to the address the name spells.
 *
 * @since 0.1.0
 */
export const makePeer: Effect.Effect<RegistryShape, never, RpcAgent> = Effect.map(RpcAgent, (agent) => ({
  kind: "peer" as const,
  getSegmentDesc: (name: string) => agent.getSegmentDesc(name),
  putSegmentDesc: () => Effect.void,
  deleteSegmentDesc: () => Effect.void
}))

/**
 * The peer registry as a Layer.
 *
 * @since 0.1.0
 */
export const layerPeer: Layer.Layer<Registry, never, RpcAgent> = Layer.effect(Registry, makePeer)

/**
 * A central registry held in memory: `putSegmentDesc` may move a segment to a new address (for tests and single hosts).
 *
 * @since 0.1.0
 */
export interface MemoryRegistry extends RegistryShape {
  /** How many lookups were made, per name. */
  readonly lookups: (name: string) => number
}

/**
 * Builds a {@link MemoryRegistry} (kind `central`).
 *
 * @example
 * ```ts
 * import { Registry } from "@tent/rpc"
 * import { Effect } from "effect"
 *
 * const registry = Registry.makeMemory()
 *
 * const program = Effect.gen(function* () {
 *   yield* registry.putSegmentDesc({ name: "node-a", rpc_server_addr: "127.0.0.1:12001", devices: [], buffers: [] })
 *   const desc = yield* registry.getSegmentDesc("node-a")
 *   console.log(desc.rpc_server_addr, registry.lookups("node-a")) // 127.0.0.1:12001 1
 * })
 *
 * Effect.runPromise(program)
 * ```
 *
 * @since 0.1.0
 */
export const makeMemory = (initial: Iterable<SegmentDesc> = []): MemoryRegistry => {
  const entries = new Map<string, SegmentDesc>()
  const counts = new Map<string, number>()
  for (const d of initial) entries.set(d.name, d)
  return {
    kind: "central",
    getSegmentDesc: (name) =>
      Effect.suspend(() => {
        counts.set(name, (counts.get(name) ?? 0) + 1)
        const d = entries.get(name)
        return d === undefined
          ? Effect.fail(new InvalidEntry({ segment: name, message: `no segment named "${name}"` }))
          : Effect.succeed(d)
      }),
    putSegmentDesc: (desc) => Effect.sync(() => void entries.set(desc.name, desc)),
    deleteSegmentDesc: (name) => Effect.sync(() => void entries.delete(name)),
    lookups: (name) => counts.get(name) ?? 0
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Redis (TENT's `metadata_type: "redis"`)
// ---------------------------------------------------------------------------------------------------------------------

/**
 * TENT's key of a segment's descriptor in a central store (`segment_registry.cpp`).
 *
 * @since 0.1.0
 */
export const segmentKey = (name: string): string => `mooncake/tent/${name}`

/**
 * TENT's `REDIS_DEFAULT_PORT`, used when `metadata_servers` names a host without a port.
 *
 * @since 0.1.0
 */
export const REDIS_DEFAULT_PORT = 6379

/**
 * Connect and per-command timeout of the Redis registry unless told otherwise (TENT's HTTP store uses 3 s too).
 *
 * @since 0.1.0
 */
export const REDIS_DEFAULT_TIMEOUT_MS = 3000

/**
 * `host:port`, `[v6]:port` or a bare host (port {@link REDIS_DEFAULT_PORT}), as TENT's `parseHostNameWithPort`.
 *
 * @since 0.1.0
 */
export const parseServer = (servers: string): { readonly host: string; readonly port: number } | undefined => {
  const s = servers.trim()
  return parseAddress(s) ?? parseAddress(`${s}:${REDIS_DEFAULT_PORT}`)
}

/**
 * How to reach the Redis server holding the registry.
 *
 * @since 0.1.0
 */
export interface RedisOptions {
  /** `metadata_servers`: `host:port` (see {@link parseServer}). */
  readonly address: string
  readonly username?: string | undefined
  readonly password?: string | undefined
  /** Database index, 0-255 (TENT `MC_REDIS_DB_INDEX`). */
  readonly db?: number | undefined
  /** Bound on connecting (and on each reconnect attempt); default {@link REDIS_DEFAULT_TIMEOUT_MS}. */
  readonly connectTimeoutMs?: number | undefined
  /** Bound on each GET / SET / DEL; default {@link REDIS_DEFAULT_TIMEOUT_MS}. */
  readonly commandTimeoutMs?: number | undefined
}

/**
 * A central registry in Redis (kind `central`).
 *
 * @since 0.1.0
 */
export interface RedisRegistry extends RegistryShape {
  /** The Redis server's `host:port` (the `address` of its `TransportFailure`s). */
  readonly address: string
}

/**
 * TENT's Redis credentials from the environment: `MC_REDIS_USERNAME`, `MC_REDIS_PASSWORD` and `MC_REDIS_DB_INDEX`
 * (0-255). Unlike TENT, which warns and uses database 0, an index out of range fails naming the variable.
 *
 * @since 0.1.0
 */
export const redisEnv: Config.Config<{ readonly username: string; readonly password: string; readonly db: number }> =
  Config.all({
    username: Config.string("MC_REDIS_USERNAME").pipe(Config.withDefault("")),
    password: Config.string("MC_REDIS_PASSWORD").pipe(Config.withDefault("")),
    db: Config.integer("MC_REDIS_DB_INDEX").pipe(
      Config.validate({ message: "must be a database index in 0..255", validation: (n) => n >= 0 && n <= 255 }),
      Config.withDefault(0)
    )
  })

const errorCode = (e: unknown): string | undefined =>
  typeof e === "object" && e !== null && "code" in e && typeof e.code === "string" ? e.code : undefined
const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/**
 * The Redis registry: TENT's layout (key {@link segmentKey}, TENT's `SegmentDesc` JSON), plain GET / SET / DEL, in
 * the current scope (the client quits when it closes). Every call is bounded: no offline queue (a call while the
 * connection is down fails at once, whatever the reconnect loop is doing), no retry of a command after a reconnect,
 * a per-command timeout. An unreachable, dropped or slow server is a `TransportFailure` whose `address` is the Redis
 * server's; a missing key or a value that is not a memory segment's descriptor is `InvalidEntry`. Fails to build
 * when it cannot connect, as TENT's engine does not start without its store.
 *
 * @since 0.1.0
 */
export const makeRedis = (options: RedisOptions): Effect.Effect<RedisRegistry, TransportFailure, Scope.Scope> =>
  Effect.gen(function* () {
    const address = options.address
    const server = parseServer(address)
    if (server === undefined) {
      return yield* new TransportFailure({ address, reason: "Refused", message: `"${address}" is not a host:port` })
    }
    const connectTimeoutMs = options.connectTimeoutMs ?? REDIS_DEFAULT_TIMEOUT_MS
    const commandTimeoutMs = options.commandTimeoutMs ?? REDIS_DEFAULT_TIMEOUT_MS
    let lastError: unknown
    // The client is loaded when a Redis registry is made, not by every program that imports the registry.
    const { Redis: RedisClient } = yield* Effect.promise(() => import("ioredis"))

    const failure = (op: string, cause: unknown): TransportFailure => {
      const text = errorText(cause)
      const code = errorCode(cause) ?? errorCode(lastError)
      const reason: TransportFailureReason = /timed out/i.test(text)
        ? "Timeout"
        : cause instanceof Error && cause.name === "ReplyError"
          ? "Protocol"
          : code === undefined
            ? "Closed"
            : connectFailureReason(code)
      const why = lastError === undefined || lastError === cause ? text : `${text} (${errorText(lastError)})`
      return new TransportFailure({ address, reason, message: `redis ${op}: ${why}` })
    }
    const timedOut = (op: string, ms: number) =>
      new TransportFailure({ address, reason: "Timeout", message: `redis ${op}: no answer within ${ms} ms` })

    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const c: Redis = new RedisClient({
          host: server.host,
          port: server.port,
          ...(options.username ? { username: options.username } : {}),
          ...(options.password ? { password: options.password } : {}),
          db: options.db ?? 0,
          lazyConnect: true,
          connectTimeout: connectTimeoutMs,
          commandTimeout: commandTimeoutMs,
          enableOfflineQueue: false,
          maxRetriesPerRequest: 0,
          autoResendUnfulfilledCommands: false,
          retryStrategy: (times) => Math.min(100 * times, 1000)
        })
        // Without a listener ioredis prints every connection error; the last one explains the next failed call.
        c.on("error", (e) => {
          lastError = e
        })
        c.on("ready", () => {
          lastError = undefined
        })
        return c
      }),
      (c) =>
        Effect.promise(() => c.quit().catch(() => undefined)).pipe(
          Effect.timeout(commandTimeoutMs),
          Effect.ignore,
          Effect.ensuring(Effect.sync(() => c.disconnect()))
        )
    )

    // ioredis bounds each call itself; this outer bound (+500 ms) only guards against a call it never settles.
    const run = <A>(op: string, f: () => Promise<A>, ms = commandTimeoutMs): Effect.Effect<A, TransportFailure> =>
      Effect.tryPromise({ try: f, catch: (e) => failure(op, e) }).pipe(
        Effect.timeoutFail({ duration: ms + 500, onTimeout: () => timedOut(op, ms) })
      )

    yield* run("connect", () => client.connect(), connectTimeoutMs)

    const machineId = TentSegment.localMachineId()
    return {
      kind: "central",
      address,
      getSegmentDesc: (name) => {
        const key = segmentKey(name)
        return run(`GET ${key}`, () => client.get(key)).pipe(
          Effect.catchIf(
            (e) => e.reason === "Protocol" && /WRONGTYPE/.test(e.message),
            (e) => Effect.fail(new InvalidEntry({ segment: name, message: `key ${key} holds no string: ${e.message}` }))
          ),
          Effect.flatMap((value) => {
            if (value === null) {
              return Effect.fail(new InvalidEntry({ segment: name, message: `no segment named "${name}" (${key})` }))
            }
            const decoded = TentSegment.decode(value)
            return decoded._tag === "Right"
              ? Effect.succeed(decoded.right)
              : Effect.fail(
                  new InvalidEntry({ segment: name, message: `${key} is not a segment descriptor: ${decoded.left}` })
                )
          })
        )
      },
      putSegmentDesc: (desc) => {
        const key = segmentKey(desc.name)
        const value = TentSegment.encode(desc, machineId)
        return Effect.asVoid(run(`SET ${key}`, () => client.set(key, value)))
      },
      deleteSegmentDesc: (name) => {
        const key = segmentKey(name)
        return Effect.asVoid(run(`DEL ${key}`, () => client.del(key)))
      }
    } satisfies RedisRegistry
  })

/**
 * The Redis registry as a Layer; credentials from {@link redisEnv} unless `options` gives them.
 *
 * @since 0.1.0
 */
export const layerRedis = (options: RedisOptions): Layer.Layer<Registry, TransportFailure | ConfigError.ConfigError> =>
  Layer.scoped(
    Registry,
    Effect.flatMap(Effect.withConfigProvider(redisEnv, ConfigProvider.fromEnv()), (env) =>
      makeRedis({
        ...options,
        username: options.username ?? env.username,
        password: options.password ?? env.password,
        db: options.db ?? env.db
      })
    )
  )
