/**
 * One engine node for the ad hoc commands (`serve`, `send`, `recv`, `transfer`): `TransferEngine.layer` over the
 * chosen verbs provider (two SoftVerbs devices on 127.0.0.1 by default), the RFC's series as the configuration selects
 * it (`Series.fromConfig`: `notification/rpc_fallback`, …) or, with `--arm legacy`, TENT `main`'s (`Series.legacy`),
 * `RailHealth` from the same configuration, and the configuration itself from `--config FILE` (TENT's
 * `transfer-engine.json`) and the environment (`MC_TENT_CONF`, TENT's `MC_*` variables, every key in constant case).
 *
 * @since 0.1.0
 */
import { Options } from "@effect/cli"
import { Diagnostics, EngineConfig, Series, TransferEngine } from "@tent/core"
import { RailHealth } from "@tent/health"
import { Ibverbs, SoftVerbs, type Verbs } from "@tent/verbs"
import { Context, Effect, Layer, Option, type Scope } from "effect"

/** The SoftVerbs devices a node opens unless `--soft-devices` or `TENT_SOFT_DEVICES` says otherwise. */
export const defaultSoftDevices = ["soft0", "soft1"] as const

/** Options every node command shares. */
export const nodeOptions = {
  config: Options.file("config", { exists: "yes" }).pipe(
    Options.withDescription(
      'TENT transfer-engine.json to read (nested or flat "a/b" keys); environment variables override it (MC_TENT_CONF, RPC_NOTIFY_TIMEOUT_MS, ...)'
    ),
    Options.optional
  ),
  provider: Options.choice("provider", ["soft", "ibverbs"]).pipe(
    Options.withDescription("verbs provider: soft (SoftVerbs, UDP on 127.0.0.1) or ibverbs (the system libibverbs)"),
    Options.withDefault("soft" as const)
  ),
  arm: Options.choice("arm", ["series", "legacy"]).pipe(
    Options.withDescription(
      "series = the RFC's Layers as built, selected by the config's keys (notification/rpc_fallback, ...); legacy = TENT main's behaviour"
    ),
    Options.withDefault("series" as const)
  ),
  softDevices: Options.text("soft-devices").pipe(
    Options.withDescription(
      `comma-separated SoftVerbs device names (default: TENT_SOFT_DEVICES or ${defaultSoftDevices.join(",")})`
    ),
    Options.optional
  )
}

/** What {@link nodeOptions} parse to. */
export interface NodeOptions {
  readonly config: Option.Option<string>
  readonly provider: "soft" | "ibverbs"
  readonly arm: "series" | "legacy"
  readonly softDevices: Option.Option<string>
}

/** The SoftVerbs device names of these options. */
export const softDeviceNames = (o: Pick<NodeOptions, "softDevices">): ReadonlyArray<string> => {
  const text = Option.getOrElse(o.softDevices, () => process.env.TENT_SOFT_DEVICES ?? defaultSoftDevices.join(","))
  return text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
}

/** The configuration source of these options: the file (if any) and this process's environment. */
export const configSource = (o: Pick<NodeOptions, "config">): EngineConfig.ConfigSource =>
  Option.match(o.config, {
    onNone: () => ({ env: process.env }),
    onSome: (file) => ({ file, env: process.env })
  })

/** The verbs provider of these options. */
export const verbsLayer = (o: NodeOptions): Layer.Layer<Verbs, import("@tent/verbs").RdmaError> =>
  o.provider === "ibverbs"
    ? Ibverbs.layerConfig()
    : Layer.map(SoftVerbs.layer({ devices: softDeviceNames(o).map((name) => ({ name, host: "127.0.0.1" })) }), (c) =>
        Context.omit(SoftVerbs.SoftVerbsControl)(c)
      )

/** A node: its engine and the engine's `Diagnostics`. */
export interface EngineNode {
  readonly engine: TransferEngine.TransferEngineShape
  readonly diagnostics: Diagnostics.DiagnosticsShape
}

/** Builds the node's engine (and its `Diagnostics`) in the current scope. */
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

/** Builds the node's engine in the current scope. */
export const makeEngine = (o: NodeOptions): Effect.Effect<TransferEngine.TransferEngineShape, unknown, Scope.Scope> =>
  Effect.map(makeNode(o), (n) => n.engine)
