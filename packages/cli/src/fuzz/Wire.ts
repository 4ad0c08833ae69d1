/**
 * Both wires of the control-plane port as a client (and an attacker) sees them, written from their documented layouts:
 * this project's lean frames `[u32 len][u8 kind][u32 id][body]` (`@tent/rpc` `internal/frame.ts`) and TENT's coro_rpc
 * requests (`CoroRpc`). For each, what the fuzzer needs: building a frame, a mirror of the server's framing that says
 * whether the bytes sent so far end on a frame boundary, mid-frame, or are refused at a length prefix or header (so
 * the fuzzer knows whether to wait for a reply, half-close, or wait for the close), and a reader of the replies.
 * The first bytes of a connection choose its wire as the server's sniff does ({@link classify}).
 */
import { ControlPlane, CoroRpc, DataPlane } from "@tent/rpc"

/** Lean frame kinds (`internal/frame.ts`). */
export const Kind = { Request: 1, Interrupt: 2, Success: 3, Failure: 4, Defect: 5, Interrupted: 6, ProtocolError: 7 }

/** Bytes a lean frame's `len` counts at least (kind and id), and the header bytes before a body. */
export const MIN_LEN = 5
export const HEADER_BYTES = 9

/** Frame bytes a server allows beyond its largest notification or data body (`codec.ts` `FRAME_SLACK`). */
const FRAME_SLACK = 1024 * 1024

/** The largest lean frame a server with these limits reads (`codec.ts` `maxFrameBytes`). */
export const maxFrameBytes = (maxNotifyBytes: number, maxDataBytes: number): number =>
  Math.max(maxNotifyBytes, maxDataBytes + 16) + 8 + FRAME_SLACK

/** The wire index of each RPC: the control plane's group in order, then the data RPCs (as the server numbers them). */
export const rpcIndex: Readonly<Record<string, number>> = Object.fromEntries(
  [...ControlPlane.requests.keys(), ...DataPlane.requests.keys()].map((tag, i) => [tag, i])
)

/** A lean frame. */
export const frame = (kind: number, id: number, body: Uint8Array = new Uint8Array(0)): Buffer => {
  const b = Buffer.allocUnsafe(HEADER_BYTES + body.length)
  b.writeUInt32LE(MIN_LEN + body.length, 0)
  b[4] = kind
  b.writeUInt32LE(id >>> 0, 5)
  b.set(body, HEADER_BYTES)
  return b
}

/** A lean request: `[u8 rpc index][payload]` in a `Request` frame. */
export const request = (tag: string, id: number, payload: Uint8Array = new Uint8Array(0)): Buffer => {
  const body = Buffer.allocUnsafe(1 + payload.length)
  body[0] = rpcIndex[tag] as number
  body.set(payload, 1)
  return frame(Kind.Request, id, body)
}

/** What the server's framing makes of a stream: whole frames, then a boundary, a partial frame, or a refusal. */
export type Ending = "boundary" | "partial" | "refused"

/** One whole lean frame found in a stream (offsets into the scanned buffer; `start` is its kind byte). */
export interface LeanFrame {
  readonly kind: number
  readonly id: number
  readonly start: number
  readonly end: number
}

/** Splits `buf` into lean frames as the server's `FrameReader` does; stops at the first refused length prefix. */
export const scanLean = (buf: Buffer, maxFrame: number): { frames: Array<LeanFrame>; ending: Ending } => {
  const frames: Array<LeanFrame> = []
  let off = 0
  while (buf.length - off >= 4) {
    const len = buf.readUInt32LE(off)
    if (len < MIN_LEN || len > maxFrame) return { frames, ending: "refused" }
    if (buf.length - off - 4 < len) return { frames, ending: "partial" }
    frames.push({ kind: buf[off + 4] as number, id: buf.readUInt32LE(off + 5), start: off + 4, end: off + 4 + len })
    off += 4 + len
  }
  return { frames, ending: off === buf.length ? "boundary" : "partial" }
}

/** Reads reply frames from a stream of chunks; `onFrame` gets each (its body valid during the call). */
export class LeanReader {
  private pending: Buffer = Buffer.alloc(0)

  constructor(private readonly onFrame: (kind: number, id: number, body: Buffer) => void) {}

  /** False when the server sent a length no reply can have (the connection is then abandoned). */
  push(chunk: Buffer): boolean {
    let buf = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk])
    let off = 0
    while (buf.length - off >= 4) {
      const len = buf.readUInt32LE(off)
      if (len < MIN_LEN || len > 1 << 30) return false
      if (buf.length - off - 4 < len) break
      this.onFrame(buf[off + 4] as number, buf.readUInt32LE(off + 5), buf.subarray(off + 9, off + 4 + len))
      off += 4 + len
    }
    buf = buf.subarray(off)
    this.pending = buf.length === 0 ? Buffer.alloc(0) : Buffer.from(buf)
    return true
  }
}

/** TENT's coro_rpc request header bytes, and the response's. */
export const TENT_REQUEST_HEADER = CoroRpc.REQUEST_HEADER_BYTES
export const TENT_RESPONSE_HEADER = CoroRpc.RESPONSE_HEADER_BYTES

/** One whole coro_rpc request found in a stream: its func id (-1 when the body is not an int) and attachment. */
export interface TentFrame {
  readonly seqNum: number
  readonly functionId: number
  readonly funcId: number
  readonly attachment: Buffer
}

/** Splits `buf` into coro_rpc requests as the server's `FrameDecoder` does (caps `maxBody`, `maxAttachment`). */
export const scanTent = (buf: Buffer, limits: CoroRpc.FrameLimits): { frames: Array<TentFrame>; ending: Ending } => {
  const frames: Array<TentFrame> = []
  let off = 0
  while (off < buf.length) {
    if (buf.length - off < TENT_REQUEST_HEADER) return { frames, ending: "partial" }
    const h = CoroRpc.readRequestHeader(buf, off)
    if (h.magic !== CoroRpc.MAGIC || h.version > CoroRpc.VERSION || h.serializeType !== CoroRpc.SERIALIZE_STRUCT_PACK)
      return { frames, ending: "refused" }
    if (h.length > limits.maxBody || h.attachLength > limits.maxAttachment) return { frames, ending: "refused" }
    const end = off + TENT_REQUEST_HEADER + h.length + h.attachLength
    if (end > buf.length) return { frames, ending: "partial" }
    const body = buf.subarray(off + TENT_REQUEST_HEADER, off + TENT_REQUEST_HEADER + h.length)
    const arg = CoroRpc.decodeIntArg(Buffer.from(body))
    frames.push({
      seqNum: h.seqNum,
      functionId: h.functionId,
      funcId: arg._tag === "Right" ? arg.right : -1,
      attachment: buf.subarray(off + TENT_REQUEST_HEADER + h.length, end)
    })
    off = end
  }
  return { frames, ending: "boundary" }
}

/** Reads coro_rpc responses from a stream of chunks; `onResponse` gets each one's seq and `err_code`. */
export class TentReader {
  private pending: Buffer = Buffer.alloc(0)

  constructor(private readonly onResponse: (seqNum: number, errCode: number, body: Buffer) => void) {}

  push(chunk: Buffer): boolean {
    let buf = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk])
    let off = 0
    while (buf.length - off >= TENT_RESPONSE_HEADER) {
      const h = CoroRpc.readResponseHeader(buf, off)
      if (h.magic !== CoroRpc.MAGIC) return false
      const end = off + TENT_RESPONSE_HEADER + h.length + h.attachLength
      if (end > buf.length) break
      this.onResponse(
        h.seqNum,
        h.errCode,
        buf.subarray(off + TENT_RESPONSE_HEADER, off + TENT_RESPONSE_HEADER + h.length)
      )
      off = end
    }
    buf = buf.subarray(off)
    this.pending = buf.length === 0 ? Buffer.alloc(0) : Buffer.from(buf)
    return true
  }
}

/** A coro_rpc request to TENT's `process(funcId)` with `attachment` (the real encoder). */
export const tentRequest = (seqNum: number, funcId: number, attachment?: Uint8Array): Buffer =>
  CoroRpc.encodeRequest(attachment === undefined ? { seqNum, funcId } : { seqNum, funcId, attachment })

/**
 * The wire the server hears on a connection that starts with `head` (`internal/tentWire.ts` `classify`): `"tent"`
 * for a coro_rpc request to TENT's function, `"lean"` otherwise, undefined while too few bytes have come.
 */
export const classify = (head: Buffer): "tent" | "lean" | undefined => {
  if (head.length === 0) return undefined
  if (head[0] !== CoroRpc.MAGIC) return "lean"
  for (let i = 1; i < Math.min(head.length, 4); i++) if (head[i] !== 0) return "lean"
  if (head.length < 12) return undefined
  return head.readUInt32LE(8) === CoroRpc.PROCESS_FUNCTION_ID ? "tent" : "lean"
}
