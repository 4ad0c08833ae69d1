/**
 * Seam of RFC PR 6 ("typed frames and a dedup window"): how a notification is framed on the wire, which stamp it
 * carries, which `notify_proto` this engine advertises in its `BootstrapDesc`, and whether a received notification is
 * admitted. Framing and admission are separate: every transport frames (the notify QP's slots here; TCP and the
 * control plane's `Notify` carry the stamp in the request), and every received notification, whatever carried it,
 * passes {@link DedupShape.admit} once, at the engine's one delivery point, with its sender and its stamp.
 *
 * TENT `main` ({@link legacy}): raw frames `[u32 name_len][name][u32 msg_len][msg]`, `notify_proto` 0, no stamp,
 * everything that decodes is admitted, so a resent notification arrives twice. PR 6's Layer frames notifications as
 * CtrlFrame v1 (44-byte header, magic `MCKC`) stamped `(session, seq)` when the peer advertised `notify_proto` ≥ 1
 * (through `stamp` and `encode`), puts the same stamp on the `Notify` request, and admits through a per-sender-session
 * window (high-water mark + 4096 bits) shared by all transports (through `admit`).
 *
 * @since 0.1.0
 */
import type { Notification, NotificationStamp } from "@tent/rpc"
import { Context, Layer } from "effect"
import * as NotifyFrame from "./NotifyFrame.js"

/** The `(session, seq)` a sender puts on a notification (RFC PR 6): the `Notify` request's `NotificationStamp`. */
export type Stamp = NotificationStamp

/** Where a decoded frame's name and message lie, and its stamp if the frame carried one. Reuse one object. */
export class DecodedFrame extends NotifyFrame.DecodedRanges {
  stamped = false
  session = 0n
  seq = 0n
}

/** Framing and admission of notifications. Hot path: plain synchronous functions. */
export interface DedupShape {
  /** Advertised as `notify_proto` in this engine's `BootstrapDesc`. */
  readonly notifyProto: number
  /** The stamp of the next notification to a peer that advertised `peerProto`; `undefined`: send it unstamped. */
  readonly stamp: (peerProto: number) => Stamp | undefined
  /** Encodes into a send slot for a peer that advertised `peerProto`; returns the length or -1 (too large). */
  readonly encode: (buf: Buffer, offset: number, n: Notification, stamp: Stamp | undefined, peerProto: number) => number
  /** Decodes a received payload into `out`: 0, or a positive `NotifyFrame.Reject` code (malformed). */
  readonly decode: (buf: Buffer, offset: number, len: number, out: DecodedFrame) => number
  /**
   * Admission at the delivery point, for every transport: true = deliver, false = a duplicate to drop. `sender`
   * names who sent it (a NIC path for RDMA, an RPC address for TCP / `Notify`).
   */
  readonly admit: (sender: string, stamp: Stamp | undefined) => boolean
  /** The largest `name.length + msg.length` one frame carries. */
  readonly maxPayload: number
}

/** The framing and dedup policy of the notify channel. */
export class Dedup extends Context.Tag("@tent/core/Dedup")<Dedup, DedupShape>() {}

/** TENT `main`: raw frames, `notify_proto` 0, no stamp, every notification admitted. */
export const legacy: DedupShape = {
  notifyProto: 0,
  stamp: () => undefined,
  encode: (buf, offset, n) => NotifyFrame.encode(buf, offset, n.name, n.msg),
  decode: (buf, offset, len, out) => NotifyFrame.decode(buf, offset, len, out),
  admit: () => true,
  maxPayload: NotifyFrame.MAX_PAYLOAD
}

/** {@link legacy} as a Layer. */
export const layerLegacy: Layer.Layer<Dedup> = Layer.succeed(Dedup, legacy)
