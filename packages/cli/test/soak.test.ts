/**
 * `tent soak`'s parts: the seeded schedule, the accounting from the receivers' logs, and (as root, in two network
 * namespaces) that the accounting catches faults planted in the processes it counts — a receiver that leaves every
 * 100th notification out of its log, a sender that sends one notification twice — and that without nft it says so
 * in one line, exit 2, leaving nothing behind. The root-only tests are skipped, with the reason printed, elsewhere.
 */
import { execFileSync, spawn } from "node:child_process"
import { mkdtempSync, rmSync, symlinkSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { account, type Call, parseLog } from "../src/soak/Accounting.js"
import * as Hosts from "../src/soak/Hosts.js"
import { quickPace, schedule } from "../src/soak/Schedule.js"
import { runArm } from "../src/soak/Soak.js"

const lacking = Hosts.missing()
if (lacking !== undefined) process.stdout.write(`soak.test.ts: the namespaced tests are skipped: ${lacking}\n`)

describe("soak schedule", () => {
  it("the same seed gives the same faults; every kind comes once in each round; none overlaps or runs late", () => {
    const a = schedule(42, 4000, 60_000, quickPace)
    expect(schedule(42, 4000, 60_000, quickPace)).toEqual(a)
    expect(schedule(43, 4000, 60_000, quickPace)).not.toEqual(a)
    expect(new Set(a.slice(0, 5).map((s) => s.fault.kind)).size).toBe(5)
    for (let i = 1; i < a.length; i++) {
      const prev = a[i - 1] as (typeof a)[number]
      expect((a[i] as (typeof a)[number]).atMs).toBeGreaterThanOrEqual(prev.atMs + prev.forMs)
    }
    for (const s of a) expect(s.atMs + s.forMs).toBeLessThanOrEqual(60_000)
  })
})

describe("soak accounting", () => {
  const call = (seq: number, start: number, ok = true): Call => ({
    seq,
    kind: "standalone",
    start,
    end: start + 10,
    ok,
    error: ok ? "" : "Timeout"
  })

  it("counts from the receivers' logs: delivered, duplicates across incarnations, undelivered, silent, per window", () => {
    const calls = [call(0, 1000), call(1, 1100), call(2, 2000), call(3, 2100), call(4, 2200, false), call(5, 5000)]
    // Incarnation 1 got 0, 1 and 2; incarnation 2 got 2 again (a duplicate) and 4 (after its call failed).
    const logs = [parseLog("0 1001 0\n1 1101 1\n2 2001 2\n"), parseLog("2 2500 0\n4 2600 0\n5 5001 1\n5 5")]
    const accounts = account(
      calls,
      logs,
      [{ seq: 3, reason: "PeerRestarted", at: 2900 }],
      [{ label: "receiver SIGKILL, restart", start: 1900, end: 2300 }],
      0
    )
    expect(accounts.total).toMatchObject({ calls: 6, ok: 5, failed: 1, delivered: 5, duplicates: 1, undelivered: 1 })
    expect(accounts.total.silent).toBe(0)
    expect(accounts.total.deliveredAfterFailure).toBe(1)
    expect(accounts.windows[0]).toMatchObject({ calls: 3, duplicates: 1, undelivered: 1, delivered: 2 })
    expect(accounts.quiet).toMatchObject({ calls: 3, delivered: 3 })
    expect(accounts.incarnations).toEqual([3, 3])
    // Seq 4 is the first after the fault's end that came over RDMA (the counter moved after it): 0.3 s after.
    expect(accounts.windows[0]?.rdmaBackS).toBe(0.3)
    // A seq neither logged nor reported, whose call returned ok, is silent.
    const lost = account(calls, [parseLog("0 1001 0\n")], [], [], 0)
    expect(lost.total.silent).toBe(4)
  })
})

describe.skipIf(lacking !== undefined)("soak in two namespaces (root)", () => {
  it("catches planted faults: a receiver that drops every 100th, a sender that sends one twice; nothing is left", async () => {
    const result = await Effect.runPromise(
      runArm(
        {
          arm: "series",
          count: 500,
          rate: 250,
          transferEvery: 4,
          faults: [],
          quick: true,
          deadlineMs: 30_000,
          settleMs: 5000,
          dropEvery: 100,
          duplicateSeq: 7
        },
        { report: () => {} }
      )
    )
    expect(result.sent).toBe(500)
    expect(result.accounts.total.ok).toBe(500)
    // 501 admitted (seq 7 twice): the 100th, 200th, ... 500th left out of the log.
    expect(result.accounts.total.silent).toBe(5)
    expect(result.accounts.total.duplicates).toBe(1)
    expect(result.accounts.total.delivered).toBe(495)
    expect(Hosts.present().filter((n) => n.includes(`-${process.pid}-`))).toEqual([])
  }, 90_000)

  it("without nft: one line that says what is missing, exit 2, no namespace made", async () => {
    const root = fileURLToPath(new URL("../../../", import.meta.url))
    const loader = pathToFileURL(`${root}node_modules/tsx/dist/loader.mjs`).href
    // A PATH with `ip` and nothing else (Node itself is started by its full path).
    const bin = mkdtempSync(join(tmpdir(), "tent-soak-path-"))
    symlinkSync(execFileSync("sh", ["-c", "command -v ip"], { encoding: "utf8" }).trim(), join(bin, "ip"))
    const before = Hosts.present()
    const r = await new Promise<{ code: number | null; stderr: string; stdout: string }>((resolve) => {
      const p = spawn(process.execPath, ["--import", loader, `${root}packages/cli/src/bin.ts`, "soak", "--quick"], {
        cwd: root,
        env: { ...process.env, PATH: bin },
        stdio: ["ignore", "pipe", "pipe"]
      })
      let out = ""
      let err = ""
      p.stdout?.on("data", (b: Buffer) => {
        out += b.toString()
      })
      p.stderr?.on("data", (b: Buffer) => {
        err += b.toString()
      })
      const timer = setTimeout(() => p.kill("SIGKILL"), 60_000)
      p.once("exit", (code) => {
        clearTimeout(timer)
        resolve({ code, stderr: err, stdout: out })
      })
    })
    rmSync(bin, { recursive: true, force: true })
    expect(r.code, r.stderr).toBe(2)
    expect(r.stderr.trim().split("\n")).toEqual([expect.stringContaining("tent soak needs the nft command")])
    expect(r.stdout).toBe("")
    expect(Hosts.present()).toEqual(before)
  }, 90_000)
})
