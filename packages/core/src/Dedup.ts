/**
 * Seam of RFC PR 6 ("typed frames and a dedup window"): how a notification is framed on the notify QP, which
 * `notify_proto` this engine advertises in its `BootstrapDesc`, and whether a received frame is delivered.
 *
 * TENT `main` ({@link legacy}): raw frames `[u32 name_len][name][u32 msg_len][msg]`, `notify_proto` 0, every frame
 * that decodes is delivered, so a resent notification arrives twice. PR 6's Layer frames notifications as
 * CtrlFrame v1 (44-byte header, magic `MCKC`) stamped `(session, seq)` when the peer advertised `notify_proto` ≥ 1,
 * and drops duplicates with a per-sender-session window (high-water mark + 4096 bits) shared by all transports.
 *
 * @since 0.1.0
 */
import { Context, Layer } from "effect"
import * as NotifyFrame from "./NotifyFrame.js"

/** Framing and duplicate suppression of the notify channel. Hot path: plain synchronous functions. */
export interface DedupShape {
  /** Advertised as `notify_proto` in this engine's `BootstrapDesc`. */
  readonly notifyProto: number
  /** Encodes into a send slot for a peer that advertised `peerProto`; returns the length or -1 (too large). */
  readonly encode: (buf: Buffer, offset: number, name: Uint8Array, msg: Uint8Array, peerProto: number) => number
  /**
   * Decodes a received payload into `out`: 0 = deliver, a positive `NotifyFrame.Reject` code = malformed, -1 =
   * a duplicate to drop. `sender` names the endpoint it came from.
   */
  readonly decode: (buf: Buffer, offset: number, len: number, out: NotifyFrame.DecodedRanges, sender: string) => number
  /** The largest `name.length + msg.length` one frame carries. */
  readonly maxPayload: number
}

/** The framing and dedup policy of the notify channel. */
export class Dedup extends Context.Tag("@tent/core/Dedup")<Dedup, DedupShape>() {}

/** TENT `main`: raw frames, `notify_proto` 0, no dedup. */
export const legacy: DedupShape = {
  notifyProto: 0,
  encode: (buf, offset, name, msg) => NotifyFrame.encode(buf, offset, name, msg),
  decode: (buf, offset, len, out) => NotifyFrame.decode(buf, offset, len, out),
  maxPayload: NotifyFrame.MAX_PAYLOAD
}

/** {@link legacy} as a Layer. */
export const layerLegacy: Layer.Layer<Dedup> = Layer.succeed(Dedup, legacy)
