/**
 * Delivery receipts, past the RFC: the seam that turns "`sendNotification` returned ok" into a promise. Every
 * notification `sendNotification` accepted for a peer that offers receipts ends, within
 * `notification/delivery_timeout_ms`, as exactly one of: **receipted** (the peer admitted it at its one delivery
 * point, once), or an {@link Undelivered} event on the sender that names it and says why.
 *
 * On the wire (`notify_proto` 2, negotiated in `Bootstrap`; a peer that does not advertise it sees the RFC's traffic
 * byte for byte): notifications go as CtrlFrame v1 with `NeedsAck` set, `seq` dense per (sender session,
 * destination) and `epoch` = the destination's incarnation; the receiver answers with header-only `CTRL_ACK` frames
 * carrying the cumulative `ack_seq` (after 32 notifications or 1 ms, whichever comes first). Over the control plane
 * the `Notify` reply is the receipt. A receiver refuses anything stamped for another incarnation of itself: a
 * notification meant for a process that died is never delivered to its successor.
 *
 * What a receipt means: the notification passed the receiver's admission (it was handed to its subscribers and
 * queued) — not that the application consumed it.
 *
 * TENT `main` and the RFC's series ({@link legacy}): nothing — no receipts, no `Undelivered`, `notify_proto` ≤ 1.
 *
 * @since 0.2.0
 */
import { randomBytes } from "node:crypto"
import type { NotificationStamp } from "@tent/rpc"
import { Context, Data, Effect, Layer } from "effect"
import type { ConfigError } from "effect/ConfigError"
import * as EngineConfig from "./EngineConfig.js"

/**
 * The `notify_proto` of a peer that offers delivery receipts.
 *
 * @since 0.2.0
 */
export const PROTO = 2

/**
 * Why an accepted notification was not receipted:
 * - `PeerRestarted`: the peer came back as a new incarnation before receipting it (its request state is gone);
 * - `Timeout`: no receipt within `notification/delivery_timeout_ms`;
 * - `NotResendable`: lost with a notify QP and the peer cannot deduplicate a copy (unstamped), so it was not resent;
 * - `Rejected`: the peer answered and refused it (e.g. larger than it takes);
 * - `Unconfirmed`: the peer does not offer receipts and the RFC's resend gave it up (it may or may not have arrived).
 *
 * @since 0.2.0
 */
export type UndeliveredReason = "PeerRestarted" | "Timeout" | "NotResendable" | "Rejected" | "Unconfirmed"

/**
 * Every {@link UndeliveredReason}, in the order the metrics list them.
 *
 * @since 0.2.0
 */
export const REASONS: ReadonlyArray<UndeliveredReason> = [
  "PeerRestarted",
  "Timeout",
  "NotResendable",
  "Rejected",
  "Unconfirmed"
]

/**
 * An accepted notification that will not be receipted: which one (`segment`, `name`, `msg`, `stamp`) and why.
 *
 * @since 0.2.0
 */
export class Undelivered extends Data.TaggedError("Undelivered")<{
  readonly segment: string
  readonly name: Uint8Array
  readonly msg: Uint8Array
  readonly stamp: NotificationStamp | undefined
  readonly reason: UndeliveredReason
  readonly message: string
}> {}

/**
 * The receipts policy and its settings.
 *
 * @since 0.2.0
 */
export interface ReceiptsShape {
  /** Offer and use receipts (`notify_proto` 2). Legacy: false. */
  readonly enabled: boolean
  /** This engine's incarnation: 64 random bits, new each start (0: none). */
  readonly incarnation: bigint
  /** `notification/delivery_timeout_ms`. */
  readonly deliveryTimeoutMs: number
  /** `notification/receipt_resend_ms`. */
  readonly resendAfterMs: number
  /** `notification/max_unreceipted`. */
  readonly maxUnreceipted: number
  /** A receiver acknowledges after this many notifications from one sender... */
  readonly ackEvery: number
  /** ...or this many ms after the first one it has not acknowledged. */
  readonly ackDelayMs: number
  /** The longest a `sendNotification` call to a peer that offers receipts waits before the ledger takes over (ms). */
  readonly acceptWithinMs: number
  /**
   * A receipt owed to a peer rides the next notification to it, in the same SEND (`notify_ack_carry`, offered and
   * used); false: every receipt is a `CTRL_ACK` of its own. Since 0.4.0.
   */
  readonly carryAcks: boolean
}

/**
 * The receipts policy.
 *
 * @since 0.2.0
 */
export class Receipts extends Context.Tag("@tent/core/Receipts")<Receipts, ReceiptsShape>() {}

/**
 * Defaults of the settings (the keys' defaults, and the ack pacing measured for the engine bench).
 *
 * @since 0.2.0
 */
export const defaults = {
  deliveryTimeoutMs: 45_000,
  resendAfterMs: 1000,
  maxUnreceipted: 65_536,
  ackEvery: 32,
  ackDelayMs: 1,
  acceptWithinMs: 900,
  carryAcks: true
} as const

/**
 * TENT `main` and the RFC's series: no receipts.
 *
 * @since 0.2.0
 */
export const legacy: ReceiptsShape = { enabled: false, incarnation: 0n, ...defaults }

/**
 * {@link legacy} as a Layer.
 *
 * @since 0.2.0
 */
export const layerLegacy: Layer.Layer<Receipts> = Layer.succeed(Receipts, legacy)

/** A new incarnation: 64 random bits, never 0. */
const newIncarnation = (): bigint => {
  for (;;) {
    const v = randomBytes(8).readBigUInt64LE(0)
    if (v !== 0n) return v
  }
}

/**
 * Receipts on, with `settings` over the defaults, and a new incarnation.
 *
 * @since 0.2.0
 */
export const make = (settings: Partial<Omit<ReceiptsShape, "enabled" | "incarnation">> = {}): ReceiptsShape => ({
  ...defaults,
  ...settings,
  enabled: true,
  incarnation: newIncarnation()
})

/**
 * Receipts on (`Series.Receipts`), with `notification/delivery_timeout_ms`, `receipt_resend_ms`, `max_unreceipted`.
 *
 * @since 0.2.0
 */
export const layer: Layer.Layer<Receipts, ConfigError> = Layer.effect(
  Receipts,
  Effect.map(EngineConfig.receiptsConfig, (s) => make(s))
)
