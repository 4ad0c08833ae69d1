/**
 * The engine's configuration: TENT's `transfer-engine.json` (nested objects or flat `"a/b"` keys, both at once)
 * plus environment variables, turned into one Effect `ConfigProvider` that every package reads (`rpc/*` keys by
 * `RpcConfig`, `transports/rdma/rail_*` by `RailHealth`, the rest here).
 *
 * Every key the engine reads is in {@link keys} with its default, its description and its type. Unlike TENT, which
 * silently falls back to the default on a type mismatch, a value of the wrong JSON type or out of range fails at
 * start with a `ConfigError` that names the key. Keys the engine does not read are ignored (TENT files carry many).
 *
 * Environment: `MC_TENT_CONF` (a file path or inline JSON) replaces the file, as in TENT; TENT's legacy variables
 * `MC_RETRY_CNT`, `MC_MTU`, `MC_IB_TC`, `MC_IB_SL` map to their keys; and any key can be set by its constant-case
 * name (`transports/rdma/endpoint/path_mtu` → `TRANSPORTS_RDMA_ENDPOINT_PATH_MTU`, `rpc/notify_timeout_ms` →
 * `RPC_NOTIFY_TIMEOUT_MS`). The environment wins over the file.
 *
 * @since 0.1.0
 */
import { readFileSync } from "node:fs"
import { RpcConfig } from "@tent/rpc"
import { Config, ConfigError, ConfigProvider, Context, Effect, Either, Layer } from "effect"

/** The JSON type a key takes. */
export type KeyKind = "int" | "bool" | "string" | "strings"

/** One configuration key: its path, type, default, description and (for integers) the values it accepts. */
export interface KeySpec {
  readonly kind: KeyKind
  readonly default: number | boolean | string | ReadonlyArray<string>
  readonly description: string
  /** For `int`: accepted values, as a predicate and the message that names them. */
  readonly valid?: { readonly check: (n: number) => boolean; readonly message: string }
}

const int = (d: number, description: string, valid?: KeySpec["valid"]): KeySpec =>
  valid === undefined ? { kind: "int", default: d, description } : { kind: "int", default: d, description, valid }
const nonNegative = { check: (n: number) => n >= 0, message: "must be ≥ 0" }
const positive = { check: (n: number) => n > 0, message: "must be > 0" }
const u8 = { check: (n: number) => n >= 0 && n <= 255, message: "must be in 0..255" }
const timeoutMs = {
  check: (n: number) => n === -1 || n > 0,
  message: "must be -1 (the library default, 30 s) or a positive number of milliseconds"
}

/** Every key the engine (and the packages it configures) reads, with TENT's defaults. */
export const keys = {
  local_segment_name: {
    kind: "string",
    default: "",
    description: "this engine's segment name; empty = its RPC address (peer registry)"
  },
  metadata_type: {
    kind: "string",
    default: "p2p",
    description: "segment registry: p2p (the segment name is the peer's RPC address) is the one implemented"
  },
  rpc_server_hostname: { kind: "string", default: "127.0.0.1", description: "interface the control plane binds" },
  rpc_server_port: int(0, "control-plane port; 0 = any free port", {
    check: (n) => n >= 0 && n <= 65535,
    message: "must be a port number (0 = any free port)"
  }),
  "rpc/request_timeout_ms": int(-1, "GetSegmentDesc and Probe timeout in ms; -1 = library default (30 s)", timeoutMs),
  "rpc/bootstrap_timeout_ms": int(-1, "Bootstrap timeout in ms; -1 = library default (30 s)", timeoutMs),
  "rpc/notify_timeout_ms": int(-1, "Notify timeout in ms; -1 = library default (30 s)", timeoutMs),
  "rpc/connect_timeout_ms": int(-1, "connect timeout in ms; -1 = library default (30 s)", timeoutMs),
  "rpc/max_notify_bytes": int(16 * 1024 * 1024, "largest Notify (name + message) sent or accepted", positive),
  "rpc/max_data_bytes": int(16 * 1024 * 1024, "largest SendData / RecvData (TCP transfers) sent or served", positive),
  max_failover_attempts: int(
    3,
    "times a failed transfer task is resubmitted on the next transport its target offers; 0 = never",
    nonNegative
  ),
  enable_auto_failover_on_poll: {
    kind: "bool",
    default: true,
    description: "getTransferStatus resubmits a FAILED task on the next transport (max_failover_attempts)"
  },
  "transports/rdma/enable": { kind: "bool", default: true, description: "install the RDMA transport" },
  "transports/tcp/enable": { kind: "bool", default: true, description: "install the TCP transport" },
  "transports/rdma/num_lanes": int(6, "data QPs per endpoint (TENT num_lanes / qp_mul_factor)", {
    check: (n) => n >= 1 && n <= 64,
    message: "must be in 1..64"
  }),
  "transports/rdma/max_timeout_ns": int(10_000_000_000, "software timeout of an in-flight slice", positive),
  "transports/rdma/endpoint/path_mtu": int(4096, "data QP path MTU, clamped to the port's active MTU", {
    check: (n) => n === 512 || n === 1024 || n === 2048 || n === 4096,
    message: "must be 512, 1024, 2048 or 4096"
  }),
  "transports/rdma/endpoint/min_rnr_timer": int(12, "data QP min_rnr_timer (IB encoding; 12 = 0.64 ms)", {
    check: (n) => n >= 0 && n <= 31,
    message: "must be in 0..31"
  }),
  "transports/rdma/endpoint/send_timeout": int(14, "data QP local ACK timeout exponent (4.096 µs × 2^n)", {
    check: (n) => n >= 0 && n <= 31,
    message: "must be in 0..31"
  }),
  "transports/rdma/endpoint/send_retry_count": int(7, "data QP retry_cnt", {
    check: (n) => n >= 0 && n <= 7,
    message: "must be in 0..7"
  }),
  "transports/rdma/endpoint/send_rnr_count": int(7, "data QP rnr_retry (7 = forever)", {
    check: (n) => n >= 0 && n <= 7,
    message: "must be in 0..7"
  }),
  "transports/rdma/endpoint/max_rd_atomic": int(16, "data QP max_rd_atomic", u8),
  "transports/rdma/endpoint/max_dest_rd_atomic": int(16, "data QP max_dest_rd_atomic", u8),
  "transports/rdma/endpoint/hop_limit": int(16, "data QP GRH hop limit", u8),
  "transports/rdma/endpoint/traffic_class": int(0, "GRH traffic class (MC_IB_TC)", u8),
  "transports/rdma/endpoint/service_level": int(0, "service level (MC_IB_SL)", {
    check: (n) => n >= 0 && n <= 15,
    message: "must be in 0..15"
  }),
  "transports/rdma/endpoint/pkey_index": int(0, "P_Key index", nonNegative),
  "transports/rdma/endpoint/max_qp_wr": int(256, "work requests per data QP (send and receive)", {
    check: (n) => n >= 1 && n <= 16384,
    message: "must be in 1..16384"
  }),
  "transports/rdma/endpoint/max_sge": int(4, "scatter/gather entries per data WR", {
    check: (n) => n >= 1 && n <= 16,
    message: "must be in 1..16"
  }),
  "transports/rdma/endpoint/max_inline_bytes": int(64, "inline data bytes per data WR", nonNegative),
  "transports/rdma/endpoint/endpoint_store_cap": int(65536, "endpoints per device before eviction", positive),
  "transports/rdma/device/port": int(1, "port number of every device", positive),
  "transports/rdma/device/gid_index": int(-1, "GID index; -1 = automatic (0)", {
    check: (n) => n >= -1,
    message: "must be -1 (automatic) or an index"
  }),
  "transports/rdma/device/max_cqe": int(4096, "depth of every CQ (clamped to the device)", positive),
  "transports/rdma/device/num_cq_list": int(6, "data CQs per device", {
    check: (n) => n >= 1 && n <= 64,
    message: "must be in 1..64"
  }),
  "transports/rdma/workers/num_workers": int(6, "worker fibers posting slices", {
    check: (n) => n >= 1 && n <= 64,
    message: "must be in 1..64"
  }),
  "transports/rdma/workers/max_retry_count": int(8, "attempts of a slice before it fails (MC_RETRY_CNT)", positive),
  "transports/rdma/workers/block_size": int(65536, "slice size in bytes", {
    check: (n) => n >= 4096,
    message: "must be at least 4096"
  }),
  "transports/rdma/rail_error_threshold": int(3, "errors within the window that pause a NIC pair", positive),
  "transports/rdma/rail_error_window_secs": int(10, "window of the rail error count, seconds", positive),
  "transports/rdma/rail_cooldown_secs": int(30, "first pause of a NIC pair, seconds (doubles, ≤ 300)", positive),
  "transports/tcp/max_retry_count": int(3, "attempts of a TCP transfer", positive),
  "transports/tcp/retry_base_delay_ms": int(100, "first TCP retry delay, doubling", nonNegative),
  "transports/tcp/retry_max_delay_ms": int(2000, "largest TCP retry delay", nonNegative),
  "transports/tcp/max_concurrent_tasks": int(16, "concurrent TCP transfer tasks", positive),
  "topology/rdma_whitelist": {
    kind: "strings",
    default: [],
    description: "RDMA devices to use (MC_TE_FILTERS); empty = every device"
  },
  "topology/rdma_blacklist": {
    kind: "strings",
    default: [],
    description: "RDMA devices not to use (MC_TE_FILTERS_EXCLUDE)"
  }
} as const satisfies Record<string, KeySpec>

/** A key of {@link keys}. */
export type Key = keyof typeof keys

/** TENT's legacy environment variables and the key each sets. */
export const legacyEnv: Record<string, Key> = {
  MC_RETRY_CNT: "transports/rdma/workers/max_retry_count",
  MC_MTU: "transports/rdma/endpoint/path_mtu",
  MC_IB_TC: "transports/rdma/endpoint/traffic_class",
  MC_IB_SL: "transports/rdma/endpoint/service_level",
  MC_TE_FILTERS: "topology/rdma_whitelist",
  MC_TE_FILTERS_EXCLUDE: "topology/rdma_blacklist"
}

/** The constant-case environment variable of a key: `rpc/notify_timeout_ms` → `RPC_NOTIFY_TIMEOUT_MS`. */
export const envName = (key: string): string => key.replace(/[/.-]/g, "_").toUpperCase()

const invalid = (key: string, message: string) => ConfigError.InvalidData(key.split("/"), message)

/** Flattens a JSON config (nested objects and `"a/b"` keys) to `key → JSON value` for the keys the engine reads. */
const flatten = (json: unknown, prefix = "", out = new Map<string, unknown>()): Map<string, unknown> => {
  if (json === null || typeof json !== "object" || Array.isArray(json)) return out
  for (const [k, v] of Object.entries(json as Record<string, unknown>)) {
    const path = prefix === "" ? k : `${prefix}/${k}`
    if (path in keys) out.set(path, v)
    else if (v !== null && typeof v === "object" && !Array.isArray(v)) flatten(v, path, out)
  }
  return out
}

/** Checks one JSON value against its key's type; returns the string form `ConfigProvider.fromMap` carries. */
const fromJsonValue = (key: Key, value: unknown): Either.Either<string, ConfigError.ConfigError> => {
  const spec: KeySpec = keys[key]
  switch (spec.kind) {
    case "int":
      return typeof value === "number" && Number.isInteger(value)
        ? Either.right(String(value))
        : Either.left(invalid(key, `Expected an integer, got ${JSON.stringify(value)}`))
    case "bool":
      return typeof value === "boolean"
        ? Either.right(String(value))
        : Either.left(invalid(key, `Expected true or false, got ${JSON.stringify(value)}`))
    case "string":
      return typeof value === "string"
        ? Either.right(value)
        : Either.left(invalid(key, `Expected a string, got ${JSON.stringify(value)}`))
    case "strings":
      return Array.isArray(value) && value.every((s) => typeof s === "string" && !s.includes(","))
        ? Either.right(value.join(","))
        : Either.left(invalid(key, `Expected an array of names, got ${JSON.stringify(value)}`))
  }
}

/** Where the configuration comes from. */
export interface ConfigSource {
  /** The parsed `transfer-engine.json` (or an object in code). */
  readonly json?: unknown
  /** A path to a `transfer-engine.json`. */
  readonly file?: string
  /** Environment variables (default: none; pass `process.env` to read the real ones). */
  readonly env?: Readonly<Record<string, string | undefined>>
}

/**
 * Builds the `ConfigProvider` of a source: JSON values type-checked per key, environment over file. Fails with a
 * `ConfigError` naming the key on a value of the wrong type, or when the file or `MC_TENT_CONF` does not parse.
 */
export const provider = (
  source: ConfigSource = {}
): Effect.Effect<ConfigProvider.ConfigProvider, ConfigError.ConfigError> =>
  Effect.suspend(() => {
    const env = source.env ?? {}
    let json: unknown = source.json ?? {}
    const readJson = (what: string, text: string): Either.Either<unknown, ConfigError.ConfigError> =>
      Either.try({
        try: () => JSON.parse(text) as unknown,
        catch: (e) => invalid(what, `not valid JSON: ${(e as Error).message}`)
      })
    if (source.file !== undefined) {
      const text = Either.try({
        try: () => readFileSync(source.file as string, "utf8"),
        catch: (e) => invalid("config_file", `cannot read ${source.file}: ${(e as Error).message}`)
      })
      if (Either.isLeft(text)) return Effect.fail(text.left)
      const parsed = readJson("config_file", text.right)
      if (Either.isLeft(parsed)) return Effect.fail(parsed.left)
      json = parsed.right
    }
    const conf = env.MC_TENT_CONF
    if (conf !== undefined && conf !== "") {
      const trimmed = conf.trim()
      let text = trimmed
      if (!trimmed.startsWith("{")) {
        const read = Either.try({
          try: () => readFileSync(trimmed, "utf8"),
          catch: (e) => invalid("MC_TENT_CONF", `cannot read ${trimmed}: ${(e as Error).message}`)
        })
        if (Either.isLeft(read)) return Effect.fail(read.left)
        text = read.right
      }
      const parsed = readJson("MC_TENT_CONF", text)
      if (Either.isLeft(parsed)) return Effect.fail(parsed.left)
      json = parsed.right
    }
    const map = new Map<string, string>()
    for (const [key, value] of flatten(json)) {
      const s = fromJsonValue(key as Key, value)
      if (Either.isLeft(s)) return Effect.fail(s.left)
      map.set(key, s.right)
    }
    for (const [name, key] of Object.entries(legacyEnv)) {
      const v = env[name]
      if (v !== undefined && v !== "") map.set(key, v)
    }
    for (const key of Object.keys(keys)) {
      const v = env[envName(key)]
      if (v !== undefined && v !== "") map.set(key, v)
    }
    return Effect.succeed(ConfigProvider.fromMap(map, { pathDelim: "/", seqDelim: "," }))
  })

const intKey = (key: Key) => {
  const spec = keys[key] as KeySpec
  const base = Config.integer(key)
  const checked =
    spec.valid === undefined
      ? base
      : base.pipe(Config.validate({ message: spec.valid.message, validation: spec.valid.check }))
  return checked.pipe(Config.withDefault(spec.default as number), Config.withDescription(spec.description))
}
const boolKey = (key: Key) =>
  Config.boolean(key).pipe(
    Config.withDefault(keys[key].default as boolean),
    Config.withDescription(keys[key].description)
  )
const stringKey = (key: Key) =>
  Config.string(key).pipe(
    Config.withDefault(keys[key].default as string),
    Config.withDescription(keys[key].description)
  )
const stringsKey = (key: Key) =>
  Config.array(Config.string(), key).pipe(
    Config.withDefault(keys[key].default as ReadonlyArray<string>),
    Config.withDescription(keys[key].description)
  )

/** TENT's `EndPointParams` (data QPs), after config. */
export interface EndpointParams {
  readonly pathMtu: number
  readonly minRnrTimer: number
  readonly sendTimeout: number
  readonly sendRetryCount: number
  readonly sendRnrCount: number
  readonly maxRdAtomic: number
  readonly maxDestRdAtomic: number
  readonly hopLimit: number
  readonly trafficClass: number
  readonly serviceLevel: number
  readonly pkeyIndex: number
  readonly maxQpWr: number
  readonly maxSge: number
  readonly maxInlineBytes: number
  readonly endpointStoreCap: number
}

/** The engine's settings (the `rpc/*` ones live in `RpcConfig`, the rail ones in `RailHealth`). */
export interface EngineSettings {
  readonly localSegmentName: string
  readonly metadataType: "p2p"
  readonly rpcServerHostname: string
  readonly rpcServerPort: number
  readonly maxFailoverAttempts: number
  readonly autoFailoverOnPoll: boolean
  readonly rdmaEnable: boolean
  readonly tcpEnable: boolean
  readonly numLanes: number
  readonly maxTimeoutNs: number
  readonly endpoint: EndpointParams
  readonly device: {
    readonly port: number
    readonly gidIndex: number
    readonly maxCqe: number
    readonly numCqList: number
  }
  readonly workers: { readonly numWorkers: number; readonly maxRetryCount: number; readonly blockSize: number }
  readonly tcp: {
    readonly maxRetryCount: number
    readonly retryBaseDelayMs: number
    readonly retryMaxDelayMs: number
    readonly maxConcurrentTasks: number
  }
  readonly whitelist: ReadonlyArray<string>
  readonly blacklist: ReadonlyArray<string>
}

/** The engine's settings read from the current `ConfigProvider`. */
export const config: Config.Config<EngineSettings> = Config.all({
  localSegmentName: stringKey("local_segment_name"),
  metadataType: stringKey("metadata_type").pipe(
    Config.validate({
      message: 'must be "p2p" (the only registry this engine implements)',
      validation: (s): s is "p2p" => s === "p2p"
    })
  ),
  rpcServerHostname: stringKey("rpc_server_hostname"),
  rpcServerPort: intKey("rpc_server_port"),
  maxFailoverAttempts: intKey("max_failover_attempts"),
  autoFailoverOnPoll: boolKey("enable_auto_failover_on_poll"),
  rdmaEnable: boolKey("transports/rdma/enable"),
  tcpEnable: boolKey("transports/tcp/enable"),
  numLanes: intKey("transports/rdma/num_lanes"),
  maxTimeoutNs: intKey("transports/rdma/max_timeout_ns"),
  endpoint: Config.all({
    pathMtu: intKey("transports/rdma/endpoint/path_mtu"),
    minRnrTimer: intKey("transports/rdma/endpoint/min_rnr_timer"),
    sendTimeout: intKey("transports/rdma/endpoint/send_timeout"),
    sendRetryCount: intKey("transports/rdma/endpoint/send_retry_count"),
    sendRnrCount: intKey("transports/rdma/endpoint/send_rnr_count"),
    maxRdAtomic: intKey("transports/rdma/endpoint/max_rd_atomic"),
    maxDestRdAtomic: intKey("transports/rdma/endpoint/max_dest_rd_atomic"),
    hopLimit: intKey("transports/rdma/endpoint/hop_limit"),
    trafficClass: intKey("transports/rdma/endpoint/traffic_class"),
    serviceLevel: intKey("transports/rdma/endpoint/service_level"),
    pkeyIndex: intKey("transports/rdma/endpoint/pkey_index"),
    maxQpWr: intKey("transports/rdma/endpoint/max_qp_wr"),
    maxSge: intKey("transports/rdma/endpoint/max_sge"),
    maxInlineBytes: intKey("transports/rdma/endpoint/max_inline_bytes"),
    endpointStoreCap: intKey("transports/rdma/endpoint/endpoint_store_cap")
  }),
  device: Config.all({
    port: intKey("transports/rdma/device/port"),
    gidIndex: intKey("transports/rdma/device/gid_index"),
    maxCqe: intKey("transports/rdma/device/max_cqe"),
    numCqList: intKey("transports/rdma/device/num_cq_list")
  }),
  workers: Config.all({
    numWorkers: intKey("transports/rdma/workers/num_workers"),
    maxRetryCount: intKey("transports/rdma/workers/max_retry_count"),
    blockSize: intKey("transports/rdma/workers/block_size")
  }),
  tcp: Config.all({
    maxRetryCount: intKey("transports/tcp/max_retry_count"),
    retryBaseDelayMs: intKey("transports/tcp/retry_base_delay_ms"),
    retryMaxDelayMs: intKey("transports/tcp/retry_max_delay_ms"),
    maxConcurrentTasks: intKey("transports/tcp/max_concurrent_tasks")
  }),
  whitelist: stringsKey("topology/rdma_whitelist"),
  blacklist: stringsKey("topology/rdma_blacklist")
})

/** The engine's settings as a service. */
export class EngineConfig extends Context.Tag("@tent/core/EngineConfig")<EngineConfig, EngineSettings>() {}

/** Settings read from the current `ConfigProvider`. */
export const layerConfig: Layer.Layer<EngineConfig, ConfigError.ConfigError> = Layer.effect(EngineConfig, config)

/**
 * Installs the provider of `source` as the `ConfigProvider` of everything built on top of it, and reads
 * {@link EngineConfig} and `RpcConfig` from it: `TransferEngine.layer` and `RailHealth.layerConfig` read the same.
 */
export const layer = (
  source: ConfigSource = {}
): Layer.Layer<EngineConfig | RpcConfig.RpcConfig, ConfigError.ConfigError> =>
  Layer.unwrapEffect(
    Effect.map(provider(source), (p) =>
      Layer.merge(layerConfig, RpcConfig.layerConfig).pipe(Layer.provide(Layer.setConfigProvider(p)))
    )
  )

/** The provider of `source` as a Layer: provide it under any Layer that reads config (`Layer.provide`). */
export const layerProvider = (source: ConfigSource = {}): Layer.Layer<never, ConfigError.ConfigError> =>
  Layer.unwrapEffect(Effect.map(provider(source), (p) => Layer.setConfigProvider(p)))
