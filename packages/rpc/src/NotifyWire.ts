/**
 * TENT's notification wire payload, the one codec of it: `[u32 name_len][name][u32 msg_len][msg]`, little-endian,
 * no magic, no version. The RDMA notify slot carries it (at most {@link SLOT_BYTES} in all, trailing bytes after
 * `msg` ignored, as TENT's `handleNotifyRecv`), and so does the body of the control plane's `Notify` (exact: the
 * lengths fill the body, optionally followed by a {@link STAMP_BYTES}-byte stamp trailer `[u64 session][u64 seq]`).
 * Plain synchronous code on caller-provided Buffers at an offset: nothing here allocates.
 *
 * @since 0.1.0
 */

/** Bytes of one notify slot (TENT `kNotifyBufferSize`): the largest encoded notification on the notify QP. */
export const SLOT_BYTES = 65536

/** The two length prefixes. */
export const HEADER_BYTES = 8

/** The largest `name.length + msg.length` a slot holds: 65 528. */
export const MAX_PAYLOAD = SLOT_BYTES - HEADER_BYTES

/** The optional stamp trailer after `msg`: `[u64 session LE][u64 seq LE]`. */
export const STAMP_BYTES = 16

/** Why a received payload was rejected (counted or reported by the caller, never thrown). */
export const Reject = {
  /** `byte_len == 0`: reposted silently in TENT. */
  Empty: 1,
  /** `byte_len < 8`. */
  Short: 2,
  /** `name_len` overruns the payload. */
  NameTooLong: 3,
  /** `msg_len` overruns the payload. */
  MsgTooLong: 4,
  /** Exact decoding only: bytes after `msg` that are neither nothing nor a stamp trailer. */
  Trailing: 5
} as const

/** Where {@link decode} found the name, the message and the stamp; reuse one object. */
export class DecodedRanges {
  nameStart = 0
  nameEnd = 0
  msgStart = 0
  msgEnd = 0
  /** Offset of the stamp trailer (read it with {@link readSession} / {@link readSeq}), or -1 when there is none. */
  stampAt = -1
}

/**
 * Encodes `name` and `msg` into `buf` at `offset`; returns the encoded length, or -1 when it is above `max` (default
 * {@link SLOT_BYTES}, TENT: "Notification message too large"). The caller makes sure `buf` has room.
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

/** Writes the stamp trailer `[u64 session][u64 seq]` at `offset` (right after an encoded `msg`); returns its length. */
export const encodeStamp = (buf: Buffer, offset: number, session: bigint, seq: bigint): number => {
  buf.writeBigUInt64LE(session, offset)
  buf.writeBigUInt64LE(seq, offset + 8)
  return STAMP_BYTES
}

/**
 * Decodes the payload `buf[offset, offset + len)` into `out`; returns 0, or a {@link Reject} code. Not `exact` (the
 * RDMA slot): bytes after `msg` are ignored and `out.stampAt` is -1. `exact` (the `Notify` body): after `msg` there
 * must be nothing, or exactly a stamp trailer (then `out.stampAt` is its offset), else {@link Reject.Trailing}. Copy
 * the bytes out before the buffer is reused.
 */
export const decode = (buf: Buffer, offset: number, len: number, out: DecodedRanges, exact = false): number => {
  if (len === 0) return Reject.Empty
  if (len < HEADER_BYTES) return Reject.Short
  const nameLen = buf.readUInt32LE(offset)
  if (nameLen > len - HEADER_BYTES) return Reject.NameTooLong
  const msgLen = buf.readUInt32LE(offset + 4 + nameLen)
  const rest = len - HEADER_BYTES - nameLen - msgLen
  if (rest < 0) return Reject.MsgTooLong
  let stampAt = -1
  if (exact && rest !== 0) {
    if (rest !== STAMP_BYTES) return Reject.Trailing
    stampAt = offset + len - STAMP_BYTES
  }
  out.nameStart = offset + 4
  out.nameEnd = offset + 4 + nameLen
  out.msgStart = offset + 8 + nameLen
  out.msgEnd = offset + 8 + nameLen + msgLen
  out.stampAt = stampAt
  return 0
}

/** The stamp's session, from `out.stampAt` of a {@link decode}. */
export const readSession = (buf: Buffer, stampAt: number): bigint => buf.readBigUInt64LE(stampAt)

/** The stamp's sequence number, from `out.stampAt` of a {@link decode}. */
export const readSeq = (buf: Buffer, stampAt: number): bigint => buf.readBigUInt64LE(stampAt + 8)
