/**
 * The structs of `<infiniband/verbs.h>` (rdma-core, x86-64/aarch64 LP64) as koffi types, member for member, and the
 * byte offsets the hot path reads and writes, computed from those types. The ABI test compares every `sizeof` and
 * `offsetof` here with what gcc computes from the real header, so a wrong offset fails a test instead of a NIC.
 *
 * The types are anonymous: koffi type names are process-wide and defining one twice throws, and this module may be
 * evaluated more than once in a process (test isolation). Members named `__anonN` stand for C's anonymous unions; the
 * path helpers see through them, as C does.
 *
 * @internal
 */
import koffi, { type TypeObject } from "koffi"

import { ibv_context, ibv_context_ops, verbs_context } from "./Context.js"
import { int, opaqueBytes, ptr, u8, u16, u32, u64 } from "./CTypes.js"

export { ibv_context, ibv_context_ops, verbs_context }

/** `union ibv_gid`. */
export const ibv_gid = koffi.union({
  raw: koffi.array(u8, 16),
  global: koffi.struct({ subnet_prefix: u64, interface_id: u64 })
})

/** `struct ibv_port_attr` (52 bytes; the exported compat `ibv_query_port` fills only the first 48). */
export const ibv_port_attr = koffi.struct({
  state: int,
  max_mtu: int,
  active_mtu: int,
  gid_tbl_len: int,
  port_cap_flags: u32,
  max_msg_sz: u32,
  bad_pkey_cntr: u32,
  qkey_viol_cntr: u32,
  pkey_tbl_len: u16,
  lid: u16,
  sm_lid: u16,
  lmc: u8,
  max_vl_num: u8,
  sm_sl: u8,
  subnet_timeout: u8,
  init_type_reply: u8,
  active_width: u8,
  active_speed: u8,
  phys_state: u8,
  link_layer: u8,
  flags: u8,
  port_cap_flags2: u16
})

/** `struct ibv_device_attr` (232 bytes): what `ibv_query_device` fills. */
export const ibv_device_attr = koffi.struct({
  fw_ver: koffi.array("char", 64),
  node_guid: u64,
  sys_image_guid: u64,
  max_mr_size: u64,
  page_size_cap: u64,
  vendor_id: u32,
  vendor_part_id: u32,
  hw_ver: u32,
  max_qp: int,
  max_qp_wr: int,
  device_cap_flags: "unsigned int",
  max_sge: int,
  max_sge_rd: int,
  max_cq: int,
  max_cqe: int,
  max_mr: int,
  max_pd: int,
  max_qp_rd_atom: int,
  max_ee_rd_atom: int,
  max_res_rd_atom: int,
  max_qp_init_rd_atom: int,
  max_ee_init_rd_atom: int,
  atomic_cap: int,
  max_ee: int,
  max_rdd: int,
  max_mw: int,
  max_raw_ipv6_qp: int,
  max_raw_ethy_qp: int,
  max_mcast_grp: int,
  max_mcast_qp_attach: int,
  max_total_mcast_qp_attach: int,
  max_ah: int,
  max_fmr: int,
  max_map_per_fmr: int,
  max_srq: int,
  max_srq_wr: int,
  max_srq_sge: int,
  max_pkeys: u16,
  local_ca_ack_delay: u8,
  phys_port_cnt: u8
})

/** `struct ibv_async_event`. */
export const ibv_async_event = koffi.struct({
  element: koffi.union({ cq: ptr, qp: ptr, srq: ptr, wq: ptr, port_num: int }),
  event_type: int
})

/** `struct ibv_wc`. */
export const ibv_wc = koffi.struct({
  wr_id: u64,
  status: int,
  opcode: int,
  vendor_err: u32,
  byte_len: u32,
  __anon0: koffi.union({ imm_data: u32, invalidated_rkey: u32 }),
  qp_num: u32,
  src_qp: u32,
  wc_flags: "unsigned int",
  pkey_index: u16,
  slid: u16,
  sl: u8,
  dlid_path_bits: u8
})

/** `struct ibv_mr`. */
export const ibv_mr = koffi.struct({
  context: ptr,
  pd: ptr,
  addr: ptr,
  length: "size_t",
  handle: u32,
  lkey: u32,
  rkey: u32
})

/** `struct ibv_global_route`. */
export const ibv_global_route = koffi.struct({
  dgid: ibv_gid,
  flow_label: u32,
  sgid_index: u8,
  hop_limit: u8,
  traffic_class: u8
})

/** `struct ibv_ah_attr`. */
export const ibv_ah_attr = koffi.struct({
  grh: ibv_global_route,
  dlid: u16,
  sl: u8,
  src_path_bits: u8,
  static_rate: u8,
  is_global: u8,
  port_num: u8
})

/** `struct ibv_qp_cap`. */
export const ibv_qp_cap = koffi.struct({
  max_send_wr: u32,
  max_recv_wr: u32,
  max_send_sge: u32,
  max_recv_sge: u32,
  max_inline_data: u32
})

/** `struct ibv_qp_init_attr`. */
export const ibv_qp_init_attr = koffi.struct({
  qp_context: ptr,
  send_cq: ptr,
  recv_cq: ptr,
  srq: ptr,
  cap: ibv_qp_cap,
  qp_type: int,
  sq_sig_all: int
})

/** `struct ibv_srq_attr`. */
export const ibv_srq_attr = koffi.struct({ max_wr: u32, max_sge: u32, srq_limit: u32 })

/** `struct ibv_srq_init_attr`. */
export const ibv_srq_init_attr = koffi.struct({ srq_context: ptr, attr: ibv_srq_attr })

/** `struct ibv_qp_attr`. */
export const ibv_qp_attr = koffi.struct({
  qp_state: int,
  cur_qp_state: int,
  path_mtu: int,
  path_mig_state: int,
  qkey: u32,
  rq_psn: u32,
  sq_psn: u32,
  dest_qp_num: u32,
  qp_access_flags: "unsigned int",
  cap: ibv_qp_cap,
  ah_attr: ibv_ah_attr,
  alt_ah_attr: ibv_ah_attr,
  pkey_index: u16,
  alt_pkey_index: u16,
  en_sqd_async_notify: u8,
  sq_draining: u8,
  max_rd_atomic: u8,
  max_dest_rd_atomic: u8,
  min_rnr_timer: u8,
  port_num: u8,
  timeout: u8,
  retry_cnt: u8,
  rnr_retry: u8,
  alt_port_num: u8,
  alt_timeout: u8,
  rate_limit: u32
})

/** `struct ibv_sge`. */
export const ibv_sge = koffi.struct({ addr: u64, length: u32, lkey: u32 })

/** `struct ibv_mw_bind_info`. */
const ibv_mw_bind_info = koffi.struct({ mr: ptr, addr: u64, length: u64, mw_access_flags: "unsigned int" })

/** `struct ibv_send_wr`, unions and all (128 bytes). */
export const ibv_send_wr = koffi.struct({
  wr_id: u64,
  next: ptr,
  sg_list: ptr,
  num_sge: int,
  opcode: int,
  send_flags: "unsigned int",
  __anon0: koffi.union({ imm_data: u32, invalidate_rkey: u32 }),
  wr: koffi.union({
    rdma: koffi.struct({ remote_addr: u64, rkey: u32 }),
    atomic: koffi.struct({ remote_addr: u64, compare_add: u64, swap: u64, rkey: u32 }),
    ud: koffi.struct({ ah: ptr, remote_qpn: u32, remote_qkey: u32 })
  }),
  qp_type: koffi.union({ xrc: koffi.struct({ remote_srqn: u32 }) }),
  __anon1: koffi.union({
    bind_mw: koffi.struct({ mw: ptr, rkey: u32, bind_info: ibv_mw_bind_info }),
    tso: koffi.struct({ hdr: ptr, hdr_sz: u16, mss: u16 })
  })
})

/** `struct ibv_recv_wr`. */
export const ibv_recv_wr = koffi.struct({ wr_id: u64, next: ptr, sg_list: ptr, num_sge: int })

/** `struct ibv_qp`. */
export const ibv_qp = koffi.struct({
  context: ptr,
  qp_context: ptr,
  pd: ptr,
  send_cq: ptr,
  recv_cq: ptr,
  srq: ptr,
  handle: u32,
  qp_num: u32,
  state: int,
  qp_type: int,
  mutex: opaqueBytes(40),
  cond: opaqueBytes(48),
  events_completed: u32
})

/** `struct ibv_comp_channel`. */
export const ibv_comp_channel = koffi.struct({ context: ptr, fd: int, refcnt: int })

/** `struct ibv_cq`. */
export const ibv_cq = koffi.struct({
  context: ptr,
  channel: ptr,
  cq_context: ptr,
  handle: u32,
  cqe: int,
  mutex: opaqueBytes(40),
  cond: opaqueBytes(48),
  comp_events_completed: u32,
  async_events_completed: u32
})

/** Every struct the binding uses, by its C name: what the ABI test checks. */
export const structs: Readonly<Record<string, TypeObject>> = {
  ibv_gid,
  ibv_device_attr,
  ibv_port_attr,
  ibv_async_event,
  ibv_wc,
  ibv_mr,
  ibv_global_route,
  ibv_ah_attr,
  ibv_qp_cap,
  ibv_qp_init_attr,
  ibv_srq_attr,
  ibv_srq_init_attr,
  ibv_qp_attr,
  ibv_sge,
  ibv_send_wr,
  ibv_recv_wr,
  ibv_qp,
  ibv_comp_channel,
  ibv_cq,
  ibv_context_ops,
  ibv_context,
  verbs_context
}

const isAnonymous = (name: string) => name.startsWith("__anon")

/** One member of a struct, named as C's `offsetof` designator names it (`wr.rdma.remote_addr`). */
export interface MemberLayout {
  readonly path: string
  readonly offset: number
  readonly size: number
}

/**
 * Every leaf member of a koffi struct or union (scalars, pointers, arrays), recursively, with its offset from the start
 * of the outer type and its size. Anonymous unions add no name, as in C.
 */
export const members = (type: TypeObject): ReadonlyArray<MemberLayout> => {
  const out: Array<MemberLayout> = []
  const walk = (t: TypeObject, prefix: string, base: number) => {
    for (const m of Object.values(t.members ?? {})) {
      const path = isAnonymous(m.name) ? prefix : prefix === "" ? m.name : `${prefix}.${m.name}`
      const offset = base + m.offset
      if (m.type.primitive === "Record" || m.type.primitive === "Union") {
        if (!isAnonymous(m.name)) out.push({ path, offset, size: m.type.size })
        walk(m.type, path, offset)
      } else {
        out.push({ path, offset, size: m.type.size })
      }
    }
  }
  walk(type, "", 0)
  return out
}

/** The offset of a member designator (`wr.rdma.rkey`) in a koffi type; throws on a name the type lacks (a bug). */
export const offsetOf = (type: TypeObject, path: string): number => {
  const found = members(type).find((m) => m.path === path)
  if (found === undefined) throw new Error(`no member ${path} in the verbs layout`)
  return found.offset
}

/** Byte offsets used by the hot path and the lifecycle code, all derived from the types above. */
export const Off = {
  context: {
    device: offsetOf(ibv_context, "device"),
    pollCq: offsetOf(ibv_context, "ops.poll_cq"),
    reqNotifyCq: offsetOf(ibv_context, "ops.req_notify_cq"),
    postSend: offsetOf(ibv_context, "ops.post_send"),
    postRecv: offsetOf(ibv_context, "ops.post_recv"),
    postSrqRecv: offsetOf(ibv_context, "ops.post_srq_recv"),
    cmdFd: offsetOf(ibv_context, "cmd_fd"),
    asyncFd: offsetOf(ibv_context, "async_fd"),
    abiCompat: offsetOf(ibv_context, "abi_compat")
  },
  /** Where `ibv_context` sits inside `verbs_context`: `verbs_get_ctx` subtracts this. */
  verbsContext: {
    queryPort: offsetOf(verbs_context, "query_port"),
    sz: offsetOf(verbs_context, "sz"),
    context: offsetOf(verbs_context, "context")
  },
  sge: { addr: offsetOf(ibv_sge, "addr"), length: offsetOf(ibv_sge, "length"), lkey: offsetOf(ibv_sge, "lkey") },
  sendWr: {
    wrId: offsetOf(ibv_send_wr, "wr_id"),
    next: offsetOf(ibv_send_wr, "next"),
    sgList: offsetOf(ibv_send_wr, "sg_list"),
    numSge: offsetOf(ibv_send_wr, "num_sge"),
    opcode: offsetOf(ibv_send_wr, "opcode"),
    sendFlags: offsetOf(ibv_send_wr, "send_flags"),
    immData: offsetOf(ibv_send_wr, "imm_data"),
    remoteAddr: offsetOf(ibv_send_wr, "wr.rdma.remote_addr"),
    rkey: offsetOf(ibv_send_wr, "wr.rdma.rkey")
  },
  recvWr: {
    wrId: offsetOf(ibv_recv_wr, "wr_id"),
    next: offsetOf(ibv_recv_wr, "next"),
    sgList: offsetOf(ibv_recv_wr, "sg_list"),
    numSge: offsetOf(ibv_recv_wr, "num_sge")
  },
  wc: {
    wrId: offsetOf(ibv_wc, "wr_id"),
    status: offsetOf(ibv_wc, "status"),
    opcode: offsetOf(ibv_wc, "opcode"),
    vendorErr: offsetOf(ibv_wc, "vendor_err"),
    byteLen: offsetOf(ibv_wc, "byte_len"),
    immData: offsetOf(ibv_wc, "imm_data"),
    qpNum: offsetOf(ibv_wc, "qp_num"),
    srcQp: offsetOf(ibv_wc, "src_qp"),
    wcFlags: offsetOf(ibv_wc, "wc_flags"),
    pkeyIndex: offsetOf(ibv_wc, "pkey_index"),
    slid: offsetOf(ibv_wc, "slid"),
    sl: offsetOf(ibv_wc, "sl"),
    dlidPathBits: offsetOf(ibv_wc, "dlid_path_bits")
  },
  qp: {
    context: offsetOf(ibv_qp, "context"),
    qpNum: offsetOf(ibv_qp, "qp_num"),
    state: offsetOf(ibv_qp, "state")
  },
  cq: { context: offsetOf(ibv_cq, "context"), cqe: offsetOf(ibv_cq, "cqe") },
  srqInit: { maxWr: offsetOf(ibv_srq_init_attr, "attr.max_wr"), maxSge: offsetOf(ibv_srq_init_attr, "attr.max_sge") },
  srqAttr: { srqLimit: offsetOf(ibv_srq_attr, "srq_limit") },
  compChannel: { fd: offsetOf(ibv_comp_channel, "fd") },
  mr: { lkey: offsetOf(ibv_mr, "lkey"), rkey: offsetOf(ibv_mr, "rkey") },
  asyncEvent: { element: offsetOf(ibv_async_event, "element"), eventType: offsetOf(ibv_async_event, "event_type") }
} as const

/** Sizes of the structs the binding allocates. */
export const Size = {
  sge: koffi.sizeof(ibv_sge),
  sendWr: koffi.sizeof(ibv_send_wr),
  recvWr: koffi.sizeof(ibv_recv_wr),
  wc: koffi.sizeof(ibv_wc),
  qpAttr: koffi.sizeof(ibv_qp_attr),
  qpInitAttr: koffi.sizeof(ibv_qp_init_attr),
  srqInitAttr: koffi.sizeof(ibv_srq_init_attr),
  srqAttr: koffi.sizeof(ibv_srq_attr),
  portAttr: koffi.sizeof(ibv_port_attr),
  deviceAttr: koffi.sizeof(ibv_device_attr),
  asyncEvent: koffi.sizeof(ibv_async_event),
  qp: koffi.sizeof(ibv_qp),
  cq: koffi.sizeof(ibv_cq),
  context: koffi.sizeof(ibv_context),
  mr: koffi.sizeof(ibv_mr)
} as const
