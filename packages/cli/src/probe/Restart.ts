/**
 * The probe's `restart` row: the receiver is SIGKILLed mid-stream and a new process starts on the same control-plane
 * address and segment name, while the initiator sends one standalone notification every few ms through the public
 * API. What each receiver process admitted comes from its own log (appended as each notification is admitted, so a
 * killed process leaves it behind), never from the sender's belief; the initiator says which calls returned ok and
 * which notifications its engine reported `Undelivered`.
 *
 * `silent` is counted by seq: the calls that returned ok whose notification no receiver process admitted and no
 * `Undelivered` named. `duplicates`: seqs admitted by both processes, or twice by one.
 *
 * @since 0.2.0
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { type Child, ChildFailure, spawnChild } from "./Children.js"

/** What the row measured. */
export interface RestartResult {
  readonly sent: number
  readonly ok: number
  readonly failed: number
  readonly notAttempted: number
  /** Distinct seqs admitted by either receiver process. */
  readonly received: number
  readonly duplicates: number
  /** Ok calls neither admitted by a receiver nor reported `Undelivered`. */
  readonly silent: number
  readonly undelivered: number
  readonly undeliveredBy: Readonly<Record<string, number>>
  /** Seqs admitted by the old process and also reported undelivered (it died before its receipt left). */
  readonly receivedAndReported: number
  /** The longest `sendNotification` call, ms. */
  readonly maxCallMs: number
  /** Seconds from the kill to the last `Undelivered` (-1: none), and to the first notification over RDMA again. */
  readonly lastUndeliveredS: number
  readonly rdmaBackS: number
  /** Seconds from the start of the row's processes to its end. */
  readonly elapsed: number
  readonly note: string
}

interface Paced {
  readonly done: boolean
  readonly attempted: number
  readonly ok: number | ReadonlyArray<number>
  readonly failed: number
  readonly maxCallMs: number
  readonly undelivered: ReadonlyArray<readonly [number, string, number]>
  readonly unreceipted: number
  readonly rdmaSent: number
  readonly rebuilt: number
}

/** A free TCP port on 127.0.0.1 (both receiver processes bind it in turn). */
const freePort = Effect.async<number, ChildFailure>((resume) => {
  const s = createServer()
  s.once("error", (e) => resume(Effect.fail(new ChildFailure({ message: `no free port: ${e.message}` }))))
  s.listen(0, "127.0.0.1", () => {
    const port = (s.address() as { port: number }).port
    s.close(() => resume(Effect.succeed(port)))
  })
})

/** A receiver's log: `seq at rdmaBefore` per admitted notification. */
const readLog = (path: string): Array<{ readonly seq: number; readonly at: number; readonly rdma: number }> => {
  let text = ""
  try {
    text = readFileSync(path, "utf8")
  } catch {
    return []
  }
  return text
    .split("\n")
    .filter((l) => l.length > 0)
    .map((l) => {
      const [seq, at, rdma] = l.split(" ").map(Number)
      return { seq: seq as number, at: at as number, rdma: rdma as number }
    })
}

/**
 * Runs the row: `count` notifications one every `everyMs`; the receiver is killed once a third were attempted and a
 * new one started on its address; then the initiator is given `settleMs` for every accepted notification to end
 * (receipted or reported).
 */
export const restartRow = (options: {
  readonly arm: "legacy" | "series"
  readonly config: Record<string, unknown>
  readonly count: number
  readonly everyMs: number
  readonly settleMs: number
  /** A stream that makes no progress this long is stopped (the sender is blocked for good). */
  readonly stallMs: number
  readonly report: (line: string) => void
}): Effect.Effect<RestartResult, ChildFailure> =>
  Effect.scoped(
    Effect.gen(function* () {
      const { arm, count } = options
      const t0 = performance.now()
      const port = yield* freePort
      const dir = mkdtempSync(join(tmpdir(), "tent-probe-restart-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
      const config = { ...options.config, rpc_server_port: port }
      const receiver = (n: number) =>
        spawnChild("receiver", { arm, config, segmentSize: 1 << 20, logFile: join(dir, `r${n}.log`) })
      const [r1, i] = yield* Effect.all(
        [receiver(1), spawnChild("initiator", { arm, config: options.config, segmentSize: 1 << 20 })],
        { concurrency: 2 }
      )
      const target = r1.segment
      const session = (Math.random() * 0xffffffff) >>> 0
      yield* i.request({ cmd: "open", target, warm: true }, 60_000)
      yield* i.request({ cmd: "paced", target, session, count, everyMs: options.everyMs })
      const paced = (full = false) => i.request<Paced>({ cmd: "pacedResult", full }, 10_000)
      const waitFor = (cond: (p: Paced) => boolean, ms: number) =>
        Effect.gen(function* () {
          const deadline = Date.now() + ms
          for (;;) {
            const p = yield* paced()
            if (cond(p) || Date.now() >= deadline) return p
            yield* Effect.sleep(50)
          }
        })
      yield* waitFor((p) => p.attempted >= Math.floor(count / 3), 120_000)
      options.report(`restart ${arm}: receiver killed (SIGKILL) mid-stream`)
      const killedAt = Date.now()
      r1.signal("SIGKILL")
      yield* Effect.sleep(200)
      const r2: Child = yield* receiver(2)
      if (r2.segment !== target) {
        return yield* new ChildFailure({ message: `the restarted receiver is ${r2.segment}, not ${target}` })
      }
      options.report(`restart ${arm}: a new receiver on ${target}; the initiator sends on`)
      // Until the stream ends, or stops moving for `stallMs` (a sender blocked for good: TENT main's full window).
      let last = -1
      let movedAt = Date.now()
      yield* waitFor(
        (p) => {
          if (p.attempted !== last) {
            last = p.attempted
            movedAt = Date.now()
          }
          return p.done || Date.now() - movedAt > options.stallMs
        },
        count * options.everyMs * 4 + 60_000
      )
      options.report(`restart ${arm}: sent; waiting for every accepted notification to end`)
      const settled = yield* waitFor((p) => p.unreceipted === 0, options.settleMs)
      const full = yield* paced(true)
      const okSeqs = new Set(full.ok as ReadonlyArray<number>)
      const l1 = readLog(join(dir, "r1.log"))
      const l2 = readLog(join(dir, "r2.log"))
      const admitted = new Map<number, number>()
      for (const x of [...l1, ...l2]) admitted.set(x.seq, (admitted.get(x.seq) ?? 0) + 1)
      const reported = new Set(full.undelivered.map(([seq]) => seq))
      let silent = 0
      for (const seq of okSeqs) if (!admitted.has(seq) && !reported.has(seq)) silent++
      let duplicates = 0
      for (const n of admitted.values()) if (n > 1) duplicates += n - 1
      let receivedAndReported = 0
      for (const seq of reported) if (admitted.has(seq)) receivedAndReported++
      const undeliveredBy: Record<string, number> = {}
      for (const [, reason] of full.undelivered) undeliveredBy[reason] = (undeliveredBy[reason] ?? 0) + 1
      const lastUndelivered = full.undelivered.reduce((m, [, , at]) => Math.max(m, at), 0)
      const rdmaBack = l2.find((x) => x.rdma > 0)
      const s = (ms: number) => Math.round(ms) / 1000
      const result: RestartResult = {
        sent: count,
        ok: okSeqs.size,
        failed: full.failed,
        notAttempted: count - full.attempted,
        received: admitted.size,
        duplicates,
        silent,
        undelivered: full.undelivered.length,
        undeliveredBy,
        receivedAndReported,
        maxCallMs: full.maxCallMs,
        lastUndeliveredS: lastUndelivered === 0 ? -1 : s(lastUndelivered - killedAt),
        rdmaBackS: rdmaBack === undefined ? -1 : s(rdmaBack.at - killedAt),
        elapsed: (performance.now() - t0) / 1000,
        note: [
          `old process admitted ${new Set(l1.map((x) => x.seq)).size}, new one ${new Set(l2.map((x) => x.seq)).size}`,
          `longest call ${full.maxCallMs} ms`,
          settled.unreceipted > 0 ? `${settled.unreceipted} still awaiting a receipt at the end` : undefined,
          receivedAndReported > 0
            ? `${receivedAndReported} admitted by the old process just before it died and reported PeerRestarted (its receipt never left)`
            : undefined,
          lastUndelivered === 0 ? undefined : `last Undelivered ${s(lastUndelivered - killedAt)} s after the kill`,
          rdmaBack === undefined
            ? "nothing reached the new process over RDMA"
            : `RDMA back ${s(rdmaBack.at - killedAt)} s after the kill (${full.rebuilt} notify channels rebuilt)`
        ]
          .filter((x): x is string => x !== undefined)
          .join("; ")
      }
      return result
    })
  )
