/**
 * The `tent` command: `devices`, `serve`, `send`, `transfer`, `recv`, `probe`, `bench`, `soak`, `fuzz`. `run(argv)`
 * parses with @effect/cli; a bad argument prints @effect/cli's message and a usage line for the subcommand and exits 2;
 * a failed command has already printed its one line and set a non-zero exit code.
 *
 * @since 0.1.0
 */
import { Command, HelpDoc, Usage, ValidationError } from "@effect/cli"
import { Console, Effect } from "effect"
import * as Bench from "./commands/Bench.js"
import * as Devices from "./commands/Devices.js"
import * as Fuzz from "./commands/Fuzz.js"
import * as Probe from "./commands/Probe.js"
import * as Recv from "./commands/Recv.js"
import * as Send from "./commands/Send.js"
import * as Serve from "./commands/Serve.js"
import * as Soak from "./commands/Soak.js"
import * as Transfer from "./commands/Transfer.js"
import { version } from "./Version.js"

/**
 * The subcommands by name.
 *
 * @since 0.1.0
 */
export const subcommands = {
  devices: Devices.command,
  serve: Serve.command,
  send: Send.command,
  transfer: Transfer.command,
  recv: Recv.command,
  probe: Probe.command,
  bench: Bench.command,
  soak: Soak.command,
  fuzz: Fuzz.command
} as const

/**
 * The root command.
 *
 * @since 0.1.0
 */
export const tent = Command.make("tent", {}, () =>
  Effect.zipRight(
    Console.error(`usage: ${usageLine(undefined)}  (tent <command> --help for each)`),
    Effect.sync(() => {
      process.exitCode = 2
    })
  )
).pipe(
  Command.withDescription(
    "tent: an RDMA transfer engine's notification channel that does not lose, duplicate or stall notifications. Run `tent <command> --help`."
  ),
  Command.withSubcommands([
    Devices.command,
    Serve.command,
    Send.command,
    Transfer.command,
    Recv.command,
    Probe.command,
    Bench.command,
    Soak.command,
    Fuzz.command
  ])
)

const ESC = String.fromCharCode(27)
const plain = (s: string) =>
  s
    .split(ESC)
    .map((part, i) => (i === 0 ? part : part.replace(/^\[[0-9;]*m/, "")))
    .join("")
    .trim()

/**
 * The usage line of a subcommand (or of `tent`).
 *
 * @since 0.1.0
 */
export const usageLine = (name: string | undefined): string => {
  const cmd: Command.Command<string, never, unknown, unknown> | undefined =
    name !== undefined && name in subcommands
      ? (subcommands[name as keyof typeof subcommands] as unknown as Command.Command<string, never, unknown, unknown>)
      : undefined
  const usage = cmd === undefined ? Command.getUsage(tent) : Command.getUsage(cmd)
  const text = plain(HelpDoc.toAnsiText(Usage.getHelp(usage))).replace(/^\$\s*/, "")
  return cmd === undefined ? `tent <${Object.keys(subcommands).join("|")}> [options]` : `tent ${text}`
}

const cli = Command.run(tent, { name: "tent", version })

/**
 * Runs the CLI on `argv` (as `process.argv`: node, script, args...).
 *
 * @since 0.1.0
 */
export const run = (argv: ReadonlyArray<string>) =>
  cli(argv).pipe(
    Effect.catchIf(ValidationError.isValidationError, () =>
      Effect.zipRight(
        Console.error(`usage: ${usageLine(argv.slice(2).find((a) => !a.startsWith("-")))}`),
        Effect.sync(() => {
          process.exitCode = 2
        })
      )
    )
  )
