/**
 * `tent send PEER NAME MSG`: starts a short-lived node, sends one notification to the segment `PEER` (a `tent serve`
 * address, `host:port`), waits until the notify SEND is acknowledged, and exits 0; otherwise one line and non-zero.
 * The body (`run/Send.ts`) is loaded when the command runs.
 *
 * @since 0.1.0
 */
import { Args, Command } from "@effect/cli"
import { nodeOptions } from "../Options.js"
import { lazy } from "../Render.js"

export const peerArg = Args.text({ name: "PEER" }).pipe(
  Args.withDescription("the peer's segment name: the host:port `tent serve` printed (for example 127.0.0.1:12001)")
)

export const options = {
  ...nodeOptions,
  peer: peerArg,
  name: Args.text({ name: "NAME" }).pipe(Args.withDescription("the notification's name")),
  msg: Args.text({ name: "MSG" }).pipe(Args.withDescription("the notification's message"))
}

/** What `tent send`'s arguments parse to. */
export type SendOptions = Command.Command.ParseConfig<typeof options>

export const command = Command.make(
  "send",
  options,
  lazy(
    "send",
    () => import("./run/Send.js"),
    (m, o: SendOptions) => m.run(o)
  )
).pipe(
  Command.withDescription(
    "Send one notification (NAME, MSG) to the node PEER (a `tent serve` host:port); exit 0 once it is acknowledged."
  )
)
