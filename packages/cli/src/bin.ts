/**
 * `tent` entry point (`pnpm tent <args>` runs this file with tsx). Logs go to stderr so stdout carries only the
 * commands' output; Ctrl-C interrupts the command, whose finalizers close sockets and kill child processes.
 *
 * @since 0.1.0
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit, Logger } from "effect"
import { run } from "./Cli.js"

run(process.argv).pipe(
  Effect.provide(NodeContext.layer),
  Effect.provide(Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.logfmtLogger))),
  NodeRuntime.runMain({
    // Interrupted (Ctrl-C, SIGTERM) → 130 once the finalizers ran; a defect → 1; otherwise the command's exit code.
    teardown: (exit, onExit) =>
      onExit(Exit.isSuccess(exit) ? Number(process.exitCode ?? 0) : Cause.isInterruptedOnly(exit.cause) ? 130 : 1)
  })
)
