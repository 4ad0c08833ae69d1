/**
 * `tent recv`: starts a node, prints its address, waits for `--count` notifications (at most `--timeout` seconds),
 * prints each, and exits 0; a timeout is one line and a non-zero exit. The body (`run/Recv.ts`) is loaded when the
 * command runs.
 *
 * @since 0.1.0
 */
import { Command, Options } from "@effect/cli"
import { nodeOptions } from "../Options.js"
import { lazy } from "../Render.js"

export const options = {
  ...nodeOptions,
  count: Options.integer("count").pipe(
    Options.withDescription("notifications to wait for before exiting"),
    Options.withDefault(1)
  ),
  timeout: Options.float("timeout").pipe(
    Options.withDescription("seconds to wait for them at most"),
    Options.withDefault(60)
  ),
  json: Options.boolean("json").pipe(Options.withDescription("print JSON lines instead of text"))
}

/** What `tent recv`'s options parse to. */
export type RecvOptions = Command.Command.ParseConfig<typeof options>

export const command = Command.make(
  "recv",
  options,
  lazy(
    "recv",
    () => import("./run/Recv.js"),
    (m, o: RecvOptions) => m.run(o)
  )
).pipe(
  Command.withDescription(
    "Start a node, print its address, wait for --count notifications (at most --timeout s), print them and exit 0."
  )
)
