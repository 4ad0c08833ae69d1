/**
 * `tent probe --quick --arm both --json` between real processes, each row's outcome pinned per arm, so a regression in
 * either arm turns it red. The stream scenarios run 600 + 600 notifications here (`TENT_PROBE_COUNT`, hidden) instead
 * of 2000 + 2000 to keep the suite short (600: scenario 6 freezes the receiver after 300 standalone sends, and 300
 * more fill the 256-send window). Legacy = TENT `main` (`Series.legacy`); series = `Series.all` (RFC PRs 1-5; PRs 6
 * and 7 still their legacy twins, so what the series arm still loses is what was in flight, at most one window of
 * 256, and what failed fast while a peer was marked dead). No probe child is left behind after a run or an
 * interrupted (SIGINT) run.
 */
import { afterEach, describe, expect, it } from "vitest"
import { alive, childrenOf, run, start, stopAll } from "./fixtures/cli.js"

afterEach(stopAll)

interface Row {
  readonly scenario: number | "recovery"
  readonly arm: "legacy" | "series"
  readonly sent: number
  readonly ok: number
  readonly failed: number
  readonly notAttempted: number
  readonly inFlightAtFault: number
  readonly closedInFlight: number
  readonly received: number
  readonly end: boolean
  readonly unknownQp: number
  readonly duplicates: number
  readonly seconds: ReadonlyArray<number>
}

const WINDOW = 256

describe("tent probe (both arms, two processes)", () => {
  it("--quick --arm both --json: each row's outcome per arm", async () => {
    const r = await run(["probe", "--quick", "--arm", "both", "--json"], 420_000, { TENT_PROBE_COUNT: "600" })
    expect(r.code, r.stderr).toBe(0)
    expect(r.stderr).toContain("--quick: control-plane timeouts")
    const { rows } = JSON.parse(r.stdout) as { rows: ReadonlyArray<Row> }
    const order = [1, 2, 3, 4, 5, 6, "recovery"].flatMap((sc) => [`${sc} legacy`, `${sc} series`])
    expect(rows.map((x) => `${x.scenario} ${x.arm}`)).toEqual(order)
    const row = (sc: Row["scenario"], arm: Row["arm"]) => rows.find((x) => x.scenario === sc && x.arm === arm) as Row
    for (const x of rows) {
      const where = `${x.scenario} ${x.arm}: ${JSON.stringify(x)}`
      expect(x.duplicates, where).toBe(0)
      expect(x.received, where).toBeLessThanOrEqual(x.sent)
      expect(x.ok + x.failed + x.notAttempted, where).toBe(x.sent)
    }
    const T = 1200
    for (const sc of [1, 2, 3, 6] as const)
      for (const arm of ["legacy", "series"] as const) expect(row(sc, arm).sent).toBe(T)

    // 1: the sender's notify channel disabled after 1/8. Legacy: every later call fails, about 1/8 arrives, no END.
    // Series (PR 3): the calls after it go over TCP; everything arrives.
    expect(row(1, "legacy")).toMatchObject({ end: false })
    expect(row(1, "legacy").received).toBeLessThanOrEqual(T / 4)
    expect(row(1, "legacy").failed).toBeGreaterThan(0)
    expect(row(1, "series")).toMatchObject({ received: T, failed: 0, end: true })

    // 2: the receiver's notify QP to ERR. Legacy: the sender's failed completions leak their units, the window fills
    // and the sender blocks for good. Series (PRs 1 and 3): the channel is disabled, the rest goes over TCP; only
    // what was in flight is lost (PR 7 closes that).
    expect(row(2, "legacy").notAttempted).toBeGreaterThan(0)
    expect(row(2, "legacy")).toMatchObject({ end: false })
    expect(row(2, "series")).toMatchObject({ notAttempted: 0, failed: 0, end: true })
    expect(T - row(2, "series").received).toBeLessThanOrEqual(WINDOW)
    // and the sender says how many of its "ok" sends the failed channel took with it
    expect(row(2, "series").closedInFlight).toBeGreaterThan(0)
    expect(row(2, "series").closedInFlight).toBeLessThanOrEqual(WINDOW)

    // 3: retirement from another fiber with completions unpolled. Legacy: dropped as "unknown QP". Series (PR 1): none.
    expect(row(3, "legacy").unknownQp).toBeGreaterThan(0)
    expect(row(3, "legacy").received).toBeLessThan(T)
    expect(row(3, "series")).toMatchObject({ unknownQp: 0, notAttempted: 0 })
    expect(T - row(3, "series").received).toBeLessThanOrEqual(WINDOW)

    // 4: a frozen peer, no endpoint yet. Legacy: each call one control-plane timeout (1 s quick). Series: the first
    // call one timeout — a failed bootstrap RPC is not retried over the control plane (PR 3: one, not two) — and
    // PR 4's record fails the second at once.
    for (const arm of ["legacy", "series"] as const) {
      expect(row(4, arm)).toMatchObject({ sent: 2, failed: 2, received: 0 })
      expect(row(4, arm).seconds[0]).toBeGreaterThanOrEqual(0.9)
      expect(row(4, arm).seconds[0]).toBeLessThan(1.9)
    }
    expect(row(4, "legacy").seconds[1]).toBeGreaterThanOrEqual(0.9)
    expect(row(4, "series").seconds[1]).toBeLessThan(0.5)

    // 5: legacy: the batch settles after the bootstrap timeouts and the TCP attempts (2 + 3 of 1 s). Series (PR 4):
    // after the first timeout the peer is marked and the rest fail at once.
    expect(row(5, "legacy").seconds[1]).toBeGreaterThanOrEqual(4)
    expect(row(5, "series").seconds[1]).toBeGreaterThanOrEqual(0.9)
    expect(row(5, "series").seconds[1]).toBeLessThan(3)

    // 6: a host freeze (SoftVerbs: the frozen process's NIC stops too) with the transfers done. Legacy: the window
    // fills and one call blocks for the whole 2 s freeze; the 8.6 s notify retry budget outlasts it: all arrive.
    // Series: the slot wait ends at 1 s (PR 4) or the channel is disabled when PR 2's 0.54 s budget ends (PR 1); the
    // call falls back to a Notify that times out against the frozen peer, which marks it, and the calls after it fail
    // at once until the prober sees the peer again: failed calls, not blocked ones; what was in flight is lost.
    expect(row(6, "legacy")).toMatchObject({ received: T, failed: 0, end: true })
    expect(row(6, "legacy").seconds[0]).toBeGreaterThanOrEqual(1.5)
    expect(row(6, "series").failed).toBeGreaterThanOrEqual(1)
    expect(row(6, "series").seconds[0]).toBeLessThan(1.9)
    expect(T - row(6, "series").received).toBeLessThanOrEqual(WINDOW + row(6, "series").failed)

    // Recovery: something gets through after SIGCONT in both arms; legacy loses nothing (the notify QP's budget
    // outlasts the freeze).
    for (const arm of ["legacy", "series"] as const) expect(row("recovery", arm).seconds).toHaveLength(1)
    expect(row("recovery", "legacy").received).toBe(row("recovery", "legacy").sent)
  }, 480_000)

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
