/**
 * A held record (transfer-bound notifications on the data QPs, `rdma/Immediates.ts`): the sender's marks on the
 * notification objects it sent held, and the record's form on the wire, a CtrlFrame v1 with flag bit 2. Plain
 * synchronous code on the notify slots; a leaf the notify channel, the receipts' worker and the poller import.
 */
import type { Notification } from "@tent/rpc"
import * as CtrlFrame from "../CtrlFrame.js"

/** How long a receiver keeps an unreleased record, or immediates without their record (ms). */
export const HELD_TTL_MS = 60_000

/** A held record's tag and lane count; `active` until the fallback may send it as an ordinary notification. */
export interface Hold {
  readonly tag: number
  readonly lanes: number
  active: boolean
}

/** The records sent held, by their notification object (one object per record: the ledger keeps it). */
export const holds = new WeakMap<Notification, Hold>()

/** Is `n` a record that must not go anywhere but held on a notify QP yet? */
export const holdActive = (n: Notification): boolean => holds.get(n)?.active === true

/**
 * The held record's flag in a CtrlFrame v1 header (bit 2; sent only to a peer that advertised `notify_imm_recvs`):
 * its payload ends with an 8-byte trailer, `[u32 tag][u32 lanes]` little-endian, counted in `payload_len`.
 */
export const FLAG_HELD = 4
const OFF_FLAGS = 6
const OFF_PAYLOAD_LEN = 40
const TRAILER = 8

/** Makes the CtrlFrame written at `buf[offset, +len)` a held record of `hold`; its new length, or -1 past `cap`. */
export const makeHeld = (buf: Buffer, offset: number, len: number, cap: number, hold: Hold): number => {
  if (len < CtrlFrame.HEADER_BYTES || len + TRAILER > cap) return -1
  if (buf.readUInt32LE(offset) !== CtrlFrame.MAGIC) return -1
  buf.writeUInt16LE(buf.readUInt16LE(offset + OFF_FLAGS) | FLAG_HELD, offset + OFF_FLAGS)
  buf.writeUInt32LE(buf.readUInt32LE(offset + OFF_PAYLOAD_LEN) + TRAILER, offset + OFF_PAYLOAD_LEN)
  buf.writeUInt32LE(hold.tag >>> 0, offset + len)
  buf.writeUInt32LE(hold.lanes >>> 0, offset + len + 4)
  return len + TRAILER
}

/**
 * If the frame at `buf[offset, +len)` is a held record: takes its trailer into `out`, makes the frame the ordinary
 * one in place (flag cleared, trailer uncounted) and returns its length; else -1 (the frame is left as it was).
 */
export const takeHeld = (buf: Buffer, offset: number, len: number, out: { tag: number; lanes: number }): number => {
  if (len < CtrlFrame.HEADER_BYTES + TRAILER || buf.readUInt32LE(offset) !== CtrlFrame.MAGIC) return -1
  const flags = buf.readUInt16LE(offset + OFF_FLAGS)
  if ((flags & FLAG_HELD) === 0) return -1
  const payload = buf.readUInt32LE(offset + OFF_PAYLOAD_LEN)
  if (payload !== len - CtrlFrame.HEADER_BYTES || payload < TRAILER) return -1
  out.tag = buf.readUInt32LE(offset + len - TRAILER)
  out.lanes = buf.readUInt32LE(offset + len - 4)
  if (out.lanes === 0) return -1
  buf.writeUInt16LE(flags & ~FLAG_HELD, offset + OFF_FLAGS)
  buf.writeUInt32LE(payload - TRAILER, offset + OFF_PAYLOAD_LEN)
  return len - TRAILER
}
