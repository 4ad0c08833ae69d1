/**
 * `serve`, `send`, `recv` and `transfer` as real processes on 127.0.0.1: a notification sent to a `serve` is printed
 * by it; a `recv` exits once it has one; a `transfer` moves bytes that the receiver's segment then holds (its
 * SHA-256, printed by `serve --digest`, is the one of the pattern written).
 */
import { createHash } from "node:crypto"
import { afterEach, describe, expect, it } from "vitest"
import { pattern } from "../src/commands/run/pattern.js"
import { run, start, stopAll } from "./fixtures/cli.js"

afterEach(stopAll)

const listening = (line: string) => line.startsWith("{") && line.includes('"listening"')

describe("serve, send, recv, transfer across processes", () => {
  it("send delivers a notification to serve; transfer writes bytes serve's segment then holds", async () => {
    const size = 65536
    const serve = start(["serve", "--json", "--digest", "--segment-size", String(size)])
    const ready = JSON.parse(await serve.line(listening)) as { address: string; size: number }
    expect(ready.size).toBe(size)

    const sent = await run(["send", ready.address, "hello", "from send"])
    expect(sent.code, sent.stderr).toBe(0)
    // Both nodes offer delivery receipts (the series' default): send waits for the receipt and says so.
    expect(sent.stdout).toContain("receipted in")
    const hello = JSON.parse(await serve.line((l) => l.includes('"hello"'), 20_000)) as Record<string, string>
    expect(hello).toMatchObject({ name: "hello", msg: "from send" })

    const moved = await run(["transfer", ready.address, "--bytes", String(size), "--seed", "7", "--notify", "done=64k"])
    expect(moved.code, moved.stderr).toBe(0)
    const sha = createHash("sha256").update(pattern(size, 7)).digest("hex")
    expect(moved.stdout).toContain(`sha256 ${sha}`)
    const done = JSON.parse(await serve.line((l) => l.includes('"done"'), 20_000)) as Record<string, string>
    expect(done).toMatchObject({ name: "done", msg: "64k", sha256: sha })
  }, 180_000)

  it("recv exits 0 once the notification it waits for arrived", async () => {
    const recv = start(["recv", "--json", "--count", "1", "--timeout", "90"])
    const ready = JSON.parse(await recv.line(listening)) as { address: string }
    const sent = await run(["send", ready.address, "ping", "42"])
    expect(sent.code, sent.stderr).toBe(0)
    expect(await recv.exited).toBe(0)
    expect(recv.stdout()).toContain(JSON.stringify({ name: "ping", msg: "42" }))
  }, 180_000)

  it("--mooncake speaks TENT's own wire (coro_rpc Notify, SendData, RecvData) to a node's control-plane port", async () => {
    const size = 65536
    const serve = start(["serve", "--json", "--digest", "--segment-size", String(size)])
    const ready = JSON.parse(await serve.line(listening)) as { address: string }

    const sent = await run(["send", "--mooncake", ready.address, "tent-wire", "é by coro_rpc"])
    expect(sent.code, sent.stderr).toBe(0)
    expect(sent.stdout).toContain("Mooncake TENT, Notify")
    const got = JSON.parse(await serve.line((l) => l.includes('"tent-wire"'), 20_000)) as Record<string, string>
    expect(got).toMatchObject({ name: "tent-wire", msg: "é by coro_rpc" })

    const moved = await run([
      "transfer",
      "--mooncake",
      ready.address,
      "--bytes",
      "1000",
      "--offset",
      "5",
      "--verify",
      "--notify",
      "done=tent-wire"
    ])
    expect(moved.code, moved.stderr).toBe(0)
    expect(moved.stdout).toContain("read back equal")
    const done = JSON.parse(await serve.line((l) => l.includes('"done"'), 20_000)) as Record<string, string>
    expect(done).toMatchObject({ name: "done", msg: "tent-wire" })

    // a range past the buffer (as GetSegmentDesc gave it): refused before anything is sent, exit non-zero
    const past = await run(["transfer", "--mooncake", ready.address, "--bytes", "16", "--offset", String(size - 8)])
    expect(past.code).not.toBe(0)
    expect(past.stderr).toContain("does not fit")
  }, 180_000)
})
