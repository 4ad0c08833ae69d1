/**
 * `tent` entry point (`pnpm tent <args>` runs this file with tsx). Logs go to stderr so stdout carries only the
 * commands' output; Ctrl-C interrupts the command, whose finalizers close sockets and kill child processes.
 *
 * @since 0.1.0
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Effect, Logger } from "effect"
import { run } from "./Cli.js"

run(process.argv).pipe(
  Effect.provide(NodeContext.layer),
  Effect.provide(Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.logfmtLogger))),
  NodeRuntime.runMain({ disableErrorReporting: false })
)
