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
 * Environment: `MC_TENT_CONF` (a file path or inline JSON) replaces the file, as in TENT; TENT's legacy `MC_*`
 * variables map to their keys ({@link legacyEnv}; those for keys this engine lacks are logged and ignored,
 * {@link ignoredLegacyEnv}); and any key can be set by its constant-case
 * name (`transports/rdma/endpoint/path_mtu` → `TRANSPORTS_RDMA_ENDPOINT_PATH_MTU`, `rpc/notify_timeout_ms` →
 * `RPC_NOTIFY_TIMEOUT_MS`). The environment wins over the file.
 *
 * @since 0.1.0
 */
import { PeerHealth, RailHealth } from "@tent/health"
import { Registry, RpcConfig } from "@tent/rpc"
import { Config, type ConfigError, type ConfigProvider, Context, Effect, Either, Layer } from "effect"
import { engineKeys } from "./internal/config/engineKeys.js"
import { invalid, type KeySpec, readers } from "./internal/config/KeySpec.js"
import type { ConfigSource } from "./internal/config/provider.js"
import * as Provider from "./internal/config/provider.js"
import { parsePools, settleLanes } from "./internal/config/rdmaKeys.js"
import * as MetricsConfig from "./MetricsConfig.js"

export {
  /**
   * The keys this package reads itself, with TENT's defaults (`rpc/*` are in `RpcConfig`, `rail_*` in `RailHealth`).
   *
   * @since 0.1.0
   */
  engineKeys
} from "./internal/config/engineKeys.js"
export type {
  /**
   * The JSON type a key takes: `int`, `bool`, `string` or `strings`.
   *
   * @since 0.1.0
   */
  KeyKind,
  /**
   * One configuration key: its type, default, description and (for integers) the values it accepts. `RpcConfig.keys`
   * of `@tent/rpc` and `RailHealth.keys` of `@tent/health` declare theirs in the same shape.
   *
   * @since 0.1.0
   */
  KeySpec
} from "./internal/config/KeySpec.js"
export type {
  /**
   * Where the configuration comes from: the parsed `transfer-engine.json` (or an object in code), a path to one, and
   * the environment variables to read (none unless given).
   *
   * @since 0.1.0
   */
  ConfigSource
}

/**
 * Every key the engine (and the packages it configures) reads, with TENT's defaults: each declared once, by the
 * package that reads it.
 *
 * @since 0.1.0
 */
export const keys = {
  ...RpcConfig.keys,
  ...RailHealth.keys,
  ...PeerHealth.keys,
  ...MetricsConfig.keys,
  ...engineKeys
} as const satisfies Record<string, KeySpec>

/**
 * A key of {@link keys}.
 *
 * @since 0.1.0
 */
export type Key = keyof typeof keys

/**
 * TENT's legacy environment variables and the key each sets: every one `ConfigHelper::loadFromEnv` maps
 * (`tent/src/common/config.cpp:137-185`) to a key this engine has, in TENT's order (a later one wins:
 * `NCCL_IB_GID_INDEX` over `MC_GID_INDEX`), then TENT's metrics variables. A wrong value fails at start naming the
 * variable; a key's own constant-case name (`TRANSPORTS_RDMA_ENDPOINT_PATH_MTU`) wins over all of them.
 *
 * @since 0.1.0
 */
export const legacyEnv: Record<string, Key> = {
  MC_RDMA_BIND_ADDRESS: "transports/rdma/bind_address",
  MC_NUM_CQ_PER_CTX: "transports/rdma/device/num_cq_list",
  MC_IB_PORT: "transports/rdma/device/port",
  MC_GID_INDEX: "transports/rdma/device/gid_index",
  NCCL_IB_GID_INDEX: "transports/rdma/device/gid_index",
  MC_MAX_CQE_PER_CTX: "transports/rdma/device/max_cqe",
  MC_MAX_EP_PER_CTX: "transports/rdma/endpoint/endpoint_store_cap",
  MC_NUM_QP_PER_EP: "transports/rdma/endpoint/qp_mul_factor",
  MC_MAX_SGE: "transports/rdma/endpoint/max_sge",
  MC_MAX_WR: "transports/rdma/endpoint/max_qp_wr",
  MC_MAX_INLINE: "transports/rdma/endpoint/max_inline_bytes",
  MC_PKEY_INDEX: "transports/rdma/endpoint/pkey_index",
  MC_MTU: "transports/rdma/endpoint/path_mtu",
  MC_IB_TC: "transports/rdma/endpoint/traffic_class",
  MC_IB_SL: "transports/rdma/endpoint/service_level",
  MC_WORKERS_PER_CTX: "transports/rdma/workers/num_workers",
  MC_SLICE_SIZE: "transports/rdma/workers/block_size",
  MC_RETRY_CNT: "transports/rdma/workers/max_retry_count",
  MC_TE_FILTERS: "topology/rdma_whitelist",
  MC_TE_FILTERS_EXCLUDE: "topology/rdma_blacklist",
  // TENT's metrics variables (TENT_METRICS_ENABLED, …), as `MetricsConfig.load` reads them
  ...MetricsConfig.env
}

/**
 * TENT's legacy variables whose keys this engine does not have, each with the key TENT sets: accepted, and logged as
 * a warning naming the variable when set. Completion channels (one per CQ here), PCI relaxed ordering, GPUDirect,
 * slice-affinity logging, a custom topology file and RPC server threads have no counterpart in this engine.
 *
 * @since 0.2.0
 */
export const ignoredLegacyEnv: Record<string, string> = {
  MC_NUM_COMP_CHANNELS_PER_CTX: "transports/rdma/device/num_comp_channels",
  MC_IB_PCI_RELAXED_ORDERING: "transports/rdma/pci_relaxed_ordering",
  MC_DISABLE_GPU_DIRECT_RDMA: "transports/rdma/disable_gpu_direct_rdma",
  MC_LOG_RDMA_SLICE_AFFINITY: "transports/rdma/log_slice_affinity",
  MC_CUSTOM_TOPO_JSON: "topology/custom_json_path",
  MC_TENT_RPC_THREADS: "rpc_server_threads"
}

/**
 * The constant-case environment variable of a key: `rpc/notify_timeout_ms` → `RPC_NOTIFY_TIMEOUT_MS`.
 *
 * @since 0.1.0
 */
export const envName: (key: string) => string = Provider.envName

/**
 * Builds the `ConfigProvider` of a source: JSON values type-checked per key, environment over file. Fails with a
 * `ConfigError` naming the key on a value of the wrong type, or when the file or `MC_TENT_CONF` does not parse.
 *
 * @since 0.1.0
 */
export const provider = (
  source: ConfigSource = {}
): Effect.Effect<ConfigProvider.ConfigProvider, ConfigError.ConfigError> =>
  Provider.make(keys, legacyEnv, source, ignoredLegacyEnv)

const read = readers(engineKeys)

/**
 * TENT's `EndPointParams` (data QPs), after config.
 *
 * @since 0.1.0
 */
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

/**
 * How an endpoint's notify slots are allocated (`transports/rdma/notify/*`; RFC open question 3).
 *
 * @since 0.1.0
 */
export interface NotifySlotSettings {
  /** `lazy_slots`: send slots on first use, a receive ring that grows; false: TENT's, everything at construction. */
  readonly lazy: boolean
  /** `slots`: the send window and the receive ring's depth (the most it grows to when lazy). */
  readonly slots: number
  /** `slot_bytes`: bytes of one slot, the largest frame this side sends or receives. */
  readonly slotBytes: number
  /** `initial_recv_slots`: the receives a lazy ring posts at connection (TENT's allocation posts `slots`). */
  readonly initialRecvSlots: number
  /**
   * `transfer_bound`: transfer-bound notifications ride the data QPs as immediates (`"immediate"`) to peers that take
   * them, or go on the notify QP after the data completed (`"notify_qp"`, TENT's). Absent: `"notify_qp"`. Since 0.3.0.
   */
  readonly transferBound?: "notify_qp" | "immediate"
  /** `imm_recvs`: receives kept posted on each data QP for immediates (with `"immediate"`). Since 0.3.0. */
  readonly immRecvs?: number
  /**
   * `shared_recv`: notifications are received into one shared receive queue per device (an SRQ), not into slots of
   * each endpoint; `shared_recv_slots` posted at start, doubled on demand up to `shared_recv_max_slots`. Since 0.4.0.
   */
  readonly sharedRecv?: boolean
  readonly sharedRecvSlots?: number
  readonly sharedRecvMaxSlots?: number
}

/**
 * The engine's settings (the `rpc/*` ones live in `RpcConfig`, the rail ones in `RailHealth`).
 *
 * @since 0.1.0
 */
export interface EngineSettings {
  readonly localSegmentName: string
  /** `metadata_type`: the peer registry, or TENT's central registry in Redis. */
  readonly metadataType: "p2p" | "redis"
  /** `metadata_servers`: the Redis server's `host:port`, or `rediss://host:port` for TLS (checked only under `redis`). */
  readonly metadataServers: string
  readonly rpcServerHostname: string
  readonly rpcServerPort: number
  readonly maxFailoverAttempts: number
  readonly autoFailoverOnPoll: boolean
  readonly rdmaEnable: boolean
  readonly tcpEnable: boolean
  /** `transports/rdma/num_lanes`, or `endpoint/qp_mul_factor` when only that is set (TENT's `configureLaneCount`). */
  readonly numLanes: number
  /** `transports/rdma/bind_address`: the host of this engine's NIC paths; "" = the segment name. Since 0.2.0. */
  readonly rdmaBindAddress: string
  /** `transports/rdma/endpoint/qp_pools`, validated; accepted and not applied. Since 0.2.0. */
  readonly qpPools: ReadonlyArray<QpPool>
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
            `must be the Redis server's "host:port" (or "rediss://host:port" for TLS; no credentials) when metadata_type is "redis", got ${JSON.stringify(Registry.redactServer(r.metadataServers))}`
          )
        )
      : Either.right(r)
  )
)

const transferBoundKind = (s: string): Either.Either<"notify_qp" | "immediate", ConfigError.ConfigError> =>
  s === "notify_qp" || s === "immediate"
    ? Either.right(s)
    : Either.left(
        invalid(
          "transports/rdma/notify/transfer_bound",
          `must be "immediate" (on the data QPs, behind the data) or "notify_qp" (TENT's), got ${JSON.stringify(s)}`
        )
      )

/** `transports/rdma/notify/*`: `initial_recv_slots` is read only when lazy, and must not exceed `slots`. */
const notifyConfig: Config.Config<NotifySlotSettings> = Config.all({
  lazy: read.bool("transports/rdma/notify/lazy_slots"),
  slots: read.int("transports/rdma/notify/slots"),
  slotBytes: read.int("transports/rdma/notify/slot_bytes"),
  initialRecvSlots: read.int("transports/rdma/notify/initial_recv_slots"),
  transferBound: read.string("transports/rdma/notify/transfer_bound").pipe(Config.mapOrFail(transferBoundKind)),
  immRecvs: read.int("transports/rdma/notify/imm_recvs"),
  sharedRecv: read.bool("transports/rdma/notify/shared_recv"),
  sharedRecvSlots: read.int("transports/rdma/notify/shared_recv_slots"),
  sharedRecvMaxSlots: read.int("transports/rdma/notify/shared_recv_max_slots")
}).pipe(
  Config.mapOrFail((n) =>
    n.sharedRecvSlots > n.sharedRecvMaxSlots
      ? Either.left(
          invalid(
            "transports/rdma/notify/shared_recv_slots",
            `must be at most transports/rdma/notify/shared_recv_max_slots (${n.sharedRecvMaxSlots}), got ${n.sharedRecvSlots}`
          )
        )
      : !n.lazy
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

/**
 * One of TENT's named QP pools (`transports/rdma/endpoint/qp_pools`, `params.h:46-52`): -1 = the global SL/TC.
 *
 * @since 0.2.0
 */
export interface QpPool {
  readonly name: string
  readonly numQp: number
  readonly serviceLevel: number
  readonly trafficClass: number
}

/** The lane count as TENT's `configureLaneCount` (`rdma_transport.cpp:86-154`) settles it for `num_lanes` and its
 * legacy name `endpoint/qp_mul_factor`: `num_lanes` when set, else `qp_mul_factor` when set, else 6; both set and
 * different fails. (TENT also folds `device/num_cq_list` and `workers/num_workers` in; here they stay separate.)
 */
const lanesConfig = Config.all({
  lanes: read.int("transports/rdma/num_lanes"),
  lanesSet: Config.option(Config.integer("transports/rdma/num_lanes")),
  qpMulFactor: read.int("transports/rdma/endpoint/qp_mul_factor")
}).pipe(Config.mapOrFail(settleLanes))

/**
 * The engine's settings read from the current `ConfigProvider`.
 *
 * @since 0.1.0
 */
export const config: Config.Config<EngineSettings> = Config.all({
  localSegmentName: read.string("local_segment_name"),
  registry: registryConfig,
  rpcServerHostname: read.string("rpc_server_hostname"),
  rpcServerPort: read.int("rpc_server_port"),
  maxFailoverAttempts: read.int("max_failover_attempts"),
  autoFailoverOnPoll: read.bool("enable_auto_failover_on_poll"),
  rdmaEnable: read.bool("transports/rdma/enable"),
  tcpEnable: read.bool("transports/tcp/enable"),
  numLanes: lanesConfig,
  rdmaBindAddress: read.string("transports/rdma/bind_address"),
  qpPools: read.json("transports/rdma/endpoint/qp_pools").pipe(Config.mapOrFail(parsePools)),
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

/**
 * The engine's settings as a service.
 *
 * @since 0.1.0
 */
export class EngineConfig extends Context.Tag("@tent/core/EngineConfig")<EngineConfig, EngineSettings>() {}

/**
 * Settings read from the current `ConfigProvider`.
 *
 * @since 0.1.0
 */
export const layerConfig: Layer.Layer<EngineConfig, ConfigError.ConfigError> = Layer.effect(EngineConfig, config)

/**
 * Installs the provider of `source` as the `ConfigProvider` of everything built on top of it, and reads
 * {@link EngineConfig} and `RpcConfig` from it: `TransferEngine.layer` and `RailHealth.layerConfig` read the same.
 *
 * @since 0.1.0
 */
export const layer = (
  source: ConfigSource = {}
): Layer.Layer<EngineConfig | RpcConfig.RpcConfig, ConfigError.ConfigError> =>
  Layer.unwrapEffect(
    Effect.map(provider(source), (p) =>
      Layer.merge(layerConfig, RpcConfig.layerConfig).pipe(Layer.provide(Layer.setConfigProvider(p)))
    )
  )

/**
 * The provider of `source` as a Layer: provide it under any Layer that reads config (`Layer.provide`).
 *
 * @since 0.1.0
 */
export const layerProvider = (source: ConfigSource = {}): Layer.Layer<never, ConfigError.ConfigError> =>
  Layer.unwrapEffect(Effect.map(provider(source), (p) => Layer.setConfigProvider(p)))

/**
 * The keys with which the RFC selects its PRs (`Series.fromConfig` reads them).
 *
 * @since 0.1.0
 */
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

/**
 * The dedup window's bounds (RFC PR 6), read by `Dedup.layer`.
 *
 * @since 0.1.0
 */
export interface DedupSettings {
  /** `notification/dedup_max_sessions`. */
  readonly maxSessions: number
  /** `notification/dedup_session_ttl_ms`. */
  readonly sessionTtlMs: number
}

/**
 * {@link DedupSettings} read from the current `ConfigProvider`; a wrong value fails naming its key.
 *
 * @since 0.1.0
 */
export const dedupConfig: Config.Config<DedupSettings> = Config.all({
  maxSessions: read.int("notification/dedup_max_sessions"),
  sessionTtlMs: read.int("notification/dedup_session_ttl_ms")
})

/**
 * The delivery receipts' settings, read by `Receipts.layer`.
 *
 * @since 0.2.0
 */
export interface ReceiptsSettings {
  /** `notification/delivery_timeout_ms`. */
  readonly deliveryTimeoutMs: number
  /** `notification/receipt_resend_ms`. */
  readonly resendAfterMs: number
  /** `notification/max_unreceipted`. */
  readonly maxUnreceipted: number
}

/**
 * {@link ReceiptsSettings} read from the current `ConfigProvider`; a wrong value fails naming its key.
 *
 * @since 0.2.0
 */
export const receiptsConfig: Config.Config<ReceiptsSettings> = Config.all({
  deliveryTimeoutMs: read.int("notification/delivery_timeout_ms"),
  resendAfterMs: read.int("notification/receipt_resend_ms"),
  maxUnreceipted: read.int("notification/max_unreceipted")
})

/**
 * {@link SeriesSettings} read from the current `ConfigProvider`; a wrong value fails naming its key.
 *
 * @since 0.1.0
 */
export const seriesConfig: Config.Config<SeriesSettings> = Config.all({
  rpcFallback: read.bool("notification/rpc_fallback"),
  notifyProto: read.int("notification/proto") as Config.Config<0 | 1>,
  peerHealth: read.bool("peer_health/enable"),
  receipts: read.bool("notification/receipts")
})
