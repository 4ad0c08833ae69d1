/**
 * Nodes on chosen addresses: `--host` binds the control plane (and is the segment name under the peer registry),
 * `--device-hosts` binds each SoftVerbs device; a peer's descriptor carries those devices' addresses, and a
 * notification goes from one node to the other on them. Every address here is a loopback one other than 127.0.0.1
 * (Linux routes all of 127/8 to lo), so a node that ignored the options would be seen on the wrong address.
 */
import { EngineConfig } from "@tent/core"
import { RpcAgent, RpcConfig } from "@tent/rpc"
import { Effect, Layer } from "effect"
import * as Option from "effect/Option"
import { afterEach, describe, expect, it } from "vitest"
import { deviceAddresses } from "../src/Addresses.js"
import { readHot } from "../src/Argv.js"
import { run, start, stopAll } from "./fixtures/cli.js"

afterEach(stopAll)

const listening = (line: string) => line.startsWith("{") && line.includes('"listening"')

/** The IPv4 address in a SoftVerbs GID (`%02x` bytes joined by `:`; the last four are the address). */
const hostOfGid = (gid: string) =>
  gid
    .split(":")
    .slice(12)
    .map((b) => Number.parseInt(b, 16))
    .join(".")

describe("addresses", () => {
  it("device hosts: the named ones, then the control plane's IPv4 host, else 127.0.0.1; bad entries say why", () => {
    const names = ["soft0", "soft1"]
    const some = Option.some
    expect(deviceAddresses(names, { deviceHosts: some("soft1=10.0.1.1") }, "10.0.2.1")).toEqual([
      { name: "soft0", host: "10.0.2.1" },
      { name: "soft1", host: "10.0.1.1" }
    ])
    expect(deviceAddresses(names, {}, "0.0.0.0")).toEqual([
      { name: "soft0", host: "127.0.0.1" },
      { name: "soft1", host: "127.0.0.1" }
    ])
    expect(deviceAddresses(names, {}, "::1")).toEqual([
      { name: "soft0", host: "127.0.0.1" },
      { name: "soft1", host: "127.0.0.1" }
    ])
    expect(deviceAddresses(names, { deviceHosts: some("soft0=10.0.0.300") }, "127.0.0.1")).toContain("NAME=IPv4")
    expect(deviceAddresses(names, { deviceHosts: some("=10.0.0.1") }, "127.0.0.1")).toContain("NAME=IPv4")
    expect(deviceAddresses(names, { deviceHosts: some("mlx0=10.0.0.1") }, "127.0.0.1")).toContain("--soft-devices")
  })

  it("tent send's fast reader reads --host and --device-hosts as the parser does", () => {
    const hot = readHot(["send", "--host", "127.0.0.9", "--device-hosts", "soft0=127.0.0.8", "127.0.0.2:1", "n", "m"])
    expect(hot?.command).toBe("send")
    expect(hot?.options).toMatchObject({ host: Option.some("127.0.0.9"), deviceHosts: Option.some("soft0=127.0.0.8") })
  })

  it("serve on --host and --device-hosts: its address, its descriptor's devices; send from other addresses delivers", async () => {
    const serve = start(["serve", "--json", "--host", "127.0.0.3", "--device-hosts", "soft0=127.0.0.4,soft1=127.0.0.5"])
    const ready = JSON.parse(await serve.line(listening, 90_000)) as { address: string; segment: string }
    expect(ready.address).toMatch(/^127\.0\.0\.3:\d+$/)
    expect(ready.segment).toBe(ready.address)

    const desc = await Effect.runPromise(
      Effect.scoped(
        Effect.flatMap(RpcAgent.make, (agent) => agent.getSegmentDesc(ready.address)).pipe(
          Effect.provide(RpcConfig.layerConfig.pipe(Layer.provide(EngineConfig.layerProvider({}))))
        )
      )
    )
    expect(desc.devices.map((d) => [d.name, hostOfGid(d.gid)])).toEqual([
      ["soft0", "127.0.0.4"],
      ["soft1", "127.0.0.5"]
    ])

    const sent = await run(["send", "--host", "127.0.0.6", ready.address, "hello", "over chosen addresses"])
    expect(sent.code, sent.stderr).toBe(0)
    expect(sent.stdout).toContain("receipted in")
    const hello = JSON.parse(await serve.line((l) => l.includes('"hello"'), 20_000)) as Record<string, string>
    expect(hello).toMatchObject({ name: "hello", msg: "over chosen addresses" })

    const bad = await run(["recv", "--device-hosts", "soft9=127.0.0.7", "--timeout", "1"])
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain("soft9")
  }, 180_000)
})
