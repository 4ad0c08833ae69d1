/**
 * `tent recv`: starts a node, prints its address, waits for `--count` notifications (at most `--timeout` seconds),
 * prints each, and exits 0; a timeout is one line and a non-zero exit. The body (`run/Recv.ts`) is loaded when the
 * command runs.
 *
 * @since 0.1.0
 */
import { Command } from "@effect/cli"
import { type RecvOptions, recvOptions } from "../Options.js"
import { lazy } from "../Render.js"

/**
 * The `tent recv` command; its options are `Options.recvOptions`.
 *
 * @since 0.1.0
 */
export const command = Command.make(
  "recv",
  recvOptions,
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
