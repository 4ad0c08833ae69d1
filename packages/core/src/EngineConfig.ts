/**
 * The engine's configuration: TENT's `transfer-engine.json` (nested objects or flat `"a/b"` keys, both at once)
 * plus environment variables, turned into one Effect `ConfigProvider` that every package reads (`rpc/*` keys by
 * `RpcConfig`, `transports/rdma/rail_*` by `RailHealth`, the rest here).
 *
 * Every key the engine reads is declared once, with its default, description and type, by the package that reads it
 * (`RpcConfig.keys`, `RailHealth.keys`, `PeerHealth.keys`, `MetricsConfig.keys`, {@link engineKeys}), and all are merged in {@link keys}. Unlike TENT, which
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
import { PeerHealth, RailHealth } from "@tent/health"
import { Registry, RpcConfig } from "@tent/rpc"
import { Config, type ConfigError, type ConfigProvider, Context, Effect, Either, Layer } from "effect"
import { invalid, type KeySpec, readers } from "./internal/config/KeySpec.js"
import type { ConfigSource } from "./internal/config/provider.js"
import * as Provider from "./internal/config/provider.js"
import * as MetricsConfig from "./MetricsConfig.js"

export type { KeyKind, KeySpec } from "./internal/config/KeySpec.js"
export type { ConfigSource }

const int = (d: number, description: string, valid?: KeySpec["valid"]): KeySpec =>
  valid === undefined ? { kind: "int", default: d, description } : { kind: "int", default: d, description, valid }
const nonNegative = { check: (n: number) => n >= 0, message: "must be ≥ 0" }
const positive = { check: (n: number) => n > 0, message: "must be > 0" }
const u8 = { check: (n: number) => n >= 0 && n <= 255, message: "must be in 0..255" }

/** The keys this package reads itself, with TENT's defaults (`rpc/*` are in `RpcConfig`, `rail_*` in `RailHealth`). */
export const engineKeys = {
  local_segment_name: {
    kind: "string",
    default: "",
    description: "this engine's segment name; empty = its RPC address (peer registry)"
  },
  metadata_type: {
    kind: "string",
    default: "p2p",
    description:
      "segment registry: p2p (the segment name is the peer's RPC address) or redis (TENT's central registry at metadata_servers)"
  },
  metadata_servers: {
    kind: "string",
    default: "",
    description:
      'the central registry\'s server, "host:port" (port 6379 if absent); read only when metadata_type is redis'
  },
  rpc_server_hostname: { kind: "string", default: "127.0.0.1", description: "interface the control plane binds" },
  rpc_server_port: int(0, "control-plane port; 0 = any free port", {
    check: (n) => n >= 0 && n <= 65535,
    message: "must be a port number (0 = any free port)"
  }),
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
  "transports/rdma/notify/lazy_slots": {
    kind: "bool",
    default: false,
    description:
      "allocate notify send slots on first use and grow the posted receive ring with demand (RNR NAKs pace the peer meanwhile); false: TENT's, every slot at endpoint construction"
  },
  "transports/rdma/notify/slots": int(256, "notify send window and receive ring depth per endpoint (TENT: 256)", {
    check: (n) => n >= 1 && n <= 16384,
    message: "must be in 1..16384"
  }),
  "transports/rdma/notify/slot_bytes": int(
    65536,
    "bytes of one notify slot, the largest notification frame sent or received over RDMA (TENT: 65536); larger ones go to the other transports",
    { check: (n) => n >= 256 && n <= 65536, message: "must be in 256..65536" }
  ),
  "transports/rdma/notify/initial_recv_slots": int(
    1,
    "with lazy_slots: receives posted per endpoint at connection, doubled when the ring runs low (at most slots)",
    positive
  ),
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
  "transports/tcp/max_retry_count": int(3, "attempts of a TCP transfer", positive),
  "transports/tcp/retry_base_delay_ms": int(100, "first TCP retry delay, doubling", nonNegative),
  "transports/tcp/retry_max_delay_ms": int(2000, "largest TCP retry delay", nonNegative),
  "transports/tcp/max_concurrent_tasks": int(16, "concurrent TCP transfer tasks", positive),
  "notification/rpc_fallback": {
    kind: "bool",
    default: true,
    description:
      "RFC PR 3 (Series.fromConfig): try the other transports and the control plane's Notify when the notify QP cannot carry a notification"
  },
  "notification/proto": int(
    1,
    "RFC PR 6 (Series.fromConfig): 1 = typed frames with a (session, seq) stamp to peers that advertise them; 0 = raw frames, no stamp",
    { check: (n) => n === 0 || n === 1, message: "must be 0 (raw frames) or 1 (typed frames)" }
  ),
  "notification/dedup_max_sessions": int(
    4096,
    "RFC PR 6: sender sessions the dedup window remembers; beyond it the least recently used is evicted (its late copies would be delivered again)",
    positive
  ),
  "notification/dedup_session_ttl_ms": int(
    600_000,
    "RFC PR 6: a sender session idle this long (ms) is forgotten by the dedup window",
    positive
  ),
  "notification/receipts": {
    kind: "bool",
    default: true,
    description:
      "delivery receipts (Series.fromConfig, with notification/proto 1): notify_proto 2, every accepted notification to a peer that offers receipts ends receipted or as an Undelivered event"
  },
  "notification/delivery_timeout_ms": int(
    45_000,
    "delivery receipts: a notification not receipted this long (ms) after sendNotification accepted it becomes Undelivered{Timeout}; above the notify QP's retry budget plus one control-plane timeout (30 s)",
    { check: (n) => n >= 100, message: "must be at least 100" }
  ),
  "notification/receipt_resend_ms": int(
    1000,
    "delivery receipts: an accepted notification without a receipt this long (ms) is sent again over the control plane's Notify (with its first stamp)",
    { check: (n) => n >= 10, message: "must be at least 10" }
  ),
  "notification/max_unreceipted": int(
    65536,
    "delivery receipts: notifications awaiting a receipt per peer; beyond it sendNotification fails (nothing accepted)",
    positive
  ),
  "peer_health/enable": {
    kind: "bool",
    default: true,
    description: "RFC PR 4 (Series.fromConfig): remember peers whose control plane stopped answering"
  },
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

/**
 * Every key the engine (and the packages it configures) reads, with TENT's defaults: each declared once, by the
 * package that reads it.
 */
export const keys = {
  ...RpcConfig.keys,
  ...RailHealth.keys,
  ...PeerHealth.keys,
  ...MetricsConfig.keys,
  ...engineKeys
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
  MC_TE_FILTERS_EXCLUDE: "topology/rdma_blacklist",
  // TENT's metrics variables (TENT_METRICS_ENABLED, …), as `MetricsConfig.load` reads them
  ...MetricsConfig.env
}

/** The constant-case environment variable of a key: `rpc/notify_timeout_ms` → `RPC_NOTIFY_TIMEOUT_MS`. */
export const envName: (key: string) => string = Provider.envName

/**
 * Builds the `ConfigProvider` of a source: JSON values type-checked per key, environment over file. Fails with a
 * `ConfigError` naming the key on a value of the wrong type, or when the file or `MC_TENT_CONF` does not parse.
 */
export const provider = (
  source: ConfigSource = {}
): Effect.Effect<ConfigProvider.ConfigProvider, ConfigError.ConfigError> => Provider.make(keys, legacyEnv, source)

const read = readers(engineKeys)

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

/** How an endpoint's notify slots are allocated (`transports/rdma/notify/*`; RFC open question 3). */
export interface NotifySlotSettings {
  /** `lazy_slots`: send slots on first use, a receive ring that grows; false: TENT's, everything at construction. */
  readonly lazy: boolean
  /** `slots`: the send window and the receive ring's depth (the most it grows to when lazy). */
  readonly slots: number
  /** `slot_bytes`: bytes of one slot, the largest frame this side sends or receives. */
  readonly slotBytes: number
  /** `initial_recv_slots`: the receives a lazy ring posts at connection (TENT's allocation posts `slots`). */
  readonly initialRecvSlots: number
}

/** The engine's settings (the `rpc/*` ones live in `RpcConfig`, the rail ones in `RailHealth`). */
export interface EngineSettings {
  readonly localSegmentName: string
  /** `metadata_type`: the peer registry, or TENT's central registry in Redis. */
  readonly metadataType: "p2p" | "redis"
  /** `metadata_servers`: the Redis server's `host:port` (checked only under `redis`). */
  readonly metadataServers: string
  readonly rpcServerHostname: string
  readonly rpcServerPort: number
  readonly maxFailoverAttempts: number
  readonly autoFailoverOnPoll: boolean
  readonly rdmaEnable: boolean
  readonly tcpEnable: boolean
  readonly numLanes: number
  readonly maxTimeoutNs: number
  readonly endpoint: EndpointParams
  /** `transports/rdma/notify/*`. */
  readonly notify: NotifySlotSettings
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

/**
 * `metadata_type` and `metadata_servers`: TENT's stock file names an etcd server under `p2p`, so the server is
 * checked only when `redis` needs it.
 */
const registryKind = (s: string): Either.Either<"p2p" | "redis", ConfigError.ConfigError> =>
  s === "p2p" || s === "redis"
    ? Either.right(s)
    : Either.left(
        invalid(
          "metadata_type",
          `must be "p2p" (the peer registry) or "redis" (a central registry at metadata_servers), got ${JSON.stringify(s)}`
        )
      )
const registryConfig = Config.all({
  metadataType: read.string("metadata_type").pipe(Config.mapOrFail(registryKind)),
  metadataServers: read.string("metadata_servers")
}).pipe(
  Config.mapOrFail((r) =>
    r.metadataType === "redis" && Registry.parseServer(r.metadataServers) === undefined
      ? Either.left(
          invalid(
            "metadata_servers",
            `must be the Redis server's "host:port" when metadata_type is "redis", got ${JSON.stringify(r.metadataServers)}`
          )
        )
      : Either.right(r)
  )
)

/** `transports/rdma/notify/*`: `initial_recv_slots` is read only when lazy, and must not exceed `slots`. */
const notifyConfig: Config.Config<NotifySlotSettings> = Config.all({
  lazy: read.bool("transports/rdma/notify/lazy_slots"),
  slots: read.int("transports/rdma/notify/slots"),
  slotBytes: read.int("transports/rdma/notify/slot_bytes"),
  initialRecvSlots: read.int("transports/rdma/notify/initial_recv_slots")
}).pipe(
  Config.mapOrFail((n) =>
    !n.lazy
      ? Either.right({ ...n, initialRecvSlots: n.slots })
      : n.initialRecvSlots > n.slots
        ? Either.left(
            invalid(
              "transports/rdma/notify/initial_recv_slots",
              `must be at most transports/rdma/notify/slots (${n.slots}), got ${n.initialRecvSlots}`
            )
          )
        : Either.right(n)
  )
)

/** The engine's settings read from the current `ConfigProvider`. */
export const config: Config.Config<EngineSettings> = Config.all({
  localSegmentName: read.string("local_segment_name"),
  registry: registryConfig,
  rpcServerHostname: read.string("rpc_server_hostname"),
  rpcServerPort: read.int("rpc_server_port"),
  maxFailoverAttempts: read.int("max_failover_attempts"),
  autoFailoverOnPoll: read.bool("enable_auto_failover_on_poll"),
  rdmaEnable: read.bool("transports/rdma/enable"),
  tcpEnable: read.bool("transports/tcp/enable"),
  numLanes: read.int("transports/rdma/num_lanes"),
  maxTimeoutNs: read.int("transports/rdma/max_timeout_ns"),
  endpoint: Config.all({
    pathMtu: read.int("transports/rdma/endpoint/path_mtu"),
    minRnrTimer: read.int("transports/rdma/endpoint/min_rnr_timer"),
    sendTimeout: read.int("transports/rdma/endpoint/send_timeout"),
    sendRetryCount: read.int("transports/rdma/endpoint/send_retry_count"),
    sendRnrCount: read.int("transports/rdma/endpoint/send_rnr_count"),
    maxRdAtomic: read.int("transports/rdma/endpoint/max_rd_atomic"),
    maxDestRdAtomic: read.int("transports/rdma/endpoint/max_dest_rd_atomic"),
    hopLimit: read.int("transports/rdma/endpoint/hop_limit"),
    trafficClass: read.int("transports/rdma/endpoint/traffic_class"),
    serviceLevel: read.int("transports/rdma/endpoint/service_level"),
    pkeyIndex: read.int("transports/rdma/endpoint/pkey_index"),
    maxQpWr: read.int("transports/rdma/endpoint/max_qp_wr"),
    maxSge: read.int("transports/rdma/endpoint/max_sge"),
    maxInlineBytes: read.int("transports/rdma/endpoint/max_inline_bytes"),
    endpointStoreCap: read.int("transports/rdma/endpoint/endpoint_store_cap")
  }),
  notify: notifyConfig,
  device: Config.all({
    port: read.int("transports/rdma/device/port"),
    gidIndex: read.int("transports/rdma/device/gid_index"),
    maxCqe: read.int("transports/rdma/device/max_cqe"),
    numCqList: read.int("transports/rdma/device/num_cq_list")
  }),
  workers: Config.all({
    numWorkers: read.int("transports/rdma/workers/num_workers"),
    maxRetryCount: read.int("transports/rdma/workers/max_retry_count"),
    blockSize: read.int("transports/rdma/workers/block_size")
  }),
  tcp: Config.all({
    maxRetryCount: read.int("transports/tcp/max_retry_count"),
    retryBaseDelayMs: read.int("transports/tcp/retry_base_delay_ms"),
    retryMaxDelayMs: read.int("transports/tcp/retry_max_delay_ms"),
    maxConcurrentTasks: read.int("transports/tcp/max_concurrent_tasks")
  }),
  whitelist: read.strings("topology/rdma_whitelist"),
  blacklist: read.strings("topology/rdma_blacklist")
}).pipe(Config.map(({ registry, ...rest }): EngineSettings => ({ ...rest, ...registry })))

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

/** The keys with which the RFC selects its PRs (`Series.fromConfig` reads them). */
export interface SeriesSettings {
  /** `notification/rpc_fallback` (PR 3). */
  readonly rpcFallback: boolean
  /** `notification/proto` (PR 6). */
  readonly notifyProto: 0 | 1
  /** `peer_health/enable` (PR 4). */
  readonly peerHealth: boolean
  /** `notification/receipts` (delivery receipts, past the RFC). */
  readonly receipts: boolean
}

/** The dedup window's bounds (RFC PR 6), read by `Dedup.layer`. */
export interface DedupSettings {
  /** `notification/dedup_max_sessions`. */
  readonly maxSessions: number
  /** `notification/dedup_session_ttl_ms`. */
  readonly sessionTtlMs: number
}

/** {@link DedupSettings} read from the current `ConfigProvider`; a wrong value fails naming its key. */
export const dedupConfig: Config.Config<DedupSettings> = Config.all({
  maxSessions: read.int("notification/dedup_max_sessions"),
  sessionTtlMs: read.int("notification/dedup_session_ttl_ms")
})

/** The delivery receipts' settings, read by `Receipts.layer`. */
export interface ReceiptsSettings {
  /** `notification/delivery_timeout_ms`. */
  readonly deliveryTimeoutMs: number
  /** `notification/receipt_resend_ms`. */
  readonly resendAfterMs: number
  /** `notification/max_unreceipted`. */
  readonly maxUnreceipted: number
}

/** {@link ReceiptsSettings} read from the current `ConfigProvider`; a wrong value fails naming its key. */
export const receiptsConfig: Config.Config<ReceiptsSettings> = Config.all({
  deliveryTimeoutMs: read.int("notification/delivery_timeout_ms"),
  resendAfterMs: read.int("notification/receipt_resend_ms"),
  maxUnreceipted: read.int("notification/max_unreceipted")
})

/** {@link SeriesSettings} read from the current `ConfigProvider`; a wrong value fails naming its key. */
export const seriesConfig: Config.Config<SeriesSettings> = Config.all({
  rpcFallback: read.bool("notification/rpc_fallback"),
  notifyProto: read.int("notification/proto") as Config.Config<0 | 1>,
  peerHealth: read.bool("peer_health/enable"),
  receipts: read.bool("notification/receipts")
})
