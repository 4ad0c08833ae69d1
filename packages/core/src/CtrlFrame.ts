/**
 * The classic Mooncake engine's `CtrlFrame` v1, type `NOTIFY_COMPAT`: the typed frame RFC PR 6 puts a notification in
 * when the peer advertised `notify_proto` ≥ 1, so it can carry a `(session, seq)` stamp. Byte for byte the C++ codec
 * of `mooncake-transfer-engine` at commit aa0ce4c74 ("[TE] Add RDMA ctrl frame codec and sender credit ledger"):
 * `include/transport/rdma_twosided/ctrl_frame.h` (h:) and `src/transport/rdma_twosided/ctrl_frame.cpp` (cpp:).
 *
 * A 44-byte little-endian header (h:26-33) — magic u32 @0 (`0x434B434D`, bytes "MCKC"), version u8 @4, type u8 @5,
 * flags u16 @6, session u64 @8, epoch u64 @16, seq u64 @24, ack_seq u64 @32, payload_len u32 @40 — then the payload,
 * which for `NOTIFY_COMPAT` is TENT's raw notification `[u32 name_len][name][u32 msg_len][msg]` (cpp:45-59), read and
 * written here with `@tent/rpc`'s `NotifyWire`. The C++ writes host-order PODs with `memcpy` (cpp:25-37); the header
 * comment fixes the wire as little-endian (h:26), which this module always writes and reads.
 *
 * Decoding follows `decodeCtrlFrame` (cpp:216-250) then `decodeNotifyCompatPayload` (cpp:61-83); a frame either of
 * them rejects is rejected here, with the {@link Reject} code of the first failing check in the C++ order:
 *
 * - fewer than 44 bytes: `len < kCtrlFrameHeaderSize` (cpp:217) → `Short`;
 * - magic other than `kCtrlFrameMagic` (cpp:226-227, h:29) → `Magic`;
 * - version other than 1, so 0 and 2..255 alike: `version != kCtrlFrameVersion` (cpp:233, h:30-32: "no silent
 *   forward compatibility") → `Version`;
 * - type outside 1..10: `!isKnownCtrlFrameType(type)` (cpp:234, h:57-60) → `Type`. Types 1..9 (credit, ack, session,
 *   fence frames) pass the C++ frame decoder but are not notifications: only `NOTIFY_COMPAT` (h:45) carries the
 *   name/msg payload, so this codec rejects them too → `NotNotify`;
 * - any flag bit other than bit 0 `NeedsAck`: `(flags & ~kCtrlFrameKnownFlagsMask) != 0` (cpp:235, h:53-55) →
 *   `Flags`;
 * - `payload_len` different from the bytes after the header: `end - ptr != payload_len` (cpp:236-237). This one check
 *   rejects both a payload running past the end and trailing bytes after the payload → `PayloadLength`;
 * - session, epoch, seq and ack_seq: any u64 (cpp:224, 228-231; no check);
 * - payload shorter than the two length prefixes: `len < 8` (cpp:63) → `PayloadShort`;
 * - `name_len` larger than what follows it, or leaving no room for `msg_len`: cpp:68 and the `readPod` of cpp:72 →
 *   `NameTooLong`;
 * - `msg_len` larger than what follows it (cpp:73) → `MsgTooLong`;
 * - bytes after `msg` inside the payload: `requireExactEnd` (cpp:76, cpp:39-41) → `Trailing`. TENT's raw slot decoder
 *   (`NotifyWire.decode`) ignores them; the typed frame does not;
 * - on any reject the output is left as it was (cpp:78-81, cpp:239-248): {@link decodeInto} writes `out` only on
 *   success.
 *
 * Encoding follows `encodeCtrlFrame` (cpp:193-214): version 1, type `NOTIFY_COMPAT`, flags limited to the known bits
 * (cpp:197), payload at most `UINT32_MAX` bytes (cpp:199; name and msg each too, cpp:47-49).
 *
 * {@link isCtrlFrame} is `isCtrlFrameMagic` (cpp:186-191): the first four bytes only. On the notify slot it tells a
 * typed frame from a raw one without ambiguity: a raw frame starting with those bytes would declare a
 * `name_len` of 0x434B434D (1.1 GB), which no 65 536-byte slot holds.
 *
 * {@link encode} / {@link decode} work on whole frames and any header values; {@link encodeInto} / {@link decodeInto}
 * are the notify slot's hot path: plain synchronous code on caller-provided Buffers, stamping `(session, seq)` with
 * epoch, ack_seq and flags 0.
 *
 * Past the C++ (0.3.0): **failure notices**, flag bit 1 ({@link FLAG_FAILURE}) between peers at `notify_proto` 3: the
 * payload is the notification, then `[u32 reason_len][reason]` (UTF-8) ending it. The decoders take the receiver's
 * flag mask: by default {@link KNOWN_FLAGS}, so bit 1 is rejected `Flags` as the C++ rejects it; at level 3
 * {@link KNOWN_FLAGS_FAILURE}. Frames with flags 0 or `NeedsAck` are the bytes of before.
 *
 * @since 0.1.0
 */
import { NotifyWire } from "@tent/rpc"

/**
 * Bytes of the header (`kCtrlFrameHeaderSize`).
 *
 * @since 0.1.0
 */
export const HEADER_BYTES = 44

/**
 * `kCtrlFrameMagic`: the bytes `4D 43 4B 43` ("MCKC") read as a little-endian u32.
 *
 * @since 0.1.0
 */
export const MAGIC = 0x434b434d

/**
 * `kCtrlFrameVersion`: the only version either side accepts.
 *
 * @since 0.1.0
 */
export const VERSION = 1

/**
 * `CtrlFrameType::CTRL_ACK`: a header-only receipt (delivery receipts, `notify_proto` ≥ 2). This engine writes
 * `session` = the acknowledged sender's session, `epoch` = the acknowledging engine's incarnation, `ack_seq` = the
 * highest seq up to which every notification of that session was admitted (cumulative), payload 0 bytes.
 *
 * @since 0.2.0
 */
export const TYPE_CTRL_ACK = 9

/**
 * `CtrlFrameType::NOTIFY_COMPAT`: a notification, payload `[u32 name_len][name][u32 msg_len][msg]`.
 *
 * @since 0.1.0
 */
export const TYPE_NOTIFY_COMPAT = 10

/**
 * `CtrlFrameFlags::NeedsAck`, bit 0: the only flag bit v1 knows (`kCtrlFrameKnownFlagsMask`).
 *
 * @since 0.1.0
 */
export const FLAG_NEEDS_ACK = 1

/**
 * Flag bit 1, past the C++ codec: a **failure notice** (the transfer-bound notification of a batch that ended FAILED),
 * its payload ending with `[u32 reason_len][reason]`. Only to peers at `notify_proto` 3 (a decoder without the bit in
 * its mask rejects the frame, `Flags`, as the C++ does).
 *
 * @since 0.3.0
 */
export const FLAG_FAILURE = 2

/**
 * `kCtrlFrameKnownFlagsMask`: the flag bits a v1 decoder accepts (`NeedsAck`), the default mask of the decoders.
 *
 * @since 0.3.0
 */
export const KNOWN_FLAGS = FLAG_NEEDS_ACK

/**
 * The flag bits a receiver at `notify_proto` 3 accepts: `NeedsAck` and {@link FLAG_FAILURE}.
 *
 * @since 0.3.0
 */
export const KNOWN_FLAGS_FAILURE = FLAG_NEEDS_ACK | FLAG_FAILURE

/**
 * The largest `name.length + msg.length` one frame carries in a notify slot: 65 536 − 44 − 8 = 65 484.
 *
 * @since 0.1.0
 */
export const MAX_PAYLOAD = NotifyWire.SLOT_BYTES - HEADER_BYTES - NotifyWire.HEADER_BYTES

/**
 * Why a received frame was rejected (counted or reported by the caller, never thrown); distinct from `NotifyWire`'s.
 *
 * @since 0.1.0
 */
export const Reject = {
  /** Fewer than 44 bytes (cpp:217). */
  Short: 10,
  /** Not `MAGIC` (cpp:226). */
  Magic: 11,
  /** Version other than 1 (cpp:233). */
  Version: 12,
  /** Type outside 1..10 (cpp:234). */
  Type: 13,
  /** A known type other than `NOTIFY_COMPAT`: a control frame, not a notification. */
  NotNotify: 14,
  /** A flag bit other than those the decoder knows: `NeedsAck`, and `FLAG_FAILURE` at level 3 (cpp:235). */
  Flags: 15,
  /** `payload_len` is not exactly the bytes after the header (cpp:236). */
  PayloadLength: 16,
  /** Payload shorter than 8 bytes (cpp:63). */
  PayloadShort: 17,
  /** `name_len` overruns the payload (cpp:68, cpp:72). */
  NameTooLong: 18,
  /** `msg_len` overruns the payload (cpp:73). */
  MsgTooLong: 19,
  /** Bytes after `msg` inside the payload (cpp:76); with `FLAG_FAILURE`, anything but exactly the reason. */
  Trailing: 20
} as const

/**
 * A whole `NOTIFY_COMPAT` frame: the header fields a sender chooses, and the notification.
 *
 * @since 0.1.0
 */
export interface Frame {
  readonly session: bigint
  readonly epoch: bigint
  readonly seq: bigint
  readonly ackSeq: bigint
  /** 0 or {@link FLAG_NEEDS_ACK}, and {@link FLAG_FAILURE} exactly when `failure` is given. */
  readonly flags: number
  readonly name: Uint8Array
  readonly msg: Uint8Array
  /** A failure notice's reason (with {@link FLAG_FAILURE}, since 0.3.0); absent otherwise. */
  readonly failure?: string | undefined
}

/**
 * Where {@link decodeInto} found the name and message, and the frame's stamp. The same shape as `Dedup.DecodedFrame`,
 * which it fills as well; reuse one object.
 *
 * @since 0.1.0
 */
export class StampedRanges extends NotifyWire.DecodedRanges {
  /**
   * Whether the frame carried a stamp: `true` for a typed frame, `false` for a raw one (then `session` and `seq` mean
   * nothing).
   *
   * @since 0.1.0
   */
  stamped = false
  /**
   * The sender's session, new each time its engine starts.
   *
   * @since 0.1.0
   */
  session = 0n
  /**
   * The notification's place in the sender's sequence within that session.
   *
   * @since 0.1.0
   */
  seq = 0n
  /**
   * The low u32 of the receiver incarnation the frame is addressed to (both halves 0: any); two u32s, no BigInt per
   * frame.
   *
   * @since 0.2.0
   */
  epochLo = 0
  /**
   * The high u32 of the receiver incarnation the frame is addressed to (see `epochLo`).
   *
   * @since 0.2.0
   */
  epochHi = 0
  /**
   * The `NeedsAck` flag: the sender keeps it until a receipt covers it.
   *
   * @since 0.2.0
   */
  needsAck = false
  /**
   * Where a failure notice's reason starts in the buffer ({@link FLAG_FAILURE}); -1: not a failure notice.
   *
   * @since 0.3.0
   */
  failureStart = -1
  /**
   * Where a failure notice's reason ends; -1: not a failure notice.
   *
   * @since 0.3.0
   */
  failureEnd = -1
}

/**
 * A decoded `CTRL_ACK`'s fields (see {@link TYPE_CTRL_ACK}). Reuse one object.
 *
 * @since 0.2.0
 */
export class AckFields {
  /**
   * The session of the sender whose notifications the ack covers.
   *
   * @since 0.2.0
   */
  session = 0n
  /**
   * The acknowledging receiver's incarnation.
   *
   * @since 0.2.0
   */
  epoch = 0n
  /**
   * The cumulative ack: every notification of that session up to this  was admitted.
   *
   * @since 0.2.0
   */
  ackSeq = 0n
}

const OFF_VERSION = 4
const OFF_TYPE = 5
const OFF_FLAGS = 6
const OFF_SESSION = 8
const OFF_EPOCH = 16
const OFF_SEQ = 24
const OFF_ACK_SEQ = 32
const OFF_PAYLOAD_LEN = 40
const TYPE_MIN = 1
const UINT32_MAX = 0xffffffff
/** Bytes of a failure notice's reason prefix, `u32 reason_len`. */
const FAILURE_PREFIX_BYTES = 4

// NotifyWire.decode writes its ranges before the exact-end check runs: decode into this, copy to `out` on success.
const scratch = new NotifyWire.DecodedRanges()
/** Where the checked frame's reason starts (-1: none); set by `check` with `scratch`. */
let scratchFailure = -1

/** 2^32, and the largest u64 a double holds exactly (2^53 - 1). */
const TWO32 = 4294967296
const MAX_EXACT = 0x1fffffffffffffn
const MAX_U64 = 0xffffffffffffffffn
/**
 * The hot path's u64 fields without BigInt garbage. Node's `writeBigUInt64LE` / `readBigUInt64LE` make three or four
 * BigInts per field (masks and shifts), ~20 % of what a notification allocated. A value a double holds exactly (every
 * `seq` and `ack_seq`) is split with plain arithmetic; the large ones (sessions and incarnations: 64 random bits, four
 * of them in a notification that carries an ack) repeat frame after frame, so the last {@link KEPT} are kept with
 * their halves.
 */
const KEPT = 4
const kept: Array<bigint> = Array.from({ length: KEPT }, () => -1n)
const keptLo = new Float64Array(KEPT)
const keptHi = new Float64Array(KEPT)
let keptNext = 0

/** Keeps the large value `v` and its halves (replacing the oldest kept). */
const keep = (v: bigint, lo: number, hi: number): void => {
  kept[keptNext] = v
  keptLo[keptNext] = lo
  keptHi[keptNext] = hi
  keptNext = (keptNext + 1) % KEPT
}

/** Writes the u64 `v` at `at` (little-endian); a value outside 0..2^64-1 throws `RangeError`, as Node's does. */
const writeU64 = (buf: Buffer, v: bigint, at: number): void => {
  if (v >= 0n && v <= MAX_EXACT) {
    const n = Number(v)
    const lo = n % TWO32
    buf.writeUInt32LE(lo, at)
    buf.writeUInt32LE((n - lo) / TWO32, at + 4)
    return
  }
  let k = 0
  while (k < KEPT && kept[k] !== v) k++
  if (k === KEPT) {
    if (v < 0n || v > MAX_U64) throw new RangeError(`CtrlFrame: ${v} is not a u64`)
    keep(v, Number(v & 0xffffffffn), Number(v >> 32n))
    k = (keptNext + KEPT - 1) % KEPT
  }
  buf.writeUInt32LE(keptLo[k] as number, at)
  buf.writeUInt32LE(keptHi[k] as number, at + 4)
}

/** Reads the u64 at `at` (little-endian): one BigInt for a value a double holds, none for a large one kept. */
const readU64 = (buf: Buffer, at: number): bigint => {
  const lo = buf.readUInt32LE(at)
  const hi = buf.readUInt32LE(at + 4)
  if (hi < 0x200000) return BigInt(hi * TWO32 + lo)
  // (an entry not yet used has high half 0, below any value that gets here)
  for (let k = 0; k < KEPT; k++) if (keptLo[k] === lo && keptHi[k] === hi) return kept[k] as bigint
  const v = (BigInt(hi) << 32n) | BigInt(lo)
  keep(v, lo, hi)
  return v
}

/** Writes the 44-byte header at `offset`. */
const writeHeader = (
  buf: Buffer,
  offset: number,
  flags: number,
  session: bigint,
  epoch: bigint,
  seq: bigint,
  ackSeq: bigint,
  payloadLen: number,
  type: number = TYPE_NOTIFY_COMPAT
): void => {
  buf.writeUInt32LE(MAGIC, offset)
  buf[offset + OFF_VERSION] = VERSION
  buf[offset + OFF_TYPE] = type
  buf.writeUInt16LE(flags, offset + OFF_FLAGS)
  writeU64(buf, session, offset + OFF_SESSION)
  writeU64(buf, epoch, offset + OFF_EPOCH)
  writeU64(buf, seq, offset + OFF_SEQ)
  writeU64(buf, ackSeq, offset + OFF_ACK_SEQ)
  buf.writeUInt32LE(payloadLen, offset + OFF_PAYLOAD_LEN)
}

/**
 * Encodes a whole frame into a new array. Like `encodeCtrlFrame` it refuses unknown flags — here anything outside
 * {@link FLAG_NEEDS_ACK} and {@link FLAG_FAILURE}, the latter only together with `failure` — and a payload above
 * `UINT32_MAX` bytes; it throws a `RangeError` for those and for a u64 field outside `[0, 2^64)`: a caller's bug, not
 * a wire condition.
 *
 * @since 0.1.0
 */
export const encode = (frame: Frame): Uint8Array => {
  const { flags, msg, name, failure } = frame
  if (flags !== (flags & KNOWN_FLAGS_FAILURE)) {
    throw new RangeError(`CtrlFrame flags ${flags}: only NeedsAck (1) and Failure (2) are known`)
  }
  if (((flags & FLAG_FAILURE) !== 0) !== (failure !== undefined)) {
    throw new RangeError("CtrlFrame: the Failure flag (2) goes with a failure reason, and only with one")
  }
  const reasonLen = failure === undefined ? 0 : Buffer.byteLength(failure, "utf8")
  const notifyLen = NotifyWire.HEADER_BYTES + name.length + msg.length
  const payloadLen = notifyLen + (failure === undefined ? 0 : FAILURE_PREFIX_BYTES + reasonLen)
  if (payloadLen > UINT32_MAX) throw new RangeError(`CtrlFrame payload of ${payloadLen} bytes: above UINT32_MAX`)
  const buf = Buffer.alloc(HEADER_BYTES + payloadLen)
  writeHeader(buf, 0, flags, frame.session, frame.epoch, frame.seq, frame.ackSeq, payloadLen)
  NotifyWire.encode(buf, HEADER_BYTES, name, msg, notifyLen)
  if (failure !== undefined) {
    buf.writeUInt32LE(reasonLen, HEADER_BYTES + notifyLen)
    buf.write(failure, HEADER_BYTES + notifyLen + FAILURE_PREFIX_BYTES, reasonLen, "utf8")
  }
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.length)
}

/**
 * The notify slot's encoder: a `NOTIFY_COMPAT` frame stamped `(session, seq)`, epoch 0, ack_seq 0, flags 0, written
 * into `buf` at `offset`. Returns the frame's length, or -1 when it does not fit `max` bytes (by default one TENT
 * notify slot, `NotifyWire.SLOT_BYTES`), in which case nothing is written. The caller makes sure `buf` has room; `session` and
 * `seq` must be u64s (`RangeError` otherwise). With `failure` (a failure notice's reason, since 0.3.0) the frame
 * carries {@link FLAG_FAILURE} and the reason after the notification, written straight into `buf` (no copy made).
 *
 * @since 0.1.0
 */
export const encodeInto = (
  buf: Buffer,
  offset: number,
  session: bigint,
  seq: bigint,
  name: Uint8Array,
  msg: Uint8Array,
  max: number = NotifyWire.SLOT_BYTES,
  epoch = 0n,
  flags = 0,
  failure?: string
): number => {
  if (failure === undefined) {
    const payloadLen = NotifyWire.encode(buf, offset + HEADER_BYTES, name, msg, max - HEADER_BYTES)
    if (payloadLen < 0) return -1
    writeHeader(buf, offset, flags, session, epoch, seq, 0n, payloadLen)
    return HEADER_BYTES + payloadLen
  }
  const reasonLen = Buffer.byteLength(failure, "utf8")
  const trailer = FAILURE_PREFIX_BYTES + reasonLen
  const notifyLen = NotifyWire.encode(buf, offset + HEADER_BYTES, name, msg, max - HEADER_BYTES - trailer)
  if (notifyLen < 0) return -1
  const at = offset + HEADER_BYTES + notifyLen
  const payloadLen = notifyLen + trailer
  buf.writeUInt32LE(reasonLen, at)
  buf.write(failure, at + FAILURE_PREFIX_BYTES, reasonLen, "utf8")
  writeHeader(buf, offset, flags | FLAG_FAILURE, session, epoch, seq, 0n, payloadLen)
  return HEADER_BYTES + payloadLen
}

/**
 * Writes a header-only `CTRL_ACK` (see {@link TYPE_CTRL_ACK}) at `offset`; returns its length, 44.
 *
 * @since 0.2.0
 */
export const encodeAckInto = (buf: Buffer, offset: number, session: bigint, epoch: bigint, ackSeq: bigint): number => {
  writeHeader(buf, offset, 0, session, epoch, 0n, ackSeq, 0, TYPE_CTRL_ACK)
  return HEADER_BYTES
}

/**
 * Whether `buf[offset, offset + len)` is a well-formed header-only `CTRL_ACK`; if so its fields are written to
 * `out`. Checked by the C++ decoder's rules (magic, version, flags, payload length); anything else is not an ack.
 *
 * @since 0.2.0
 */
export const decodeAckInto = (buf: Buffer, offset: number, len: number, out: AckFields): boolean => {
  if (len !== HEADER_BYTES || buf.readUInt32LE(offset) !== MAGIC) return false
  if (buf[offset + OFF_VERSION] !== VERSION || buf[offset + OFF_TYPE] !== TYPE_CTRL_ACK) return false
  if ((buf.readUInt16LE(offset + OFF_FLAGS) & ~FLAG_NEEDS_ACK) !== 0) return false
  if (buf.readUInt32LE(offset + OFF_PAYLOAD_LEN) !== 0) return false
  out.session = readU64(buf, offset + OFF_SESSION)
  out.epoch = readU64(buf, offset + OFF_EPOCH)
  out.ackSeq = readU64(buf, offset + OFF_ACK_SEQ)
  return true
}

/**
 * Whether `buf[offset, offset + len)` starts with {@link MAGIC} (`isCtrlFrameMagic`): a typed frame, not a raw one.
 *
 * @since 0.1.0
 */
export const isCtrlFrame = (buf: Buffer, offset: number, len: number): boolean =>
  len >= 4 && buf.readUInt32LE(offset) === MAGIC

/**
 * The header and payload checks, in the C++ order, with the flag bits `known`; fills `scratch` (and `scratchFailure`)
 * on success.
 */
const check = (buf: Buffer, offset: number, len: number, known: number): number => {
  if (len < HEADER_BYTES) return Reject.Short
  if (buf.readUInt32LE(offset) !== MAGIC) return Reject.Magic
  if (buf[offset + OFF_VERSION] !== VERSION) return Reject.Version
  const type = buf[offset + OFF_TYPE]
  if (type < TYPE_MIN || type > TYPE_NOTIFY_COMPAT) return Reject.Type
  const flags = buf.readUInt16LE(offset + OFF_FLAGS)
  if ((flags & ~known) !== 0) return Reject.Flags
  const payloadLen = buf.readUInt32LE(offset + OFF_PAYLOAD_LEN)
  if (payloadLen !== len - HEADER_BYTES) return Reject.PayloadLength
  if (type !== TYPE_NOTIFY_COMPAT) return Reject.NotNotify
  const raw = NotifyWire.decode(buf, offset + HEADER_BYTES, payloadLen, scratch)
  if (raw === NotifyWire.Reject.NameTooLong) return Reject.NameTooLong
  if (raw === NotifyWire.Reject.MsgTooLong) return Reject.MsgTooLong
  if (raw !== 0) return Reject.PayloadShort
  const end = offset + len
  if ((flags & FLAG_FAILURE) === 0) {
    if (scratch.msgEnd !== end) return Reject.Trailing
    scratchFailure = -1
    return 0
  }
  // A failure notice: exactly `[u32 reason_len][reason]` after msg.
  const at = scratch.msgEnd
  if (end - at < FAILURE_PREFIX_BYTES || buf.readUInt32LE(at) !== end - at - FAILURE_PREFIX_BYTES) {
    return Reject.Trailing
  }
  scratchFailure = at + FAILURE_PREFIX_BYTES
  return 0
}

/**
 * The notify slot's decoder: checks `buf[offset, offset + len)` as the C++ decoders do and, on success, sets `out` to
 * the name and message ranges (offsets into `buf`) and the stamp (`stamped = true`, `session`, `seq`); returns 0, or a
 * {@link Reject} code and leaves `out` as it was. Epoch, ack_seq and flags are checked, not reported ({@link decode}
 * reports them). Copy the bytes out before the slot is reposted. `known` is the receiver's flag mask: by default the
 * C++ one; {@link KNOWN_FLAGS_FAILURE} at `notify_proto` 3, and then a failure notice's reason range is set too
 * (`failureStart` -1 otherwise).
 *
 * @since 0.1.0
 */
export const decodeInto = (
  buf: Buffer,
  offset: number,
  len: number,
  out: StampedRanges,
  known: number = KNOWN_FLAGS
): number => {
  const code = check(buf, offset, len, known)
  if (code !== 0) return code
  out.nameStart = scratch.nameStart
  out.nameEnd = scratch.nameEnd
  out.msgStart = scratch.msgStart
  out.msgEnd = scratch.msgEnd
  out.stamped = true
  out.session = readU64(buf, offset + OFF_SESSION)
  out.seq = readU64(buf, offset + OFF_SEQ)
  out.epochLo = buf.readUInt32LE(offset + OFF_EPOCH)
  out.epochHi = buf.readUInt32LE(offset + OFF_EPOCH + 4)
  out.needsAck = (buf.readUInt16LE(offset + OFF_FLAGS) & FLAG_NEEDS_ACK) !== 0
  out.failureStart = scratchFailure
  out.failureEnd = scratchFailure < 0 ? -1 : offset + len
  return 0
}

/**
 * Decodes a whole frame, or returns `undefined` for one the C++ decoders reject (see the module's rules; `known` as
 * for {@link decodeInto}). `name` and `msg` are copies, independent of `bytes`; a failure notice's reason is in
 * `failure`. Never throws.
 *
 * @since 0.1.0
 */
export const decode = (bytes: Uint8Array, known: number = KNOWN_FLAGS): Frame | undefined => {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  if (check(buf, 0, buf.length, known) !== 0) return undefined
  const frame: Frame = {
    session: buf.readBigUInt64LE(OFF_SESSION),
    epoch: buf.readBigUInt64LE(OFF_EPOCH),
    seq: buf.readBigUInt64LE(OFF_SEQ),
    ackSeq: buf.readBigUInt64LE(OFF_ACK_SEQ),
    flags: buf.readUInt16LE(OFF_FLAGS),
    name: bytes.slice(scratch.nameStart, scratch.nameEnd),
    msg: bytes.slice(scratch.msgStart, scratch.msgEnd)
  }
  return scratchFailure < 0 ? frame : { ...frame, failure: buf.toString("utf8", scratchFailure, buf.length) }
}
