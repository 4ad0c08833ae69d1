/**
 * The options every node command shares (`--config`, `--provider`, `--arm`, `--soft-devices`) and what they parse
 * to. Light on purpose: the command line's parser and help load this module and not the engine (`Node.ts` builds the
 * engine once a command runs).
 *
 * @since 0.1.0
 */
import { Options } from "@effect/cli"
import type { EngineConfig } from "@tent/core"
import { Option } from "effect"

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
