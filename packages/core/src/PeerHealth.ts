/**
 * Seam of RFC PR 4 ("remember dead peers"): whether a control-plane call to a peer may be attempted at all, what its
 * outcome teaches, and how long a sender may wait for a free notify send slot.
 *
 * TENT `main` ({@link legacy}) has no memory of dead peers: every call to a frozen peer waits its full timeout again
 * (the RFC measured 30.011 s then 30.001 s for two `sendNotification`s), and the wait for a free send slot is
 * unbounded (59.289 s blocked when the peer froze mid-stream). PR 4's Layer (backed by `PeerHealth` in
 * `@tent/health`) keeps an unreachable-peer cache (5 s doubling to 60 s) with a 1 s prober, fails such calls fast,
 * tells "refused" from "unanswered", and bounds the slot wait at 1 s.
 *
 * @since 0.1.0
 */
import type { TransportFailure } from "@tent/rpc"
import { Context, type Duration, Effect, Layer } from "effect"

/** The dead-peer policy of the engine's control-plane calls and notify send window. */
export interface PeerHealthPolicyShape {
  /** Before a control-plane call to `address`: fail fast with a `TransportFailure`, or let it through. */
  readonly admit: (address: string) => Effect.Effect<void, TransportFailure>
  /** After a control-plane call to `address`: its outcome (`undefined` = answered). */
  readonly record: (address: string, failure: TransportFailure | undefined) => Effect.Effect<void>
  /** The longest wait for a free notify send slot; `undefined` = unbounded. */
  readonly slotWait: Duration.Duration | undefined
}

/** The peer health policy (RFC PR 4's seam). */
export class PeerHealthPolicy extends Context.Tag("@tent/core/PeerHealthPolicy")<
  PeerHealthPolicy,
  PeerHealthPolicyShape
>() {}

/** TENT `main`: no memory of dead peers, no bound on the slot wait. */
export const legacy: PeerHealthPolicyShape = {
  admit: () => Effect.void,
  record: () => Effect.void,
  slotWait: undefined
}

/** {@link legacy} as a Layer. */
export const layerLegacy: Layer.Layer<PeerHealthPolicy> = Layer.succeed(PeerHealthPolicy, legacy)
