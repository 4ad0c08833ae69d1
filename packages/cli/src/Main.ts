/**
 * The `tent` command once `bin.ts` has decided it is needed: runs the command. `tent send` and `tent devices`, in the
 * forms `Argv.readHot` reads exactly, go straight to the command's body; everything else goes through the parser
 * (`Cli.ts`, @effect/cli), loaded only then. Logs go to stderr so stdout carries only the commands' output; Ctrl-C
 * interrupts the command, whose finalizers close sockets and kill child processes.
 *
 * @since 0.1.0
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Console, Effect, Exit, Logger } from "effect"
import { type Hot, readHot } from "./Argv.js"
import { lazy } from "./Render.js"

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

/** A command read by `Argv.readHot`: its body, loaded now. */
const runHot = (hot: Hot): Effect.Effect<unknown> =>
  hot.command === "send"
    ? lazy(
        "send",
        () => import("./commands/run/Send.js"),
        (m, o: typeof hot.options) => m.run(o)
      )(hot.options)
    : lazy(
        "devices",
        () => import("./commands/run/Devices.js"),
        (m, o: typeof hot.options) => m.run(o)
      )(hot.options)

/** Any other command line: the parser, and the platform services its options need (`--config` checks the file). */
const runParsed = (argv: ReadonlyArray<string>): Effect.Effect<unknown> =>
  Effect.flatMap(
    Effect.promise(() => Promise.all([import("./Cli.js"), import("@effect/platform-node/NodeContext")])),
    ([cli, context]) => Effect.provide(cli.run(argv), context.layer)
  )

/**
 * Runs the command of `argv` (as `process.argv`: node, script, args...) to its end and exits with its code.
 * `hot: false` sends every command line through the parser.
 *
 * @since 0.1.0
 */
export const main = (argv: ReadonlyArray<string>, hot: boolean): void => {
  const read = hot ? readHot(argv.slice(2)) : undefined
  const colour = process.stdout.isTTY === true && process.env.NO_COLOR === undefined
  ;(read === undefined ? runParsed(argv) : runHot(read)).pipe(
    (self) => (colour ? self : Effect.flatMap(plainConsole, (c) => Effect.withConsole(self, c))),
    Effect.provide(Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.logfmtLogger))),
    NodeRuntime.runMain({
      // Interrupted (Ctrl-C, SIGTERM) → 130 once the finalizers ran; a defect → 1; otherwise the command's exit code.
      teardown: (exit, onExit) =>
        onExit(Exit.isSuccess(exit) ? Number(process.exitCode ?? 0) : Cause.isInterruptedOnly(exit.cause) ? 130 : 1)
    })
  )
}
