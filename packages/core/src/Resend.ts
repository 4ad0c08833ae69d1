/**
 * Seam of RFC PR 7 ("resend what a dead notify QP lost"): what happens to notifications that were posted on an
 * endpoint's notify QP and not yet completed when that endpoint's notify channel is disabled or retired.
 *
 * TENT `main` ({@link legacy}): nothing. The sends in flight are flushed (or never acknowledged) and lost: the RFC
 * measured 3743 of 4000 received when the receiver's notify QP was forced to ERR mid-stream, and 500 of 4000 when
 * the sender's channel was disabled. Their send-window units also leak (a failed completion never frees its slot).
 * PR 7's Layer keeps a pending table per endpoint and, on disable/retire, resends from a fiber over other NIC pairs
 * (primary first, ≤ 3 attempts, skipping paused pairs), then other transports and RPC, never to a peer that cannot
 * deduplicate.
 *
 * @since 0.1.0
 */
import type { Notification } from "@tent/rpc"
import { Context, Effect, Layer } from "effect"

/** What the resend policy sees of a retiring endpoint. */
export interface RetiringChannel {
  /** The target segment's name. */
  readonly segment: string
  /** The endpoint's NIC pair. */
  readonly localNic: string
  readonly peerNicPath: string
  /** Notifications posted and not completed, oldest first (empty unless {@link ResendShape.track}). */
  readonly pending: ReadonlyArray<Notification>
}

/** The resend policy. */
export interface ResendShape {
  /** Keep each posted notification until its send completes (the pending table). Legacy: false. */
  readonly track: boolean
  /** Called when an endpoint's notify channel goes away with sends in flight. */
  readonly onRetire: (channel: RetiringChannel) => Effect.Effect<void>
}

/** The resend policy of the notify channel. */
export class Resend extends Context.Tag("@tent/core/Resend")<Resend, ResendShape>() {}

/** TENT `main`: no pending table, no resend. */
export const legacy: ResendShape = { track: false, onRetire: () => Effect.void }

/** {@link legacy} as a Layer. */
export const layerLegacy: Layer.Layer<Resend> = Layer.succeed(Resend, legacy)
