import { Schema } from "effect"
import { ControlPlane, type ControlPlaneTag, DataPlane, type DataPlaneTag } from "../ControlPlane.js"
import { Notification } from "../Models.js"
import * as NotifyWire from "../NotifyWire.js"
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

/** Bytes of TENT's data header: `{u64 le addr, u64 le len}`. */
export const DATA_HEADER = 16

/** Frame bytes allowed beyond the largest notification or data body: names, and the JSON of the other RPCs. */
const FRAME_SLACK = 1024 * 1024

/** The largest frame a side accepts, given its largest notification (name + message) and data body. */
export const maxFrameBytes = (maxNotifyBytes: number, maxDataBytes: number): number =>
  Math.max(maxNotifyBytes, maxDataBytes + DATA_HEADER) + NotifyWire.HEADER_BYTES + FRAME_SLACK

/** Notifications up to this many bytes (name + message) are copied into a shared slab instead of a buffer of their own. */
const SLAB_MAX = 4096
const SLAB_BYTES = 64 * 1024
let slab = new ArrayBuffer(SLAB_BYTES)
let slabUsed = 0

/**
 * Copies `buf[start, end)` into memory of its own. Small copies are views on a shared slab (as Node's `Buffer` pool
 * does): a fresh `ArrayBuffer` per 64-byte notification costs more than the rest of decoding.
 */
const copyOut = (buf: Buffer, start: number, end: number): Uint8Array => {
  const len = end - start
  if (len > SLAB_MAX) {
    const own = new Uint8Array(len)
    own.set(buf.subarray(start, end))
    return own
  }
  if (slabUsed + len > SLAB_BYTES) {
    slab = new ArrayBuffer(SLAB_BYTES)
    slabUsed = 0
  }
  const out = new Uint8Array(slab, slabUsed, len)
  slabUsed = (slabUsed + len + 7) & ~7
  if (len <= 64) for (let i = 0; i < len; i++) out[i] = buf[start + i] as number
  else out.set(buf.subarray(start, end))
  return out
}

/**
 * The stamp trailer a `Notify` body may carry after TENT's payload: `[u64 session LE][u64 seq LE]`, and with an
 * epoch (the receiver's incarnation, delivery receipts) `[u64 epoch LE]` after them.
 */
const STAMP_BYTES = 16
const EPOCH_STAMP_BYTES = 24
/**
 * A failure notice's body (`Notification.failure`): TENT's payload, the 24-byte stamp trailer always (session and seq
 * 0: unstamped; epoch 0: none), then `[u32 reason_len LE][reason, UTF-8]`. More than 24 bytes after `msg` is what
 * marks it, so the three older forms (0, 16, 24 bytes) keep their meaning; a receiver that predates it finds a
 * malformed body and refuses the call, never a success.
 */
const FAILURE_MIN_BYTES = EPOCH_STAMP_BYTES + 4

/** Where {@link notifyRanges} found the name and message of a `Notify` body, and its trailers (-1: none). */
export class NotifyRanges extends NotifyWire.DecodedRanges {
  stampAt = -1
  /** Whether the trailer carries an epoch. */
  epoch = false
  /** Where a failure notice's reason starts (-1: not a failure notice); it ends with the body. */
  failureAt = -1
  failureEnd = -1
}

const ranges = new NotifyRanges()

/**
 * Checks the `Notify` body `buf[start, end)`: TENT's payload ({@link NotifyWire.decode}), then nothing, exactly a
 * stamp trailer, or a failure notice's trailers. Returns where its parts lie, in one shared object (read it before
 * the next call); throws when the body is malformed (the connection is closed).
 */
export const notifyRanges = (buf: Buffer, start: number, end: number): NotifyRanges => {
  if (NotifyWire.decode(buf, start, end - start, ranges) !== 0) throw new Error("malformed Notify body")
  const rest = end - ranges.msgEnd
  ranges.failureAt = -1
  if (rest >= FAILURE_MIN_BYTES) {
    const at = ranges.msgEnd + EPOCH_STAMP_BYTES
    if (buf.readUInt32LE(at) !== end - at - 4) throw new Error("malformed Notify body")
    const unstamped = buf.readBigUInt64LE(ranges.msgEnd) === 0n && buf.readBigUInt64LE(ranges.msgEnd + 8) === 0n
    ranges.stampAt = unstamped ? -1 : ranges.msgEnd
    ranges.epoch = buf.readBigUInt64LE(ranges.msgEnd + 16) !== 0n
    ranges.failureAt = at + 4
    ranges.failureEnd = end
    return ranges
  }
  if (rest !== 0 && rest !== STAMP_BYTES && rest !== EPOCH_STAMP_BYTES) throw new Error("malformed Notify body")
  ranges.stampAt = rest === 0 ? -1 : ranges.msgEnd
  ranges.epoch = rest === EPOCH_STAMP_BYTES
  return ranges
}

/** The stamp of a checked body (`stampAt` ≥ 0). */
const stampAt = (buf: Buffer, r: NotifyRanges): NonNullable<Notification["stamp"]> =>
  r.epoch
    ? {
        session: buf.readBigUInt64LE(r.stampAt),
        seq: buf.readBigUInt64LE(r.stampAt + 8),
        epoch: buf.readBigUInt64LE(r.stampAt + 16)
      }
    : { session: buf.readBigUInt64LE(r.stampAt), seq: buf.readBigUInt64LE(r.stampAt + 8) }

/** The {@link Notification} of a `Notify` body {@link notifyRanges} checked, copied out of the frame (reused). */
export const notificationAt = (buf: Buffer, r: NotifyRanges): Notification => {
  const name = copyOut(buf, r.nameStart, r.nameEnd)
  const msg = copyOut(buf, r.msgStart, r.msgEnd)
  if (r.failureAt >= 0) {
    const failure = buf.toString("utf8", r.failureAt, r.failureEnd)
    return r.stampAt < 0 ? { name, msg, failure } : { name, msg, stamp: stampAt(buf, r), failure }
  }
  return r.stampAt < 0 ? { name, msg } : { name, msg, stamp: stampAt(buf, r) }
}

/**
 * The `Notify` body: TENT's RDMA slot layout `[u32 name_len][name][u32 msg_len][msg]` ({@link NotifyWire}), plus the
 * 16-byte stamp trailer when the notification has a stamp, 24 bytes when the stamp has a non-zero epoch (without one
 * the bytes are the slot's); a failure notice always has the 24-byte trailer and its reason after it.
 */
export const notificationCodec: BodyCodec = {
  encode: (w, value) => {
    const n = value as Notification
    const stamp = n.stamp
    const size = NotifyWire.HEADER_BYTES + n.name.length + n.msg.length
    const epoch = stamp?.epoch
    const failure = n.failure
    if (failure !== undefined) {
      const reasonLen = Buffer.byteLength(failure, "utf8")
      const at = w.reserve(size + FAILURE_MIN_BYTES + reasonLen)
      const buf = w.buffer
      NotifyWire.encode(buf, at, n.name, n.msg, size)
      buf.writeBigUInt64LE(stamp?.session ?? 0n, at + size)
      buf.writeBigUInt64LE(stamp?.seq ?? 0n, at + size + 8)
      buf.writeBigUInt64LE(epoch ?? 0n, at + size + 16)
      buf.writeUInt32LE(reasonLen, at + size + EPOCH_STAMP_BYTES)
      buf.write(failure, at + size + FAILURE_MIN_BYTES, reasonLen, "utf8")
      return
    }
    const withEpoch = epoch !== undefined && epoch !== 0n
    const at = w.reserve(stamp === undefined ? size : size + (withEpoch ? EPOCH_STAMP_BYTES : STAMP_BYTES))
    NotifyWire.encode(w.buffer, at, n.name, n.msg, size)
    if (stamp !== undefined) {
      w.buffer.writeBigUInt64LE(stamp.session, at + size)
      w.buffer.writeBigUInt64LE(stamp.seq, at + size + 8)
      if (withEpoch) w.buffer.writeBigUInt64LE(epoch, at + size + 16)
    }
  },
  decode: (buf, start, end) => notificationAt(buf, notifyRanges(buf, start, end))
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
