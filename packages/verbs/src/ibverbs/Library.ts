/**
 * The exported functions of `libibverbs.so.1`, declared for koffi, and the function-pointer prototypes of the verbs
 * that `<infiniband/verbs.h>` defines `static inline` (they dispatch through `ibv_context.ops`). Pointers are passed
 * as plain numbers (user-space addresses fit in 53 bits) and come back from koffi as bigints or `null`.
 *
 * @internal
 */
import { getSystemErrorMap } from "node:util"
import koffi, { type LibraryHandle } from "koffi"

const ptr = "void *"

/** `int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **)`, and `post_recv` alike. */
export const PostProto = koffi.proto("int", [ptr, ptr, ptr])
/** `int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *)`. */
export const PollCqProto = koffi.proto("int", [ptr, "int", ptr])
/** `int (*req_notify_cq)(struct ibv_cq *, int)`. */
export const ReqNotifyCqProto = koffi.proto("int", [ptr, "int"])
/** `int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *, size_t)` in `verbs_context`. */
export const QueryPortExProto = koffi.proto("int", [ptr, "uint8_t", ptr, "size_t"])

/** A C pointer as koffi returns it. */
export type Pointer = bigint | null

/**
 * The verbs a libibverbs may lack because it predates them, each looked up on first use (once: a miss is remembered)
 * and `undefined` when absent, so an older rdma-core loads and only the feature that needs the verb falls back.
 */
const optional = (lib: LibraryHandle) => {
  const lookup = <F>(declare: () => unknown): (() => F | undefined) => {
    let state: { readonly fn: F | undefined } | undefined
    return () => {
      if (state === undefined) {
        try {
          state = { fn: declare() as F }
        } catch {
          state = { fn: undefined }
        }
      }
      return state.fn
    }
  }
  return {
    /** `ibv_reg_mr_iova2` (symbol version `IBVERBS_1.8`; older rdma-core lacks it): what the `ibv_reg_mr` macro calls for access bits 20–29. */
    regMrIova2: lookup<(pd: number, addr: number, length: number, iova: number, access: number) => Pointer>(() =>
      lib.func("ibv_reg_mr_iova2", ptr, [ptr, ptr, "size_t", "uint64_t", "unsigned int"])
    ),
    /**
     * `_ibv_query_gid_ex` (symbol version `IBVERBS_1.11`, rdma-core v32): what the `ibv_query_gid_ex` inline calls;
     * returns 0 or the errno. Older rdma-core lacks it, and a GID's type then comes from sysfs.
     */
    queryGidEx: lookup<
      (ctx: number, port: number, index: number, entry: number, flags: number, entrySize: number) => number
    >(() => lib.func("_ibv_query_gid_ex", "int", [ptr, "uint32_t", "uint32_t", ptr, "uint32_t", "size_t"]))
  }
}

/**
 * The bound library: one function per exported verb the provider calls. Every verb here is in every rdma-core release
 * (libibverbs 1.1 on), so a missing one means the file is not a libibverbs and `bind` throws; verbs that only newer
 * releases export are in {@link optional}, looked up on first use.
 */
export const bind = (lib: LibraryHandle) => ({
  getDeviceList: lib.func("ibv_get_device_list", ptr, [ptr]) as (num: number) => Pointer,
  freeDeviceList: lib.func("ibv_free_device_list", "void", [ptr]) as (list: number) => void,
  getDeviceName: lib.func("ibv_get_device_name", "const char *", [ptr]) as (dev: number) => string | null,
  getDeviceGuid: lib.func("ibv_get_device_guid", "uint64_t", [ptr]) as (dev: number) => number | bigint,
  openDevice: lib.func("ibv_open_device", ptr, [ptr]) as (dev: number) => Pointer,
  closeDevice: lib.func("ibv_close_device", "int", [ptr]) as (ctx: number) => number,
  queryDevice: lib.func("ibv_query_device", "int", [ptr, ptr]) as (ctx: number, attr: number) => number,
  queryPortCompat: lib.func("ibv_query_port", "int", [ptr, "uint8_t", ptr]) as (
    ctx: number,
    port: number,
    attr: number
  ) => number,
  queryGid: lib.func("ibv_query_gid", "int", [ptr, "uint8_t", "int", ptr]) as (
    ctx: number,
    port: number,
    index: number,
    gid: number
  ) => number,
  allocPd: lib.func("ibv_alloc_pd", ptr, [ptr]) as (ctx: number) => Pointer,
  deallocPd: lib.func("ibv_dealloc_pd", "int", [ptr]) as (pd: number) => number,
  regMr: lib.func("ibv_reg_mr", ptr, [ptr, ptr, "size_t", "int"]) as (
    pd: number,
    addr: number,
    length: number,
    access: number
  ) => Pointer,
  deregMr: lib.func("ibv_dereg_mr", "int", [ptr]) as (mr: number) => number,
  createCompChannel: lib.func("ibv_create_comp_channel", ptr, [ptr]) as (ctx: number) => Pointer,
  destroyCompChannel: lib.func("ibv_destroy_comp_channel", "int", [ptr]) as (channel: number) => number,
  createCq: lib.func("ibv_create_cq", ptr, [ptr, "int", ptr, ptr, "int"]) as (
    ctx: number,
    cqe: number,
    cqContext: number,
    channel: number,
    vector: number
  ) => Pointer,
  destroyCq: lib.func("ibv_destroy_cq", "int", [ptr]) as (cq: number) => number,
  getCqEvent: lib.func("ibv_get_cq_event", "int", [ptr, ptr, ptr]) as (
    channel: number,
    cqOut: number,
    contextOut: number
  ) => number,
  ackCqEvents: lib.func("ibv_ack_cq_events", "void", [ptr, "unsigned int"]) as (cq: number, n: number) => void,
  createQp: lib.func("ibv_create_qp", ptr, [ptr, ptr]) as (pd: number, init: number) => Pointer,
  modifyQp: lib.func("ibv_modify_qp", "int", [ptr, ptr, "int"]) as (qp: number, attr: number, mask: number) => number,
  queryQp: lib.func("ibv_query_qp", "int", [ptr, ptr, "int", ptr]) as (
    qp: number,
    attr: number,
    mask: number,
    init: number
  ) => number,
  destroyQp: lib.func("ibv_destroy_qp", "int", [ptr]) as (qp: number) => number,
  createSrq: lib.func("ibv_create_srq", ptr, [ptr, ptr]) as (pd: number, init: number) => Pointer,
  modifySrq: lib.func("ibv_modify_srq", "int", [ptr, ptr, "int"]) as (
    srq: number,
    attr: number,
    mask: number
  ) => number,
  destroySrq: lib.func("ibv_destroy_srq", "int", [ptr]) as (srq: number) => number,
  getAsyncEvent: lib.func("ibv_get_async_event", "int", [ptr, ptr]) as (ctx: number, event: number) => number,
  ackAsyncEvent: lib.func("ibv_ack_async_event", "void", [ptr]) as (event: number) => void,
  optional: optional(lib)
})

/** The bound libibverbs. */
export type Library = ReturnType<typeof bind>

let libc: { readonly fcntl: (...args: Array<unknown>) => number } | undefined

const F_GETFL = 3
const F_SETFL = 4
const O_NONBLOCK = 0o4000

/**
 * Makes a file descriptor non-blocking, as rdma-core's man pages say to for the completion channel and async fds, so
 * `ibv_get_cq_event`/`ibv_get_async_event` return EAGAIN instead of blocking the event loop. Returns 0 or an errno.
 */
export const setNonBlocking = (fd: number): number => {
  libc ??= { fcntl: koffi.load("libc.so.6").func("int fcntl(int fd, int cmd, ...)") }
  const flags = libc.fcntl(fd, F_GETFL)
  if (flags < 0) return koffi.errno()
  return libc.fcntl(fd, F_SETFL, "int", flags | O_NONBLOCK) < 0 ? koffi.errno() : 0
}

/** A returned pointer as a number address, 0 for NULL. */
export const address = (p: Pointer | number): number => (p === null ? 0 : Number(p))

/** The errno after a failed call: a positive return code is the errno itself (rdma-core style); otherwise `errno`. */
export const errnoOf = (rc: number): number => {
  if (rc > 0) return rc
  if (rc < -1) return -rc
  return koffi.errno() || 5 /* EIO: the call failed without saying why */
}

/** `ENOSYS (function not implemented)`: the errno's name and the system's text for it. */
export const errnoText = (errno: number): string => {
  const entry = getSystemErrorMap().get(-errno)
  return entry === undefined ? `errno ${errno}` : `${entry[0]} (${entry[1]})`
}
