/**
 * Every command's `--help` renders and says what it does; bad arguments fail with a usage line and a non-zero exit.
 * Parsing runs in this process (`Cli.run`, output captured from the console); real processes confirm the exit
 * codes `pnpm tent` gives, and that its help is coloured on a terminal only (not through a pipe, not with NO_COLOR).
 */
import { NodeContext } from "@effect/platform-node"
import { Effect } from "effect"
import { afterEach, describe, expect, it, vi } from "vitest"
import { run as runCli, subcommands } from "../src/Cli.js"
import { describe as describeError } from "../src/Render.js"
import { hasScript, run, runOnTty, stopAll } from "./fixtures/cli.js"

afterEach(stopAll)

const inProcess = async (args: ReadonlyArray<string>) => {
  const out: Array<string> = []
  const err: Array<string> = []
  const log = vi.spyOn(console, "log").mockImplementation((...a: Array<unknown>) => void out.push(a.join(" ")))
  const error = vi.spyOn(console, "error").mockImplementation((...a: Array<unknown>) => void err.push(a.join(" ")))
  const before = process.exitCode
  process.exitCode = undefined
  try {
    await Effect.runPromise(runCli(["node", "tent", ...args]).pipe(Effect.provide(NodeContext.layer)))
    return { code: process.exitCode ?? 0, stdout: out.join("\n"), stderr: err.join("\n") }
  } finally {
    process.exitCode = before
    log.mockRestore()
    error.mockRestore()
  }
}

const ESC = String.fromCharCode(27)

const descriptions: Record<keyof typeof subcommands, RegExp> = {
  devices: /Ibverbs devices/,
  serve: /Run one engine node/,
  send: /Send one notification/,
  transfer: /RDMA-WRITE --bytes/,
  recv: /wait for --count notifications/,
  probe: /fault matrix between two real processes/,
  bench: /benchmark suites/,
  soak: /namespaced hosts/,
  fuzz: /Fuzz every decoder/
}

const badArgs: Record<keyof typeof subcommands, ReadonlyArray<string>> = {
  devices: ["--bogus"],
  serve: ["--segment-size", "lots"],
  send: ["127.0.0.1:1", "only-a-name"],
  transfer: ["127.0.0.1:1"],
  recv: ["--count"],
  probe: ["--arm", "sideways"],
  bench: ["gpu"],
  soak: ["--arm", "sideways"],
  fuzz: ["--target", "kernel"]
}

describe("tent --help and bad arguments", () => {
  for (const name of Object.keys(subcommands) as Array<keyof typeof subcommands>) {
    it(`tent ${name} --help says what it does`, async () => {
      const r = await inProcess([name, "--help"])
      expect(r.code).toBe(0)
      expect(r.stdout).toMatch(descriptions[name])
      expect(r.stdout).toContain("USAGE")
    })
    it(`tent ${name} ${badArgs[name].join(" ")} fails with a usage line`, async () => {
      const r = await inProcess([name, ...badArgs[name]])
      expect(r.code).toBe(2)
      expect(r.stderr).toMatch(new RegExp(`usage: tent ${name} `))
    })
  }

  it("tent (no command) and an unknown command fail with the list of commands", async () => {
    for (const args of [[], ["nope"]]) {
      const r = await inProcess(args)
      expect(r.code).toBe(2)
      expect(r.stderr).toContain("usage: tent <devices|serve|send|transfer|recv|probe|bench|soak|fuzz>")
    }
  })

  it("tent probe: a wrong --only or --arm is a clear usage error naming what exists", async () => {
    const only = await inProcess(["probe", "--arm", "series", "--quick", "--only", "9"])
    expect(only.code).toBe(1)
    expect(only.stderr).toMatch(/--only: unknown scenario 9; the scenarios are 1, 2, 3, 4, 5, 6, recovery/)
    const arm = await inProcess(["probe", "--arm", "nope"])
    expect(arm.code).not.toBe(0)
    expect(arm.stderr).toMatch(/legacy.*series.*both/s)
  })

  it("typed errors render as one line naming the peer and what to check", () => {
    const line = describeError(
      { _tag: "TransportFailure", address: "10.0.0.7:4000", reason: "Timeout", message: "no reply within 30 s" },
      "10.0.0.7:4000"
    )
    expect(line).toMatch(/10\.0\.0\.7:4000.*Timeout.*check:/)
    expect(line).not.toContain("\n")
  })

  it("as a real process: --help exits 0, a bad argument exits 2 with the usage line, a failure exits 1 with one line", async () => {
    const [help, bad, refused] = await Promise.all([
      run(["send", "--help"]),
      run(["send", "only-a-peer"]),
      run(["send", "127.0.0.1:1", "n", "m"])
    ])
    expect(help.code).toBe(0)
    expect(help.stdout).toContain("Send one notification")
    // stdout is a pipe here: the help comes without the colour codes it is rendered with (as in-process shows).
    expect((await inProcess(["send", "--help"])).stdout).toContain(ESC)
    expect(help.stdout).not.toContain(ESC)
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain("usage: tent send ")
    expect(refused.code).toBe(1)
    expect(refused.stderr.trim()).toMatch(/^tent send: control plane to 127\.0\.0\.1:1 failed \(Refused\).*check:/)
    expect(refused.stderr.trim().split("\n")).toHaveLength(1)
  })

  const tty = hasScript()
  if (!tty)
    console.warn("skipping the terminal colour test: util-linux script(1), which gives tent a terminal, is missing")
  it.skipIf(!tty)("on a terminal the help is in colour, and NO_COLOR takes the colour away", async () => {
    const [coloured, plain] = await Promise.all([
      runOnTty(["send", "--help"]),
      runOnTty(["send", "--help"], 120_000, { NO_COLOR: "1" })
    ])
    expect(coloured.code).toBe(0)
    expect(coloured.stdout).toContain("Send one notification")
    expect(coloured.stdout).toContain(ESC)
    expect(plain.code).toBe(0)
    expect(plain.stdout).toContain("Send one notification")
    expect(plain.stdout).not.toContain(ESC)
  })
})
