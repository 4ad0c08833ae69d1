import { Schema } from "effect"
import { ControlPlane, type ControlPlaneTag } from "../ControlPlane.js"
import { Notification } from "../Models.js"
import type { FrameWriter } from "./frame.js"

/** Encodes one value into a frame's body, and decodes it back. Both may throw on a value that does not fit. */
export interface BodyCodec {
  readonly encode: (w: FrameWriter, value: unknown) => void
  readonly decode: (buf: Buffer, start: number, end: number) => unknown
}

const voidCodec: BodyCodec = {
  encode: () => {},
  decode: (_buf, start, end) => {
    if (start !== end) throw new Error(`expected an empty body, got ${end - start} bytes`)
    return undefined
  }
}

/** Bytes of a `Notify` body before its name and message: the two u32 lengths. */
export const NOTIFY_OVERHEAD = 8

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
    const lengths = notificationLengths(buf, start, end)
    if (lengths === undefined) throw new Error("malformed Notify body")
    const copy = new Uint8Array(lengths.name + lengths.msg)
    copy.set(buf.subarray(start + 4, start + 4 + lengths.name), 0)
    copy.set(buf.subarray(start + 8 + lengths.name, end), lengths.name)
    return { name: copy.subarray(0, lengths.name), msg: copy.subarray(lengths.name) }
  }
}

/** The name and message lengths of a `Notify` body, or undefined when they do not fill it exactly. */
export const notificationLengths = (
  buf: Buffer,
  start: number,
  end: number
): { readonly name: number; readonly msg: number } | undefined => {
  if (end - start < NOTIFY_OVERHEAD) return undefined
  const name = buf.readUInt32LE(start)
  if (start + 8 + name > end) return undefined
  const msg = buf.readUInt32LE(start + 4 + name)
  if (start + 8 + name + msg !== end) return undefined
  return { name, msg }
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
  readonly tag: ControlPlaneTag
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
