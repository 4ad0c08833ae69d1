/**
 * The struct_pack bodies of TENT's coro_rpc calls (ylt `struct_pack`, pinned at 7801bc9): the `int` argument of
 * `CoroRpcAgent::process`, the `void` result, the error bodies, and the 4-byte type hashes that open each. A release
 * (`NDEBUG`) build writes the hash then the data; a debug build sets the hash's low bit and adds a metainfo byte and
 * the type literal, which the decoders here accept too.
 *
 * Plain synchronous code on Buffers; nothing throws: a body that is not the expected type is a
 * {@link CoroRpcFrameError} with reason `BadBody`. {@link CoroRpc} re-exports all of it.
 *
 * @since 0.2.0
 */
import * as Crypto from "node:crypto"
import { Either } from "effect"
import { CoroRpcFrameError } from "./CoroRpcHeader.js"

const frameError = (reason: CoroRpcFrameError["reason"], message: string) => new CoroRpcFrameError({ reason, message })

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
