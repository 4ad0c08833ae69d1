#!/usr/bin/env node
/**
 * `tent` entry point: the installed `tent` command (built into `dist/bin/tent.js` by `pnpm build`) and `pnpm tent`
 * (this file through tsx). Answers without loading anything else: `tent --version`, and, in the built command,
 * `tent --help` and `tent <command> --help` from `help.json` (each command's help as the parser prints it to a pipe,
 * recorded by the build). Everything else loads `Main.ts`, which runs `tent send` and `tent devices` (their common
 * forms, read exactly by `Argv.readHot`) without the parser and every other command line through it, and loads a
 * command's body only when that command runs. `TENT_CLI_FAST=0` turns the answers and the exact reading off (the
 * parser reads every command line).
 *
 * @since 0.1.0
 */
import { readFileSync } from "node:fs"
import * as NodeModule from "node:module"
import { version } from "./Version.js"

declare const TENT_BUNDLE: boolean | undefined

const help = (args: ReadonlyArray<string>): string | undefined => {
  if (typeof TENT_BUNDLE !== "boolean" || !TENT_BUNDLE) return undefined
  const flag = (a: string | undefined) => a === "--help" || a === "-h"
  const key = args.length === 1 && flag(args[0]) ? "" : args.length === 2 && flag(args[1]) ? args[0] : undefined
  if (key === undefined) return undefined
  try {
    const texts = JSON.parse(readFileSync(new URL("./help.json", import.meta.url), "utf8")) as Record<string, string>
    return Object.hasOwn(texts, key) ? texts[key] : undefined
  } catch {
    return undefined
  }
}

const args = process.argv.slice(2)
const fast = process.env.TENT_CLI_FAST !== "0"
const text = !fast ? undefined : args.length === 1 && args[0] === "--version" ? `${version}\n\n` : help(args)
if (text !== undefined) process.stdout.write(text)
else {
  // Node ≥ 22.1 keeps the compiled parser and commands between runs (its module compile cache); Node 20 has none.
  ;(NodeModule as { enableCompileCache?: () => unknown }).enableCompileCache?.()
  const { main } = await import("./Main.js")
  main(process.argv, fast)
}
