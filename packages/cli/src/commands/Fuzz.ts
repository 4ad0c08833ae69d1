/**
 * `tent fuzz`: hostile inputs at every decoder of a node, over real sockets, each victim in a child process: raw bytes
 * to a served control-plane port (`rpc-frames`), typed and raw notify records into a real engine's notify-QP receive
 * slots (`notify-slots`), SoftVerbs datagrams from a connected peer's own address (`softverbs`); a real client served
 * throughout. The body (`run/Fuzz.ts`) is loaded when the command runs.
 *
 * @since 0.3.0
 */
import { Command } from "@effect/cli"
import { type FuzzOptions, fuzzOptions } from "../Options.js"
import { lazy } from "../Render.js"

/**
 * The `tent fuzz` command; its options are `Options.fuzzOptions`.
 *
 * @since 0.3.0
 */
export const command = Command.make(
  "fuzz",
  fuzzOptions,
  lazy(
    "fuzz",
    () => import("./run/Fuzz.js"),
    (m, o: FuzzOptions) => m.run(o)
  )
).pipe(
  Command.withDescription(
    "Fuzz every decoder of a node over real sockets with a seed: --count inputs per target (control-plane frames, notify-slot records, SoftVerbs datagrams) while a real client is served; fails on a crash, a handler error, RSS growth of 64 MiB or a byte changed that no accepted write asked for."
  )
)
