/**
 * The inputs of the `notify-slots` target: the payloads of SENDs into an engine's notify-QP receive slots. Seeds are
 * made by the real codecs — TENT's raw frame (`NotifyWire.encode`), `CtrlFrame` v1 `NOTIFY_COMPAT` stamped, with an
 * epoch, `NeedsAck`, a failure notice, a held record (flag bit 2 and its `[u32 tag][u32 lanes]` trailer, as the
 * sender of transfer-bound notifications writes it), a header-only `CTRL_ACK` (`CtrlFrame.encodeAckInto`), and the
 * empty SEND — then mutated knowing the layout: the header's magic, version, type, flags, stamps and `payload_len`,
 * the payload's `name_len`/`msg_len`, the failure reason's length, the held trailer; then often havoc. Every payload
 * fits the victim's 64 KiB slot (a SEND longer than the posted receive is a protocol error of the sender's own QP).
 */
import { CtrlFrame } from "@tent/core"
import { NotifyWire } from "@tent/rpc"
import { havoc, INTERESTING_64, interesting32, putU32, putU64 } from "./Mutate.js"
import type { Prng } from "./Prng.js"

/** The largest payload sent: one notify slot. */
export const SLOT_BYTES = NotifyWire.SLOT_BYTES

const FLAG_HELD = 4
const OFF = { magic: 0, version: 4, type: 5, flags: 6, session: 8, epoch: 16, seq: 24, ackSeq: 32, payloadLen: 40 }

const text = (s: string) => Buffer.from(s, "utf8")

/** A raw TENT frame. */
const raw = (name: Uint8Array, msg: Uint8Array): Buffer => {
  const b = Buffer.alloc(NotifyWire.HEADER_BYTES + name.length + msg.length)
  NotifyWire.encode(b, 0, name, msg)
  return b
}

/** A typed frame. */
const typed = (frame: CtrlFrame.Frame): Buffer => Buffer.from(CtrlFrame.encode(frame))

/** A typed frame made a held record (flag bit 2, trailer `[tag][lanes]` counted in `payload_len`). */
const held = (frame: CtrlFrame.Frame, tag: number, lanes: number): Buffer => {
  const f = typed(frame)
  const b = Buffer.concat([f, Buffer.alloc(8)])
  b.writeUInt16LE(b.readUInt16LE(OFF.flags) | FLAG_HELD, OFF.flags)
  b.writeUInt32LE(b.readUInt32LE(OFF.payloadLen) + 8, OFF.payloadLen)
  b.writeUInt32LE(tag >>> 0, f.length)
  b.writeUInt32LE(lanes >>> 0, f.length + 4)
  return b
}

/** The seeds, made by the real encoders. */
export const seeds = (): Array<Buffer> => {
  const name = text("fz-slot")
  const msg = text("a notification into a notify slot")
  const base = { session: 0x1234_5678_9abc_def0n, epoch: 0n, seq: 1n, ackSeq: 0n, flags: 0, name, msg }
  const ack = Buffer.alloc(CtrlFrame.HEADER_BYTES)
  CtrlFrame.encodeAckInto(ack, 0, base.session, 7n, 3n)
  return [
    raw(name, msg),
    raw(new Uint8Array(0), new Uint8Array(0)),
    typed(base),
    typed({ ...base, seq: 2n, epoch: 7n, flags: CtrlFrame.FLAG_NEEDS_ACK }),
    typed({ ...base, seq: 3n, flags: CtrlFrame.FLAG_FAILURE, failure: "a failure notice" }),
    held({ ...base, seq: 4n }, 9, 2),
    ack,
    Buffer.alloc(0)
  ]
}

/** A u64 for a stamp field: small, interesting, or random. */
const u64 = (rng: Prng): bigint =>
  rng.chance(0.4) ? BigInt(rng.int(16)) : rng.chance(0.5) ? rng.pick(INTERESTING_64) : rng.u64()

/** Changes one field of a typed frame's header or payload. */
const mutateTyped = (rng: Prng, b: Buffer): Buffer => {
  if (b.length < CtrlFrame.HEADER_BYTES) return b
  const payloadLen = b.length - CtrlFrame.HEADER_BYTES
  switch (rng.int(9)) {
    case 0:
      putU32(b, OFF.magic, rng.chance(0.5) ? CtrlFrame.MAGIC ^ (1 << rng.int(32)) : interesting32(rng))
      return b
    case 1:
      b[OFF.version] = rng.pick([0, 1, 2, 255])
      return b
    case 2:
      b[OFF.type] = rng.pick([0, 1, 8, 9, 10, 11, 255])
      return b
    case 3:
      b.writeUInt16LE(rng.chance(0.7) ? rng.int(8) : rng.int(0x10000), OFF.flags)
      return b
    case 4:
      putU64(b, rng.pick([OFF.session, OFF.epoch, OFF.seq, OFF.ackSeq]), u64(rng))
      return b
    case 5:
      putU32(b, OFF.payloadLen, interesting32(rng, [payloadLen, payloadLen - 8, SLOT_BYTES]))
      return b
    case 6: {
      const at = CtrlFrame.HEADER_BYTES
      putU32(
        b,
        rng.chance(0.5) ? at : at + 4 + (b.length > at + 4 ? b.readUInt32LE(at) : 0),
        interesting32(rng, [payloadLen])
      )
      return b
    }
    case 7: {
      // the failure reason's length, or the held trailer's tag and lanes: the last 8 bytes
      putU32(b, b.length - 8 + (rng.chance(0.5) ? 0 : 4), interesting32(rng, [0, 1, 2, 64]))
      return b
    }
    default:
      return b.subarray(0, rng.int(b.length))
  }
}

/** Changes a raw frame's lengths. */
const mutateRaw = (rng: Prng, b: Buffer): Buffer => {
  if (b.length < 4) return b
  const nameLen = b.readUInt32LE(0)
  if (rng.chance(0.5)) putU32(b, 0, interesting32(rng, [nameLen, b.length - 8, SLOT_BYTES - 8]))
  else putU32(b, 4 + nameLen, interesting32(rng, [b.length - 8 - nameLen, SLOT_BYTES]))
  return b
}

/** A frame filling a slot (or just over what a payload may be), typed or raw. */
const big = (rng: Prng): Buffer => {
  const name = text(`fz-big-${rng.int(1000)}`)
  const overhead = rng.chance(0.5) ? CtrlFrame.HEADER_BYTES + 8 : 8
  const msg = Buffer.alloc(SLOT_BYTES - overhead - name.length - rng.int(2), rng.int(256))
  return overhead === 8
    ? raw(name, msg)
    : typed({ session: rng.u64(), epoch: 0n, seq: 1n, ackSeq: 0n, flags: 0, name, msg })
}

/** The next payload, never longer than a slot. */
export const next = (rng: Prng, corpus: ReadonlyArray<Buffer>): { bytes: Buffer; what: string } => {
  if (rng.chance(0.002)) return { bytes: big(rng), what: "full-slot" }
  if (rng.chance(0.02)) return { bytes: rng.bytes(rng.int(200)), what: "random" }
  let b: Buffer = Buffer.from(rng.pick(corpus))
  let what = "seed"
  const isTyped = b.length >= 4 && b.readUInt32LE(0) === CtrlFrame.MAGIC
  if (rng.chance(0.75)) {
    b = isTyped ? mutateTyped(rng, b) : mutateRaw(rng, b)
    what = isTyped ? "typed/fields" : "raw/fields"
  }
  if (isTyped && rng.chance(0.3)) {
    // fresh stamps: the dedup window admits them (and keeps a session each, up to its bound)
    putU64(b, OFF.session, u64(rng))
    putU64(b, OFF.seq, u64(rng))
  }
  if (rng.chance(0.3)) {
    b = havoc(rng, b, corpus as Array<Buffer>, SLOT_BYTES)
    what = `${what}/havoc`
  }
  return { bytes: b.length > SLOT_BYTES ? b.subarray(0, SLOT_BYTES) : b, what }
}
