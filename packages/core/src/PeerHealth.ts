/**
 * Seam of RFC PR 4 ("remember dead peers"): a decoration of the engine's control-plane agent — so every
 * control-plane call (`Bootstrap`, `Notify`, `GetSegmentDesc`, `Probe`, `SendData`, `RecvData`) passes it, from
 * whichever part of the engine makes it — and how long a sender may wait for a free notify send slot.
 *
 * The engine builds one `RpcAgent` (the `RpcAgent` service, undecorated: a prober uses it to reach marked peers) and
 * calls every peer through `decorate(agent)`. The policy's Layer may itself need `RpcAgent` and fork its prober in
 * its own scope.
 *
 * TENT `main` ({@link legacy}) has no memory of dead peers: every call to a frozen peer waits its full timeout again
 * (the RFC measured 30.011 s then 30.001 s for two `sendNotification`s), and the wait for a free send slot is
 * unbounded (59.289 s blocked when the peer froze mid-stream). PR 4's Layer (backed by `PeerHealth` in
 * `@tent/health`) keeps an unreachable-peer cache (5 s doubling to 60 s) with a 1 s prober, fails such calls fast,
 * tells "refused" from "unanswered", and bounds the slot wait at 1 s.
 *
 * @since 0.1.0
 */
import { PeerHealth as HealthRecord } from "@tent/health"
import { RpcAgent, RpcConfig } from "@tent/rpc"
import { Context, Duration, Effect, Layer, type Scope } from "effect"
import type { ConfigError } from "effect/ConfigError"

/**
 * The dead-peer policy of the engine's control-plane calls and notify send window.
 *
 * @since 0.1.0
 */
export interface PeerHealthPolicyShape {
  /** The agent the engine calls peers through, made from the plain one. Legacy: the plain agent itself. */
  readonly decorate: (agent: RpcAgent.RpcAgentShape) => RpcAgent.RpcAgentShape
  /** The longest wait for a free notify send slot; `undefined` = unbounded. */
  readonly slotWait: Duration.Duration | undefined
  /**
   * Whether the peer at this RPC address is known unreachable now: a sender whose notify window towards it is full
   * does not wait for a slot at all (its fallback fails fast too). Legacy: never.
   */
  readonly unreachable: (address: string) => boolean
  /**
   * Run once by the engine, in its scope, with the plain (undecorated) agent: where a policy forks its prober.
   * Legacy: nothing.
   */
  readonly start: (plain: RpcAgent.RpcAgentShape) => Effect.Effect<void, never, Scope.Scope>
  /**
   * Whether a slice whose bootstrap got no answer (`TransportFailure`) is charged to its NIC pair in `RailHealth`
   * when it gives up, as TENT's `disableEndpoint` does (legacy: true). PR 4: false — failing fast on a dead peer
   * would otherwise trip a healthy pair into a cooldown of minutes. A refused bootstrap (the peer answered) is
   * charged either way.
   */
  readonly chargeUnansweredBootstrap: boolean
  /**
   * Whether a slice whose endpoint is not READY bootstraps on the transfer worker that took it, as TENT's
   * `Workers::getEndpoint` does (legacy: true): the worker waits the whole bootstrap, so one frozen peer holds it, and
   * every slice queued behind it (to any peer) waits out that peer's timeout. PR 4 (and beyond the RFC): false — the
   * bootstrap and the post run in a fiber of their own and the worker takes its next slice at once (a frozen peer
   * costs the others nothing; one endpoint is still bootstrapped once, however many slices wait on it).
   */
  readonly bootstrapOnWorker: boolean
  /** The policy's live counters, for tools and tests (`Diagnostics.counters.peerHealth`); legacy: none. */
  readonly metrics: HealthRecord.PeerHealthMetrics | undefined
}

/**
 * The peer health policy (RFC PR 4's seam).
 *
 * @since 0.1.0
 */
export class PeerHealthPolicy extends Context.Tag("@tent/core/PeerHealthPolicy")<
  PeerHealthPolicy,
  PeerHealthPolicyShape
>() {}

/**
 * TENT `main`: no memory of dead peers, no bound on the slot wait.
 *
 * @since 0.1.0
 */
export const legacy: PeerHealthPolicyShape = {
  decorate: (agent) => agent,
  slotWait: undefined,
  unreachable: () => false,
  start: () => Effect.void,
  chargeUnansweredBootstrap: true,
  bootstrapOnWorker: true,
  metrics: undefined
}

/**
 * {@link legacy} as a Layer.
 *
 * @since 0.1.0
 */
export const layerLegacy: Layer.Layer<PeerHealthPolicy> = Layer.succeed(PeerHealthPolicy, legacy)

/**
 * RFC PR 4 over a `PeerHealth` record of `@tent/health`: every control-plane call of the engine passes the record
 * (`RpcAgent.decorate`: a marked peer's calls fail at once, a transport-level failure marks, any reply clears); the
 * prober (`start`) re-checks marked peers every `peer_health/probe_interval_ms` with the plain agent's `Probe`
 * bounded by `rpc/probe_timeout_ms`; the wait for a notify send slot is bounded at 1 s, and skipped while the peer is
 * marked (then PR 3's fallback, which fails fast too: the RFC's "31 s once, then 0 s"); an unanswered bootstrap is
 * not charged to the NIC pair; a slice's bootstrap runs off the transfer worker, so a frozen peer's timeout holds no
 * worker that other peers' slices wait on.
 *
 * @since 0.1.0
 */
export const fromRecord = (record: HealthRecord.PeerHealthShape, probeTimeoutMs: number): PeerHealthPolicyShape => ({
  decorate: (agent) => RpcAgent.decorate(agent, record),
  slotWait: Duration.seconds(1),
  unreachable: record.unreachable,
  start: (plain) =>
    Effect.asVoid(
      Effect.forkScoped(
        record.runProber((address) => plain.probe(address, { timeout: Duration.millis(probeTimeoutMs) }))
      )
    ),
  chargeUnansweredBootstrap: false,
  bootstrapOnWorker: false,
  metrics: record.metrics
})

/**
 * RFC PR 4 (`Series.PeerHealth`): a record built from `peer_health/*` and `rpc/probe_timeout_ms` of the ambient config.
 *
 * @since 0.1.0
 */
export const layer: Layer.Layer<PeerHealthPolicy, ConfigError> = Layer.effect(
  PeerHealthPolicy,
  Effect.gen(function* () {
    const options = yield* HealthRecord.config
    const rpc = yield* RpcConfig.config
    const record = yield* HealthRecord.make(options)
    return fromRecord(record, rpc.probeTimeoutMs ?? RpcConfig.defaults.probe_timeout_ms)
  })
)
