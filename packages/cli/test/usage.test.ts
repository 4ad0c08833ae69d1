/**
 * Usage errors that say what to type instead (exit 2, as any bad argument), found as a user types them: a `--notify`
 * that is not NAME=MSG, and a peer that cannot be an address under the peer registry. And `--version` from the one
 * version source (`@tent/cli`'s package.json), the same with or without the entry's fast answer.
 */
import { readFileSync } from "node:fs"
import { afterEach, describe, expect, it } from "vitest"
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
    const { notifyOption } = await import("../src/commands/Transfer.js")
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
