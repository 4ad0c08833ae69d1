/**
 * The body of `tent devices` (loaded when the command runs).
 *
 * @since 0.1.0
 */
import { EngineConfig } from "@tent/core"
import { Ibverbs } from "@tent/verbs"
import { Console, Effect, Option } from "effect"
import { configSource, softDeviceNames } from "../../NodeOptions.js"
import type { DevicesOptions } from "../../Options.js"
import { describe, failWith } from "../../Render.js"

export const run = (o: DevicesOptions) =>
  Effect.gen(function* () {
    const verbs = yield* Ibverbs.make()
    const hw = yield* Effect.either(verbs.getDeviceList)
    const settings = yield* Effect.provide(
      EngineConfig.EngineConfig,
      EngineConfig.layer(configSource({ config: o.config }))
    )
    const soft = softDeviceNames(o).map((name) => {
      const excluded =
        settings.whitelist.length > 0 && !settings.whitelist.includes(name)
          ? "not in topology/rdma_whitelist"
          : settings.blacklist.includes(name)
            ? "in topology/rdma_blacklist"
            : undefined
      return { name, address: "127.0.0.1:<any free UDP port>", opened: excluded === undefined, excluded }
    })
    if (o.json) {
      const ibverbs =
        hw._tag === "Right"
          ? { devices: hw.right.map((d) => ({ name: d.name, guid: d.guid })) }
          : { devices: [], reason: hw.left.reason ?? null, message: hw.left.message }
      yield* Console.log(JSON.stringify({ ibverbs, soft }))
      return
    }
    yield* Console.log("Ibverbs (system libibverbs):")
    if (hw._tag === "Right") {
      if (hw.right.length === 0) yield* Console.log("  none")
      for (const d of hw.right) yield* Console.log(`  ${d.name}  guid ${d.guid}`)
    } else {
      yield* Console.log(`  none: ${describe(hw.left)}`)
    }
    yield* Console.log(
      `SoftVerbs (${Option.isSome(o.softDevices) ? "--soft-devices" : process.env.TENT_SOFT_DEVICES ? "TENT_SOFT_DEVICES" : "default"}):`
    )
    for (const d of soft) {
      yield* Console.log(`  ${d.name}  ${d.opened ? `would open, UDP ${d.address}` : `skipped: ${d.excluded}`}`)
    }
  }).pipe(failWith("devices"))
