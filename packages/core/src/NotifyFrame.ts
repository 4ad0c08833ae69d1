/**
 * The notification wire payload of TENT `main` on the notify QP: `[u32 name_len][name][u32 msg_len][msg]`,
 * little-endian, no magic, no version, no sequence number; at most 65 536 bytes in all (one send slot). Plain
 * synchronous code on caller-provided Buffers: the hot path of the notify channel allocates nothing here.
 *
 * @since 0.1.0
 */

/** Bytes of one notify slot (TENT `kNotifyBufferSize`): the largest encoded notification. */
export const SLOT_BYTES = 65536

/** The two length prefixes. */
export const HEADER_BYTES = 8

/** The largest `name.length + msg.length` a slot holds: 65 528. */
export const MAX_PAYLOAD = SLOT_BYTES - HEADER_BYTES

/**
 * Encodes `name` and `msg` into `buf` at `offset`; returns the encoded length, or -1 when it does not fit
 * `SLOT_BYTES` (TENT: "Notification message too large").
 */
export const encode = (buf: Buffer, offset: number, name: Uint8Array, msg: Uint8Array): number => {
  const total = HEADER_BYTES + name.length + msg.length
  if (total > SLOT_BYTES) return -1
  buf.writeUInt32LE(name.length, offset)
  buf.set(name, offset + 4)
  buf.writeUInt32LE(msg.length, offset + 4 + name.length)
  buf.set(msg, offset + 8 + name.length)
  return total
}

/** Why a received payload was rejected (counted by the poller, never thrown). */
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
 * Decodes the payload `buf[offset, offset + len)` as TENT's `handleNotifyRecv` does (trailing bytes after `msg` are
 * ignored). On success returns 0 and sets `out` to the name and message ranges; otherwise returns a {@link Reject}
 * code. Copy the bytes out before the slot is reposted.
 */
export const decode = (buf: Buffer, offset: number, len: number, out: DecodedRanges): number => {
  if (len === 0) return Reject.Empty
  if (len < HEADER_BYTES) return Reject.Short
  const nameLen = buf.readUInt32LE(offset)
  if (nameLen > len - HEADER_BYTES) return Reject.NameTooLong
  const msgLen = buf.readUInt32LE(offset + 4 + nameLen)
  if (msgLen > len - HEADER_BYTES - nameLen) return Reject.MsgTooLong
  out.nameStart = offset + 4
  out.nameEnd = offset + 4 + nameLen
  out.msgStart = offset + 8 + nameLen
  out.msgEnd = offset + 8 + nameLen + msgLen
  return 0
}

/** Where {@link decode} found the name and message; reuse one object. */
export class DecodedRanges {
  nameStart = 0
  nameEnd = 0
  msgStart = 0
  msgEnd = 0
}
