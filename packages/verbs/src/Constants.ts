/**
 * The numbers of `<infiniband/verbs.h>` (rdma-core), with the same names minus the `IBV_` prefix, so a reader who
 * knows verbs reads this as verbs. Every provider uses these values on its interface; the koffi provider passes them
 * to the C library unchanged.
 *
 * @since 0.1.0
 */

/**
 * `enum ibv_qp_state`.
 *
 * @since 0.1.0
 */
export const QpState = {
  RESET: 0,
  INIT: 1,
  RTR: 2,
  RTS: 3,
  SQD: 4,
  SQE: 5,
  ERR: 6
} as const
/**
 * A value of {@link QpState}.
 *
 * @since 0.1.0
 */
export type QpState = (typeof QpState)[keyof typeof QpState]

/**
 * `enum ibv_qp_type` (only RC is used by the engine).
 *
 * @since 0.1.0
 */
export const QpType = { RC: 2, UC: 3, UD: 4 } as const
/**
 * A value of {@link QpType}.
 *
 * @since 0.1.0
 */
export type QpType = (typeof QpType)[keyof typeof QpType]

/**
 * `enum ibv_qp_attr_mask`.
 *
 * @since 0.1.0
 */
export const QpAttrMask = {
  STATE: 1 << 0,
  CUR_STATE: 1 << 1,
  EN_SQD_ASYNC_NOTIFY: 1 << 2,
  ACCESS_FLAGS: 1 << 3,
  PKEY_INDEX: 1 << 4,
  PORT: 1 << 5,
  QKEY: 1 << 6,
  AV: 1 << 7,
  PATH_MTU: 1 << 8,
  TIMEOUT: 1 << 9,
  RETRY_CNT: 1 << 10,
  RNR_RETRY: 1 << 11,
  RQ_PSN: 1 << 12,
  MAX_QP_RD_ATOMIC: 1 << 13,
  ALT_PATH: 1 << 14,
  MIN_RNR_TIMER: 1 << 15,
  SQ_PSN: 1 << 16,
  MAX_DEST_RD_ATOMIC: 1 << 17,
  PATH_MIG_STATE: 1 << 18,
  CAP: 1 << 19,
  DEST_QPN: 1 << 20
} as const

/**
 * `enum ibv_mtu`: the encoded path MTU.
 *
 * @since 0.1.0
 */
export const Mtu = { MTU_256: 1, MTU_512: 2, MTU_1024: 3, MTU_2048: 4, MTU_4096: 5 } as const
/**
 * A value of {@link Mtu}.
 *
 * @since 0.1.0
 */
export type Mtu = (typeof Mtu)[keyof typeof Mtu]

/**
 * Bytes of an encoded `ibv_mtu` (`MTU_4096` → 4096); 0 for a value that is not an MTU.
 *
 * @since 0.1.0
 */
export const mtuToBytes = (mtu: number): number => (mtu >= 1 && mtu <= 5 ? 128 << mtu : 0)

/**
 * `enum ibv_wr_opcode`.
 *
 * @since 0.1.0
 */
export const WrOpcode = {
  RDMA_WRITE: 0,
  RDMA_WRITE_WITH_IMM: 1,
  SEND: 2,
  SEND_WITH_IMM: 3,
  RDMA_READ: 4,
  ATOMIC_CMP_AND_SWP: 5,
  ATOMIC_FETCH_AND_ADD: 6
} as const
/**
 * A value of {@link WrOpcode}.
 *
 * @since 0.1.0
 */
export type WrOpcode = (typeof WrOpcode)[keyof typeof WrOpcode]

/**
 * `enum ibv_send_flags`.
 *
 * @since 0.1.0
 */
export const SendFlags = { FENCE: 1, SIGNALED: 2, SOLICITED: 4, INLINE: 8 } as const

/**
 * `enum ibv_access_flags`.
 *
 * @since 0.1.0
 */
export const AccessFlags = {
  LOCAL_WRITE: 1,
  REMOTE_WRITE: 2,
  REMOTE_READ: 4,
  REMOTE_ATOMIC: 8,
  MW_BIND: 16,
  ZERO_BASED: 32,
  ON_DEMAND: 64,
  HUGETLB: 128,
  RELAXED_ORDERING: 1 << 20
} as const

/**
 * `enum ibv_wc_status`.
 *
 * @since 0.1.0
 */
export const WcStatus = {
  SUCCESS: 0,
  LOC_LEN_ERR: 1,
  LOC_QP_OP_ERR: 2,
  LOC_EEC_OP_ERR: 3,
  LOC_PROT_ERR: 4,
  WR_FLUSH_ERR: 5,
  MW_BIND_ERR: 6,
  BAD_RESP_ERR: 7,
  LOC_ACCESS_ERR: 8,
  REM_INV_REQ_ERR: 9,
  REM_ACCESS_ERR: 10,
  REM_OP_ERR: 11,
  RETRY_EXC_ERR: 12,
  RNR_RETRY_EXC_ERR: 13,
  LOC_RDD_VIOL_ERR: 14,
  REM_INV_RD_REQ_ERR: 15,
  REM_ABORT_ERR: 16,
  INV_EECN_ERR: 17,
  INV_EEC_STATE_ERR: 18,
  FATAL_ERR: 19,
  RESP_TIMEOUT_ERR: 20,
  GENERAL_ERR: 21
} as const
/**
 * A value of {@link WcStatus}.
 *
 * @since 0.1.0
 */
export type WcStatus = (typeof WcStatus)[keyof typeof WcStatus]

const wcStatusNames: ReadonlyArray<string> = Object.keys(WcStatus)

/**
 * The name of a work-completion status (`ibv_wc_status_str` gives prose; this gives the enum name).
 *
 * @since 0.1.0
 */
export const wcStatusName = (status: number): string => wcStatusNames[status] ?? `UNKNOWN(${status})`

/**
 * `enum ibv_wc_opcode`.
 *
 * @since 0.1.0
 */
export const WcOpcode = {
  SEND: 0,
  RDMA_WRITE: 1,
  RDMA_READ: 2,
  COMP_SWAP: 3,
  FETCH_ADD: 4,
  BIND_MW: 5,
  LOCAL_INV: 6,
  TSO: 7,
  RECV: 128,
  RECV_RDMA_WITH_IMM: 129
} as const
/**
 * A value of {@link WcOpcode}.
 *
 * @since 0.1.0
 */
export type WcOpcode = (typeof WcOpcode)[keyof typeof WcOpcode]

/**
 * `enum ibv_wc_flags`.
 *
 * @since 0.1.0
 */
export const WcFlags = { GRH: 1, WITH_IMM: 2, IP_CSUM_OK: 4, WITH_INV: 8 } as const

/**
 * `enum ibv_port_state`.
 *
 * @since 0.1.0
 */
export const PortState = { NOP: 0, DOWN: 1, INIT: 2, ARMED: 3, ACTIVE: 4, ACTIVE_DEFER: 5 } as const
/**
 * A value of {@link PortState}.
 *
 * @since 0.1.0
 */
export type PortState = (typeof PortState)[keyof typeof PortState]

/**
 * `enum ibv_event_type`.
 *
 * @since 0.1.0
 */
export const EventType = {
  CQ_ERR: 0,
  QP_FATAL: 1,
  QP_REQ_ERR: 2,
  QP_ACCESS_ERR: 3,
  COMM_EST: 4,
  SQ_DRAINED: 5,
  PATH_MIG: 6,
  PATH_MIG_ERR: 7,
  DEVICE_FATAL: 8,
  PORT_ACTIVE: 9,
  PORT_ERR: 10,
  LID_CHANGE: 11,
  PKEY_CHANGE: 12,
  SM_CHANGE: 13,
  SRQ_ERR: 14,
  SRQ_LIMIT_REACHED: 15,
  QP_LAST_WQE_REACHED: 16,
  CLIENT_REREGISTER: 17,
  GID_CHANGE: 18,
  WQ_FATAL: 19
} as const
/**
 * A value of {@link EventType}.
 *
 * @since 0.1.0
 */
export type EventType = (typeof EventType)[keyof typeof EventType]

/**
 * `IBV_LINK_LAYER_*` as reported in `ibv_port_attr.link_layer`.
 *
 * @since 0.1.0
 */
export const LinkLayer = { UNSPECIFIED: 0, INFINIBAND: 1, ETHERNET: 2 } as const

/**
 * `enum ibv_gid_type`: what a GID table entry addresses (`struct ibv_gid_entry.gid_type`).
 *
 * @since 0.2.0
 */
export const GidType = { IB: 0, ROCE_V1: 1, ROCE_V2: 2 } as const

/**
 * A value of {@link GidType}.
 *
 * @since 0.2.0
 */
export type GidType = (typeof GidType)[keyof typeof GidType]

/**
 * The InfiniBand RNR NAK timer encoding (IBA table 45): `min_rnr_timer` → milliseconds the requester waits before it
 * retries after a Receiver-Not-Ready NAK. 0 encodes the longest delay, 655.36 ms.
 *
 * @since 0.1.0
 */
export const RNR_TIMER_MS: ReadonlyArray<number> = [
  655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92, 2.56, 3.84, 5.12,
  7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52
]

/**
 * Local ACK timeout of an RC QP in milliseconds: `4.096 µs × 2^timeout`; `timeout` 0 means infinite (returns 0).
 *
 * @since 0.1.0
 */
export const ackTimeoutMs = (timeout: number): number => (timeout === 0 ? 0 : 0.004096 * 2 ** timeout)

/**
 * `rnr_retry` 7 means "retry forever".
 *
 * @since 0.1.0
 */
export const RNR_RETRY_INFINITE = 7

/**
 * Linux errno values the verbs calls return.
 *
 * @since 0.1.0
 */
export const Errno = {
  EPERM: 1,
  ENOENT: 2,
  EIO: 5,
  EAGAIN: 11,
  ENOMEM: 12,
  EFAULT: 14,
  EBUSY: 16,
  ENODEV: 19,
  EINVAL: 22,
  ENOSYS: 38,
  EOPNOTSUPP: 95,
  ETIMEDOUT: 110
} as const
