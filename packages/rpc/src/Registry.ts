/**
 * The segment registry, which resolves a segment name to its descriptor: the peer registry (TENT's `p2p`, the
 * default), a central registry in memory, or one in Redis (TENT's `metadata_type: "redis"`).
 *
 * @since 0.1.0
 */
import { readFileSync } from "node:fs"
import { isIP } from "node:net"
import { Config, ConfigError, ConfigProvider, Context, Effect, Layer, Redacted, type Scope } from "effect"
import { InvalidEntry, TransportFailure } from "./Errors.js"
import { parseAddress } from "./internal/address.js"
import * as RedisClient from "./internal/redis/client.js"
import type { Reply } from "./internal/redis/resp.js"
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

/** Redis's own bound on a string (`proto-max-bulk-len`'s default, 512 MiB). */
const MAX_VALUE_BYTES_LIMIT = 512 * 1024 * 1024

/**
 * Largest value the Redis registry reads unless told otherwise (`maxValueBytes`, `TENT_REDIS_MAX_VALUE_BYTES`): 1 MiB,
 * room for a descriptor of a few thousand buffers. A larger value is refused on the reply's length prefix, before any
 * of its bytes is read.
 *
 * @since 0.3.0
 */
export const REDIS_DEFAULT_MAX_VALUE_BYTES = 1024 * 1024

/**
 * Where the Redis registry's server is, from `metadata_servers`.
 *
 * @since 0.3.0
 */
export interface RedisServer {
  readonly host: string
  readonly port: number
  /** `rediss://`: the connection is TLS. */
  readonly tls: boolean
}

/**
 * `host:port`, `[v6]:port` or a bare host (port {@link REDIS_DEFAULT_PORT}), as TENT's `parseHostNameWithPort`; the
 * same after `redis://`, or after `rediss://` for TLS (an optional trailing `/`). An address with credentials in it
 * (`rediss://user:pw@host`) is refused: they come from `MC_REDIS_USERNAME` / `MC_REDIS_PASSWORD`, which are never
 * printed, where a config value is.
 *
 * @since 0.1.0
 */
export const parseServer = (servers: string): RedisServer | undefined => {
  const s = servers.trim()
  const url = /^(rediss?):\/\/([^/@]*)\/?$/i.exec(s)
  if (url === null && (s.includes("/") || s.includes("@"))) return undefined
  const hostPort = url === null ? s : (url[2] as string)
  const address = parseAddress(hostPort) ?? parseAddress(`${hostPort}:${REDIS_DEFAULT_PORT}`)
  return address === undefined ? undefined : { ...address, tls: url?.[1]?.toLowerCase() === "rediss" }
}

/**
 * `metadata_servers` fit to print: credentials before an `@` replaced by `<redacted>`.
 *
 * @since 0.3.0
 */
export const redactServer = (servers: string): string =>
  servers.replace(/^(\s*(?:[a-z][a-z0-9+.-]*:\/\/)?)[^/@]*@/i, "$1<redacted>@")

/**
 * TLS settings of a `rediss://` registry. Without them the server's certificate must chain to Node's default CA set
 * (Mozilla's, plus `NODE_EXTRA_CA_CERTS`; the system's store under `node --use-openssl-ca`) and name the host.
 *
 * @since 0.3.0
 */
export interface RedisTlsOptions {
  /** PEM CA certificates trusted in place of the default set (`TENT_REDIS_CA_FILE` for the engine). */
  readonly ca?: string | Buffer | ReadonlyArray<string | Buffer> | undefined
  /**
   * Name sent as SNI and checked against the certificate. Default: the host when it is a name; for an IP address no
   * SNI, and the certificate must list the address.
   */
  readonly servername?: string | undefined
}

/**
 * How to reach the Redis server holding the registry.
 *
 * @since 0.1.0
 */
export interface RedisOptions {
  /** `metadata_servers`: `host:port`, a host, `redis://…` or `rediss://…` (TLS); see {@link parseServer}. */
  readonly address: string
  readonly username?: string | undefined
  /** Sent in `AUTH` and nowhere else; never printed. A `Redacted` since 0.3.0 (was a string). */
  readonly password?: Redacted.Redacted<string> | undefined
  /** Database index, 0-255 (TENT `MC_REDIS_DB_INDEX`). */
  readonly db?: number | undefined
  /** Bound on connecting, TLS and `AUTH` included (and on each reconnect); default {@link REDIS_DEFAULT_TIMEOUT_MS}. */
  readonly connectTimeoutMs?: number | undefined
  /** Bound on each GET / SET / DEL; default {@link REDIS_DEFAULT_TIMEOUT_MS}. */
  readonly commandTimeoutMs?: number | undefined
  /** Largest value read, 1 byte to 512 MiB (Redis's own bound); default {@link REDIS_DEFAULT_MAX_VALUE_BYTES}. Since 0.3.0. */
  readonly maxValueBytes?: number | undefined
  /** TLS settings; only with a `rediss://` address. Since 0.3.0. */
  readonly tls?: RedisTlsOptions | undefined
}

/**
 * A central registry in Redis (kind `central`).
 *
 * @since 0.1.0
 */
export interface RedisRegistry extends RegistryShape {
  /** The Redis server's address as configured (the `address` of its `TransportFailure`s). */
  readonly address: string
}

/**
 * The Redis registry's settings from the environment: TENT's `MC_REDIS_USERNAME`, `MC_REDIS_PASSWORD` (read as a
 * `Redacted`; empty = no `AUTH`) and `MC_REDIS_DB_INDEX` (0-255; unlike TENT, which warns and uses database 0, out of
 * range fails naming the variable), and this engine's `TENT_REDIS_CA_FILE` (PEM CAs for `rediss://`; empty = Node's
 * default set) and `TENT_REDIS_MAX_VALUE_BYTES`.
 *
 * @since 0.1.0
 */
export const redisEnv: Config.Config<{
  readonly username: string
  readonly password: Redacted.Redacted<string>
  readonly db: number
  readonly caFile: string
  readonly maxValueBytes: number
}> = Config.all({
  username: Config.string("MC_REDIS_USERNAME").pipe(Config.withDefault("")),
  password: Config.redacted("MC_REDIS_PASSWORD").pipe(Config.withDefault(Redacted.make(""))),
  db: Config.integer("MC_REDIS_DB_INDEX").pipe(
    Config.validate({ message: "must be a database index in 0..255", validation: (n) => n >= 0 && n <= 255 }),
    Config.withDefault(0)
  ),
  caFile: Config.string("TENT_REDIS_CA_FILE").pipe(
    Config.withDescription("PEM file of the CAs a rediss:// registry's certificate must chain to"),
    Config.withDefault("")
  ),
  maxValueBytes: Config.integer("TENT_REDIS_MAX_VALUE_BYTES").pipe(
    Config.validate({
      message: `must be a byte count in 1..${MAX_VALUE_BYTES_LIMIT}`,
      validation: (n) => n >= 1 && n <= MAX_VALUE_BYTES_LIMIT
    }),
    Config.withDescription("largest registry value read; a larger one is refused before its bytes are read"),
    Config.withDefault(REDIS_DEFAULT_MAX_VALUE_BYTES)
  )
})

/** Cut to a length a message can carry (a hostile value may be long). */
const clip = (s: string): string => (s.length > 200 ? `${s.slice(0, 200)}…` : s)

/**
 * The Redis registry: TENT's layout (key {@link segmentKey}, TENT's `SegmentDesc` JSON), plain GET / SET / DEL over
 * one connection (TLS under `rediss://`), in the current scope (`QUIT` when it closes). Every call is bounded: a call
 * that finds no connection opens one (within the connect timeout), a command is never resent, and one without an
 * answer within the command timeout fails and closes its connection. An unreachable, dropped or slow server, or a
 * refused TLS session or `AUTH`, is a `TransportFailure` whose `address` is the Redis server's. `InvalidEntry`: a
 * missing key; a value larger than `maxValueBytes` (refused on its length prefix, never read); a value that is not a
 * memory segment's descriptor; a descriptor whose `name` is not the name it was looked up by (an entry cannot stand
 * for another segment). Fails to build when it cannot connect, as TENT's engine does not start without its store.
 *
 * @since 0.1.0
 */
export const makeRedis = (options: RedisOptions): Effect.Effect<RedisRegistry, TransportFailure, Scope.Scope> =>
  Effect.gen(function* () {
    const address = redactServer(options.address)
    const server = parseServer(options.address)
    if (server === undefined) {
      return yield* new TransportFailure({
        address,
        reason: "Refused",
        message: `"${address}" is not a host:port, redis://host:port or rediss://host:port (credentials go in MC_REDIS_USERNAME / MC_REDIS_PASSWORD)`
      })
    }
    if (!server.tls && options.tls !== undefined) {
      return yield* new TransportFailure({
        address,
        reason: "Refused",
        message: `TLS settings given for "${address}", which is not a rediss:// address`
      })
    }
    const maxValueBytes = options.maxValueBytes ?? REDIS_DEFAULT_MAX_VALUE_BYTES
    if (!Number.isSafeInteger(maxValueBytes) || maxValueBytes < 1 || maxValueBytes > MAX_VALUE_BYTES_LIMIT) {
      return yield* Effect.dieMessage(
        `maxValueBytes must be an integer in 1..${MAX_VALUE_BYTES_LIMIT}, got ${maxValueBytes}`
      )
    }
    const ca = options.tls?.ca
    const client = yield* RedisClient.make({
      address,
      host: server.host,
      port: server.port,
      tls: server.tls
        ? {
            servername: options.tls?.servername ?? (isIP(server.host) === 0 ? server.host : undefined),
            ca: ca === undefined ? undefined : typeof ca === "string" || Buffer.isBuffer(ca) ? [ca] : ca
          }
        : undefined,
      username: options.username || undefined,
      password: options.password,
      db: options.db ?? 0,
      connectTimeoutMs: options.connectTimeoutMs ?? REDIS_DEFAULT_TIMEOUT_MS,
      commandTimeoutMs: options.commandTimeoutMs ?? REDIS_DEFAULT_TIMEOUT_MS,
      maxValueBytes
    })

    /** An error reply (or a reply of the wrong type) to a command: the server's `Protocol` failure. */
    const protocol = (op: string, reply: Reply) =>
      new TransportFailure({
        address,
        reason: "Protocol",
        message: `redis ${op}: ${reply._tag === "Error" ? clip(client.scrub(reply.value)) : `unexpected ${reply._tag} reply`}`
      })

    /** SET or DEL, whose replies are one line: a bulk reply of any size is the server's protocol error. */
    const write = (op: string, args: ReadonlyArray<string>) =>
      client
        .call(op, args)
        .pipe(
          Effect.catchTag("ValueTooLarge", (e) =>
            Effect.fail(
              new TransportFailure({ address, reason: "Protocol", message: `redis ${op}: a ${e.size}-byte reply` })
            )
          )
        )

    const machineId = TentSegment.localMachineId()
    return {
      kind: "central",
      address,
      getSegmentDesc: (name) => {
        const key = segmentKey(name)
        const invalid = (message: string) => new InvalidEntry({ segment: name, message })
        return client.call(`GET ${key}`, ["GET", key]).pipe(
          Effect.catchTag("ValueTooLarge", (e) =>
            Effect.fail(
              invalid(`${key} holds a value of ${e.size} bytes, over the registry's bound of ${e.max} bytes (not read)`)
            )
          ),
          Effect.flatMap((reply): Effect.Effect<SegmentDesc, InvalidEntry | TransportFailure> => {
            if (reply._tag === "Error" && reply.value.startsWith("WRONGTYPE")) {
              return Effect.fail(invalid(`key ${key} holds no string: ${clip(client.scrub(reply.value))}`))
            }
            if (reply._tag !== "Bulk") return Effect.fail(protocol(`GET ${key}`, reply))
            if (reply.value === null) return Effect.fail(invalid(`no segment named "${name}" (${key})`))
            const decoded = TentSegment.decode(reply.value.toString("utf8"))
            if (decoded._tag === "Left") {
              return Effect.fail(invalid(`${key} is not a segment descriptor: ${decoded.left}`))
            }
            const desc = decoded.right
            if (desc.name !== name) {
              return Effect.fail(
                invalid(
                  `${key} holds the descriptor of segment ${clip(JSON.stringify(desc.name))}, not of ${JSON.stringify(name)}: refused, an entry cannot stand for another segment`
                )
              )
            }
            return Effect.succeed(desc)
          })
        )
      },
      putSegmentDesc: (desc) => {
        const key = segmentKey(desc.name)
        const value = TentSegment.encode(desc, machineId)
        return write(`SET ${key}`, ["SET", key, value]).pipe(
          Effect.flatMap((reply) =>
            reply._tag === "Simple" && reply.value === "OK" ? Effect.void : Effect.fail(protocol(`SET ${key}`, reply))
          )
        )
      },
      deleteSegmentDesc: (name) => {
        const key = segmentKey(name)
        return write(`DEL ${key}`, ["DEL", key]).pipe(
          Effect.flatMap((reply) =>
            reply._tag === "Integer" ? Effect.void : Effect.fail(protocol(`DEL ${key}`, reply))
          )
        )
      }
    } satisfies RedisRegistry
  })

/**
 * The Redis registry as a Layer; credentials, CA file and value bound from {@link redisEnv} unless `options` gives
 * them. `TENT_REDIS_CA_FILE` with an address that is not `rediss://`, or a file that cannot be read, fails naming it.
 *
 * @since 0.1.0
 */
export const layerRedis = (options: RedisOptions): Layer.Layer<Registry, TransportFailure | ConfigError.ConfigError> =>
  Layer.scoped(
    Registry,
    Effect.gen(function* () {
      const env = yield* Effect.withConfigProvider(redisEnv, ConfigProvider.fromEnv())
      let tls = options.tls
      if (env.caFile !== "" && tls?.ca === undefined) {
        const caFile = env.caFile
        const caError = (message: string) => ConfigError.InvalidData(["TENT_REDIS_CA_FILE"], message)
        if (parseServer(options.address)?.tls !== true) {
          return yield* Effect.fail(
            caError(`is set, but "${redactServer(options.address)}" is not a rediss:// address`)
          )
        }
        const ca = yield* Effect.try({
          try: () => readFileSync(caFile),
          catch: (e) => caError(`cannot read ${caFile}: ${e instanceof Error ? e.message : String(e)}`)
        })
        tls = { ...tls, ca }
      }
      const password = options.password ?? env.password
      return yield* makeRedis({
        ...options,
        username: options.username ?? env.username,
        password: Redacted.value(password) === "" ? undefined : password,
        db: options.db ?? env.db,
        maxValueBytes: options.maxValueBytes ?? env.maxValueBytes,
        tls
      })
    })
  )
