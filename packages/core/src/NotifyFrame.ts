/**
 * The notification wire payload of TENT `main` on the notify QP: `[u32 name_len][name][u32 msg_len][msg]`,
 * little-endian, no magic, no version, no sequence number; at most 65 536 bytes in all (one send slot). The codec is
 * `@tent/rpc`'s `NotifyWire` (one implementation for the notify slot and the control plane's `Notify`); this module
 * names it for the RDMA path: `decode` here is the slot's lenient one (trailing bytes after `msg` ignored).
 *
 * @since 0.1.0
 */
import { NotifyWire } from "@tent/rpc"

/**
 * Bytes of one notify slot (TENT `kNotifyBufferSize`): the largest encoded notification.
 *
 * @since 0.1.0
 */
export const SLOT_BYTES = NotifyWire.SLOT_BYTES

/**
 * The two length prefixes.
 *
 * @since 0.1.0
 */
export const HEADER_BYTES = NotifyWire.HEADER_BYTES

/**
 * The largest `name.length + msg.length` a slot holds: 65 528.
 *
 * @since 0.1.0
 */
export const MAX_PAYLOAD = NotifyWire.MAX_PAYLOAD

/**
 * Encodes `name` and `msg` into `buf` at `offset`; returns the encoded length, or -1 when it does not fit `max`
 * bytes, by default `SLOT_BYTES` (TENT: "Notification message too large").
 *
 * @since 0.1.0
 */
export const encode: (buf: Buffer, offset: number, name: Uint8Array, msg: Uint8Array, max?: number) => number =
  NotifyWire.encode

/**
 * Why a received payload was rejected (counted by the poller, never thrown).
 *
 * @since 0.1.0
 */
export const Reject = NotifyWire.Reject

/**
 * Decodes the payload `buf[offset, offset + len)` as TENT's `handleNotifyRecv` does (trailing bytes after `msg` are
 * ignored). On success returns 0 and sets `out` to the name and message ranges; otherwise returns a {@link Reject}
 * code. Copy the bytes out before the slot is reposted.
 *
 * @since 0.1.0
 */
export const decode: (buf: Buffer, offset: number, len: number, out: DecodedRanges) => number = NotifyWire.decode

/**
 * Where {@link decode} found the name and message; reuse one object.
 *
 * @since 0.1.0
 */
export const DecodedRanges = NotifyWire.DecodedRanges
/**
 * Where {@link decode} found the name and message.
 *
 * @since 0.1.0
 */
export type DecodedRanges = NotifyWire.DecodedRanges
