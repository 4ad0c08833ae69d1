/**
 * Decoding coro_rpc frames from a byte stream: {@link FrameDecoder} takes TCP chunks of any size and returns whole
 * frames, checking each header (magic, version, serialize type, the caps of {@link FrameLimits}) before it allocates
 * the body; {@link decodeRequest} and {@link decodeResponse} decode exactly one whole frame.
 *
 * Plain synchronous code on Buffers; nothing throws: malformed input comes back as a {@link CoroRpcFrameError}.
 * {@link CoroRpc} re-exports all of it.
 *
 * @since 0.2.0
 */
import { Either } from "effect"
import {
  CoroRpcFrameError,
  MAGIC,
  REQUEST_HEADER_BYTES,
  RESPONSE_HEADER_BYTES,
  type RequestFrame,
  type RequestHeader,
  type ResponseFrame,
  type ResponseHeader,
  readRequestHeader,
  readResponseHeader,
  SERIALIZE_STRUCT_PACK,
  VERSION
} from "./CoroRpcHeader.js"

const frameError = (reason: CoroRpcFrameError["reason"], message: string) => new CoroRpcFrameError({ reason, message })

const EMPTY = Buffer.alloc(0)
/** A frame's first payload buffer; it doubles as the bytes come, up to the size its header announced. */
const PAYLOAD_START = 64 * 1024

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
  /** Bytes the current frame's header announced (body + attachment). */
  private payloadTotal = 0
  private failed: CoroRpcFrameError | undefined = undefined
  private readonly headBytes: number

  constructor(
    readonly kind: K,
    readonly limits: FrameLimits = defaultLimits
  ) {
    this.headBytes = kind === "request" ? REQUEST_HEADER_BYTES : RESPONSE_HEADER_BYTES
    this.head = Buffer.alloc(this.headBytes)
  }

  /**
   * Bytes held of an incomplete frame.
   *
   * @since 0.2.0
   */
  buffered(): number {
    return this.headFill + this.payloadFill
  }

  /**
   * The error that stopped this decoder, if any.
   *
   * @since 0.2.0
   */
  error(): CoroRpcFrameError | undefined {
    return this.failed
  }

  /**
   * Consumes a chunk; returns the frames it completed, or the error of the first malformed header.
   *
   * @since 0.2.0
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
        // memory grows with the bytes that arrive, not with what a header announces (a peer that announces the cap
        // and sends nothing holds 64 KiB, not the cap)
        this.payloadTotal = h.length + h.attachLength
        this.payload = Buffer.allocUnsafe(Math.min(this.payloadTotal, PAYLOAD_START))
        this.payloadFill = 0
      }
      const want = this.payloadTotal - this.payloadFill
      const n = Math.min(want, chunk.length - i)
      if (n > 0) {
        if (this.payloadFill + n > this.payload.length) {
          const grown = Buffer.allocUnsafe(
            Math.min(this.payloadTotal, Math.max(this.payload.length * 2, this.payloadFill + n))
          )
          this.payload.copy(grown, 0, 0, this.payloadFill)
          this.payload = grown
        }
        this.payload.set(chunk.subarray(i, i + n), this.payloadFill)
        this.payloadFill += n
        i += n
      }
      if (this.payloadFill < this.payloadTotal) break
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
      this.payloadTotal = 0
    }
    return Either.right(out)
  }
}
