/**
 * The `tent` command once `bin.ts` has decided it is needed: parses the arguments and runs the command. Logs go to
 * stderr so stdout carries only the commands' output; Ctrl-C interrupts the command, whose finalizers close sockets
 * and kill child processes.
 *
 * @since 0.1.0
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Console, Effect, Exit, Logger } from "effect"
import { run } from "./Cli.js"

const ANSI = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g")
const strip = (a: unknown): unknown => (typeof a === "string" ? a.replace(ANSI, "") : a)

/** Help and errors without colour codes when stdout is not a terminal (a pipe, a file, CI) or `NO_COLOR` is set. */
const plainConsole = Effect.map(
  Console.consoleWith(Effect.succeed),
  (c): Console.Console => ({
    ...c,
    log: (...args) => c.log(...args.map(strip)),
    error: (...args) => c.error(...args.map(strip))
  })
)
const colour = process.stdout.isTTY === true && process.env.NO_COLOR === undefined

run(process.argv).pipe(
  (self) => (colour ? self : Effect.flatMap(plainConsole, (c) => Effect.withConsole(self, c))),
  Effect.provide(NodeContext.layer),
  Effect.provide(Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.logfmtLogger))),
  NodeRuntime.runMain({
    // Interrupted (Ctrl-C, SIGTERM) → 130 once the finalizers ran; a defect → 1; otherwise the command's exit code.
    teardown: (exit, onExit) =>
      onExit(Exit.isSuccess(exit) ? Number(process.exitCode ?? 0) : Cause.isInterruptedOnly(exit.cause) ? 130 : 1)
  })
)
