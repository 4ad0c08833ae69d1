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
import { randomBytes } from "node:crypto"
import type { Notification, NotificationStamp } from "@tent/rpc"
import { Context, Effect, Layer } from "effect"
import type { ConfigError } from "effect/ConfigError"
import * as CtrlFrame from "./CtrlFrame.js"
import * as EngineConfig from "./EngineConfig.js"
import { type DedupCounters, SessionTable, type SessionTableOptions } from "./internal/ReplayWindow.js"
import * as NotifyFrame from "./NotifyFrame.js"
import { PROTO as FAILURE_PROTO } from "./SubmitHooks.js"

/**
 * The `(session, seq)` a sender puts on a notification (RFC PR 6): the `Notify` request's `NotificationStamp`.
 *
 * @since 0.1.0
 */
export type Stamp = NotificationStamp

/**
 * Where a decoded frame's name and message lie, and its stamp if the frame carried one. Reuse one object.
 *
 * @since 0.1.0
 */
export const DecodedFrame = CtrlFrame.StampedRanges
/**
 * A {@link DecodedFrame}.
 *
 * @since 0.1.0
 */
export type DecodedFrame = CtrlFrame.StampedRanges

/**
 * Framing and admission of notifications. Hot path: plain synchronous functions.
 *
 * @since 0.1.0
 */
export interface DedupShape {
  /** Advertised as `notify_proto` in this engine's `BootstrapDesc`. */
  readonly notifyProto: number
  /** The stamp of the next notification to a peer that advertised `peerProto`; `undefined`: send it unstamped. */
  readonly stamp: (peerProto: number) => Stamp | undefined
  /**
   * Encodes into a send slot for a peer that advertised `peerProto`; returns the length or -1 (longer than `max`
   * bytes, by default a whole TENT slot: nothing is written). A failure notice (`n.failure`) is framed with
   * `CtrlFrame.FLAG_FAILURE` for a peer at `notify_proto` 3 that is sent a stamp; for any other it is -1, never a
   * frame that would read as a success.
   */
  readonly encode: (
    buf: Buffer,
    offset: number,
    n: Notification,
    stamp: Stamp | undefined,
    peerProto: number,
    max?: number
  ) => number
  /**
   * Decodes a received payload into `out`: 0, or a positive `NotifyFrame.Reject` code (malformed). `known`: the
   * typed frame's flag bits this receiver accepts (`CtrlFrame.KNOWN_FLAGS` by default, the C++ decoder's;
   * `CtrlFrame.KNOWN_FLAGS_FAILURE` when it takes failure notices).
   */
  readonly decode: (buf: Buffer, offset: number, len: number, out: DecodedFrame, known?: number) => number
  /**
   * Admission at the delivery point, for every transport: true = deliver, false = a duplicate to drop. `sender`
   * names who sent it (a NIC path for RDMA, an RPC address for TCP / `Notify`). `now` (ms, `performance.now`): a
   * caller admitting a batch reads the clock once for it (a clock read costs more than the window's check here);
   * without it the policy reads its own.
   */
  readonly admit: (sender: string, stamp: Stamp | undefined, now?: number) => boolean
  /**
   * Whether the sender segment `sender.slice(0, end)` may use the stamp's `session`, binding the session to the first
   * one that does (a NIC path's segment is its part before the last `@`: `end` there). The delivery point asks it
   * before {@link admit}, only for senders whose segment it knows; false: refused, the window untouched. Absent
   * (legacy): sessions are not bound. Since 0.3.0.
   */
  readonly claim?: ((session: bigint, sender: string, end: number, now?: number) => boolean) | undefined
  /** The largest `name.length + msg.length` one frame carries. */
  readonly maxPayload: number
  /** This engine's sender session, when it stamps (delivery receipts number their seqs within it). */
  readonly session?: bigint | undefined
  /** What the dedup window counted (RFC PR 6); legacy: none. */
  readonly counters?: DedupCounters | undefined
}

/**
 * The framing and dedup policy of the notify channel.
 *
 * @since 0.1.0
 */
export class Dedup extends Context.Tag("@tent/core/Dedup")<Dedup, DedupShape>() {}

/**
 * TENT `main`: raw frames, `notify_proto` 0, no stamp, every notification admitted.
 *
 * @since 0.1.0
 */
export const legacy: DedupShape = {
  notifyProto: 0,
  stamp: () => undefined,
  encode: (buf, offset, n, _stamp, _peerProto, max) => NotifyFrame.encode(buf, offset, n.name, n.msg, max),
  decode: (buf, offset, len, out) => NotifyFrame.decode(buf, offset, len, out),
  admit: () => true,
  maxPayload: NotifyFrame.MAX_PAYLOAD
}

/**
 * {@link legacy} as a Layer.
 *
 * @since 0.1.0
 */
export const layerLegacy: Layer.Layer<Dedup> = Layer.succeed(Dedup, legacy)

/** A sender session id: 64 random bits, new each time an engine starts (never 0). */
const newSession = (): bigint => {
  for (;;) {
    const s = randomBytes(8).readBigUInt64LE(0)
    if (s !== 0n) return s
  }
}

/**
 * RFC PR 6 with the window's bounds (`notification/dedup_*`): `notify_proto` 1; to a peer that advertised ≥ 1 every
 * notification is stamped `(session, seq)` — this engine's random session, a seq that grows by one per stamp — and
 * framed as `CtrlFrame` v1 (`NOTIFY_COMPAT`); to a peer that advertised 0 (or predates the field) it goes unstamped in
 * TENT's raw frame, byte for byte the old traffic. A received payload that starts with the frame's magic is decoded
 * by the C++ decoder's rules, anything else as a raw frame (a raw frame cannot start with the magic: it would declare
 * a 1.1 GB name). Admission: unstamped notifications pass; stamped ones pass a per-sender-session anti-replay window
 * (high-water mark + 4096 bits), one for every transport, so a copy is dropped whichever transport carried it. Each
 * session is bound to the first sender segment that uses it (`claim`), whichever transport carried it.
 *
 * @since 0.1.0
 */
export const makeSeries = (options: SessionTableOptions = {}): DedupShape => {
  const session = newSession()
  let next = 0n
  const table = new SessionTable(options)
  return {
    notifyProto: 1,
    stamp: (peerProto) => (peerProto >= 1 ? { session, seq: ++next } : undefined),
    encode: (buf, offset, n, stamp, peerProto, max) => {
      const failure = n.failure
      if (failure !== undefined && (stamp === undefined || peerProto < FAILURE_PROTO)) return -1
      return stamp !== undefined && peerProto >= 1
        ? stamp.epoch === undefined
          ? CtrlFrame.encodeInto(buf, offset, stamp.session, stamp.seq, n.name, n.msg, max, 0n, 0, failure)
          : CtrlFrame.encodeInto(
              buf,
              offset,
              stamp.session,
              stamp.seq,
              n.name,
              n.msg,
              max,
              stamp.epoch,
              CtrlFrame.FLAG_NEEDS_ACK,
              failure
            )
        : NotifyFrame.encode(buf, offset, n.name, n.msg, max)
    },
    decode: (buf, offset, len, out, known) => {
      if (CtrlFrame.isCtrlFrame(buf, offset, len)) return CtrlFrame.decodeInto(buf, offset, len, out, known)
      out.stamped = false
      out.failureStart = -1
      return NotifyFrame.decode(buf, offset, len, out)
    },
    admit: (_sender, stamp, now) => table.admitStamp(stamp, now),
    claim: (session, sender, end, now) => table.claim(session, sender, end, now),
    // A slot holds a typed frame's header too; the smaller bound holds for raw and typed peers alike.
    maxPayload: CtrlFrame.MAX_PAYLOAD,
    counters: table.counters,
    session
  }
}

/**
 * RFC PR 6 (`Series.Dedup`): {@link makeSeries} with `notification/dedup_*` from the ambient config.
 *
 * @since 0.1.0
 */
export const layer: Layer.Layer<Dedup, ConfigError> = Layer.effect(
  Dedup,
  Effect.map(EngineConfig.dedupConfig, (o) => makeSeries(o))
)
