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
import { Data, Either } from "effect"

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

/**
 * struct_pack's 4-byte type hash of a root type: `MD5Hash32(type literal) & ~1`
 * (`struct_pack/type_calculate.hpp:508-516`); the low bit, when set, says a metainfo byte follows
 * (`packer.hpp:90-139`). The literal of a fundamental or string type is its `type_id` byte(s)
 * (`type_calculate.hpp:194-306`, `type_id.hpp:25-81`).
 *
 * @since 0.2.0
 */
export const typeHashOf = (literal: ReadonlyArray<number>): number =>
  (Crypto.createHash("md5").update(Buffer.from(literal)).digest().readUInt32BE(0) & 0xfffffffe) >>> 0

/**
 * The struct_pack type literals coro_rpc uses for TENT: `int` = `[int32_t=1]`; the `void` result = `std::monostate`
 * = `[monostate_t=250]`; an error message (`std::string_view`) = `[string_t=128, char_8_t=12]`
 * (`type_id.hpp:25-81, 160-167`); an error above 255 = `std::pair<uint16_t, string_view>` =
 * `[struct_t=253, uint16_t=8, 128, 12, type_end_flag=255]`.
 *
 * @since 0.2.0
 */
export const TypeLiteral = {
  int32: [1],
  monostate: [250],
  string: [128, 12],
  errorPair: [253, 8, 128, 12, 255]
} as const

/**
 * The type hashes of {@link TypeLiteral} (computed here, and checked against g++ output of the pinned headers):
 * int32 0x55a54008, monostate 0x8901cfea, string 0x9dcffa76, error pair 0x372be64c.
 *
 * @since 0.2.0
 */
export const TypeHash = {
  int32: 0x55a54008,
  monostate: 0x8901cfea,
  string: 0x9dcffa76,
  errorPair: 0x372be64c
} as const

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

const frameError = (reason: CoroRpcFrameError["reason"], message: string) => new CoroRpcFrameError({ reason, message })

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

// ---------------------------------------------------------------------------------------------------------------
// struct_pack bodies

/**
 * struct_pack of one `int` as ylt's client packs `call<&CoroRpcAgent::process>(func_id)`:
 * `serialize_to_with_offset(buffer, offset, int)` (`coro_rpc_client.hpp:1371-1391`) = type hash, then the 4 bytes
 * (no metainfo in an `NDEBUG` build: `serialize_static_config::has_type_literal`, `type_calculate.hpp:744-752`).
 * For func_id 5: `08 40 a5 55 05 00 00 00`.
 *
 * @since 0.2.0
 */
export const encodeIntArg = (value: number): Buffer => {
  const b = Buffer.alloc(8)
  b.writeUInt32LE(TypeHash.int32, 0)
  b.writeInt32LE(value | 0, 4)
  return b
}

/**
 * struct_pack of `std::monostate`, the body of every successful `void`/`Lazy<void>` call
 * (`struct_pack_protocol.hpp:34-36`, `rpc_execute.hpp:209-219`): only the type hash, `ea cf 01 89`.
 *
 * @since 0.2.0
 */
export const VOID_RESULT: Buffer = (() => {
  const b = Buffer.alloc(4)
  b.writeUInt32LE(TypeHash.monostate, 0)
  return b
})()

/**
 * Reads struct_pack's head: the type hash (must match `hash` ignoring the low bit, as `deserialize_metainfo` does,
 * `unpacker.hpp:585-595`), then, when the low bit is set, the metainfo byte (`unpacker.hpp:596-618`): bits 0-1 a
 * compatible-size field (refused: none of TENT's types has one), bit 2 a NUL-terminated type literal (a debug,
 * non-`NDEBUG`, build writes one; it must equal `literal`), bits 3-4 the width of container lengths (1, 2, 4, 8 bytes).
 * Returns the offset of the data and the length width, or an error message.
 */
const readHead = (
  body: Buffer,
  hash: number,
  literal: ReadonlyArray<number>
): { readonly offset: number; readonly sizeWidth: number } | string => {
  if (body.length < 4) return "shorter than a struct_pack type hash"
  const head = body.readUInt32LE(0)
  if (head >>> 1 !== hash >>> 1) return `type hash 0x${head.toString(16)}, expected 0x${hash.toString(16)}`
  if ((head & 1) === 0) return { offset: 4, sizeWidth: 1 }
  if (body.length < 5) return "metainfo byte missing"
  const meta = body[4] as number
  if ((meta & 0b11) !== 0) return "compatible-field metainfo is not expected here"
  let offset = 5
  if ((meta & 0b100) !== 0) {
    const end = offset + literal.length + 1
    if (body.length < end) return "type literal truncated"
    for (let k = 0; k < literal.length; k++) if (body[offset + k] !== literal[k]) return "type literal differs"
    if (body[offset + literal.length] !== 0) return "type literal not NUL-terminated"
    offset = end
  }
  return { offset, sizeWidth: 1 << ((meta >> 3) & 0b11) }
}

/**
 * Decodes the `int` argument of `process` (the release form `hash + i32`, or a debug build's
 * `hash|1, 0x04, 01 00, i32`). Trailing bytes are ignored, as struct_pack's `deserialize_to` does.
 *
 * @since 0.2.0
 */
export const decodeIntArg = (body: Buffer): Either.Either<number, CoroRpcFrameError> => {
  const h = readHead(body, TypeHash.int32, TypeLiteral.int32)
  if (typeof h === "string") return Either.left(frameError("BadBody", `int argument: ${h}`))
  if (body.length < h.offset + 4) return Either.left(frameError("BadBody", "int argument: truncated"))
  return Either.right(body.readInt32LE(h.offset))
}

/**
 * Checks a successful result body is struct_pack's `std::monostate` (release or debug form).
 *
 * @since 0.2.0
 */
export const decodeVoidResult = (body: Buffer): Either.Either<void, CoroRpcFrameError> => {
  const h = readHead(body, TypeHash.monostate, TypeLiteral.monostate)
  return typeof h === "string" ? Either.left(frameError("BadBody", `void result: ${h}`)) : Either.right(undefined)
}

const lengthWidth = (n: number): number => (n < 0x100 ? 1 : n < 0x10000 ? 2 : 4)

const writeLength = (b: Buffer, offset: number, n: number, width: number): void => {
  if (width === 1) b.writeUInt8(n, offset)
  else if (width === 2) b.writeUInt16LE(n, offset)
  else b.writeUInt32LE(n, offset)
}

/**
 * Encodes an error body as `prepare_response` does (`coro_rpc_protocol.hpp:222-235`): for a code up to 255 the
 * struct_pack of the message string (a length of 1 byte when under 256 bytes; else metainfo `0x08`/`0x10` and a
 * 2/4-byte length, `calculate_size.hpp:425-447`); above 255, `std::pair<uint16_t, string_view>` with the header's
 * `err_code` 255. Returns the `err_code` byte and the body.
 *
 * @since 0.2.0
 */
export const encodeErrorBody = (code: number, message: string): { readonly errCode: number; readonly body: Buffer } => {
  const text = Buffer.from(message, "utf8")
  const width = lengthWidth(text.length)
  const meta = width === 1 ? 0 : width === 2 ? 0b01000 : 0b10000
  const pair = code > 255
  const head = 4 + (meta === 0 ? 0 : 1)
  const b = Buffer.alloc(head + (pair ? 2 : 0) + width + text.length)
  b.writeUInt32LE(((pair ? TypeHash.errorPair : TypeHash.string) | (meta === 0 ? 0 : 1)) >>> 0, 0)
  if (meta !== 0) b.writeUInt8(meta, 4)
  let o = head
  if (pair) {
    b.writeUInt16LE(code, o)
    o += 2
  }
  writeLength(b, o, text.length, width)
  text.copy(b, o + width)
  return { errCode: pair ? 255 : code, body: b }
}

const readLength = (b: Buffer, offset: number, width: number): number | undefined => {
  if (b.length < offset + width) return undefined
  if (width === 1) return b.readUInt8(offset)
  if (width === 2) return b.readUInt16LE(offset)
  if (width === 4) return b.readUInt32LE(offset)
  const big = b.readBigUInt64LE(offset)
  return big > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(big)
}

/**
 * Decodes an error response's body as ylt's client does (`handle_response_buffer`, `coro_rpc_client.hpp:1303-1362`):
 * `err_code` 1..254 → the body is a struct_pack string; 255 → `std::pair<uint16_t code, string>`.
 *
 * @since 0.2.0
 */
export const decodeErrorBody = (
  errCode: number,
  body: Buffer
): Either.Either<{ readonly code: number; readonly message: string }, CoroRpcFrameError> => {
  const pair = errCode === 255
  const h = pair
    ? readHead(body, TypeHash.errorPair, TypeLiteral.errorPair)
    : readHead(body, TypeHash.string, TypeLiteral.string)
  if (typeof h === "string") return Either.left(frameError("BadBody", `error body: ${h}`))
  let o = h.offset
  let code = errCode
  if (pair) {
    if (body.length < o + 2) return Either.left(frameError("BadBody", "error body: truncated code"))
    code = body.readUInt16LE(o)
    o += 2
  }
  const n = readLength(body, o, h.sizeWidth)
  if (n === undefined || body.length < o + h.sizeWidth + n) {
    return Either.left(frameError("BadBody", "error body: truncated message"))
  }
  const start = o + h.sizeWidth
  return Either.right({ code, message: body.toString("utf8", start, start + n) })
}

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

/**
 * Caps a decoder enforces before it allocates: a header announcing more is refused with `Oversized`.
 *
 * @since 0.2.0
 */
export interface FrameLimits {
  /** Most body bytes accepted (the body is a few struct_pack'd bytes in TENT's use). */
  readonly maxBody: number
  /** Most attachment bytes accepted. */
  readonly maxAttachment: number
}

/**
 * Default caps: 64 KiB of body; attachments up to 1 GiB + 16 (TENT's own per-call cap on `RecvData`,
 * `control_plane.cpp:428-433`, plus its 16-byte header). A server facing untrusted peers should lower the latter.
 *
 * @since 0.2.0
 */
export const defaultLimits: FrameLimits = { maxBody: 64 * 1024, maxAttachment: 2 ** 30 + 16 }

const validateRequestHeader = (h: RequestHeader, limits: FrameLimits): CoroRpcFrameError | undefined => {
  if (h.magic !== MAGIC) return frameError("BadMagic", `magic ${h.magic}, expected ${MAGIC}`)
  if (h.version > VERSION) return frameError("BadVersion", `version ${h.version}`)
  if (h.serializeType !== SERIALIZE_STRUCT_PACK)
    return frameError("BadSerializeType", `serialize_type ${h.serializeType}`)
  return checkLimits(h.length, h.attachLength, limits)
}

const validateResponseHeader = (h: ResponseHeader, limits: FrameLimits): CoroRpcFrameError | undefined => {
  if (h.magic !== MAGIC) return frameError("BadMagic", `magic ${h.magic}, expected ${MAGIC}`)
  if (h.version > VERSION) return frameError("BadVersion", `version ${h.version}`)
  return checkLimits(h.length, h.attachLength, limits)
}

const checkLimits = (length: number, attachLength: number, limits: FrameLimits): CoroRpcFrameError | undefined => {
  if (length > limits.maxBody) return frameError("Oversized", `body of ${length} bytes, cap ${limits.maxBody}`)
  if (attachLength > limits.maxAttachment) {
    return frameError("Oversized", `attachment of ${attachLength} bytes, cap ${limits.maxAttachment}`)
  }
  return undefined
}

/**
 * Decodes one whole request from `buf` (exactly one frame; trailing bytes are an error).
 *
 * @since 0.2.0
 */
export const decodeRequest = (
  buf: Buffer,
  limits: FrameLimits = defaultLimits
): Either.Either<RequestFrame, CoroRpcFrameError> => {
  const d = new FrameDecoder("request", limits)
  const r = d.push(buf)
  if (Either.isLeft(r)) return Either.left(r.left)
  const frames = r.right as ReadonlyArray<RequestFrame>
  if (frames.length !== 1 || d.buffered() !== 0) {
    return Either.left(
      frameError("Truncated", `expected one whole request, got ${frames.length} and ${d.buffered()} bytes`)
    )
  }
  return Either.right(frames[0] as RequestFrame)
}

/**
 * Decodes one whole response from `buf` (exactly one frame; trailing bytes are an error).
 *
 * @since 0.2.0
 */
export const decodeResponse = (
  buf: Buffer,
  limits: FrameLimits = defaultLimits
): Either.Either<ResponseFrame, CoroRpcFrameError> => {
  const d = new FrameDecoder("response", limits)
  const r = d.push(buf)
  if (Either.isLeft(r)) return Either.left(r.left)
  const frames = r.right as ReadonlyArray<ResponseFrame>
  if (frames.length !== 1 || d.buffered() !== 0) {
    return Either.left(
      frameError("Truncated", `expected one whole response, got ${frames.length} and ${d.buffered()} bytes`)
    )
  }
  return Either.right(frames[0] as ResponseFrame)
}

/**
 * A streaming decoder for one direction of a connection: feed it TCP chunks of any size with {@link FrameDecoder.push}
 * and it returns the frames each chunk completed. Headers are checked (magic, version, serialize type, caps) as soon
 * as they are whole, before the body is allocated; after an error the decoder stays failed (the connection is to be
 * closed, as ylt does).
 *
 * @since 0.2.0
 */
export class FrameDecoder<K extends "request" | "response" = "request" | "response"> {
  private head: Buffer
  private headFill = 0
  private header: RequestHeader | ResponseHeader | undefined = undefined
  private payload: Buffer = EMPTY
  private payloadFill = 0
  private failed: CoroRpcFrameError | undefined = undefined
  private readonly headBytes: number

  constructor(
    readonly kind: K,
    readonly limits: FrameLimits = defaultLimits
  ) {
    this.headBytes = kind === "request" ? REQUEST_HEADER_BYTES : RESPONSE_HEADER_BYTES
    this.head = Buffer.alloc(this.headBytes)
  }

  /** Bytes held of an incomplete frame. */
  buffered(): number {
    return this.headFill + this.payloadFill
  }

  /** The error that stopped this decoder, if any. */
  error(): CoroRpcFrameError | undefined {
    return this.failed
  }

  /**
   * Consumes a chunk; returns the frames it completed, or the error of the first malformed header.
   */
  push(
    chunk: Uint8Array
  ): Either.Either<ReadonlyArray<K extends "request" ? RequestFrame : ResponseFrame>, CoroRpcFrameError> {
    type F = K extends "request" ? RequestFrame : ResponseFrame
    if (this.failed !== undefined) return Either.left(this.failed)
    const out: Array<F> = []
    let i = 0
    while (i < chunk.length) {
      if (this.header === undefined) {
        const n = Math.min(this.headBytes - this.headFill, chunk.length - i)
        this.head.set(chunk.subarray(i, i + n), this.headFill)
        this.headFill += n
        i += n
        if (this.headFill < this.headBytes) break
        const h = this.kind === "request" ? readRequestHeader(this.head, 0) : readResponseHeader(this.head, 0)
        const bad =
          this.kind === "request"
            ? validateRequestHeader(h as RequestHeader, this.limits)
            : validateResponseHeader(h as ResponseHeader, this.limits)
        if (bad !== undefined) {
          this.failed = bad
          return Either.left(bad)
        }
        this.header = h
        this.payload = Buffer.allocUnsafe(h.length + h.attachLength)
        this.payloadFill = 0
      }
      const want = this.payload.length - this.payloadFill
      const n = Math.min(want, chunk.length - i)
      if (n > 0) {
        this.payload.set(chunk.subarray(i, i + n), this.payloadFill)
        this.payloadFill += n
        i += n
      }
      if (this.payloadFill < this.payload.length) break
      const h = this.header
      out.push({
        header: h,
        body: this.payload.subarray(0, h.length),
        attachment: this.payload.subarray(h.length)
      } as F)
      this.header = undefined
      this.headFill = 0
      this.payload = EMPTY
      this.payloadFill = 0
    }
    return Either.right(out)
  }
}
