/**
 * Usage errors that say what to type instead (exit 2, as any bad argument), found as a user types them: a `--notify`
 * that is not NAME=MSG, and a peer that cannot be an address under the peer registry. And `--version` from the one
 * version source (`@tent/cli`'s package.json), the same with or without the entry's fast answer; and `Argv.readHot`,
 * which reads `tent send` and `tent devices` without the parser, agreeing with the parser on every argument list it
 * reads, and leaving to it every one the parser refuses.
 */
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Command } from "@effect/cli"
import { NodeContext } from "@effect/platform-node"
import { Effect, Exit } from "effect"
import { afterEach, describe, expect, it, vi } from "vitest"
import { type Hot, readHot } from "../src/Argv.js"
import * as Devices from "../src/commands/Devices.js"
import * as Send from "../src/commands/Send.js"
import { run, stopAll } from "./fixtures/cli.js"

afterEach(stopAll)

describe("usage errors", () => {
  it("--notify without NAME=MSG says what it wants; a peer that is not host:port says what one looks like", async () => {
    const [notify, peer, transferPeer] = await Promise.all([
      run(["transfer", "--notify", "done", "127.0.0.1:1", "--bytes", "5"]),
      run(["send", "nonsense", "n", "m"]),
      run(["transfer", "prefill-0", "--bytes", "5"])
    ])
    expect(notify.code).toBe(2)
    expect(notify.stderr).toContain('--notify wants NAME=MSG, the notification\'s name and message joined by "="')
    expect(notify.stderr).toContain('got "done"')
    expect(notify.stderr).toContain("usage: tent transfer ")
    for (const [r, command, name] of [
      [peer, "send", "nonsense"],
      [transferPeer, "transfer", "prefill-0"]
    ] as const) {
      expect(r.code, r.stderr).toBe(2)
      expect(r.stderr.trim()).toBe(
        `tent ${command}: "${name}" is not a peer address: under metadata_type p2p a peer is the host:port that \`tent serve\` printed (for example 127.0.0.1:12001, or [::1]:12001)`
      )
    }
  })

  it("--notify NAME=MSG keeps everything after the first = as the message", async () => {
    const { notifyOption } = await import("../src/Options.js")
    const { Effect } = await import("effect")
    expect(Effect.runSync(notifyOption("done=a=b"))).toEqual({ name: "done", msg: "a=b" })
    expect(Effect.runSync(Effect.either(notifyOption("=x")))._tag).toBe("Left")
  })

  it("--version prints package.json's version, with or without the entry's own answer", async () => {
    const version = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")).version as string
    const [fast, parser] = await Promise.all([run(["--version"]), run(["--version"], 120_000, { TENT_CLI_FAST: "0" })])
    expect(fast.code).toBe(0)
    expect(fast.stdout.trim()).toBe(version)
    expect(fast.stdout).toBe(parser.stdout)
  })
})

/** What the parser makes of `args` with the real `devices` and `send` commands (their handlers only record). */
const parse = async (args: ReadonlyArray<string>): Promise<Hot | undefined> => {
  let got: Hot | undefined
  const tent = Command.make("tent").pipe(
    Command.withSubcommands([
      Command.withHandler(Devices.command, (options) =>
        Effect.sync(() => {
          got = { command: "devices", options }
        })
      ),
      Command.withHandler(Send.command, (options) =>
        Effect.sync(() => {
          got = { command: "send", options }
        })
      )
    ])
  )
  const quiet = [vi.spyOn(console, "log"), vi.spyOn(console, "error")].map((s) => s.mockImplementation(() => {}))
  try {
    const exit = await Effect.runPromiseExit(
      Command.run(tent, { name: "tent", version: "0" })(["node", "tent", ...args]).pipe(
        Effect.provide(NodeContext.layer)
      )
    )
    return Exit.isSuccess(exit) ? got : undefined
  } finally {
    for (const s of quiet) s.mockRestore()
  }
}

describe("Argv.readHot and the parser", () => {
  const dir = mkdtempSync(join(tmpdir(), "tent-argv-"))
  const file = join(dir, "transfer-engine.json")
  writeFileSync(file, "{}\n")
  const missing = join(dir, "absent.json")
  const peer = "127.0.0.1:41297"
  // [argument list, whether readHot reads it]: every form it reads, and near misses it must leave to the parser.
  const corpus: ReadonlyArray<readonly [ReadonlyArray<string>, boolean]> = [
    [["devices"], true],
    [["devices", "--json"], true],
    [["devices", "--soft-devices", "a,b"], true],
    [["devices", "--json", "--soft-devices", "x"], true],
    [["devices", "--soft-devices", "x", "--json"], true],
    [["devices", "--config", file], true],
    [["devices", "--config", file, "--soft-devices", " a , b ", "--json"], true],
    [["devices", "--config", missing], false],
    [["devices", "--config", dir], false],
    [["devices", "--config"], false],
    [["devices", "--json", "--json"], false],
    [["devices", "--soft-devices"], false],
    [["devices", "--soft-devices", ""], false],
    [["devices", "--soft-devices", "-x"], false],
    [["devices", "--soft-devices", "a", "--soft-devices", "b"], false],
    // --mooncake starts no node: the parser's command, never the fast path's
    [["send", "--mooncake", peer, "n", "m"], false],
    [["devices", "extra"], false],
    [["devices", "--JSON"], false],
    [["devices", "--json=true"], false],
    [["devices", "--json", "true"], false],
    [["devices", "--json", "false"], false],
    [["devices", "--soft-devices=a"], false],
    [["devices", "--provider", "soft"], false],
    [["devices", "--bogus"], false],
    [["devices", "--help"], false],
    [["devices", "-h"], false],
    [["send", peer, "n", "m"], true],
    [["send", peer, "hello", "hello world"], true],
    [["send", "nonsense", "n", "m"], true],
    [["send", peer, "n", "a=b=c"], true],
    [["send", peer, "名前", "メッセージ"], true],
    [["send", "--provider", "ibverbs", peer, "n", "m"], true],
    [["send", "--provider", "soft", "--arm", "legacy", peer, "n", "m"], true],
    [["send", "--arm", "series", "--provider", "ibverbs", "--soft-devices", "s0,s1", peer, "n", "m"], true],
    [["send", "--soft-devices", "benchsoft1", peer, "bench", "0"], true],
    [["send", "--config", file, peer, "n", "m"], true],
    [["send", "--config", missing, peer, "n", "m"], false],
    [["send", "--config", dir, peer, "n", "m"], false],
    [["send", "--provider", "bogus", peer, "n", "m"], false],
    [["send", "--provider", "SOFT", peer, "n", "m"], false],
    [["send", "--arm", "sideways", peer, "n", "m"], false],
    [["send", "--arm", peer, "n", "m"], false],
    [["send", "--arm", "legacy", "--arm", "series", peer, "n", "m"], false],
    [["send", "--provider=soft", peer, "n", "m"], false],
    [["send", "--Provider", "soft", peer, "n", "m"], false],
    [["send", "--soft-devices", "--json", peer, "n", "m"], false],
    [["send", "--json", peer, "n", "m"], false],
    [["send", peer, "n"], false],
    [["send", peer], false],
    [["send"], false],
    [["send", peer, "n", "m", "extra"], false],
    [["send", peer, "n", "m", "--arm", "legacy"], false],
    [["send", peer, "n", "-m"], false],
    [["send", "--", peer, "n", "m"], false],
    [["send", "", "n", "m"], false],
    [["send", peer, "n", ""], false],
    [["send", peer, "n", "m", "--help"], false],
    [["send", "--help"], false],
    [["--log-level", "debug", "send", peer, "n", "m"], false],
    [["Send", peer, "n", "m"], false],
    [["serve"], false],
    [["recv", "--count", "1"], false],
    [[], false]
  ]

  it("reads the forms it knows, leaves the rest, and gives exactly what the parser gives", async () => {
    let read = 0
    for (const [args, hot] of corpus) {
      const mine = readHot(args)
      expect(mine !== undefined, `readHot ${JSON.stringify(args)}`).toBe(hot)
      const theirs = await parse(args)
      if (mine === undefined) continue
      read++
      // Whatever readHot reads, the parser reads the same way: the same command, the same options.
      expect(theirs, `parser ${JSON.stringify(args)}`).toEqual(mine)
    }
    expect(read).toBe(corpus.filter(([, hot]) => hot).length)
  }, 120_000)

  it("a command line it reads ends as through the parser: the same output and exit code", async () => {
    // A refused peer (exit 1, after a node started) and a peer that is no address (exit 2, before one starts).
    for (const [args, code] of [
      [["send", "127.0.0.1:1", "a", "b"], 1],
      [["send", "nonsense", "a", "b"], 2]
    ] as const) {
      expect(readHot(args)).toBeDefined()
      const [hot, parser] = await Promise.all([run(args), run(args, 120_000, { TENT_CLI_FAST: "0" })])
      expect(hot.code, hot.stderr).toBe(code)
      expect([hot.code, hot.stdout, hot.stderr]).toEqual([parser.code, parser.stdout, parser.stderr])
    }
  }, 300_000)
})
