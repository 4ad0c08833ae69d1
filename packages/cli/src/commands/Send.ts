/**
 * `tent send PEER NAME MSG`: starts a short-lived node, sends one notification to the segment `PEER` (a `tent serve`
 * address, `host:port`), waits until the notify SEND is acknowledged, and exits 0; otherwise one line and non-zero.
 * The body (`run/Send.ts`) is loaded when the command runs.
 *
 * @since 0.1.0
 */
import { Command } from "@effect/cli"
import { type SendOptions, sendOptions } from "../Options.js"
import { lazy } from "../Render.js"

const body = lazy(
  "send",
  () => import("./run/Send.js"),
  (m, o: SendOptions) => m.run(o)
)
const toMooncake = lazy(
  "send",
  () => import("./run/Mooncake.js"),
  (m, o: SendOptions) => m.send(o)
)

/**
 * The `tent send` command; its options are `Options.sendOptions`.
 *
 * @since 0.1.0
 */
export const command = Command.make("send", sendOptions, (o) => (o.mooncake ? toMooncake(o) : body(o))).pipe(
  Command.withDescription(
    "Send one notification (NAME, MSG) to the node PEER (a `tent serve` host:port; with --mooncake a Mooncake TENT node); exit 0 once it is receipted or acknowledged."
  )
)
