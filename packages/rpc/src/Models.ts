/**
 * The schemas of what the control plane carries, field names as on TENT's JSON wire: the endpoint, device, buffer and
 * segment descriptors, and a notification with its sender's stamp.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * An unsigned 32-bit integer (QP numbers, rkeys).
 *
 * @since 0.1.0
 */
export const U32 = Schema.Number.pipe(Schema.int(), Schema.between(0, 0xffffffff))

/**
 * A byte offset or length that fits a JS number exactly (virtual addresses of x86-64 and aarch64 do).
 *
 * @since 0.1.0
 */
export const SafeUint = Schema.Number.pipe(Schema.int(), Schema.between(0, Number.MAX_SAFE_INTEGER))

/**
 * What two endpoints exchange to connect their QPs (TENT `BootstrapDesc`, field names as on TENT's JSON wire).
 * Decoding is lenient the way a peer of another version needs: `notify_proto` (and the other fields TENT gives a
 * default) default when absent, and unknown extra fields are ignored.
 *
 * @since 0.1.0
 */
export const BootstrapDesc = Schema.Struct({
  /** The sender's `"<server>@<nic>"`. */
  local_nic_path: Schema.String,
  /** The target's `"<server>@<nic>"`: selects the target's device. */
  peer_nic_path: Schema.String,
  /** Data QP numbers, paired positionally with the peer's. */
  qp_num: Schema.Array(U32),
  local_lid: Schema.optionalWith(Schema.Number.pipe(Schema.int(), Schema.between(0, 0xffff)), { default: () => 0 }),
  /** 16 GID bytes as `%02x` joined by `:`. */
  local_gid: Schema.String,
  /** Error text of a refusal; empty on success. */
  reply_msg: Schema.optionalWith(Schema.String, { default: () => "" }),
  /** The notify QP number; 0 means "no notifications". */
  notify_qp_num: Schema.optionalWith(U32, { default: () => 0 }),
  /** Notification protocol the sender understands (0 = raw frames only, what peers that predate the field speak). */
  notify_proto: Schema.optionalWith(U32, { default: () => 0 }),
  /**
   * Bytes of the sender's notify receive slots, the largest notification frame it can take; absent (TENT, and this
   * engine with TENT's slots): 65 536.
   */
  notify_slot_bytes: Schema.optional(Schema.Number.pipe(Schema.int(), Schema.between(1, 65536))),
  /**
   * The sender's incarnation (a u64 in decimal, new each time its engine starts), when it offers delivery receipts
   * (`notify_proto` ≥ 2): a notification stamped for another incarnation is refused, never delivered.
   */
  notify_incarnation: Schema.optional(Schema.String),
  /**
   * Receives the sender keeps posted on each of its data QPs for transfer-bound notifications riding the data QPs
   * (`RDMA_WRITE_WITH_IMM`, one per lane a transfer used): present only when it takes them; absent (TENT, and this
   * engine with `transports/rdma/notify/transfer_bound` = `notify_qp`), a peer gets the notify QP's bytes.
   */
  notify_imm_recvs: Schema.optional(Schema.Number.pipe(Schema.int(), Schema.between(0, 65536))),
  /**
   * 1 when the sender takes a receipt carried with a notification: one SEND holding a header-only `CTRL_ACK` (44 bytes)
   * and then the notification's frame (`notify_proto` ≥ 2 only). Absent (TENT, and engines before 0.4.0): every
   * receipt goes to it as a `CTRL_ACK` of its own. Since 0.4.0.
   */
  notify_ack_carry: Schema.optional(Schema.Literal(1)),
  /** The sender's initial PSN per data QP (random), paired with `qp_num`; absent (TENT): 0 both ways. */
  qp_psn: Schema.optional(Schema.Array(Schema.Number.pipe(Schema.int(), Schema.between(0, 0xffffff)))),
  /** The sender's notify QP's initial PSN (random); absent (TENT): 0 both ways. */
  notify_psn: Schema.optional(Schema.Number.pipe(Schema.int(), Schema.between(0, 0xffffff))),
  /**
   * The token (a u64 in decimal) every datagram to the sender's QPs must carry on SoftVerbs (`SoftVerbs.setQpToken`;
   * a real NIC ignores it); absent (TENT): no token either way.
   */
  qp_token: Schema.optional(
    Schema.String.pipe(
      Schema.pattern(/^[1-9][0-9]{0,19}$/),
      Schema.filter((s) => BigInt(s) < 1n << 64n)
    )
  )
})
/**
 * A decoded {@link BootstrapDesc}.
 *
 * @since 0.1.0
 */
export type BootstrapDesc = typeof BootstrapDesc.Type

/**
 * One RDMA device of a segment.
 *
 * @since 0.1.0
 */
export const DeviceDesc = Schema.Struct({
  name: Schema.String,
  lid: Schema.optionalWith(Schema.Number, { default: () => 0 }),
  gid: Schema.String
})
/**
 * A decoded {@link DeviceDesc}.
 *
 * @since 0.1.0
 */
export type DeviceDesc = typeof DeviceDesc.Type

/**
 * One registered buffer; `rkey[i]` is its rkey on `devices[i]`.
 *
 * @since 0.1.0
 */
export const BufferDesc = Schema.Struct({
  addr: SafeUint,
  length: SafeUint,
  rkey: Schema.Array(U32),
  /**
   * The transports the buffer was registered with, in TENT's order (`"rdma"` before `"tcp"`); absent from older
   * peers' descriptors, which offer both.
   */
  transports: Schema.optional(Schema.Array(Schema.String))
})
/**
 * A decoded {@link BufferDesc}.
 *
 * @since 0.1.0
 */
export type BufferDesc = typeof BufferDesc.Type

/**
 * A segment's descriptor: its name, the RPC address that serves it, its devices and registered buffers. Under a
 * central registry `rpc_server_addr` may change for the same name, which is why the descriptor carries it.
 *
 * @since 0.1.0
 */
export const SegmentDesc = Schema.Struct({
  name: Schema.String,
  rpc_server_addr: Schema.String,
  devices: Schema.Array(DeviceDesc),
  buffers: Schema.Array(BufferDesc),
  /**
   * The server part of the NIC paths (`<server>@<nic>`) a peer builds to reach this segment's devices, when it is not
   * the segment's name (TENT's `rdma_server_name`, `segment.h:179-193`); absent otherwise.
   */
  rdma_server_name: Schema.optional(Schema.String),
  /** The serving engine's incarnation (u64 in decimal) when it offers delivery receipts; absent otherwise. */
  notify_incarnation: Schema.optional(Schema.String),
  /**
   * Receives the sender keeps posted on each of its data QPs for transfer-bound notifications riding the data QPs
   * (`RDMA_WRITE_WITH_IMM`, one per lane a transfer used): present only when it takes them; absent (TENT, and this
   * engine with `transports/rdma/notify/transfer_bound` = `notify_qp`), a peer gets the notify QP's bytes.
   */
  notify_imm_recvs: Schema.optional(Schema.Number.pipe(Schema.int(), Schema.between(0, 65536))),
  /**
   * The `notify_proto` the serving engine speaks, written only from level 3 (failure notices) up, so that a peer that
   * never bootstraps an RDMA endpoint with it (transfers over TCP) learns the level too; absent otherwise (the level
   * then comes from `BootstrapDesc`).
   *
   * @since 0.3.0
   */
  notify_proto: Schema.optional(U32)
})
/**
 * A decoded {@link SegmentDesc}.
 *
 * @since 0.1.0
 */
export type SegmentDesc = typeof SegmentDesc.Type

/**
 * Who sent a notification and where it stands in that sender's sequence: the sender's `session` (new each time it
 * starts) and a `seq` that grows within it, both u64. On the `Notify` wire it is a 16-byte trailer after `msg` (24 with
 * an `epoch`).
 *
 * @since 0.1.0
 */
export const NotificationStamp = Schema.Struct({
  session: Schema.BigIntFromSelf,
  seq: Schema.BigIntFromSelf,
  /**
   * The receiver's incarnation the stamp is addressed to (delivery receipts, `notify_proto` ≥ 2): a receiver of
   * another incarnation refuses it. On the `Notify` wire an 8-byte extension of the trailer; absent (or 0): any.
   */
  epoch: Schema.optional(Schema.BigIntFromSelf)
})
/**
 * A {@link NotificationStamp}.
 *
 * @since 0.1.0
 */
export type NotificationStamp = typeof NotificationStamp.Type

/**
 * A notification: `name` and `msg` are opaque bytes (binary-safe, as on the notify QP). `stamp` is optional: without
 * it a `Notify` carries exactly TENT's bytes; only peers that understand the trailer should be sent one.
 *
 * `failure` (since 0.3.0) makes it a **failure notice**: the transfer-bound notification `name`/`msg` of a batch that
 * ended FAILED, with the reason as text (possibly empty). The key is present only on failure notices, so a receiver
 * tells one from a success by the key alone. Only a peer that advertised `notify_proto` 3 is sent one: a peer that
 * does not know the key would read a success. On the `Notify` wire it is a trailer after a 24-byte stamp trailer
 * (zeros when unstamped): `[u32 reason_len][reason]`.
 *
 * @since 0.1.0
 */
export const Notification = Schema.Struct({
  name: Schema.Uint8ArrayFromSelf,
  msg: Schema.Uint8ArrayFromSelf,
  stamp: Schema.optional(NotificationStamp),
  failure: Schema.optional(Schema.String)
})
/**
 * A {@link Notification}.
 *
 * @since 0.1.0
 */
export type Notification = typeof Notification.Type

const utf8 = new TextEncoder()
const utf8Decoder = new TextDecoder()

/**
 * Builds a {@link Notification}; strings are UTF-8 encoded, bytes are taken as they are (not copied).
 *
 * @since 0.1.0
 */
export const makeNotification = (name: string | Uint8Array, msg: string | Uint8Array): Notification => ({
  name: typeof name === "string" ? utf8.encode(name) : name,
  msg: typeof msg === "string" ? utf8.encode(msg) : msg
})

/**
 * A notification's name and message as UTF-8 text (for logs and tests; the bytes need not be text).
 *
 * @since 0.1.0
 */
export const notificationText = (n: Notification): { readonly name: string; readonly msg: string } => ({
  name: utf8Decoder.decode(n.name),
  msg: utf8Decoder.decode(n.msg)
})
