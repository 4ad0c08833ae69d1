import { describe, expect, it } from "@effect/vitest"
import { PeerHealth, RailHealth } from "@tent/health"
import { RpcConfig } from "@tent/rpc"
import { Context, Effect, Layer } from "effect"
import {
  Dedup,
  DescriptorPolicy,
  EngineConfig,
  MetricsConfig,
  NotificationRouting,
  NotifyQpParams,
  PeerHealth as PeerHealthSeam,
  QpRetirement,
  Series
} from "../src/index.js"

/** Every key's default as `EngineConfig.keys` declared it before the keys moved to the packages that read them. */
const defaultsBefore = {
  // The RFC's keys that select its PRs (Series.fromConfig), with the RFC's defaults.
  "notification/rpc_fallback": true,
  "notification/proto": 1,
  "notification/dedup_max_sessions": 4096,
  "notification/dedup_session_ttl_ms": 600_000,
  // Delivery receipts, past the RFC (new keys: no default of TENT's or the RFC's to keep).
  "notification/receipts": true,
  "notification/delivery_timeout_ms": 45_000,
  "notification/receipt_resend_ms": 1000,
  "notification/max_unreceipted": 65_536,
  "peer_health/enable": true,
  "peer_health/cooldown_ms": 5000,
  "peer_health/max_cooldown_ms": 60_000,
  "peer_health/probe_interval_ms": 1000,
  "peer_health/max_age_ms": 600_000,
  local_segment_name: "",
  metadata_type: "p2p",
  metadata_servers: "", // TENT's default; read only under metadata_type "redis"
  rpc_server_hostname: "127.0.0.1",
  rpc_server_port: 0,
  "rpc/request_timeout_ms": -1,
  "rpc/bootstrap_timeout_ms": -1,
  "rpc/notify_timeout_ms": -1,
  "rpc/connect_timeout_ms": -1,
  "rpc/max_notify_bytes": 16_777_216,
  "rpc/max_data_bytes": 16_777_216,
  "rpc/probe_timeout_ms": 2000, // RFC PR 4: the prober's Probe timeout
  // hostile peers: bounds, and authentication off unless a secret is given (TENT has none)
  "rpc/max_connections": 1024,
  "rpc/max_inflight": 1024,
  "rpc/max_unread_reply_bytes": 16 * 1024 * 1024,
  "rpc/auth_secret_file": "",
  "rpc/allow_cidrs": [],
  max_failover_attempts: 3,
  enable_auto_failover_on_poll: true,
  "transports/rdma/enable": true,
  "transports/tcp/enable": true,
  "transports/rdma/num_lanes": 6,
  // TENT's keys added in 0.2.0, with TENT's defaults (qp_mul_factor read unset: rdma_transport.cpp:92-93).
  "transports/rdma/endpoint/qp_mul_factor": -1,
  "transports/rdma/endpoint/qp_pools": [],
  "transports/rdma/bind_address": "",
  "transports/rdma/max_timeout_ns": 10_000_000_000,
  "transports/rdma/endpoint/path_mtu": 4096,
  "transports/rdma/endpoint/min_rnr_timer": 12,
  "transports/rdma/endpoint/send_timeout": 14,
  "transports/rdma/endpoint/send_retry_count": 7,
  "transports/rdma/endpoint/send_rnr_count": 7,
  "transports/rdma/endpoint/max_rd_atomic": 16,
  "transports/rdma/endpoint/max_dest_rd_atomic": 16,
  "transports/rdma/endpoint/hop_limit": 16,
  "transports/rdma/endpoint/traffic_class": 0,
  "transports/rdma/endpoint/service_level": 0,
  "transports/rdma/endpoint/pkey_index": 0,
  "transports/rdma/endpoint/max_qp_wr": 256,
  "transports/rdma/endpoint/max_sge": 4,
  "transports/rdma/endpoint/max_inline_bytes": 64,
  "transports/rdma/endpoint/endpoint_store_cap": 65_536,
  "transports/rdma/device/port": 1,
  "transports/rdma/device/gid_index": -1,
  "transports/rdma/device/max_cqe": 4096,
  "transports/rdma/device/num_cq_list": 6,
  "transports/rdma/workers/num_workers": 6,
  "transports/rdma/workers/max_retry_count": 8,
  "transports/rdma/workers/block_size": 65_536,
  "transports/rdma/rail_error_threshold": 3,
  "transports/rdma/rail_error_window_secs": 10,
  "transports/rdma/rail_cooldown_secs": 30,
  "transports/tcp/max_retry_count": 3,
  "transports/tcp/retry_base_delay_ms": 100,
  "transports/tcp/retry_max_delay_ms": 2000,
  "transports/tcp/max_concurrent_tasks": 16,
  "topology/rdma_whitelist": [],
  "topology/rdma_blacklist": [],
  // Added since: the metrics export's keys (TENT's `metrics/*`, the export off by default, bound to 127.0.0.1).
  "metrics/enabled": false,
  "metrics/http_port": 9100,
  "metrics/http_host": "127.0.0.1",
  "metrics/peer_labels": false,
  // Added since: the notify slots' allocation (TENT's 256 × 64 KiB at construction unless `lazy_slots`).
  "transports/rdma/notify/lazy_slots": true,
  "transports/rdma/notify/slots": 256,
  "transports/rdma/notify/slot_bytes": 65_536,
  "transports/rdma/notify/initial_recv_slots": 1,
  "transports/rdma/notify/transfer_bound": "notify_qp",
  "transports/rdma/notify/imm_recvs": 64,
  // Added since: notify receives shared per device (an SRQ; TENT's: per-endpoint slots), and with it lazy send slots
  // by default (`lazy_slots` above: TENT's is false).
  "transports/rdma/notify/shared_recv": true,
  "transports/rdma/notify/shared_recv_slots": 256,
  "transports/rdma/notify/shared_recv_max_slots": 4096,
  // Added since: the bounds on what peers can make an engine hold (accepted endpoints, queued notifications).
  "transports/rdma/max_endpoints_per_peer": 256,
  "transports/rdma/max_accepted_bytes": -1,
  "notification/max_queued_bytes": 67_108_864
}

/** The key tables, by the package that declares (and reads) them. */
const tables = {
  "@tent/rpc": RpcConfig.keys,
  "@tent/health": { ...RailHealth.keys, ...PeerHealth.keys },
  "@tent/core": { ...EngineConfig.engineKeys, ...MetricsConfig.keys }
} as const

const owners = (key: string) => Object.entries(tables).flatMap(([pkg, table]) => (key in table ? [pkg] : []))

/** Builds `layer` under the engine's provider of `source`; the error is the `ConfigError` of the start. */
const start = <A, E>(source: EngineConfig.ConfigSource, layer: Layer.Layer<A, E>) =>
  Layer.build(layer.pipe(Layer.provide(EngineConfig.layerProvider(source)))).pipe(
    Effect.scoped,
    Effect.flip,
    Effect.map(String)
  )

describe("config keys: each declared once, by the package that reads it", () => {
  it("every key is in exactly one package's table, rpc/* in @tent/rpc and rail_* in @tent/health", () => {
    for (const key of Object.keys(EngineConfig.keys)) expect([key, owners(key)]).toEqual([key, [expect.any(String)]])
    for (const key of Object.keys(RpcConfig.keys)) expect(key).toMatch(/^rpc\//)
    for (const key of Object.keys(RailHealth.keys)) expect(key).toMatch(/^transports\/rdma\/rail_/)
    for (const key of Object.keys(PeerHealth.keys)) expect(key).toMatch(/^peer_health\//)
    for (const key of Object.keys(EngineConfig.engineKeys)) expect(key).not.toMatch(/^rpc\/|\/rail_/)
  })

  it("EngineConfig.keys is the union of the tables, each entry the owner's own", () => {
    const union = Object.values(tables).flatMap((table) => Object.keys(table))
    expect(Object.keys(EngineConfig.keys).sort()).toEqual(union.sort())
    for (const table of Object.values(tables)) {
      for (const [key, spec] of Object.entries(table)) expect(EngineConfig.keys[key as EngineConfig.Key]).toBe(spec)
    }
  })

  it("legacy behaviour: every default is unchanged", () => {
    const defaults = Object.fromEntries(Object.entries(EngineConfig.keys).map(([key, spec]) => [key, spec.default]))
    expect(defaults).toEqual(defaultsBefore)
  })

  it.effect("the packages' settings take the defaults of their tables", () =>
    Effect.gen(function* () {
      const rails = yield* RailHealth.config.pipe(Effect.withConfigProvider(yield* EngineConfig.provider()))
      expect(rails).toEqual({ ...RailHealth.defaults })
      expect(RailHealth.defaults.cooldownSecs).toBe(RailHealth.keys["transports/rdma/rail_cooldown_secs"].default)
      const rpc = yield* RpcConfig.config.pipe(Effect.withConfigProvider(yield* EngineConfig.provider()))
      expect(rpc.maxDataBytes).toBe(RpcConfig.keys["rpc/max_data_bytes"].default)
      expect(rpc.notifyTimeoutMs).toBe(RpcConfig.LIBRARY_DEFAULT_TIMEOUT_MS)
    })
  )

  it.effect("a wrong rpc/* value fails at start naming the key, with the message of RpcConfig.keys", () =>
    Effect.gen(function* () {
      const range = yield* start({ json: { rpc: { max_data_bytes: 0 } } }, RpcConfig.layerConfig)
      expect(range).toContain("rpc.max_data_bytes")
      expect(range).toContain(RpcConfig.keys["rpc/max_data_bytes"].valid.message)
      const type = yield* start({ json: { "rpc/connect_timeout_ms": "soon" } }, RpcConfig.layerConfig)
      expect(type).toContain("connect_timeout_ms")
      expect(type).toContain("Expected an integer")
      const env = yield* start({ env: { RPC_REQUEST_TIMEOUT_MS: "-2" } }, RpcConfig.layerConfig)
      expect(env).toContain("request_timeout_ms")
      const engine = yield* Effect.flip(Layer.build(EngineConfig.layer({ json: { rpc: { notify_timeout_ms: 0 } } })))
      expect(String(engine)).toContain("notify_timeout_ms")
    }).pipe(Effect.scoped)
  )

  it.effect(
    "a wrong transports/rdma/rail_* value fails at start naming the key, with the message of RailHealth.keys",
    () =>
      Effect.gen(function* () {
        const range = yield* start(
          { json: { transports: { rdma: { rail_cooldown_secs: 0 } } } },
          RailHealth.layerConfig
        )
        expect(range).toContain("transports.rdma.rail_cooldown_secs")
        expect(range).toContain(RailHealth.keys["transports/rdma/rail_cooldown_secs"].valid.message)
        const type = yield* start({ json: { "transports/rdma/rail_error_threshold": true } }, RailHealth.layerConfig)
        expect(type).toContain("rail_error_threshold")
        expect(type).toContain("Expected an integer")
        const env = yield* start({ env: { TRANSPORTS_RDMA_RAIL_ERROR_WINDOW_SECS: "soon" } }, RailHealth.layerConfig)
        expect(env).toContain("rail_error_window_secs")
      })
  )
})

/** TENT's stock `tent/config/transfer-engine.json`: the parts that name keys this engine reads, and some it ignores. */
const tentStockConfig = {
  local_segment_name: "",
  metadata_type: "p2p",
  metadata_servers: "127.0.0.1:2379",
  rpc_server_hostname: "127.0.0.1",
  rpc_server_port: 0,
  topology: { rdma_whitelist: ["mlx5_0", "mlx5_2"], rdma_blacklist: [] },
  log_level: "warning",
  max_failover_attempts: 3,
  enable_auto_failover_on_poll: true,
  enable_progress_worker: false,
  metrics: {
    enabled: true,
    http_port: 9100,
    http_host: "0.0.0.0",
    http_server_threads: 2,
    report_interval_seconds: 30
  },
  transports: {
    rdma: {
      enable: true,
      shared_quota_shm_path: "mooncake_quota_shm",
      max_timeout_ns: 10_000_000_000,
      num_lanes: 1,
      device: { num_comp_channels: 1, port: 1, gid_index: 0, max_cqe: 4096 },
      endpoint: {
        endpoint_store_cap: 256,
        max_sge: 4,
        max_qp_wr: 256,
        max_inline_bytes: 64,
        path_mtu: 4096,
        pkey_index: 0,
        hop_limit: 16,
        flow_label: 0,
        traffic_class: 0,
        service_level: 0,
        src_path_bits: 0,
        static_rate: 0,
        rq_psn: 0,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        sq_psn: 0,
        send_timeout: 14,
        send_retry_count: 7,
        send_rnr_count: 7,
        max_rd_atomic: 16
      },
      workers: {
        max_retry_count: 8,
        block_size: 65536,
        grace_period_ns: 50000,
        rail_topo_path: "/path/to/rail_topo.json"
      }
    },
    tcp: {
      enable: true,
      max_retry_count: 3,
      retry_base_delay_ms: 100,
      retry_max_delay_ms: 2000,
      max_concurrent_tasks: 16
    },
    shm: { enable: true, cxl_mount_path: "" }
  },
  policy: [{ name: "default_memory", segment_type: "memory", devices: ["mlx5_0"], transports: ["rdma", "shm"] }]
}

describe("segment registry keys: metadata_type and metadata_servers", () => {
  /** The engine's settings for `source`. */
  const settings = (source: EngineConfig.ConfigSource) =>
    Layer.build(EngineConfig.layer(source)).pipe(
      Effect.map((ctx) => Context.get(ctx, EngineConfig.EngineConfig)),
      Effect.scoped
    )

  it.effect("TENT's stock config loads: p2p, its etcd address kept but not used", () =>
    Effect.gen(function* () {
      const s = yield* settings({ json: tentStockConfig })
      expect(s.metadataType).toBe("p2p")
      expect(s.metadataServers).toBe("127.0.0.1:2379")
      expect(s.whitelist).toEqual(["mlx5_0", "mlx5_2"])
      expect((yield* settings({})).metadataType).toBe("p2p")
    })
  )

  it.effect('metadata_type "redis" takes metadata_servers as "host:port" (or a host, port 6379)', () =>
    Effect.gen(function* () {
      const s = yield* settings({ json: { metadata_type: "redis", metadata_servers: "127.0.0.1:6380" } })
      expect([s.metadataType, s.metadataServers]).toEqual(["redis", "127.0.0.1:6380"])
      const env = yield* settings({ env: { METADATA_TYPE: "redis", METADATA_SERVERS: "redis.local" } })
      expect([env.metadataType, env.metadataServers]).toEqual(["redis", "redis.local"])
    })
  )

  it.effect("an unknown metadata_type, or redis without a valid metadata_servers, fails at start naming the key", () =>
    Effect.gen(function* () {
      const etcd = yield* start(
        { json: { metadata_type: "etcd", metadata_servers: "127.0.0.1:2379" } },
        EngineConfig.layerConfig
      )
      expect(etcd).toContain("metadata_type")
      expect(etcd).toContain('must be "p2p" (the peer registry) or "redis"')
      const missing = yield* start({ json: { metadata_type: "redis" } }, EngineConfig.layerConfig)
      expect(missing).toContain("metadata_servers")
      expect(missing).toContain("host:port")
      const port = yield* start(
        { json: { metadata_type: "redis", metadata_servers: "h:http" } },
        EngineConfig.layerConfig
      )
      expect(port).toContain("metadata_servers")
      const type = yield* start({ json: { metadata_type: "redis", metadata_servers: 6379 } }, EngineConfig.layerConfig)
      expect(type).toContain("metadata_servers")
      expect(type).toContain("Expected a string")
    })
  )
})

describe("Series.fromConfig: the RFC's keys select its PRs", () => {
  /** The routing, retirement and descriptor policy `Series.fromConfig` builds for `source`. */
  const selected = (source: EngineConfig.ConfigSource) =>
    Layer.build(Series.fromConfig.pipe(Layer.provide(EngineConfig.layerProvider(source)))).pipe(
      Effect.map((ctx) => ({
        routing: Context.get(ctx, NotificationRouting.NotificationRouting),
        retirement: Context.get(ctx, QpRetirement.QpRetirement),
        params: Context.get(ctx, NotifyQpParams.NotifyQpParams),
        stale: Context.get(ctx, DescriptorPolicy.DescriptorPolicy),
        health: Context.get(ctx, PeerHealthSeam.PeerHealthPolicy),
        dedup: Context.get(ctx, Dedup.Dedup)
      })),
      Effect.scoped
    )

  it.effect(
    "by default: PRs 1-6 (the built ones); notification/rpc_fallback, peer_health/enable false or notification/proto 0 restores that legacy twin",
    () =>
      Effect.gen(function* () {
        const on = yield* selected({})
        expect(on.routing).toBe(NotificationRouting.rpcFallback)
        expect(on.retirement).toBe(QpRetirement.series)
        expect(on.params).toBe(NotifyQpParams.fromEndpoint)
        expect(on.stale).toBe(DescriptorPolicy.keepOnFailure)
        expect(on.dedup.notifyProto).toBe(1) // PR 6
        expect(on.dedup.counters).toBeDefined()
        expect(on.health.slotWait).toBeDefined() // PR 4
        expect(on.health.chargeUnansweredBootstrap).toBe(false)
        const noHealth = yield* selected({ json: { peer_health: { enable: false } } })
        expect(noHealth.health).toBe(PeerHealthSeam.legacy)
        const off = yield* selected({ json: { notification: { rpc_fallback: false } } })
        expect(off.routing).toBe(NotificationRouting.legacy)
        expect(off.retirement).toBe(QpRetirement.series)
        const env = yield* selected({ env: { NOTIFICATION_RPC_FALLBACK: "false" } })
        expect(env.routing).toBe(NotificationRouting.legacy)
        const raw = yield* selected({ json: { notification: { proto: 0 } } })
        expect(raw.dedup).toBe(Dedup.legacy)
        const bounds = yield* start({ json: { "notification/dedup_max_sessions": 0 } }, Series.fromConfig)
        expect(bounds).toContain("dedup_max_sessions")
      })
  )

  it.effect(
    "a wrong value of notification/rpc_fallback, notification/proto or peer_health/enable fails naming the key",
    () =>
      Effect.gen(function* () {
        const fallback = yield* start({ json: { notification: { rpc_fallback: "yes" } } }, Series.fromConfig)
        expect(fallback).toContain("rpc_fallback")
        expect(fallback).toContain("Expected true or false")
        const proto = yield* start({ json: { "notification/proto": 2 } }, Series.fromConfig)
        expect(proto).toContain("notification/proto")
        expect(proto).toContain("must be 0 (raw frames) or 1 (typed frames)")
        const health = yield* start({ env: { PEER_HEALTH_ENABLE: "maybe" } }, Series.fromConfig)
        expect(health).toContain("peer_health")
      })
  )
})
