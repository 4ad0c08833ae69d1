/**
 * `tent probe --quick --arm both --json` between real processes, each row's outcome pinned per arm, so a regression in
 * either arm turns it red. The stream scenarios run 800 + 800 notifications here (`TENT_PROBE_COUNT`, hidden) instead
 * of 2000 + 2000 to keep the suite short (800: scenario 6 freezes the receiver after 200 standalone sends, and the 600
 * after them outlast what a frozen application's NIC takes, 256 receives, plus the sender's window of 256). Legacy =
 * TENT `main` (`Series.legacy`); series = `Series.all` (RFC PRs 1-7: what the series arm still loses is what failed
 * fast while a peer was marked dead, a failure its caller saw). The frozen peer twice: the application frozen with its NIC alive (the RFC's rows) and the host frozen
 * (SIGSTOP, the soft NIC too), told apart by what the sender's NIC got back during the freeze. `--quick` divides the
 * control-plane timeouts (2 s) and the freeze (4 s) by 15 and keeps the retry counts. No probe child is left behind
 * after a run or an interrupted (SIGINT) run. While it runs, the live view (stderr piped here) prints each row's sent,
 * received, duplicates dropped, fallbacks, resends and elapsed time, at most a line a second per arm; each row of
 * `--json` carries the figures that explain it (resends by path and NIC pair, duplicates dropped, fallbacks).
 */
import { afterEach, describe, expect, it } from "vitest"
import { explain, type Figures, noFigures, View } from "../src/probe/Live.js"
import { alive, childrenOf, run, start, stopAll } from "./fixtures/cli.js"

afterEach(stopAll)

interface Row {
  readonly scenario: number | "recovery" | "storm" | "restart"
  readonly freeze: "application" | "host" | null
  readonly arm: "legacy" | "series"
  readonly sent: number
  readonly ok: number
  readonly failed: number
  readonly notAttempted: number
  readonly inFlightAtFault: number
  readonly closedInFlight: number
  readonly completedWhileFrozen: number
  readonly received: number
  readonly end: boolean
  readonly unknownQp: number
  readonly duplicates: number
  readonly seconds: ReadonlyArray<number>
  readonly duplicatesDropped: number
  readonly fallbacks: number
  readonly fallbacksVia: Readonly<Record<string, number>>
  readonly resent: number
  readonly resentVia: { readonly nicPair: number; readonly tcp: number; readonly controlPlane: number }
  readonly resentPairs: Readonly<Record<string, number>>
  readonly resendFailed: number
  readonly undelivered: number
  readonly undeliveredBy: Readonly<Record<string, number>>
  readonly silent: number
  readonly ledgerSent: number
  readonly rebuilt: number
  readonly elapsed: number
}

/** A live line through a pipe: `<row> <arm> <elapsed> s: sent …, received …, …`. */
const LIVE =
  /^(\S+) (legacy|series) (\d+\.\d) s: sent (\d+), received (\d+), duplicates dropped (\d+), fallbacks (\d+), resent (\d+)/
const sum = (r: Readonly<Record<string, number>>) => Object.values(r).reduce((a, b) => a + b, 0)

const WINDOW = 256
/** `--quick`'s control-plane timeout and freeze. */
const TIMEOUT = 2
const HOLD = 4
const arms = ["legacy", "series"] as const
const freezes = ["application", "host"] as const

describe("tent probe (both arms, two processes)", () => {
  it("--quick --arm both --json: each row's outcome per arm", async () => {
    // 24 rows take 8 minutes on a quiet 2-core machine; the bound is for a loaded one (a hang guard, not a rule).
    const r = await run(["probe", "--quick", "--arm", "both", "--json"], 1_500_000, { TENT_PROBE_COUNT: "800" })
    expect(r.code, r.stderr).toBe(0)
    expect(r.stderr).toContain("--quick: control-plane timeouts")
    expect(r.stderr).toContain("this models a hardware or rxe NIC")
    const { rows } = JSON.parse(r.stdout) as { rows: ReadonlyArray<Row> }
    const key = (x: Pick<Row, "scenario" | "freeze">) => `${x.scenario}${x.freeze === "host" ? "-host" : ""}`
    const order = [
      "1",
      "2",
      "3",
      "4",
      "5",
      "6",
      "recovery",
      "storm",
      "4-host",
      "5-host",
      "6-host",
      "recovery-host",
      "restart"
    ].flatMap((sc) => [`${sc} legacy`, `${sc} series`])
    expect(rows.map((x) => `${key(x)} ${x.arm}`)).toEqual(order)
    const row = (sc: Row["scenario"], arm: Row["arm"], freeze: Row["freeze"] = null) =>
      rows.find(
        (x) => x.scenario === sc && x.arm === arm && (x.freeze ?? "application") === (freeze ?? "application")
      ) as Row
    // The live view, piped: lines of every row, at most one a second per arm (+1: the row's first line, printed
    // as its processes start).
    const live = r.stderr
      .split("\n")
      .map((l) => LIVE.exec(l))
      .filter((m): m is RegExpExecArray => m !== null)
    for (const x of rows) {
      const lines = live.filter((m) => m[1] === key(x) && m[2] === x.arm)
      expect(lines.length, `${key(x)} ${x.arm}`).toBeGreaterThan(0)
      expect(lines.length, `${key(x)} ${x.arm}: ${lines.length} lines in ${x.elapsed} s`).toBeLessThanOrEqual(
        Math.floor(x.elapsed) + 2
      )
      const sent = lines.map((m) => Number(m[4]))
      expect(sent, `${key(x)} ${x.arm}: sent never goes back`).toEqual([...sent].sort((a, b) => a - b))
    }
    expect(live.some((m) => Number(m[4]) > 0 && Number(m[5]) > 0)).toBe(true)

    for (const x of rows) {
      const where = `${key(x)} ${x.arm}: ${JSON.stringify(x)}`
      // The figures that explain the row: the resends by path add up, each NIC-pair resend is of a pair, and a row
      // lasts at least as long as any of its calls.
      expect(x.resent, where).toBe(x.resentVia.nicPair + x.resentVia.tcp + x.resentVia.controlPlane)
      expect(sum(x.resentPairs), where).toBe(x.resentVia.nicPair)
      expect(x.fallbacks, where).toBe(sum(x.fallbacksVia))
      expect(x.elapsed, where).toBeGreaterThanOrEqual(Math.max(0, ...x.seconds))
      if (x.arm === "legacy") {
        // TENT main: no resend, no dedup window, no fallback.
        expect(x, where).toMatchObject({ resent: 0, resendFailed: 0, duplicatesDropped: 0, fallbacks: 0 })
      }
      expect(x.duplicates, where).toBe(0)
      expect(x.received, where).toBeLessThanOrEqual(x.sent)
      expect(x.ok + x.failed + x.notAttempted, where).toBe(x.sent)
      expect(x.freeze === null, where).toBe(
        x.scenario === "storm" || x.scenario === "restart" || (typeof x.scenario === "number" && x.scenario <= 3)
      )
      // Delivery receipts: in the series arm no call that returned ok is lost in silence, in any row.
      if (x.arm === "series") expect(x.silent, where).toBe(0)
      else expect(x.undelivered, where).toBe(0)
    }
    // ... while TENT main loses some with no word to the sender (the probe's silent column).
    expect(row(2, "legacy").silent + row(3, "legacy").silent + row("restart", "legacy").silent).toBeGreaterThan(0)

    // restart: the receiver SIGKILLed mid-stream, a new process on its address. Series: nothing stamped for the old
    // process is delivered to the new one; what the old one did not receipt is reported PeerRestarted.
    expect(row("restart", "legacy").silent).toBeGreaterThan(0)
    expect(row("restart", "series")).toMatchObject({ silent: 0, duplicates: 0, failed: 0 })
    expect(row("restart", "series").undelivered).toBeGreaterThan(0)
    expect(Object.keys(row("restart", "series").undeliveredBy)).toEqual(["PeerRestarted"])
    const T = 1600
    for (const sc of [1, 2, 3, 6, "storm"] as const) for (const arm of arms) expect(row(sc, arm).sent).toBe(T)

    // 1: the sender's notify channel disabled after 1/8. Legacy: every later call fails, about 1/8 arrives, no END.
    // Series: everything arrives, and (delivery receipts) over RDMA again once the channel is rebuilt.
    expect(row(1, "legacy")).toMatchObject({ end: false })
    expect(row(1, "legacy").received).toBeLessThanOrEqual(T / 4)
    expect(row(1, "legacy").failed).toBeGreaterThan(0)
    expect(row(1, "series")).toMatchObject({ received: T, failed: 0, end: true })
    // Delivery receipts: the disabled channel is rebuilt at the next send, and the notifications return to RDMA:
    // fewer than 10 % went any other way (the RFC's series alone sent every later one over TCP).
    expect(row(1, "series").rebuilt).toBeGreaterThanOrEqual(1)
    expect(row(1, "series").fallbacks + row(1, "series").ledgerSent).toBeLessThan(T / 10)

    // 2: the receiver's notify QP to ERR. Legacy: the sender's failed completions leak their units, the window fills
    // and the sender blocks for good. Series: the channel is disabled (PR 1), the rest goes over TCP (PR 3), what
    // was in flight on it is resent on another NIC pair (PR 7) and delivered once (PR 6): everything arrives.
    expect(row(2, "legacy").notAttempted).toBeGreaterThan(0)
    expect(row(2, "legacy")).toMatchObject({ end: false })
    expect(row(2, "series")).toMatchObject({ received: T, notAttempted: 0, failed: 0, end: true })
    // what the failed channel had in flight when it closed: resent, not lost — by the receipts' ledger (the entries it
    // held without a receipt, over the control plane)
    expect(row(2, "series").closedInFlight).toBeGreaterThan(0)
    expect(row(2, "series").closedInFlight).toBeLessThanOrEqual(WINDOW)
    expect(row(2, "series").ledgerSent).toBeGreaterThan(0)

    // 3: retirement from another fiber with completions unpolled. Legacy: dropped as "unknown QP". Series: none
    // (PR 1), and what the retired endpoint had in flight is resent (PR 7): everything arrives.
    expect(row(3, "legacy").unknownQp).toBeGreaterThan(0)
    expect(row(3, "legacy").received).toBeLessThan(T)
    expect(row(3, "series")).toMatchObject({ received: T, unknownQp: 0, notAttempted: 0, end: true })

    // The resend storm: the receiver's notify QP to ERR after every 200. Legacy: blocked for good after the first.
    // Series: each dead channel's sends in flight are resent across the next fault (PR 7), each delivered once (PR 6).
    expect(row("storm", "legacy")).toMatchObject({ end: false })
    expect(row("storm", "legacy").notAttempted).toBeGreaterThan(0)
    expect(row("storm", "series")).toMatchObject({ received: T, failed: 0, notAttempted: 0, end: true })

    for (const freeze of freezes) {
      // 4: a frozen peer, no endpoint yet: its kernel completes the handshake, nothing answers. Legacy: each call one
      // control-plane timeout. (The RFC's series alone: the first call one timeout, PR 4's record fails the second.)
      expect(row(4, "legacy", freeze)).toMatchObject({ sent: 2, failed: 2, received: 0 })
      expect(row(4, "legacy", freeze).seconds[0]).toBeGreaterThanOrEqual(TIMEOUT * 0.95)
      expect(row(4, "legacy", freeze).seconds[0]).toBeLessThan(TIMEOUT * 1.9)
      expect(row(4, "legacy", freeze).seconds[1]).toBeGreaterThanOrEqual(TIMEOUT * 0.95)
      // Series with delivery receipts: the descriptor (fetched before the freeze) says the peer offers receipts, so
      // each call returns once its notification is accepted (within 0.9 s, not a control-plane timeout), and each
      // arrives once the peer runs again.
      expect(row(4, "series", freeze)).toMatchObject({ sent: 2, ok: 2, failed: 0, received: 2, silent: 0 })
      for (const t of row(4, "series", freeze).seconds) expect(t).toBeLessThan(TIMEOUT * 0.75)

      // 5: legacy: the batch settles after 8 bootstrap timeouts and the TCP attempts (8 + 3 of 2 s). Series (PR 4):
      // after the first timeout the peer is marked and the rest fail at once.
      expect(row(5, "legacy", freeze).seconds[1]).toBeGreaterThanOrEqual(TIMEOUT * 8)
      expect(row(5, "series", freeze).seconds[1]).toBeGreaterThanOrEqual(TIMEOUT * 0.95)
      expect(row(5, "series", freeze).seconds[1]).toBeLessThan(TIMEOUT * 3)

      // Recovery: a notification sent after the resume gets through in both arms; legacy loses nothing.
      for (const arm of arms) expect(row("recovery", arm, freeze).seconds).toHaveLength(1)
      expect(row("recovery", "legacy", freeze).received).toBe(row("recovery", "legacy", freeze).sent)
    }

    // 6 as the RFC froze it: the application stopped, its NIC alive. The NIC ACKs the sends its 256 posted receives
    // take, then RNR-NAKs (rnr_retry 7: for ever). Legacy: the window fills and one call blocks for the whole freeze;
    // all arrive after it. Series: the slot wait ends at 1 s (PR 4), the call falls back to a Notify that times out
    // (2 s) and marks the peer; the calls after it fail at once (no slot wait for a marked peer: "then 0 s") until
    // the prober sees the peer again.
    expect(row(6, "legacy").completedWhileFrozen).toBeGreaterThanOrEqual(WINDOW * 0.9)
    expect(row(6, "series").completedWhileFrozen).toBeGreaterThanOrEqual(WINDOW * 0.9)
    expect(row(6, "legacy")).toMatchObject({ received: T, failed: 0, end: true })
    expect(row(6, "legacy").seconds[0]).toBeGreaterThanOrEqual(HOLD * 0.75)
    // With delivery receipts no call fails or waits out a control-plane timeout: after the 1 s slot wait the ledger
    // takes the notification (and sends it once the peer answers); everything arrives.
    expect(row(6, "series")).toMatchObject({ received: T, failed: 0, end: true })
    expect(row(6, "series").seconds[0]).toBeLessThan(1 + TIMEOUT * 0.5)
    expect(row(6, "series").seconds[1]).toBeLessThan(1 + TIMEOUT * 0.5)

    // 6 as a host freeze (SoftVerbs: the frozen process's NIC stops too): nothing completes while frozen. Legacy:
    // the window fills and one call blocks for the whole freeze; the 8.6 s notify retry budget outlasts it: all
    // arrive. Series: the slot wait ends at 1 s (PR 4) or the channel is disabled when PR 2's 0.54 s budget ends
    // (PR 1); failed calls, not blocked ones; what was in flight is lost.
    for (const arm of arms) expect(row(6, arm, "host").completedWhileFrozen).toBe(0)
    expect(row(6, "legacy", "host")).toMatchObject({ received: T, failed: 0, end: true })
    expect(row(6, "legacy", "host").seconds[0]).toBeGreaterThanOrEqual(HOLD * 0.75)
    expect(row(6, "series", "host").failed).toBe(0)
    expect(row(6, "series", "host").seconds[0]).toBeLessThan(HOLD)
    expect(row(6, "series", "host").received + row(6, "series", "host").undelivered).toBe(T)
  }, 1_560_000)

  it("the live view: in place on a terminal, at most one plain line a second per arm through a pipe", () => {
    const f = (sent: number, elapsed: number): Figures => ({ ...noFigures, sent, received: sent, elapsed })
    const tty: Array<string> = []
    const onTty = new View({ isTTY: true, columns: 100, write: (t) => tty.push(t) })
    onTty.update("series", "2 series", f(10, 1.5), "scenario 2 series: attempted 10/1600")
    onTty.update("series", "2 series", f(20, 1.6), "")
    onTty.clear()
    expect(tty.slice(0, 2).every((t) => t.startsWith("\r\u001b[2K2 series ") && !t.includes("\n"))).toBe(true)
    // cut to the terminal's width: no wrapped line left behind
    expect(tty[0]).toHaveLength("\r\u001b[2K".length + 99)
    expect(tty[1]).toContain("sent 20, received 20, duplicates dropped 0, fallbacks 0, resent 0")
    expect(tty[2]).toBe("\r\u001b[2K")

    let now = 0
    const piped: Array<string> = []
    const onPipe = new View({ isTTY: false, write: (t) => piped.push(t) }, () => now)
    for (now = 0; now < 3000; now += 100) {
      onPipe.update("legacy", "2 legacy", f(now, now / 1000), "")
      onPipe.update("series", "2 series", f(now, now / 1000), "")
    }
    expect(piped.every((t) => t.endsWith("\n") && !t.includes("\r"))).toBe(true)
    expect(piped.filter((t) => t.startsWith("2 legacy")).map((t) => LIVE.exec(t)?.[4])).toEqual(["0", "1000", "2000"])
    expect(piped.filter((t) => t.startsWith("2 series"))).toHaveLength(3)
  })

  it("each row's explanation names the NIC pair once, several pairs with their counts, and what was not resent", () => {
    const resent = (resentPairs: Record<string, number>, tcp = 0): Figures => ({
      ...noFigures,
      resentVia: { nicPair: Object.values(resentPairs).reduce((a, b) => a + b, 0), tcp, controlPlane: 0 },
      resentPairs,
      duplicatesDropped: 3,
      fallbacksVia: { "rdma→tcp": 549 }
    })
    expect(explain(resent({ "mlx0→mlx1": 256 }))).toBe(
      "256 resent (256 over mlx0→mlx1), 3 duplicates dropped, 549 fell back (549 rdma→tcp)"
    )
    expect(explain(resent({ "mlx0→mlx1": 200, "mlx1→mlx1": 56 }, 4))).toBe(
      "260 resent (256 over NIC pairs (200 mlx0→mlx1, 56 mlx1→mlx1), 4 over TCP), 3 duplicates dropped, 549 fell back (549 rdma→tcp)"
    )
    expect(explain({ ...noFigures, resendFailed: 28 })).toBe(
      "0 resent, 28 not resent, 0 duplicates dropped, 0 fell back"
    )
  })

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
