/**
 * One engine node for the ad hoc commands (`serve`, `send`, `recv`, `transfer`): `TransferEngine.layer` over the
 * chosen verbs provider (two SoftVerbs devices on 127.0.0.1 by default; `--host` and `--device-hosts` choose where the
 * control plane and each device bind, `Addresses.ts`), the RFC's series as the configuration selects
 * it (`Series.fromConfig`: `notification/rpc_fallback`, …) or, with `--arm legacy`, TENT `main`'s (`Series.legacy`),
 * `RailHealth` from the same configuration, and the configuration itself from `--config FILE` (TENT's
 * `transfer-engine.json`) and the environment (`MC_TENT_CONF`, TENT's `MC_*` variables, every key in constant case).
 *
 * @since 0.1.0
 */
import { Diagnostics, EngineConfig, Series, TransferEngine } from "@tent/core"
import { RailHealth } from "@tent/health"
import { parseAddress } from "@tent/rpc"
import { Ibverbs, SoftVerbs, type Verbs } from "@tent/verbs"
import { type ConfigError, Context, Effect, Layer, type Scope } from "effect"
import { deviceAddresses } from "./Addresses.js"
import { configSource, type NodeOptions, softDeviceNames } from "./NodeOptions.js"
import { UsageFailure } from "./Render.js"

export {
  /**
   * The configuration source of these options: the file (if any) and this process's environment (re-exported from `NodeOptions`).
   *
   * @since 0.1.0
   */
  configSource,
  /**
   * The SoftVerbs devices a node opens unless `--soft-devices` or `TENT_SOFT_DEVICES` says otherwise (re-exported from `NodeOptions`).
   *
   * @since 0.1.0
   */
  defaultSoftDevices,
  /**
   * What the options every node command shares parse to (re-exported from `NodeOptions`).
   *
   * @since 0.1.0
   */
  type NodeOptions,
  /**
   * The SoftVerbs device names of these options (re-exported from `NodeOptions`).
   *
   * @since 0.1.0
   */
  softDeviceNames
} from "./NodeOptions.js"

/**
 * The verbs provider of these options. SoftVerbs devices bind `--device-hosts`' addresses, else the control plane's
 * host (`--host`, or the configuration's `rpc_server_hostname`) when it is an IPv4 address, else 127.0.0.1.
 *
 * @since 0.1.0
 */
export const verbsLayer = (
  o: NodeOptions
): Layer.Layer<Verbs, import("@tent/verbs").RdmaError | UsageFailure | ConfigError.ConfigError> =>
  o.provider === "ibverbs"
    ? Ibverbs.layerConfig()
    : Layer.unwrapEffect(
        Effect.gen(function* () {
          const settings = yield* Effect.provide(EngineConfig.EngineConfig, EngineConfig.layer(configSource(o)))
          const devices = deviceAddresses(softDeviceNames(o), o, settings.rpcServerHostname)
          if (typeof devices === "string") return yield* Effect.fail(new UsageFailure(devices))
          return Layer.map(SoftVerbs.layer({ devices }), (c) => Context.omit(SoftVerbs.SoftVerbsControl)(c))
        })
      )

/**
 * A node: its engine and the engine's `Diagnostics`.
 *
 * @since 0.1.0
 */
export interface EngineNode {
  readonly engine: TransferEngine.TransferEngineShape
  readonly diagnostics: Diagnostics.DiagnosticsShape
}

/**
 * Builds the node's engine (and its `Diagnostics`) in the current scope.
 *
 * @since 0.1.0
 */
export const makeNode = (o: NodeOptions): Effect.Effect<EngineNode, unknown, Scope.Scope> =>
  TransferEngine.layer.pipe(
    Layer.provide([verbsLayer(o), o.arm === "legacy" ? Series.legacy : Series.fromConfig]),
    Layer.provide(RailHealth.layerConfig),
    Layer.provide(EngineConfig.layerProvider(configSource(o))),
    Layer.build,
    Effect.map((ctx) => ({
      engine: Context.get(ctx, TransferEngine.TransferEngine),
      diagnostics: Context.get(ctx, Diagnostics.Diagnostics)
    }))
  )

/**
 * Builds the node's engine in the current scope.
 *
 * @since 0.1.0
 */
export const makeEngine = (o: NodeOptions): Effect.Effect<TransferEngine.TransferEngineShape, unknown, Scope.Scope> =>
  Effect.map(makeNode(o), (n) => n.engine)

/**
 * Refuses, before any node starts, a peer that cannot be one: under the peer registry (`metadata_type` `p2p`, the
 * default) a segment's name is its node's `host:port`; under a central registry (`redis`) any name goes. A `host:port`
 * is a peer under either, so only another name reads the configuration here (the node reads it when it starts).
 *
 * @since 0.1.0
 */
export const checkPeer = (o: NodeOptions, peer: string): Effect.Effect<void, UsageFailure | ConfigError.ConfigError> =>
  parseAddress(peer) !== undefined
    ? Effect.void
    : Effect.flatMap(Effect.provide(EngineConfig.EngineConfig, EngineConfig.layer(configSource(o))), (settings) =>
        settings.metadataType === "p2p"
          ? Effect.fail(
              new UsageFailure(
                `${JSON.stringify(peer)} is not a peer address: under metadata_type p2p a peer is the host:port that \`tent serve\` printed (for example 127.0.0.1:12001, or [::1]:12001)`
              )
            )
          : Effect.void
      )
