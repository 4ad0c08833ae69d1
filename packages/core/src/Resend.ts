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
import { RailHealth } from "@tent/health"
import { type Notification, TransportFailure } from "@tent/rpc"
import { Context, Effect, Either, Layer } from "effect"
import type { ConfigError } from "effect/ConfigError"
import type { Stamp } from "./Dedup.js"
import * as Metrics from "./Metrics.js"

/**
 * One notification posted on a notify QP and not completed.
 *
 * @since 0.1.0
 */
export interface PendingNotification {
  readonly notification: Notification
  /** The stamp it was framed with (`undefined`: unstamped, the peer cannot deduplicate a resend). */
  readonly stamp: Stamp | undefined
  /** The peer's `notify_proto` when it was posted. */
  readonly peerProto: number
}

/**
 * What the resend policy sees of a channel that went away.
 *
 * @since 0.1.0
 */
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

/**
 * Where a resend can go. Each is one attempt and reports its own failure.
 *
 * @since 0.1.0
 */
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
  /**
   * Tells the application about an entry the policy gave up (with delivery receipts on: an `Undelivered` event,
   * `NotResendable` or `Unconfirmed`); absent or a no-op otherwise.
   */
  readonly giveUp?: (segment: string, p: PendingNotification, reason: "NotResendable" | "Unconfirmed") => void
}

/**
 * What a resend policy did, as plain numbers (RFC PR 7).
 *
 * @since 0.1.0
 */
export interface ResendCounters {
  /** Channels handed over with entries pending. */
  channels: number
  /** Entries resent, by the path that took them. */
  viaNicPair: number
  viaTcp: number
  viaControlPlane: number
  /** Entries no path took (lost, and counted). */
  failed: number
  /** Entries not resent because the peer cannot deduplicate them (unstamped: a resend could deliver twice). */
  notResendable: number
  /** NIC-pair attempts, and those skipped because the notification-path health table had the pair paused. */
  pairAttempts: number
  pairsSkipped: number
}

/**
 * The resend policy.
 *
 * @since 0.1.0
 */
export interface ResendShape {
  /** Keep each posted notification until its send completes (the pending table). Legacy: false. */
  readonly track: boolean
  /** Run by the engine's resend fiber for each channel that went away with entries pending. */
  readonly onRetire: (channel: RetiringChannel, paths: ResendPaths) => Effect.Effect<void>
  /** What it did; legacy: none. */
  readonly counters?: ResendCounters | undefined
}

/**
 * The resend policy of the notify channel.
 *
 * @since 0.1.0
 */
export class Resend extends Context.Tag("@tent/core/Resend")<Resend, ResendShape>() {}

/**
 * TENT `main`: no pending table, no resend.
 *
 * @since 0.1.0
 */
export const legacy: ResendShape = { track: false, onRetire: () => Effect.void }

/**
 * {@link legacy} as a Layer.
 *
 * @since 0.1.0
 */
export const layerLegacy: Layer.Layer<Resend> = Layer.succeed(Resend, legacy)

/**
 * NIC pairs tried per notification before the other transports (RFC PR 7: up to three attempts).
 *
 * @since 0.1.0
 */
export const MAX_PAIR_ATTEMPTS = 3

/**
 * RFC PR 7 over a notification-path health table of its own (`RailHealth`'s rules and `transports/rdma/rail_*` keys,
 * its own state): `track` keeps every posted notification until its send completes; for a channel that went away,
 * each pending entry the peer can deduplicate (stamped, `notify_proto` ≥ 1: PR 6) is sent again with its first stamp
 * — on the NIC pairs, primary first, skipping pairs the table has paused, up to {@link MAX_PAIR_ATTEMPTS} attempts
 * (a failed pair is charged to the table, a delivered one cleared), then over TCP, then with the control plane's
 * `Notify`. A control plane that failed at transport level is not tried again for the rest of the channel (no second
 * RPC wait: PR 4's record would fail it anyway). An unstamped entry is never resent (the peer would deliver a copy);
 * it is counted as not resendable.
 *
 * @since 0.1.0
 */
export const makeSeries = (rails: RailHealth.RailHealthShape): ResendShape => {
  const counters: ResendCounters = {
    channels: 0,
    viaNicPair: 0,
    viaTcp: 0,
    viaControlPlane: 0,
    failed: 0,
    notResendable: 0,
    pairAttempts: 0,
    pairsSkipped: 0
  }
  const pairAttempt = (
    pair: { readonly localNic: string; readonly peerNic: string },
    outcome: "sent" | "failed" | "skipped"
  ): void => Metrics.resendPairAttempts.child(pair.localNic, pair.peerNic, outcome).update(1)
  const resendOne = (
    channel: RetiringChannel,
    paths: ResendPaths,
    pairs: ReadonlyArray<{ readonly localNic: string; readonly peerNic: string }>,
    p: PendingNotification,
    control: { dead: boolean }
  ): Effect.Effect<void> =>
    Effect.gen(function* () {
      const stamp = p.stamp
      if (stamp === undefined || p.peerProto < 1) {
        counters.notResendable++
        Metrics.resent.notResendable.update(1, channel.segment)
        paths.giveUp?.(channel.segment, p, "NotResendable")
        return
      }
      let attempts = 0
      for (const pair of pairs) {
        if (attempts >= MAX_PAIR_ATTEMPTS) break
        if (!(yield* rails.available(pair.localNic, pair.peerNic))) {
          counters.pairsSkipped++
          pairAttempt(pair, "skipped")
          continue
        }
        attempts++
        counters.pairAttempts++
        const r = yield* Effect.either(
          paths.viaNicPair(pair.localNic, pair.peerNic, channel.segment, p.notification, stamp)
        )
        if (Either.isRight(r)) {
          counters.viaNicPair++
          pairAttempt(pair, "sent")
          Metrics.resent.rdma.update(1, channel.segment)
          yield* rails.recordSuccess(pair.localNic, pair.peerNic)
          return
        }
        pairAttempt(pair, "failed")
        yield* rails.recordError(pair.localNic, pair.peerNic)
      }
      if (control.dead) {
        counters.failed++
        Metrics.resent.failed.update(1, channel.segment)
        paths.giveUp?.(channel.segment, p, "Unconfirmed")
        return
      }
      const stamped = { ...p.notification, stamp }
      const tcp = yield* Effect.either(paths.viaTcp(channel.segment, stamped))
      if (Either.isRight(tcp)) {
        counters.viaTcp++
        Metrics.resent.tcp.update(1, channel.segment)
        return
      }
      if (tcp.left instanceof TransportFailure) {
        control.dead = true
        counters.failed++
        Metrics.resent.failed.update(1, channel.segment)
        paths.giveUp?.(channel.segment, p, "Unconfirmed")
        return
      }
      const rpc = yield* Effect.either(paths.viaControlPlane(channel.segment, stamped))
      if (Either.isRight(rpc)) {
        counters.viaControlPlane++
        Metrics.resent.rpc.update(1, channel.segment)
        return
      }
      if (rpc.left instanceof TransportFailure) control.dead = true
      counters.failed++
      Metrics.resent.failed.update(1, channel.segment)
      paths.giveUp?.(channel.segment, p, "Unconfirmed")
    })
  return {
    track: true,
    counters,
    onRetire: (channel, paths) =>
      Effect.gen(function* () {
        if (channel.pending.length === 0) return
        counters.channels++
        Metrics.resendChannel.update(1)
        const pairs = yield* Effect.orElseSucceed(paths.nicPairs(channel.segment), () => [])
        const control = { dead: false }
        const failedBefore = counters.failed + counters.notResendable
        for (const p of channel.pending) yield* resendOne(channel, paths, pairs, p, control)
        const gaveUp = counters.failed + counters.notResendable - failedBefore
        yield* Effect.logDebug(
          `Resend of the ${channel.pending.length} notifications pending on ${channel.localNic} -> ${channel.peerNicPath} (${channel.cause}): ${channel.pending.length - gaveUp} resent, ${gaveUp} given up`
        )
      }).pipe(
        Effect.withSpan("tent.resend.walk", {
          attributes: {
            peer: channel.segment,
            local: channel.localNic,
            peerNicPath: channel.peerNicPath,
            cause: channel.cause,
            pending: channel.pending.length
          }
        })
      )
  }
}

/**
 * RFC PR 7 (`Series.Resend`): {@link makeSeries} over a notification-path `RailHealth` from `transports/rdma/rail_*`.
 *
 * @since 0.1.0
 */
export const layer: Layer.Layer<Resend, ConfigError> = Layer.effect(
  Resend,
  Effect.map(Effect.flatMap(RailHealth.config, RailHealth.make), makeSeries)
)
