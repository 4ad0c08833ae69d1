/**
 * TENT's notification wire payload, the one codec of it: `[u32 name_len][name][u32 msg_len][msg]`, little-endian,
 * no magic, no version. The RDMA notify slot carries it (at most {@link SLOT_BYTES} in all), and so does the body of
 * the control plane's `Notify` (which may append a stamp trailer: that is the `Notify` body codec's business, not
 * TENT's payload). {@link decode} is TENT's `handleNotifyRecv`: bytes after `msg` are ignored. Plain synchronous code
 * on caller-provided Buffers at an offset: nothing here allocates.
 *
 * @since 0.1.0
 */

/**
 * Bytes of one notify slot (TENT `kNotifyBufferSize`): the largest encoded notification on the notify QP.
 *
 * @since 0.1.0
 */
export const SLOT_BYTES = 65536

/**
 * The two length prefixes.
 *
 * @since 0.1.0
 */
export const HEADER_BYTES = 8

/**
 * The largest `name.length + msg.length` a slot holds: 65 528.
 *
 * @since 0.1.0
 */
export const MAX_PAYLOAD = SLOT_BYTES - HEADER_BYTES

/**
 * Why a received payload was rejected (counted or reported by the caller, never thrown).
 *
 * @since 0.1.0
 */
export const Reject = {
  /** `byte_len == 0`: reposted silently in TENT. */
  Empty: 1,
  /** `byte_len < 8`. */
  Short: 2,
  /** `name_len` overruns the payload. */
  NameTooLong: 3,
  /** `msg_len` overruns the payload. */
  MsgTooLong: 4
} as const

/**
 * Where {@link decode} found the name and the message; reuse one object.
 *
 * @since 0.1.0
 */
export class DecodedRanges {
  /**
   * Offset in the buffer of the first byte of the name.
   *
   * @since 0.1.0
   */
  nameStart = 0
  /**
   * Offset in the buffer just past the name.
   *
   * @since 0.1.0
   */
  nameEnd = 0
  /**
   * Offset in the buffer of the first byte of the message.
   *
   * @since 0.1.0
   */
  msgStart = 0
  /**
   * Offset in the buffer just past the message.
   *
   * @since 0.1.0
   */
  msgEnd = 0
}

/**
 * Encodes `name` and `msg` into `buf` at `offset`; returns the encoded length, or -1 when it is above `max` (default
 * {@link SLOT_BYTES}, TENT: "Notification message too large"). The caller makes sure `buf` has room.
 *
 * @since 0.1.0
 */
export const encode = (buf: Buffer, offset: number, name: Uint8Array, msg: Uint8Array, max = SLOT_BYTES): number => {
  const total = HEADER_BYTES + name.length + msg.length
  if (total > max) return -1
  buf.writeUInt32LE(name.length, offset)
  buf.set(name, offset + 4)
  buf.writeUInt32LE(msg.length, offset + 4 + name.length)
  buf.set(msg, offset + 8 + name.length)
  return total
}

/**
 * Decodes the payload `buf[offset, offset + len)` into `out` as TENT's `handleNotifyRecv` does: bytes after `msg`
 * are ignored (`out.msgEnd` tells where `msg` ends). Returns 0, or a {@link Reject} code. Copy the bytes out before
 * the buffer is reused.
 *
 * @example
 * ```ts
 * import { NotifyWire } from "@tent/rpc"
 *
 * const buf = Buffer.alloc(NotifyWire.SLOT_BYTES)
 * const len = NotifyWire.encode(buf, 0, Buffer.from("kv-cache"), Buffer.from("layer 3 ready"))
 * const out = new NotifyWire.DecodedRanges()
 * assert.strictEqual(NotifyWire.decode(buf, 0, len, out), 0)
 * assert.strictEqual(buf.toString("utf8", out.msgStart, out.msgEnd), "layer 3 ready")
 * ```
 *
 * @since 0.1.0
 */
export const decode = (buf: Buffer, offset: number, len: number, out: DecodedRanges): number => {
  if (len === 0) return Reject.Empty
  if (len < HEADER_BYTES) return Reject.Short
  const nameLen = buf.readUInt32LE(offset)
  if (nameLen > len - HEADER_BYTES) return Reject.NameTooLong
  const msgLen = buf.readUInt32LE(offset + 4 + nameLen)
  if (len - HEADER_BYTES - nameLen - msgLen < 0) return Reject.MsgTooLong
  out.nameStart = offset + 4
  out.nameEnd = offset + 4 + nameLen
  out.msgStart = offset + 8 + nameLen
  out.msgEnd = offset + 8 + nameLen + msgLen
  return 0
}
