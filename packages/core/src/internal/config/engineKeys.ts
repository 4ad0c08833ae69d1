/**
 * The declarations of the configuration keys `@tent/core` reads itself (`EngineConfig.engineKeys`): type, TENT's
 * default, description and accepted values of each. Kept apart from `EngineConfig.ts`, which merges them with the
 * other packages' keys and reads them.
 */
import type { KeySpec } from "./KeySpec.js"

const int = (d: number, description: string, valid?: KeySpec["valid"]): KeySpec =>
  valid === undefined ? { kind: "int", default: d, description } : { kind: "int", default: d, description, valid }
const nonNegative = { check: (n: number) => n >= 0, message: "must be ≥ 0" }
const positive = { check: (n: number) => n > 0, message: "must be > 0" }
/** An integer in `lo..hi`, and the message that says so. */
const range = (lo: number, hi: number): NonNullable<KeySpec["valid"]> => ({
  check: (n: number) => n >= lo && n <= hi,
  message: `must be in ${lo}..${hi}`
})
const u8 = range(0, 255)

/**
 * The keys this package reads itself, with TENT's defaults (`rpc/*` are in `RpcConfig`, `rail_*` in `RailHealth`).
 * `EngineConfig` re-exports it.
 */
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
      'the central registry\'s server, "host:port" (port 6379 if absent), or "rediss://host:port" for TLS; read only when metadata_type is redis'
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
  "transports/rdma/num_lanes": int(6, "data QPs per endpoint (TENT num_lanes / qp_mul_factor)", range(1, 64)),
  "transports/rdma/endpoint/qp_mul_factor": int(
    -1,
    "TENT's legacy name of num_lanes (MC_NUM_QP_PER_EP); -1 = unset. Set alone it sets the lane count; set with a different num_lanes it fails",
    { check: (n) => n === -1 || (n >= 1 && n <= 64), message: "must be -1 (unset) or in 1..64" }
  ),
  "transports/rdma/endpoint/qp_pools": {
    kind: "json",
    default: [],
    description:
      "TENT's named QP pools ([{name, num_qp, service_level?, traffic_class?}]): validated and accepted, not applied (one pool at the global SL/TC)"
  },
  "transports/rdma/bind_address": {
    kind: "string",
    default: "",
    description:
      "RDMA-reachable host for NIC paths (MC_RDMA_BIND_ADDRESS); published as the descriptor's rdma_server_name; empty = the segment name"
  },
  "transports/rdma/max_timeout_ns": int(10_000_000_000, "software timeout of an in-flight slice", positive),
  "transports/rdma/endpoint/path_mtu": int(4096, "data QP path MTU, clamped to the port's active MTU", {
    check: (n) => n === 512 || n === 1024 || n === 2048 || n === 4096,
    message: "must be 512, 1024, 2048 or 4096"
  }),
  "transports/rdma/endpoint/min_rnr_timer": int(12, "data QP min_rnr_timer (IB encoding; 12 = 0.64 ms)", range(0, 31)),
  "transports/rdma/endpoint/send_timeout": int(14, "data QP local ACK timeout exponent (4.096 µs × 2^n)", range(0, 31)),
  "transports/rdma/endpoint/send_retry_count": int(7, "data QP retry_cnt", range(0, 7)),
  "transports/rdma/endpoint/send_rnr_count": int(7, "data QP rnr_retry (7 = forever)", range(0, 7)),
  "transports/rdma/endpoint/max_rd_atomic": int(16, "data QP max_rd_atomic", u8),
  "transports/rdma/endpoint/max_dest_rd_atomic": int(16, "data QP max_dest_rd_atomic", u8),
  "transports/rdma/endpoint/hop_limit": int(16, "data QP GRH hop limit", u8),
  "transports/rdma/endpoint/traffic_class": int(0, "GRH traffic class (MC_IB_TC)", u8),
  "transports/rdma/endpoint/service_level": int(0, "service level (MC_IB_SL)", range(0, 15)),
  "transports/rdma/endpoint/pkey_index": int(0, "P_Key index", nonNegative),
  "transports/rdma/endpoint/max_qp_wr": int(256, "work requests per data QP (send and receive)", range(1, 16384)),
  "transports/rdma/endpoint/max_sge": int(4, "scatter/gather entries per data WR", range(1, 16)),
  "transports/rdma/endpoint/max_inline_bytes": int(64, "inline data bytes per data WR", nonNegative),
  "transports/rdma/endpoint/endpoint_store_cap": int(65536, "endpoints per device before eviction", positive),
  "transports/rdma/max_endpoints_per_peer": int(
    256,
    "endpoints one peer segment may have this engine accept (its NIC pairs with this engine's); a Bootstrap beyond it is refused RESOURCE_EXHAUSTED, no endpoint evicted",
    positive
  ),
  "transports/rdma/max_accepted_bytes": int(
    -1,
    "memory all peers together may have this engine hold for the endpoints it accepts, each counted at its notify slots' full size each way; a Bootstrap beyond it is refused RESOURCE_EXHAUSTED, no endpoint evicted; -1 = half the host's memory",
    { check: (n) => n === -1 || n > 0, message: "must be > 0, or -1 (half the host's memory)" }
  ),
  "transports/rdma/notify/lazy_slots": {
    kind: "bool",
    default: true,
    description:
      "allocate notify send slots on first use and grow the posted receive ring with demand (RNR NAKs pace the peer meanwhile); false: TENT's, every slot at endpoint construction"
  },
  "transports/rdma/notify/slots": int(
    256,
    "notify send window and receive ring depth per endpoint (TENT: 256)",
    range(1, 16384)
  ),
  "transports/rdma/notify/slot_bytes": int(
    65536,
    "bytes of one notify slot, the largest notification frame sent or received over RDMA (TENT: 65536); larger ones go to the other transports",
    range(256, 65536)
  ),
  "transports/rdma/notify/initial_recv_slots": int(
    1,
    "with lazy_slots: receives posted per endpoint at connection, doubled when the ring runs low (at most slots)",
    positive
  ),
  "transports/rdma/notify/shared_recv": {
    kind: "bool",
    default: true,
    description:
      "receive notifications into one shared receive queue (SRQ) per device that every endpoint's notify QP takes its receives from, instead of receive slots of each endpoint: an idle endpoint holds no receive memory (a provider without SRQs keeps per-endpoint slots); false: TENT's, receive slots per endpoint"
  },
  "transports/rdma/notify/shared_recv_slots": int(
    256,
    "with shared_recv: notify receives posted per device at start, doubled when more than half completed in one poller drain",
    range(1, 16384)
  ),
  "transports/rdma/notify/shared_recv_max_slots": int(
    4096,
    "with shared_recv: the most notify receives a device's shared queue grows to (its max_wr; each slot_bytes)",
    range(1, 16384)
  ),
  "transports/rdma/notify/transfer_bound": {
    kind: "string",
    default: "notify_qp",
    description:
      'how a transfer-bound notification travels to a peer that takes immediates: "immediate" = a 0-byte RDMA_WRITE_WITH_IMM behind the data on every lane the transfer used, the notification released by the receiver once every lane\'s arrived (one RTT earlier, never ahead of its data); "notify_qp" = TENT\'s, a SEND on the notify QP once every slice completed'
  },
  "transports/rdma/notify/imm_recvs": int(
    64,
    "with transfer_bound immediate: receives kept posted on every data QP for the peers' immediates (at most max_qp_wr)",
    range(1, 65536)
  ),
  "transports/rdma/device/port": int(1, "port number of every device", positive),
  "transports/rdma/device/gid_index": int(-1, "GID index; -1 = chosen as TENT does (RoCE v2 IPv4-mapped or IB first)", {
    check: (n) => n >= -1,
    message: "must be -1 (automatic) or an index"
  }),
  "transports/rdma/device/max_cqe": int(4096, "depth of every CQ (clamped to the device)", positive),
  "transports/rdma/device/num_cq_list": int(6, "data CQs per device", range(1, 64)),
  "transports/rdma/workers/num_workers": int(6, "worker fibers posting slices", range(1, 64)),
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
  "notification/max_queued_bytes": int(
    64 * 1024 * 1024,
    "bytes (name + msg) of received notifications queued for the consumers; beyond it a notification is not admitted: a receipted one is resent by its sender, a Notify refused, an unstamped RDMA one dropped (all counted)",
    positive
  ),
  "notification/receipts": {
    kind: "bool",
    default: true,
    description:
      "delivery receipts and submit hooks (Series.fromConfig, with notification/proto 1): notify_proto 3, every accepted notification to a peer that offers receipts ends receipted or as an Undelivered event; a hook never re-sends to a served target; a FAILED batch sends failure notices"
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
