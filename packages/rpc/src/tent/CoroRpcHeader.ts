/**
 * The frame headers of yalantinglibs `coro_rpc` (pinned by Mooncake at alibaba/yalantinglibs
 * 7801bc9ad9021781f15217552214e325a1cf7373), as `coro_rpc_protocol.hpp` lays them out, and the error of a frame that
 * cannot be decoded. A frame is a fixed header, then `length` body bytes, then `attach_length` attachment bytes (ylt
 * `coro_rpc_protocol.hpp:60-79`). Every integer is little-endian; the headers are struct_pack'd with
 * `DISABLE_ALL_META_INFO`, i.e. the fields in order with no padding (`endian_wrapper.hpp:137-152`).
 *
 * Plain synchronous code on Buffers. {@link CoroRpc} re-exports all of it.
 *
 * @since 0.2.0
 */
import { Data } from "effect"

/**
 * `coro_rpc_protocol::magic_number` (ylt `coro_rpc_protocol.hpp:250`).
 *
 * @since 0.2.0
 */
export const MAGIC = 21

/**
 * `coro_rpc_protocol::VERSION_NUMBER` (ylt `coro_rpc_protocol.hpp:45`); a server closes the connection on a request
 * whose version is greater (`coro_rpc_protocol.hpp:112-115`).
 *
 * @since 0.2.0
 */
export const VERSION = 0

/**
 * `serialize_type` 0 = struct_pack, the only one (ylt `coro_rpc_protocol.hpp:85-92`); any other closes the
 * connection (`coro_connection.hpp:280-290`).
 *
 * @since 0.2.0
 */
export const SERIALIZE_STRUCT_PACK = 0

/**
 * Request header bytes: `u8 magic, u8 version, u8 serialize_type, u8 msg_type, u32 seq_num, u32 function_id,
 * u32 length, u32 attach_length` (ylt `coro_rpc_protocol.hpp:60-69, 252-253`).
 *
 * @since 0.2.0
 */
export const REQUEST_HEADER_BYTES = 20

/**
 * Response header bytes: `u8 magic, u8 version, u8 err_code, u8 msg_type, u32 seq_num, u32 length,
 * u32 attach_length` (ylt `coro_rpc_protocol.hpp:71-79, 255-256`).
 *
 * @since 0.2.0
 */
export const RESPONSE_HEADER_BYTES = 16

/**
 * A frame that cannot be (or must not be) decoded. `reason`:
 * - `BadMagic`: the first byte is not 21 (a ylt server closes the connection, `coro_rpc_protocol.hpp:112-115`);
 * - `BadVersion`: version above 0 (same);
 * - `BadSerializeType`: serialize_type not 0 (`coro_connection.hpp:280-290`);
 * - `Oversized`: `length` or `attach_length` above the decoder's cap (refused before allocating);
 * - `BadBody`: the struct_pack body is not the expected type;
 * - `Truncated`: fewer bytes than the header announces (a whole-frame decode, or the stream ended mid-frame).
 *
 * @since 0.2.0
 */
export class CoroRpcFrameError extends Data.TaggedError("CoroRpcFrameError")<{
  readonly reason: "BadMagic" | "BadVersion" | "BadSerializeType" | "Oversized" | "BadBody" | "Truncated"
  readonly message: string
}> {}

/**
 * A decoded request header.
 *
 * @since 0.2.0
 */
export interface RequestHeader {
  readonly magic: number
  readonly version: number
  readonly serializeType: number
  readonly msgType: number
  readonly seqNum: number
  readonly functionId: number
  readonly length: number
  readonly attachLength: number
}

/**
 * A decoded response header.
 *
 * @since 0.2.0
 */
export interface ResponseHeader {
  readonly magic: number
  readonly version: number
  readonly errCode: number
  readonly msgType: number
  readonly seqNum: number
  readonly length: number
  readonly attachLength: number
}

/**
 * A whole request: header, struct_pack'd arguments, attachment.
 *
 * @since 0.2.0
 */
export interface RequestFrame {
  readonly header: RequestHeader
  readonly body: Buffer
  readonly attachment: Buffer
}

/**
 * A whole response: header, struct_pack'd result (or error message), attachment.
 *
 * @since 0.2.0
 */
export interface ResponseFrame {
  readonly header: ResponseHeader
  readonly body: Buffer
  readonly attachment: Buffer
}

/**
 * Writes a request header at `offset`. `magic`, `version`, `serializeType` and `msgType` default to what ylt's client
 * sends (21, 0, 0, 0: `prepare_buffer`, `coro_rpc_client.hpp:1265-1275` zero-initialises the header).
 *
 * @since 0.2.0
 */
export const writeRequestHeader = (
  buf: Buffer,
  offset: number,
  h: Pick<RequestHeader, "seqNum" | "functionId" | "length" | "attachLength"> & Partial<RequestHeader>
): void => {
  buf.writeUInt8(h.magic ?? MAGIC, offset)
  buf.writeUInt8(h.version ?? VERSION, offset + 1)
  buf.writeUInt8(h.serializeType ?? SERIALIZE_STRUCT_PACK, offset + 2)
  buf.writeUInt8(h.msgType ?? 0, offset + 3)
  buf.writeUInt32LE(h.seqNum >>> 0, offset + 4)
  buf.writeUInt32LE(h.functionId >>> 0, offset + 8)
  buf.writeUInt32LE(h.length >>> 0, offset + 12)
  buf.writeUInt32LE(h.attachLength >>> 0, offset + 16)
}

/**
 * Reads a request header at `offset` (the caller has checked there are 20 bytes); no validation.
 *
 * @since 0.2.0
 */
export const readRequestHeader = (buf: Buffer, offset: number): RequestHeader => ({
  magic: buf.readUInt8(offset),
  version: buf.readUInt8(offset + 1),
  serializeType: buf.readUInt8(offset + 2),
  msgType: buf.readUInt8(offset + 3),
  seqNum: buf.readUInt32LE(offset + 4),
  functionId: buf.readUInt32LE(offset + 8),
  length: buf.readUInt32LE(offset + 12),
  attachLength: buf.readUInt32LE(offset + 16)
})

/**
 * Writes a response header at `offset`; `magic`/`version`/`msgType` default to 21/0/0 (`prepare_response`,
 * `coro_rpc_protocol.hpp:191-240`).
 *
 * @since 0.2.0
 */
export const writeResponseHeader = (
  buf: Buffer,
  offset: number,
  h: Pick<ResponseHeader, "seqNum" | "errCode" | "length" | "attachLength"> & Partial<ResponseHeader>
): void => {
  buf.writeUInt8(h.magic ?? MAGIC, offset)
  buf.writeUInt8(h.version ?? VERSION, offset + 1)
  buf.writeUInt8(h.errCode, offset + 2)
  buf.writeUInt8(h.msgType ?? 0, offset + 3)
  buf.writeUInt32LE(h.seqNum >>> 0, offset + 4)
  buf.writeUInt32LE(h.length >>> 0, offset + 8)
  buf.writeUInt32LE(h.attachLength >>> 0, offset + 12)
}

/**
 * Reads a response header at `offset` (the caller has checked there are 16 bytes); no validation.
 *
 * @since 0.2.0
 */
export const readResponseHeader = (buf: Buffer, offset: number): ResponseHeader => ({
  magic: buf.readUInt8(offset),
  version: buf.readUInt8(offset + 1),
  errCode: buf.readUInt8(offset + 2),
  msgType: buf.readUInt8(offset + 3),
  seqNum: buf.readUInt32LE(offset + 4),
  length: buf.readUInt32LE(offset + 8),
  attachLength: buf.readUInt32LE(offset + 12)
})
