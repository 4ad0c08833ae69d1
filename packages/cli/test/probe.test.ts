/**
 * `tent probe --quick --arm legacy --json` between real processes reproduces TENT `main`'s column: scenarios 1-3
 * lose notifications (received < sent, and received + lost = sent by construction of the per-stamp count), 4-6
 * block for the configured (quick: 1 s) control-plane timeout or the (quick: 2 s) freeze, no duplicates. The
 * stream scenarios run 500 + 500 notifications here (`TENT_PROBE_COUNT`, hidden) instead of 2000 + 2000 to keep
 * the suite short. No probe child is left behind after a run or an interrupted (SIGINT) run.
 */
import { afterEach, describe, expect, it } from "vitest"
import { alive, childrenOf, run, start, stopAll } from "./fixtures/cli.js"

afterEach(stopAll)

interface Row {
  readonly scenario: number | "recovery"
  readonly arm: string
  readonly sent: number
  readonly received: number
  readonly duplicates: number
  readonly seconds: ReadonlyArray<number>
}

describe("tent probe (legacy arm, two processes)", () => {
  it("--quick --arm legacy --json: losses in 1-3, timeout-long stalls in 4-6, recovery measured", async () => {
    const r = await run(["probe", "--quick", "--arm", "legacy", "--json"], 240_000, { TENT_PROBE_COUNT: "500" })
    expect(r.code, r.stderr).toBe(0)
    expect(r.stderr).toContain("--quick: control-plane timeouts")
    const { rows } = JSON.parse(r.stdout) as { rows: ReadonlyArray<Row> }
    expect(rows.map((x) => x.scenario)).toEqual([1, 2, 3, 4, 5, 6, "recovery"])
    const row = (s: Row["scenario"]) => rows.find((x) => x.scenario === s) as Row
    for (const x of rows) {
      expect(Object.keys(x).sort()).toEqual(["arm", "duplicates", "received", "scenario", "seconds", "sent"])
      expect(x.arm).toBe("legacy")
      expect(x.duplicates).toBe(0)
      expect(x.received).toBeLessThanOrEqual(x.sent)
    }
    // 1-3: notifications lost.
    for (const s of [1, 2, 3] as const) {
      expect(row(s).sent).toBe(1000)
      expect(row(s).received).toBeLessThan(row(s).sent)
    }
    // 1: the sender's channel disabled after 1/8 of the stream: about that much arrived.
    expect(row(1).received).toBeLessThan(400)
    // 4: each call waits one control-plane timeout (1 s quick), within a wide margin.
    expect(row(4).seconds).toHaveLength(2)
    for (const t of row(4).seconds) {
      expect(t).toBeGreaterThanOrEqual(0.9)
      expect(t).toBeLessThan(3)
    }
    // 5: the batch settles only after the bootstrap timeouts (at least one 1 s timeout).
    expect(row(5).seconds[1]).toBeGreaterThanOrEqual(0.9)
    // 5: and past the RDMA attempts, the task failed over to TCP and paid its attempts too (2 + 3 timeouts of 1 s).
    expect(row(5).seconds[1]).toBeGreaterThanOrEqual(4)
    // 6: the freeze costs the sender. With 500 + 500 here the freeze comes after 250 standalone sends while transfers
    // still run: a frozen SoftVerbs process does not acknowledge, so the data QPs' retry budget (~0.5 s) retires the
    // endpoint and its notify QP mid-freeze, losing what was in flight, and the next call may wait a bootstrap
    // timeout; or, when no transfer is in flight, the sends fill the window and one blocks. (`pnpm demo`, 2000 + 2000,
    // shows the pure case: 4000/4000 and one call blocked for the whole 2 s freeze.)
    expect(row(6).seconds[0] >= 1 || row(6).received < row(6).sent).toBe(true)
    expect(row("recovery").seconds).toHaveLength(1)
  }, 300_000)

  it("an interrupted probe (SIGINT) leaves no child process behind", async () => {
    const probe = start(["probe", "--quick", "--arm", "legacy", "--only", "5"])
    const pid = probe.process.pid as number
    let kids: Array<number> = []
    const deadline = Date.now() + 60_000
    while (kids.length < 2 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200))
      kids = await childrenOf(pid, "probe/node.ts")
    }
    expect(kids.length).toBe(2)
    await new Promise((r) => setTimeout(r, 3000))
    probe.process.kill("SIGINT")
    const code = await probe.exited
    expect(code).toBe(130)
    await new Promise((r) => setTimeout(r, 500))
    expect(kids.filter(alive)).toEqual([])
  }, 120_000)
})
