/**
 * The command line without the parser: {@link readHot}, an exact reader of the common forms of `tent send` and
 * `tent devices`, the two commands whose start time matters, so that they run without loading @effect/cli. What their
 * shared options mean is in `NodeOptions.ts`; of `Options.ts`, the parser's side, only types are taken here. It reads
 * only what it fully understands and leaves anything else (a typo, `--help`, `--provider=soft`, an option after a
 * positional argument, a missing file) to the parser, which gives its usual answer or error; a test runs both on the
 * same argument lists and requires the same result wherever this reader gives one.
 *
 * @since 0.1.0
 */
import { statSync } from "node:fs"
import * as Option from "effect/Option"
import { arms, type NodeOptions, providers } from "./NodeOptions.js"
import type { DevicesOptions, SendOptions } from "./Options.js"

/**
 * A command line {@link readHot} read: the command and its options, as the parser would have given them.
 *
 * @since 0.1.0
 */
export type Hot =
  | { readonly command: "devices"; readonly options: DevicesOptions }
  | { readonly command: "send"; readonly options: SendOptions }

/** Whether `path` is an existing file (as `--config`, an `Options.file` with `exists: "yes"`, requires). */
const isFile = (path: string): boolean => {
  try {
    return statSync(path).isFile()
  } catch {
    return false
  }
}

/** The value options each hot command takes, and the values each accepts (`undefined`: any non-empty text). */
const valued: Record<Hot["command"], Record<string, ReadonlyArray<string> | undefined>> = {
  devices: { "--config": undefined, "--soft-devices": undefined },
  send: {
    "--config": undefined,
    "--provider": providers,
    "--arm": arms,
    "--soft-devices": undefined,
    "--host": undefined,
    "--device-hosts": undefined
  }
}

/**
 * Reads `args` (the arguments after `tent`) when they are `devices [--json] [--config FILE] [--soft-devices LIST]` or
 * `send [--config FILE] [--provider soft|ibverbs] [--arm series|legacy] [--soft-devices LIST] [--host HOST]
 * [--device-hosts LIST] PEER NAME MSG`: each
 * option once, spelled so, before the positional arguments, every value non-empty and not starting with `-`, FILE an
 * existing file. Anything else is `undefined`: the parser reads it.
 *
 * @since 0.1.0
 */
export const readHot = (
  args: ReadonlyArray<string>,
  fileExists: (path: string) => boolean = isFile
): Hot | undefined => {
  const command = args[0]
  if (command !== "devices" && command !== "send") return undefined
  const takes = valued[command]
  const values = new Map<string, string>()
  let json = false
  let i = 1
  for (; i < args.length; i++) {
    const a = args[i] as string
    if (!a.startsWith("-")) break
    if (command === "devices" && a === "--json" && !json) {
      json = true
      continue
    }
    if (!Object.hasOwn(takes, a) || values.has(a)) return undefined
    const v = args[++i]
    const choices = takes[a]
    if (v === undefined || v === "" || v.startsWith("-")) return undefined
    if (choices !== undefined && !choices.includes(v)) return undefined
    if (a === "--config" && !fileExists(v)) return undefined
    values.set(a, v)
  }
  const positional = args.slice(i)
  if (positional.some((p) => p === "" || p.startsWith("-"))) return undefined
  const config = Option.fromNullable(values.get("--config"))
  const softDevices = Option.fromNullable(values.get("--soft-devices"))
  if (command === "devices") {
    return positional.length === 0 ? { command, options: { config, softDevices, json } } : undefined
  }
  const [peer, name, msg] = positional
  if (positional.length !== 3 || peer === undefined || name === undefined || msg === undefined) return undefined
  return {
    command,
    options: {
      config,
      provider: (values.get("--provider") ?? providers[0]) as NodeOptions["provider"],
      arm: (values.get("--arm") ?? arms[0]) as NodeOptions["arm"],
      softDevices,
      host: Option.fromNullable(values.get("--host")),
      deviceHosts: Option.fromNullable(values.get("--device-hosts")),
      peer,
      // `--mooncake` is not read here: a command line with it takes the full parser
      mooncake: false,
      name,
      msg
    }
  }
}
