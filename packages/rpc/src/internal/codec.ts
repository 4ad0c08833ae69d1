import { Schema } from "effect"
import { ControlPlane, type ControlPlaneTag, DataPlane, type DataPlaneTag } from "../ControlPlane.js"
import { Notification } from "../Models.js"
import { type FrameWriter, readU64 } from "./frame.js"

/** Encodes one value into a frame's body, and decodes it back. Both may throw on a value that does not fit. */
export interface BodyCodec {
  readonly encode: (w: FrameWriter, value: unknown) => void
  readonly decode: (buf: Buffer, start: number, end: number) => unknown
}

export const voidCodec: BodyCodec = {
  encode: () => {},
  decode: (_buf, start, end) => {
    if (start !== end) throw new Error(`expected an empty body, got ${end - start} bytes`)
    return undefined
  }
}

/** Bytes of a `Notify` body before its name and message: the two u32 lengths. */
export const NOTIFY_OVERHEAD = 8

/** Notifications up to this many bytes (name + message) are copied into a shared slab instead of a buffer of their own. */
const SLAB_MAX = 4096
const SLAB_BYTES = 64 * 1024
let slab = new ArrayBuffer(SLAB_BYTES)
let slabUsed = 0

/**
 * Copies `len` bytes of `buf` from `start` into memory of their own. Small copies are views on a shared slab (as
 * Node's `Buffer` pool does): a fresh `ArrayBuffer` per 64-byte notification costs more than the rest of decoding.
 */
const copyOut = (buf: Buffer, start: number, len: number): Uint8Array => {
  if (len > SLAB_MAX) {
    const own = new Uint8Array(len)
    own.set(buf.subarray(start, start + len))
    return own
  }
  if (slabUsed + len > SLAB_BYTES) {
    slab = new ArrayBuffer(SLAB_BYTES)
    slabUsed = 0
  }
  const out = new Uint8Array(slab, slabUsed, len)
  slabUsed = (slabUsed + len + 7) & ~7
  if (len <= 64) for (let i = 0; i < len; i++) out[i] = buf[start + i] as number
  else out.set(buf.subarray(start, start + len))
  return out
}

/** TENT's notification wire payload: `[u32 name_len][name][u32 msg_len][msg]`, little-endian. */
export const notificationCodec: BodyCodec = {
  encode: (w, value) => {
    const n = value as Notification
    w.u32(n.name.length)
    w.bytes(n.name)
    w.u32(n.msg.length)
    w.bytes(n.msg)
  },
  decode: (buf, start, end) => {
    const name = notifyNameLength(buf, start, end)
    if (name < 0) throw new Error("malformed Notify body")
    return { name: copyOut(buf, start + 4, name), msg: copyOut(buf, start + 8 + name, end - start - 8 - name) }
  }
}

/** The name length of a `Notify` body, or -1 when its two lengths do not fill it exactly. */
export const notifyNameLength = (buf: Buffer, start: number, end: number): number => {
  if (end - start < NOTIFY_OVERHEAD) return -1
  const name = buf.readUInt32LE(start)
  if (start + 8 + name > end) return -1
  const msg = buf.readUInt32LE(start + 4 + name)
  return start + 8 + name + msg === end ? name : -1
}

/** The name and message lengths of a `Notify` body, or undefined when they do not fill it exactly. */
export const notificationLengths = (
  buf: Buffer,
  start: number,
  end: number
): { readonly name: number; readonly msg: number } | undefined => {
  const name = notifyNameLength(buf, start, end)
  return name < 0 ? undefined : { name, msg: end - start - NOTIFY_OVERHEAD - name }
}

const jsonCodec = (schema: Schema.Schema<unknown, unknown, never>): BodyCodec => {
  const encode = Schema.encodeSync(schema)
  const decode = Schema.decodeUnknownSync(schema)
  return {
    encode: (w, value) => w.utf8(JSON.stringify(encode(value))),
    decode: (buf, start, end) => decode(JSON.parse(buf.toString("utf8", start, end)))
  }
}

const codecFor = (schema: Schema.Schema.Any | Schema.Schema.All): BodyCodec => {
  if (schema === Schema.Void) return voidCodec
  if (schema === Notification) return notificationCodec
  return jsonCodec(schema as unknown as Schema.Schema<unknown, unknown, never>)
}

/** How one RPC of the group travels: its index on the wire and the codecs of its payload, success and error. */
export interface RpcSpec {
  readonly tag: ControlPlaneTag | DataPlaneTag
  readonly index: number
  readonly payload: BodyCodec
  readonly success: BodyCodec
  readonly error: BodyCodec
}

/** The RPCs of {@link ControlPlane} in wire-index order. */
export const specs: ReadonlyArray<RpcSpec> = Array.from(ControlPlane.requests.values(), (rpc, index) => ({
  tag: rpc._tag as ControlPlaneTag,
  index,
  payload: codecFor(rpc.payloadSchema),
  success: codecFor(rpc.successSchema),
  error: codecFor(rpc.errorSchema)
}))

/** {@link specs} by tag. */
export const specByTag = Object.fromEntries(specs.map((s) => [s.tag, s])) as Record<ControlPlaneTag, RpcSpec>

/** Bytes of TENT's data header: `{u64 le addr, u64 le len}`. */
export const DATA_HEADER = 16

/** The `{addr, len}` header of a `SendData`/`RecvData` body, or undefined when the body is too short. */
export const dataHeader = (
  buf: Buffer,
  start: number,
  end: number
): { readonly addr: number; readonly length: number } | undefined =>
  end - start < DATA_HEADER ? undefined : { addr: readU64(buf, start), length: readU64(buf, start + 8) }

const checkedU64 = (v: unknown, what: string): number => {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) throw new Error(`${what} must be a u64, got ${v}`)
  return v
}

/** `SendData`: `[u64 addr][u64 len][data]`. */
const sendDataCodec: BodyCodec = {
  encode: (w, value) => {
    const v = value as { readonly addr: number; readonly data: Uint8Array }
    w.u64(checkedU64(v.addr, "addr"))
    w.u64(v.data.length)
    w.bytes(v.data)
  },
  decode: (buf, start, end) => {
    const h = dataHeader(buf, start, end)
    if (h === undefined || h.addr < 0 || h.length !== end - start - DATA_HEADER)
      throw new Error("malformed SendData body")
    return { addr: h.addr, data: new Uint8Array(buf.subarray(start + DATA_HEADER, end)) }
  }
}

/** `RecvData`: `[u64 addr][u64 len]`. */
const recvDataCodec: BodyCodec = {
  encode: (w, value) => {
    const v = value as { readonly addr: number; readonly length: number }
    w.u64(checkedU64(v.addr, "addr"))
    w.u64(checkedU64(v.length, "length"))
  },
  decode: (buf, start, end) => {
    const h = dataHeader(buf, start, end)
    if (h === undefined || end - start !== DATA_HEADER || h.addr < 0 || h.length < 0)
      throw new Error("malformed RecvData body")
    return h
  }
}

/** Raw bytes (the `RecvData` reply): copied out of the frame, which is reused. */
const rawCodec: BodyCodec = {
  encode: (w, value) => w.bytes(value as Uint8Array),
  decode: (buf, start, end) => {
    const out = new Uint8Array(end - start)
    out.set(buf.subarray(start, end))
    return out
  }
}

/** The data RPCs, on the wire after the {@link specs} of the control plane (indices 4 and 5). */
export const dataSpecs: ReadonlyArray<RpcSpec> = Array.from(DataPlane.requests.values(), (rpc, i) => ({
  tag: rpc._tag as DataPlaneTag,
  index: specs.length + i,
  payload: rpc._tag === "SendData" ? sendDataCodec : recvDataCodec,
  success: rpc._tag === "SendData" ? voidCodec : rawCodec,
  error: codecFor(rpc.errorSchema)
}))

/** Every RPC a server answers, by wire index. */
export const allSpecs: ReadonlyArray<RpcSpec> = [...specs, ...dataSpecs]

/** {@link dataSpecs} by tag. */
export const dataSpecByTag = Object.fromEntries(dataSpecs.map((s) => [s.tag, s])) as Record<DataPlaneTag, RpcSpec>
