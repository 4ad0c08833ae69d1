/**
 * `tent devices`: the Ibverbs devices of this host (or why there are none: `DeviceNotFound`'s reason) and the
 * SoftVerbs devices a node would open with the current configuration (`--soft-devices`, then TENT's
 * `topology/rdma_whitelist` / `rdma_blacklist` filters).
 * The body (`run/Devices.ts`) is loaded when the command runs.
 *
 * @since 0.1.0
 */
import { Command, Options } from "@effect/cli"
import { nodeOptions } from "../Options.js"
import { lazy } from "../Render.js"

const json = Options.boolean("json").pipe(Options.withDescription("print one JSON object instead of text"))

export const options = { config: nodeOptions.config, softDevices: nodeOptions.softDevices, json }

/** What `tent devices`'s arguments parse to. */
export type DevicesOptions = Command.Command.ParseConfig<typeof options>

export const command = Command.make(
  "devices",
  options,
  lazy(
    "devices",
    () => import("./run/Devices.js"),
    (m, o: DevicesOptions) => m.run(o)
  )
).pipe(
  Command.withDescription(
    "List the Ibverbs devices of this host (or why there are none) and the SoftVerbs devices a node would open with the current configuration."
  )
)
