/**
 * What the options every node command shares (`--config`, `--provider`, `--arm`, `--soft-devices`, `--host`,
 * `--device-hosts`) parse to, and what that means: the default SoftVerbs devices, a node's device names and its
 * configuration source. No parser is loaded here: the parser's side of these options is `Options.ts`, and
 * `Argv.readHot` reads the common forms of `tent send` and `tent devices` without it. The names here date from 0.1.0
 * (in `Argv.ts`, and re-exported by `Node.ts` as before).
 *
 * @since 0.2.0
 */
import type { EngineConfig } from "@tent/core"
import * as Option from "effect/Option"
import { type AddressOptions, controlHost } from "./Addresses.js"

/**
 * The SoftVerbs devices a node opens unless `--soft-devices` or `TENT_SOFT_DEVICES` says otherwise.
 *
 * @since 0.1.0
 */
export const defaultSoftDevices = ["soft0", "soft1"] as const

/**
 * `--provider`'s choices, the default first.
 *
 * @since 0.1.0
 */
export const providers = ["soft", "ibverbs"] as const

/**
 * `--arm`'s choices, the default first.
 *
 * @since 0.1.0
 */
export const arms = ["series", "legacy"] as const

/**
 * What the options every node command shares (`--config`, `--provider`, `--arm`, `--soft-devices`, and where it
 * binds: `--host`, `--device-hosts`) parse to.
 *
 * @since 0.1.0
 */
export interface NodeOptions extends AddressOptions {
  readonly config: Option.Option<string>
  readonly provider: (typeof providers)[number]
  readonly arm: (typeof arms)[number]
  readonly softDevices: Option.Option<string>
}

/**
 * The SoftVerbs device names of these options.
 *
 * @since 0.1.0
 */
export const softDeviceNames = (o: Pick<NodeOptions, "softDevices">): ReadonlyArray<string> => {
  const text = Option.getOrElse(o.softDevices, () => process.env.TENT_SOFT_DEVICES ?? defaultSoftDevices.join(","))
  return text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
}

/**
 * The configuration source of these options: the file (if any) and this process's environment; `--host` sets
 * `rpc_server_hostname` over both (as `RPC_SERVER_HOSTNAME` would).
 *
 * @since 0.1.0
 */
export const configSource = (o: Pick<NodeOptions, "config" | "host">): EngineConfig.ConfigSource => {
  const host = controlHost(o)
  const env = host === undefined ? process.env : { ...process.env, RPC_SERVER_HOSTNAME: host }
  return Option.match(o.config, {
    onNone: () => ({ env }),
    onSome: (file) => ({ file, env })
  })
}
