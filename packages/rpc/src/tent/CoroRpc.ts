/**
 * The wire of TENT's control plane: yalantinglibs `coro_rpc` (pinned by Mooncake at alibaba/yalantinglibs
 * 7801bc9ad9021781f15217552214e325a1cf7373), as TENT uses it: one registered function
 * `mooncake::tent::CoroRpcAgent::process(int func_id)` (TENT `include/tent/rpc/rpc.h:104`), whose `int` argument
 * selects the handler and whose request and response bytes travel as coro_rpc attachments (TENT
 * `src/rpc/rpc.cpp:151-178, 216-218`).
 *
 * A frame is a fixed header, then `length` body bytes (struct_pack of the arguments, or of the result), then
 * `attach_length` attachment bytes (ylt `coro_rpc_protocol.hpp:60-79`, `coro_connection.hpp:586-604`,
 * `coro_rpc_client.hpp:1244-1299`). Every integer is little-endian (struct_pack's `write_wrapper`,
 * `endian_wrapper.hpp:137-152`; the headers are struct_pack'd with `DISABLE_ALL_META_INFO`, i.e. the fields in
 * order with no padding).
 *
 * Plain synchronous code on Buffers; nothing throws: malformed input comes back as a {@link CoroRpcFrameError}.
 *
 * @since 0.2.0
 */
import * as Crypto from "node:crypto"
import {
  REQUEST_HEADER_BYTES,
  RESPONSE_HEADER_BYTES,
  writeRequestHeader,
  writeResponseHeader
} from "./CoroRpcHeader.js"
import { encodeErrorBody, encodeIntArg, VOID_RESULT } from "./StructPack.js"

/**
 * The frame headers, their constants and {@link CoroRpcFrameError}.
 *
 * @since 0.2.0
 */
export * from "./CoroRpcHeader.js"
/**
 * The streaming {@link FrameDecoder}, its caps, and the whole-frame decoders.
 *
 * @since 0.2.0
 */
export * from "./FrameDecoder.js"
/**
 * The struct_pack bodies: the `int` argument, the `void` result, the error bodies, the type hashes.
 *
 * @since 0.2.0
 */
export * from "./StructPack.js"

/**
 * The name coro_rpc derives for a registered function: `get_func_name<func>()` (ylt `util/function_name.h:32-47`)
 * is `refvalue::qualified_name_of_v<func>` (`util/magic_names.hpp:138-203`), which on GCC and Clang cuts the
 * `Func = &…` part out of `__PRETTY_FUNCTION__`, drops the `&`, and keeps the qualified name (there is no `l ` and
 * no `(` in it, so nothing more is cut). TENT's class lives in `namespace mooncake { namespace tent {`
 * (`rpc.h:35-36, 54, 104`). Checked with g++ 12 against the pinned headers.
 *
 * @since 0.2.0
 */
export const PROCESS_FUNCTION_NAME = "mooncake::tent::CoroRpcAgent::process"

/**
 * coro_rpc's `function_id` of a function name: `MD5Hash32Constexpr(name)` (ylt `util/utils.hpp:23-29`,
 * `router.hpp:121-127`) = `SwapEndian(a)` where `a` is MD5's first state word (`struct_pack/md5_constexpr.hpp:
 * 309-323`). MD5's digest stores `a` little-endian in bytes 0..3, so the swapped word is those four bytes read
 * big-endian.
 *
 * @since 0.2.0
 */
export const functionIdOf = (name: string): number => Crypto.createHash("md5").update(name).digest().readUInt32BE(0)

/**
 * The `function_id` of `mooncake::tent::CoroRpcAgent::process`: MD5 = `ff74660d…`, so
 * {@link functionIdOf}({@link PROCESS_FUNCTION_NAME}) = 0xff74660d, on the wire `0d 66 74 ff`.
 *
 * @since 0.2.0
 */
export const PROCESS_FUNCTION_ID = 0xff74660d

/**
 * TENT's `enum RpcFuncID` (`include/tent/rpc/rpc.h:38-50`): the `int` argument of `process`.
 *
 * @since 0.2.0
 */
export enum TentFuncId {
  GetSegmentDesc = 1,
  BootstrapRdma = 2,
  SendData = 3,
  RecvData = 4,
  Notify = 5,
  Probe = 6,
  Delegate = 7,
  Pin = 8,
  Unpin = 9,
  SubscribeSegmentUpdate = 10,
  NotifySegmentUpdated = 11
}

/**
 * coro_rpc's `errc` (ylt `coro_rpc/impl/errno.h:20-39`), carried in the response header's `err_code` byte; a code
 * above 255 travels as 255 with the real code in the body (`coro_rpc_protocol.hpp:222-235`).
 *
 * @since 0.2.0
 */
export const Errc = {
  ok: 0,
  io_error: 1,
  not_connected: 2,
  timed_out: 3,
  invalid_rpc_arguments: 4,
  address_in_used: 5,
  bad_address: 6,
  open_error: 7,
  listen_error: 8,
  operation_canceled: 9,
  rpc_throw_exception: 10,
  function_not_registered: 11,
  protocol_error: 12,
  unknown_protocol_version: 13,
  message_too_large: 14,
  server_has_ran: 15,
  invalid_rpc_result: 16,
  serial_number_conflict: 17
} as const

// ---------------------------------------------------------------------------------------------------------------
// Whole frames

/**
 * Encodes a call of `process(funcId)` with `attachment` as ylt's client sends it: header, struct_pack'd `int`,
 * attachment (`send_impl`, `coro_rpc_client.hpp:1820-1900`). `functionId` defaults to {@link PROCESS_FUNCTION_ID}.
 *
 * @since 0.2.0
 */
export const encodeRequest = (opts: {
  readonly seqNum: number
  readonly funcId: number
  readonly attachment?: Uint8Array
  readonly functionId?: number
}): Buffer => {
  const attachment = opts.attachment ?? EMPTY
  const body = encodeIntArg(opts.funcId)
  const out = Buffer.allocUnsafe(REQUEST_HEADER_BYTES + body.length + attachment.length)
  writeRequestHeader(out, 0, {
    seqNum: opts.seqNum,
    functionId: opts.functionId ?? PROCESS_FUNCTION_ID,
    length: body.length,
    attachLength: attachment.length
  })
  body.copy(out, REQUEST_HEADER_BYTES)
  out.set(attachment, REQUEST_HEADER_BYTES + body.length)
  return out
}

/**
 * Encodes a response: header, body, attachment. With no `error`, the body is {@link VOID_RESULT} (what `process`
 * returns); with an `error`, the body is {@link encodeErrorBody} and no attachment is sent (ylt sends whatever
 * attachment was set, and TENT sets none on an exception: `rpc.cpp:151-178`).
 *
 * @since 0.2.0
 */
export const encodeResponse = (opts: {
  readonly seqNum: number
  readonly attachment?: Uint8Array
  readonly error?: { readonly code: number; readonly message: string }
}): Buffer => {
  const err = opts.error === undefined ? undefined : encodeErrorBody(opts.error.code, opts.error.message)
  const body = err === undefined ? VOID_RESULT : err.body
  const attachment = err === undefined ? (opts.attachment ?? EMPTY) : EMPTY
  const out = Buffer.allocUnsafe(RESPONSE_HEADER_BYTES + body.length + attachment.length)
  writeResponseHeader(out, 0, {
    seqNum: opts.seqNum,
    errCode: err === undefined ? 0 : err.errCode,
    length: body.length,
    attachLength: attachment.length
  })
  body.copy(out, RESPONSE_HEADER_BYTES)
  out.set(attachment, RESPONSE_HEADER_BYTES + body.length)
  return out
}

const EMPTY = Buffer.alloc(0)
