/**
 * SoftVerbs' fidelity to a pulled cable, with the kernel making the fault: two processes in two network namespaces
 * joined by a veth pair (the soak's hosts), one SoftVerbs device and one RC QP each. A SEND completes; with the
 * receiving host's end of the link set down, the next SEND completes `RETRY_EXC_ERR` once the IB retry budget is
 * spent (`retry_cnt` 7 retransmissions, each after the `timeout` 14 wait: 8 × 67 ms), not at once and not never, as
 * on a NIC whose cable was pulled. Skipped, with the reason printed, when not root.
 */
import { fileURLToPath } from "node:url"
import { WcStatus } from "@tent/verbs"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import * as Hosts from "../src/soak/Hosts.js"
import { spawnIn } from "../src/soak/Process.js"

const lacking = Hosts.missing()
if (lacking !== undefined) process.stdout.write(`soak-retry.test.ts: skipped: ${lacking}\n`)

const peer = fileURLToPath(new URL("./fixtures/soak-rc-peer.ts", import.meta.url))

interface Ready {
  readonly gid: string
  readonly qpNum: number
  readonly psn: number
}

describe.skipIf(lacking !== undefined)("SoftVerbs under a kernel-made link down (root)", () => {
  it("an RC SEND fails RETRY_EXC_ERR after the retry budget once the link is down; SUCCESS before", async () => {
    const out = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const hosts = yield* Hosts.make()
          const [a, b] = yield* Effect.all(
            [
              spawnIn(hosts.a.ns, { role: "rc-a", host: hosts.a.rails[0] }, peer),
              spawnIn(hosts.b.ns, { role: "rc-b", host: hosts.b.rails[0] }, peer)
            ],
            { concurrency: 2 }
          )
          const ra = a.ready as unknown as Ready
          const rb = b.ready as unknown as Ready
          yield* b.request({ cmd: "connect", ...ra })
          yield* a.request({ cmd: "connect", ...rb })
          const send = a.request<{ status: number | null; ms: number }>({ cmd: "send", timeoutMs: 10_000 }, 15_000)
          const before = yield* send
          yield* Hosts.setLink(hosts, 0, false)
          const down = yield* send
          return { before, down }
        })
      )
    )
    expect(out.before.status).toBe(WcStatus.SUCCESS)
    expect(out.down.status).toBe(WcStatus.RETRY_EXC_ERR)
    // The budget: 8 waits of 4.096 µs × 2^14 (67 ms) each, about 0.54 s; wide margins on both sides.
    expect(out.down.ms).toBeGreaterThan(300)
    expect(out.down.ms).toBeLessThan(5000)
    expect(Hosts.present().filter((n) => n.includes(`-${process.pid}-`))).toEqual([])
  }, 120_000)
})
