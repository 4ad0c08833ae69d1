/**
 * One soak arm: builds the two namespaced hosts, starts a receiver in `B` and a long-lived sender in `A` (each
 * `soak/node.ts`), has the sender send `count` notifications at `rate` (every `transferEvery`-th bound to a 4 KiB
 * transfer, the rest standalone), runs the seeded fault schedule on the hosts meanwhile, waits for every call to
 * end, and accounts from the receivers' logs (`Accounting.ts`). The hosts, the children and the temporary files are
 * removed when it ends, whatever happened.
 *
 * @since 0.2.0
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { nodeConfig, quickPlan } from "../probe/Plan.js"
import { type Accounts, type Admitted, account, type Call, parseLog, type Reported, type Window } from "./Accounting.js"
import * as Hosts from "./Hosts.js"
import { type Child, ChildFailure, spawnIn } from "./Process.js"
import { describeFault, type Scheduled } from "./Schedule.js"

/**
 * What one arm is asked to do.
 *
 * @since 0.2.0
 */
export interface ArmPlan {
  readonly arm: "legacy" | "series"
  readonly count: number
  /** Notifications per second the sender is paced at. */
  readonly rate: number
  readonly transferEvery: number
  readonly faults: ReadonlyArray<Scheduled>
  /** The control-plane timeouts of `tent probe --quick` (2 s), or the library's (30 s). */
  readonly quick: boolean
  /** The sender attempts nothing after this long. */
  readonly deadlineMs: number
  /** How long every call and every receipt still owed is given to end, after the last attempt. */
  readonly settleMs: number
  /** Planted faults (the soak's own test). */
  readonly dropEvery?: number | undefined
  readonly duplicateSeq?: number | undefined
}

/**
 * What one arm measured.
 *
 * @since 0.2.0
 */
export interface ArmResult {
  readonly arm: "legacy" | "series"
  readonly sent: number
  readonly notAttempted: number
  readonly accounts: Accounts
  readonly elapsedS: number
}

/**
 * What the live line shows.
 *
 * @since 0.2.0
 */
export interface ArmLive {
  readonly report: (phase: string, sent: number, received: number) => void
}

interface Progress {
  readonly attempted: number
  readonly ok: number
  readonly failed: number
  readonly inFlight: number
  readonly done: boolean
  readonly undelivered: number
  readonly unreceipted: number
}

const PORT = 17_001

const readText = (path: string) => {
  try {
    return readFileSync(path, "utf8")
  } catch {
    return ""
  }
}

const lineCount = (path: string) => {
  let n = 0
  const t = readText(path)
  for (let i = 0; i < t.length; i++) if (t.charCodeAt(i) === 10) n++
  return n
}

/**
 * Runs one arm.
 *
 * @since 0.2.0
 */
export const runArm = (plan: ArmPlan, live: ArmLive): Effect.Effect<ArmResult, ChildFailure | Hosts.HostFailure> =>
  Effect.scoped(
    Effect.gen(function* () {
      const t0 = performance.now()
      const dir = mkdtempSync(join(tmpdir(), `tent-soak-${plan.arm}-`))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
      const hosts = yield* Hosts.make()
      const base = plan.quick ? nodeConfig(quickPlan(0)) : nodeConfig({ ...quickPlan(0), rpcTimeoutMs: -1 })
      const receiverConfig = join(dir, "receiver.json")
      const senderConfig = join(dir, "sender.json")
      writeFileSync(receiverConfig, JSON.stringify({ ...base, rpc_server_port: PORT }))
      writeFileSync(senderConfig, JSON.stringify(base))
      const logs: Array<string> = []
      const receiver = (): Effect.Effect<Child, ChildFailure, import("effect").Scope.Scope> => {
        const logFile = join(dir, `receiver-${logs.length + 1}.log`)
        logs.push(logFile)
        writeFileSync(logFile, "")
        return spawnIn(hosts.b.ns, {
          role: "receiver",
          arm: plan.arm,
          configFile: receiverConfig,
          host: hosts.b.control,
          rails: hosts.b.rails,
          logFile,
          ...(plan.dropEvery === undefined ? {} : { dropEvery: plan.dropEvery })
        })
      }
      live.report("starting the receiver and the sender in their namespaces", 0, 0)
      const [first, sender] = yield* Effect.all(
        [
          receiver(),
          spawnIn(hosts.a.ns, {
            role: "sender",
            arm: plan.arm,
            configFile: senderConfig,
            host: hosts.a.control,
            rails: hosts.a.rails,
            ...(plan.duplicateSeq === undefined ? {} : { duplicateSeq: plan.duplicateSeq })
          })
        ],
        { concurrency: 2 }
      )
      let current = first
      const target = first.ready.segment as string
      yield* sender.request({ cmd: "open", target }, 120_000)
      const session = (Math.random() * 0xffffffff) >>> 0
      const origin = Date.now()
      yield* sender.request({
        cmd: "run",
        target,
        session,
        count: plan.count,
        rate: plan.rate,
        transferEvery: plan.transferEvery,
        deadlineMs: plan.deadlineMs,
        remoteAddr: first.ready.addr
      })
      const progress = () => sender.request<Progress>({ cmd: "progress" }, 60_000)
      const received = () => logs.reduce((n, l) => n + lineCount(l), 0)
      let sent = 0
      const show = (phase: string) =>
        Effect.map(Effect.either(sender.request<Progress>({ cmd: "progress" }, 2000)), (p) => {
          if (p._tag === "Right") sent = p.right.attempted
          live.report(phase, sent, received())
        })
      /** Sleeps until `at` (wall ms), showing progress once a second. */
      const until = (at: number, phase: string) =>
        Effect.gen(function* () {
          for (let guard = 0; guard < 100_000 && Date.now() < at; guard++) {
            yield* show(phase)
            yield* Effect.sleep(Math.max(0, Math.min(1000, at - Date.now())))
          }
        })

      const windows: Array<Window> = []
      for (const [i, f] of plan.faults.entries()) {
        const label = describeFault(f.fault)
        yield* until(origin + f.atMs, "between faults")
        const phase = `fault ${i + 1}/${plan.faults.length}: ${label}`
        const start = Date.now()
        const fault = f.fault
        switch (fault.kind) {
          case "railDown":
            yield* Hosts.setLink(hosts, fault.rail, false)
            yield* until(start + f.forMs, phase)
            yield* Hosts.setLink(hosts, fault.rail, true)
            break
          case "railDrop":
            yield* Hosts.setDrop(hosts, fault.rail, fault.percent)
            yield* until(start + f.forMs, phase)
            yield* Hosts.setDrop(hosts, fault.rail, 0)
            break
          case "controlDown":
            yield* Hosts.setLink(hosts, "control", false)
            yield* until(start + f.forMs, phase)
            yield* Hosts.setLink(hosts, "control", true)
            break
          case "freeze":
            current.signal("SIGSTOP")
            yield* until(start + f.forMs, phase)
            current.signal("SIGCONT")
            break
          case "restart": {
            current.signal("SIGKILL")
            yield* until(start + f.forMs, phase)
            live.report(`${phase}: starting a new receiver on the same addresses`, sent, received())
            current = yield* receiver()
            if (current.ready.segment !== target) {
              return yield* new ChildFailure({
                message: `the restarted receiver is ${String(current.ready.segment)}, not ${target}`
              })
            }
            if (current.ready.addr !== first.ready.addr) {
              yield* sender.request({ cmd: "retarget", remoteAddr: current.ready.addr })
            }
            break
          }
        }
        windows.push({ label, start, end: Date.now() })
      }
      // Every attempt made, then every call and every receipt still owed ended (bounded).
      const sendingEnds = origin + plan.deadlineMs
      for (let guard = 0; guard < 100_000 && Date.now() < sendingEnds; guard++) {
        const p = yield* progress()
        sent = p.attempted
        live.report("sending", sent, received())
        if (p.done) break
        yield* Effect.sleep(1000)
      }
      const settleEnds = Date.now() + plan.settleMs
      for (let guard = 0; guard < 100_000 && Date.now() < settleEnds; guard++) {
        const p = yield* progress()
        sent = p.attempted
        live.report(`settling: ${p.inFlight} calls in flight, ${p.unreceipted} awaiting a receipt`, sent, received())
        if (p.done && p.inFlight === 0 && p.unreceipted === 0) break
        yield* Effect.sleep(500)
      }
      const callsFile = join(dir, "calls.txt")
      const undeliveredFile = join(dir, "undelivered.txt")
      yield* sender.request({ cmd: "result", callsFile, undeliveredFile }, 60_000)
      const calls: Array<Call> = readText(callsFile)
        .split("\n")
        .filter((l) => l.length > 0)
        .map((l) => {
          const [seq, kind, start, end, ok, error] = l.split(" ")
          return {
            seq: Number(seq),
            kind: kind === "transfer" ? "transfer" : "standalone",
            start: Number(start),
            end: Number(end),
            ok: ok === "1",
            error: error === "-" || error === undefined ? "" : error
          }
        })
      const undelivered: Array<Reported> = readText(undeliveredFile)
        .split("\n")
        .filter((l) => l.length > 0)
        .map((l) => {
          const [seq, reason, at] = l.split(" ")
          return { seq: Number(seq), reason: reason ?? "?", at: Number(at) }
        })
      const admitted: Array<ReadonlyArray<Admitted>> = logs.map((l) => parseLog(readText(l)))
      return {
        arm: plan.arm,
        sent: calls.length,
        notAttempted: plan.count - calls.length,
        accounts: account(calls, admitted, undelivered, windows, origin),
        elapsedS: Math.round(performance.now() - t0) / 1000
      }
    })
  )
