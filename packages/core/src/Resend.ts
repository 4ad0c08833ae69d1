/**
 * Seam of RFC PR 7 ("resend what a dead notify QP lost"): what happens to notifications that were posted on an
 * endpoint's notify QP and not yet completed when that endpoint's notify channel is disabled or retired.
 *
 * The engine hands each such channel (a {@link RetiringChannel}: its NIC pair and its pending entries with their
 * stamps) to a queue; one fiber in the engine's scope takes them in order and calls {@link ResendShape.onRetire} with
 * {@link ResendPaths}, through which it can send on a given NIC pair, on another transport, or over the control
 * plane. Nothing runs detached: the fiber stops with the engine.
 *
 * TENT `main` ({@link legacy}): nothing. The sends in flight are flushed (or never acknowledged) and lost: the RFC
 * measured 3743 of 4000 received when the receiver's notify QP was forced to ERR mid-stream, and 500 of 4000 when
 * the sender's channel was disabled. PR 7's Layer tracks each stamped send to a peer that can deduplicate
 * (`track`), and on disable/retire walks the NIC pairs (primary first, ≤ 3 attempts, skipping paused pairs), then
 * the other transports and the control plane.
 *
 * @since 0.1.0
 */
import type { Notification } from "@tent/rpc"
import { Context, Effect, Layer } from "effect"
import type { Stamp } from "./Dedup.js"

/** One notification posted on a notify QP and not completed. */
export interface PendingNotification {
  readonly notification: Notification
  /** The stamp it was framed with (`undefined`: unstamped, the peer cannot deduplicate a resend). */
  readonly stamp: Stamp | undefined
  /** The peer's `notify_proto` when it was posted. */
  readonly peerProto: number
}

/** What the resend policy sees of a channel that went away. */
export interface RetiringChannel {
  /** The target segment's name. */
  readonly segment: string
  /** The endpoint's NIC pair: this side's device and the peer's NIC path. */
  readonly localNic: string
  readonly peerNicPath: string
  /** `retire`: the endpoint is being destroyed; `disable`: its notify channel failed (a failed send completion). */
  readonly cause: "retire" | "disable"
  /** Notifications posted and not completed, oldest first (empty unless {@link ResendShape.track}). */
  readonly pending: ReadonlyArray<PendingNotification>
}

/** Where a resend can go. Each is one attempt and reports its own failure. */
export interface ResendPaths {
  /** Every (local NIC, remote NIC) pair towards `segment`: local devices in order, each with the peer's NICs in order. */
  readonly nicPairs: (
    segment: string
  ) => Effect.Effect<ReadonlyArray<{ readonly localNic: string; readonly peerNic: string }>, unknown>
  /** Posts `n` (framed with `stamp`) on the endpoint from `localNic` to the peer's `peerNic`, set up if needed. */
  readonly viaNicPair: (
    localNic: string,
    peerNic: string,
    segment: string,
    n: Notification,
    stamp: Stamp | undefined
  ) => Effect.Effect<void, unknown>
  /** Sends through the TCP transport, if installed. */
  readonly viaTcp: (segment: string, n: Notification) => Effect.Effect<void, unknown>
  /** Sends with the control plane's `Notify` (always available). */
  readonly viaControlPlane: (segment: string, n: Notification) => Effect.Effect<void, unknown>
}

/** The resend policy. */
export interface ResendShape {
  /** Keep each posted notification until its send completes (the pending table). Legacy: false. */
  readonly track: boolean
  /** Run by the engine's resend fiber for each channel that went away with entries pending. */
  readonly onRetire: (channel: RetiringChannel, paths: ResendPaths) => Effect.Effect<void>
}

/** The resend policy of the notify channel. */
export class Resend extends Context.Tag("@tent/core/Resend")<Resend, ResendShape>() {}

/** TENT `main`: no pending table, no resend. */
export const legacy: ResendShape = { track: false, onRetire: () => Effect.void }

/** {@link legacy} as a Layer. */
export const layerLegacy: Layer.Layer<Resend> = Layer.succeed(Resend, legacy)
