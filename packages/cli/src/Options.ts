/**
 * The options every node command shares (`--config`, `--provider`, `--arm`, `--soft-devices`, `--host`,
 * `--device-hosts`) as @effect/cli options.
 * What they parse to, and what that means (device names, the configuration source), is in `Argv.ts`, which loads no
 * parser: `tent send` and `tent devices` read their common forms without it.
 *
 * @since 0.1.0
 */
import { Options } from "@effect/cli"
import { arms, defaultSoftDevices, providers } from "./Argv.js"

export {
  /**
   * The configuration source of these options: the file (if any) and this process's environment (re-exported from `Argv`).
   *
   * @since 0.1.0
   */
  configSource,
  /**
   * The SoftVerbs devices a node opens unless `--soft-devices` or `TENT_SOFT_DEVICES` says otherwise (re-exported from `Argv`).
   *
   * @since 0.1.0
   */
  defaultSoftDevices,
  /**
   * What the options every node command shares parse to (re-exported from `Argv`).
   *
   * @since 0.1.0
   */
  type NodeOptions,
  /**
   * The SoftVerbs device names of these options (re-exported from `Argv`).
   *
   * @since 0.1.0
   */
  softDeviceNames
} from "./Argv.js"

/**
 * Options every node command shares.
 *
 * @since 0.1.0
 */
export const nodeOptions = {
  config: Options.file("config", { exists: "yes" }).pipe(
    Options.withDescription(
      'TENT transfer-engine.json to read (nested or flat "a/b" keys); environment variables override it (MC_TENT_CONF, RPC_NOTIFY_TIMEOUT_MS, ...)'
    ),
    Options.optional
  ),
  provider: Options.choice("provider", providers).pipe(
    Options.withDescription("verbs provider: soft (SoftVerbs, UDP on 127.0.0.1) or ibverbs (the system libibverbs)"),
    Options.withDefault(providers[0])
  ),
  arm: Options.choice("arm", arms).pipe(
    Options.withDescription(
      "series = the RFC's Layers as built, selected by the config's keys (notification/rpc_fallback, ...); legacy = TENT main's behaviour"
    ),
    Options.withDefault(arms[0])
  ),
  softDevices: Options.text("soft-devices").pipe(
    Options.withDescription(
      `comma-separated SoftVerbs device names (default: TENT_SOFT_DEVICES or ${defaultSoftDevices.join(",")})`
    ),
    Options.optional
  ),
  host: Options.text("host").pipe(
    Options.withDescription(
      "interface the control plane binds (sets rpc_server_hostname; default 127.0.0.1); SoftVerbs devices bind it too unless --device-hosts says otherwise (an IPv4 address; else they bind 127.0.0.1)"
    ),
    Options.optional
  ),
  deviceHosts: Options.text("device-hosts").pipe(
    Options.withDescription(
      "NAME=IPv4,...: the address each SoftVerbs device binds (for example soft0=10.0.0.1,soft1=10.0.1.1: one rail per link); a device not named binds --host"
    ),
    Options.optional
  )
}
