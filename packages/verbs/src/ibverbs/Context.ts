/**
 * `struct ibv_context` and what surrounds it: the function table the `static inline` verbs dispatch through and the
 * extended `verbs_context` that ends with it. Re-exported by `Layout.ts`, whose ABI test checks them with the rest.
 *
 * @internal
 */
import koffi from "koffi"
import { int, opaqueBytes, pointers, ptr, u64 } from "./CTypes.js"

/** `struct ibv_context_ops`: the function table the `static inline` verbs dispatch through. */
export const ibv_context_ops = koffi.struct(
  pointers([
    "_compat_query_device",
    "_compat_query_port",
    "_compat_alloc_pd",
    "_compat_dealloc_pd",
    "_compat_reg_mr",
    "_compat_rereg_mr",
    "_compat_dereg_mr",
    "alloc_mw",
    "bind_mw",
    "dealloc_mw",
    "_compat_create_cq",
    "poll_cq",
    "req_notify_cq",
    "_compat_cq_event",
    "_compat_resize_cq",
    "_compat_destroy_cq",
    "_compat_create_srq",
    "_compat_modify_srq",
    "_compat_query_srq",
    "_compat_destroy_srq",
    "post_srq_recv",
    "_compat_create_qp",
    "_compat_query_qp",
    "_compat_modify_qp",
    "_compat_destroy_qp",
    "post_send",
    "post_recv",
    "_compat_create_ah",
    "_compat_destroy_ah",
    "_compat_attach_mcast",
    "_compat_detach_mcast",
    "_compat_async_event"
  ])
)

/** `struct ibv_context`. */
export const ibv_context = koffi.struct({
  device: ptr,
  ops: ibv_context_ops,
  cmd_fd: int,
  async_fd: int,
  num_comp_vectors: int,
  mutex: opaqueBytes(40),
  abi_compat: ptr
})

/** `struct verbs_context`: the extended context that ends with the `ibv_context` libibverbs hands out. */
export const verbs_context = koffi.struct({
  ...pointers([
    "query_port",
    "advise_mr",
    "alloc_null_mr",
    "read_counters",
    "attach_counters_point_flow",
    "create_counters",
    "destroy_counters",
    "reg_dm_mr",
    "alloc_dm",
    "free_dm",
    "modify_flow_action_esp",
    "destroy_flow_action",
    "create_flow_action_esp",
    "modify_qp_rate_limit",
    "alloc_parent_domain",
    "dealloc_td",
    "alloc_td",
    "modify_cq",
    "post_srq_ops",
    "destroy_rwq_ind_table",
    "create_rwq_ind_table",
    "destroy_wq",
    "modify_wq",
    "create_wq",
    "query_rt_values",
    "create_cq_ex",
    "priv",
    "query_device_ex",
    "ibv_destroy_flow",
    "ABI_placeholder2",
    "ibv_create_flow",
    "ABI_placeholder1",
    "open_qp",
    "create_qp_ex",
    "get_srq_num",
    "create_srq_ex",
    "open_xrcd",
    "close_xrcd"
  ]),
  _ABI_placeholder3: u64,
  sz: "size_t",
  context: ibv_context
})
