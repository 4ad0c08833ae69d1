/**
 * `tent devices`: the Ibverbs devices of this host (or why there are none: `DeviceNotFound`'s reason) and the
 * SoftVerbs devices a node would open with the current configuration (`--soft-devices`, then TENT's
 * `topology/rdma_whitelist` / `rdma_blacklist` filters).
 * The body (`run/Devices.ts`) is loaded when the command runs.
 *
 * @since 0.1.0
 */
import { Command } from "@effect/cli"
import { type DevicesOptions, devicesOptions } from "../Options.js"
import { lazy } from "../Render.js"

/**
 * The `tent devices` command; its options are `Options.devicesOptions`.
 *
 * @since 0.1.0
 */
export const command = Command.make(
  "devices",
  devicesOptions,
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
