/**
 * A probe child: one engine node (two SoftVerbs devices, the arm's policies) in its own process, driven by the probe
 * over JSON lines on stdin/stdout. It prints `{segment, addr}` when ready, then answers one line per request.
 *
 * The fault injection lives here and only here: it is reachable by the processes `tent probe` starts (it sets
 * `TENT_PROBE_CHILD=1` and passes the arm and configuration as the first argument), never by `tent serve`.
 *
 * Receiver requests: `counts`, `fault` (`notifyQpError`: its notify QPs to ERR; `retire`: the notify poller held
 * for `holdMs`, then every endpoint retired from this request's fiber, then the poller resumed; `freezeApp`: the
 * application frozen or thawed, its SoftVerbs NICs running on — `Diagnostics.freezeApplication`), `recoveryAfter`.
 * Initiator requests: `open`, `stream`, `progress`, `abort`, `timedSends`, `frozenTransfer`, `loop`, `sentAfter`,
 * `stopLoop`. Both: `figures` (what the live view and each row's explanation show: the notifications this node's
 * application sent and received, the duplicates its dedup window dropped, its fallbacks and resends — from its
 * `Diagnostics` counters and the `tent_*` metrics of its registry).
 *
 * @since 0.1.0
 */
import { appendFileSync } from "node:fs"
import { createInterface } from "node:readline"
import { Dedup, Diagnostics, EngineConfig, Series, TransferEngine } from "@tent/core"
import { RailHealth } from "@tent/health"
import { SoftVerbs } from "@tent/verbs"
import { Effect, Fiber, Layer, Logger, Metric, MetricState, Stream } from "effect"
import * as Stamp from "./Stamp.js"

interface Options {
  readonly role: "receiver" | "initiator"
  readonly arm: "legacy" | "series"
  readonly config: unknown
  readonly segmentSize: number
  /**
   * Receiver: a file to which every stamped notification it admits is appended at once (`seq at rdma`: its seq, the
   * wall-clock ms, and how many had come over RDMA before it), so a process killed mid-row leaves what it received.
   */
  readonly logFile?: string
}

if (process.env.TENT_PROBE_CHILD !== "1") {
  process.stderr.write("this is a tent probe child process; run `tent probe` instead\n")
  process.exit(2)
}
const opts = JSON.parse(process.argv[2] ?? "{}") as Options
const TRANSFER_BYTES = 4096
const SLOTS = 64
const LEAD = 512

const layer = TransferEngine.layer.pipe(
  Layer.provideMerge(
    SoftVerbs.layer({
      devices: [
        { name: "mlx0", host: "127.0.0.1" },
        { name: "mlx1", host: "127.0.0.1" }
      ]
    })
  ),
  // The arm: TENT `main`, or the RFC's series (`Series.all`). `TENT_PROBE_WITHOUT_WINDOW=1` (hidden, an ablation):
  // the series with PR 6's window swapped for the legacy admission — stamped frames, PR 7's resends, no dedup.
  Layer.provide(
    opts.arm === "legacy"
      ? Series.legacy
      : process.env.TENT_PROBE_WITHOUT_WINDOW === "1"
        ? Layer.merge(
            Series.all,
            Layer.sync(Dedup.Dedup, () => ({ ...Dedup.makeSeries(), admit: () => true }))
          )
        : Series.all
  ),
  Layer.provide(RailHealth.layerConfig),
  Layer.provide(EngineConfig.layerProvider({ json: opts.config }))
)

type Reply = Record<string, unknown>

/**
 * The counter `name` of this process's metric registry, summed by the key `label` makes of each series' labels
 * (series it maps to undefined, and zeros, left out).
 */
const counterSeries = (name: string, label: (tags: Readonly<Record<string, string>>) => string | undefined) => {
  const out: Record<string, number> = {}
  for (const { metricKey, metricState } of Metric.unsafeSnapshot()) {
    if (metricKey.name !== name || !MetricState.isCounterState(metricState)) continue
    const n = Number(metricState.count)
    if (n === 0) continue
    const tags: Record<string, string> = {}
    for (const t of metricKey.tags) tags[t.key] = t.value
    const k = label(tags)
    if (k !== undefined) out[k] = (out[k] ?? 0) + n
  }
  return out
}

const program = Effect.gen(function* () {
  const engine = yield* TransferEngine.TransferEngine
  const control = yield* SoftVerbs.SoftVerbsControl
  const diagnostics = yield* Diagnostics.Diagnostics
  const rdma = diagnostics.counters.rdma as NonNullable<typeof diagnostics.counters.rdma>
  const memory = Buffer.alloc(opts.segmentSize)
  const segment = yield* engine.registerSegment(memory)
  const counter = new Stamp.Counter()
  if (opts.role === "receiver") {
    yield* Effect.forkDaemon(Stream.runForEach(engine.notifications, (n) => Effect.sync(() => counter.add(n))))
    const logFile = opts.logFile
    if (logFile !== undefined) {
      yield* engine.subscribe((n) => {
        const d = Stamp.decode(n)
        if (d._tag === "Stamp") appendFileSync(logFile, `${d.seq} ${Date.now()} ${rdma.received}\n`)
      })
    }
  }
  // Initiator: the seqs of its probe notifications the engine reported undelivered (delivery receipts), by reason.
  const undelivered: Array<readonly [number, string, number]> = []
  yield* engine.onUndelivered((u) => {
    const d = Stamp.decode({ name: u.name, msg: u.msg })
    if (d._tag === "Stamp") undelivered.push([d.seq, u.reason, Date.now()])
  })
  const paced = { ok: [] as Array<number>, failed: 0, maxCallMs: 0, done: false, sentAt: [] as Array<number> }

  // Initiator state.
  const progress = {
    attempted: 0,
    standalone: 0,
    failed: 0,
    lastError: "",
    done: false,
    endSent: false,
    aborted: false,
    disabled: false,
    /** The stream waits here (a `holdAt` reached) until the orchestrator's `release`, sent once its fault is in. */
    held: false,
    callMs: [] as Array<number>,
    callStart: 0
  }
  let stream: Fiber.RuntimeFiber<void, never> | undefined
  let loop: Fiber.RuntimeFiber<void, never> | undefined
  let loopSent = 0
  let loopFailed = 0
  /** Notifications sent by `timedSends` and `frozenTransfer` (the stream's are `attempted`, the loop's `loopSent`). */
  let otherSent = 0
  /** Wall-clock ms at which each recovery-loop send started, by seq. */
  const loopStartedAt: Array<number> = []

  /** Scenario 1's fault: the initiator's notify channel towards `target` disabled (TENT `notify_connected_ = false`). */
  const disable = (target: string) =>
    Effect.suspend(() => {
      progress.disabled = true
      return diagnostics.disableNotify(target)
    })

  const handle = (req: Reply): Effect.Effect<Reply, unknown> =>
    Effect.gen(function* () {
      switch (req.cmd) {
        case "figures":
          return {
            sent: progress.attempted + loopSent + otherSent,
            received: counter.counts.received,
            duplicatesDropped: diagnostics.counters.dedup?.duplicates ?? 0,
            resentVia: {
              nicPair: diagnostics.counters.resend?.viaNicPair ?? 0,
              tcp: diagnostics.counters.resend?.viaTcp ?? 0,
              controlPlane: diagnostics.counters.resend?.viaControlPlane ?? 0
            },
            resendFailed:
              (diagnostics.counters.resend?.failed ?? 0) + (diagnostics.counters.resend?.notResendable ?? 0),
            resentPairs: counterSeries("tent_resend_pair_attempts_total", (t) =>
              t.outcome === "sent" ? `${t.local_nic}→${t.peer_nic}` : undefined
            ),
            fallbacksVia: counterSeries("tent_fallbacks_total", (t) => `${t.from}→${t.to}`),
            undelivered: diagnostics.counters.receipts?.undeliveredTotal ?? 0,
            undeliveredBy: Object.fromEntries(
              Object.entries(diagnostics.counters.receipts?.undelivered ?? {}).filter(([, n]) => n > 0)
            ),
            ledgerSent: diagnostics.counters.receipts?.resent ?? 0,
            rebuilt: rdma.rebuilt,
            unreceipted: diagnostics.counters.receipts?.unreceipted ?? 0
          }
        case "counts":
          return {
            ...counter.counts,
            unknownQp: rdma.unknownQp,
            notifyErrors: rdma.notifyErrors,
            deferredPasses: rdma.deferredPasses
          }
        case "recoveryAfter": {
          // The first recovery-loop notification to arrive after `t`, and the first of those the initiator sent at
          // `fromSeq` or later (sent after `t`: not one that waited out the freeze in a queue).
          const t = req.t as number
          const fromSeq = req.fromSeq as number | null
          let fresh: number | null = null
          if (fromSeq !== null)
            for (const x of counter.recovery) if (x.seq >= fromSeq && (fresh === null || x.at < fresh)) fresh = x.at
          return { at: counter.recovery.find((x) => x.at >= t)?.at ?? null, fresh }
        }
        case "fault": {
          if (req.kind === "freezeApp") {
            yield* diagnostics.freezeApplication(req.frozen === true)
            return { ok: true }
          }
          if (req.kind === "notifyQpError") {
            const eps = (yield* diagnostics.endpoints).filter((e) => e.notifyQpNum !== 0)
            for (const e of eps) yield* control.forceQpError(e.localNic, e.notifyQpNum)
            return { endpoints: eps.length }
          }
          // Retirement from a fiber other than the notify poller, with completions left unpolled meanwhile.
          yield* diagnostics.pauseNotifyPoller(true)
          yield* Effect.sleep(req.holdMs as number)
          const before = rdma.unknownQp
          let retired = 0
          for (const e of yield* diagnostics.endpoints)
            if (yield* diagnostics.retire(e.localNic, e.peerNicPath)) retired++
          yield* diagnostics.pauseNotifyPoller(false)
          yield* Effect.sleep(200)
          return { retired, unknownQp: rdma.unknownQp - before }
        }
        case "open": {
          const target = req.target as string
          yield* engine.openSegment(target)
          if (req.warm === true) {
            yield* engine.sendNotification(target, { name: new Uint8Array([119]), msg: new Uint8Array(0) })
          }
          return { ok: true }
        }
        case "stream": {
          const target = req.target as string
          const count = req.count as number
          const session = req.session as number
          const disableAt = (req.disableAt as number | undefined) ?? -1
          const holdAt = (req.holdAt as number | undefined) ?? -1
          const handleId = yield* engine.openSegment(target)
          const remote = req.remoteAddr as number
          // The fault, when due, goes in before the attempt is counted (and before its send).
          const attempt = Effect.gen(function* () {
            while (progress.held) yield* Effect.sleep(2)
            if (disableAt >= 0 && !progress.disabled && progress.attempted >= disableAt) yield* disable(target)
            progress.attempted++
          })
          const fail = (e: unknown) => {
            progress.failed++
            progress.lastError = (e as { _tag?: string })._tag ?? String(e)
          }
          // The standalone stream may run at most LEAD ahead of the transfer-bound one, so a fault mid-stream finds
          // both kinds under way (and LEAD > 256, so a full notify window, not this pacing, is what blocks it).
          const lead = (req.lead as number | undefined) ?? LEAD
          let transfersAttempted = 0
          let transfersDone = false
          const transfers = Effect.forEach(
            Array.from({ length: count }, (_, i) => i),
            (i) =>
              Effect.gen(function* () {
                yield* attempt
                transfersAttempted++
                const batch = yield* engine.allocateBatch
                const off = (i % SLOTS) * TRANSFER_BYTES
                const r = yield* Effect.either(
                  engine.submitTransfer(
                    batch,
                    [
                      {
                        opcode: "WRITE",
                        source: segment.addr + off,
                        target: handleId,
                        targetOffset: remote + off,
                        length: TRANSFER_BYTES
                      }
                    ],
                    Stamp.stamp(session, i, "transfer")
                  )
                )
                if (r._tag === "Left") fail(r.left)
                else {
                  const s = yield* engine.waitTransfer(batch, 600_000)
                  if (s.status !== "COMPLETED") fail(s.status)
                }
                yield* engine.freeBatch(batch)
              }),
            { concurrency: 8, discard: true }
          ).pipe(
            Effect.ensuring(
              Effect.sync(() => {
                transfersDone = true
              })
            )
          )
          const standalone = Effect.forEach(
            Array.from({ length: count }, (_, i) => count + i),
            (seq) =>
              Effect.gen(function* () {
                while (!transfersDone && transfersAttempted < seq - count - lead) yield* Effect.sleep(5)
                if (seq - count === holdAt) {
                  // The freeze point: the transfer-bound stream finishes first (no data in flight: the notify
                  // channel alone meets the fault), then both streams stop until the fault is in.
                  while (!transfersDone) yield* Effect.sleep(5)
                  progress.held = true
                }
                yield* attempt
                progress.standalone++
                progress.callStart = performance.now()
                const r = yield* Effect.either(engine.sendNotification(target, Stamp.stamp(session, seq, "standalone")))
                progress.callMs.push(performance.now() - progress.callStart)
                progress.callStart = 0
                if (r._tag === "Left") fail(r.left)
              }),
            { discard: true }
          )
          stream = yield* Effect.forkDaemon(
            Effect.gen(function* () {
              yield* Effect.all([transfers, standalone], { concurrency: 2, discard: true })
              const r = yield* Effect.either(engine.sendNotification(target, Stamp.end(session, progress.attempted)))
              progress.endSent = r._tag === "Right"
              if (r._tag === "Left") progress.lastError = r.left._tag
              progress.done = true
            }).pipe(Effect.catchAllCause(() => Effect.void))
          )
          return { ok: true }
        }
        case "progress": {
          const calls = progress.callMs.slice()
          if (progress.callStart > 0) calls.push(performance.now() - progress.callStart)
          let max = 0
          for (let i = 1; i < calls.length; i++) if ((calls[i] as number) > (calls[max] as number)) max = i
          const pendingNotify = (yield* diagnostics.endpoints).reduce((n, e) => n + e.pending, 0)
          return {
            attempted: progress.attempted,
            standalone: progress.standalone,
            held: progress.held,
            closedInFlight: rdma.closedInFlight,
            failed: progress.failed,
            lastError: progress.lastError,
            done: progress.done,
            endSent: progress.endSent,
            aborted: progress.aborted,
            pendingNotify,
            notifySent: rdma.sent,
            sendsCompleted: rdma.sendsCompleted,
            maxCallMs: calls[max] ?? 0,
            nextCallsMs: calls.slice(max + 1, max + 4)
          }
        }
        case "release":
          progress.held = false
          return { ok: true }
        case "abort": {
          progress.aborted = !progress.done
          if (stream !== undefined) yield* Fiber.interrupt(stream)
          return { ok: true }
        }
        case "timedSends": {
          const target = req.target as string
          const out: Array<{ ms: number; error: string | null }> = []
          for (let i = 0; i < (req.n as number); i++) {
            const t0 = performance.now()
            otherSent++
            const r = yield* Effect.either(
              engine.sendNotification(target, Stamp.stamp(req.session as number, i, "standalone"))
            )
            out.push({ ms: performance.now() - t0, error: r._tag === "Left" ? r.left._tag : null })
          }
          return { calls: out }
        }
        case "frozenTransfer": {
          const target = req.target as string
          const t0 = performance.now()
          otherSent++
          const batch = yield* engine.allocateBatch
          const r = yield* Effect.either(
            engine.submitTransfer(
              batch,
              [
                {
                  opcode: "WRITE",
                  source: segment.addr,
                  target,
                  targetOffset: req.remoteAddr as number,
                  length: TRANSFER_BYTES
                }
              ],
              Stamp.stamp(req.session as number, 0, "transfer")
            )
          )
          const submitMs = performance.now() - t0
          if (r._tag === "Left") return { submitMs, settledMs: submitMs, status: r.left._tag }
          const s = yield* engine.waitTransfer(batch, req.boundMs as number)
          return { submitMs, settledMs: performance.now() - t0, status: s.status }
        }
        case "loop": {
          const target = req.target as string
          loop = yield* Effect.forkDaemon(
            Effect.forever(
              Effect.suspend(() =>
                Effect.zipRight(
                  Effect.catchAll(
                    Effect.suspend(() => {
                      loopStartedAt.push(Date.now())
                      return engine.sendNotification(target, Stamp.stamp(req.session as number, loopSent++, "recovery"))
                    }),
                    () => Effect.sync(() => void loopFailed++)
                  ),
                  Effect.sleep(20)
                )
              )
            )
          )
          return { ok: true }
        }
        case "sentAfter": {
          const t = req.t as number
          const seq = loopStartedAt.findIndex((x) => x >= t)
          return { seq: seq === -1 ? null : seq }
        }
        case "paced": {
          // `count` standalone notifications, one every `everyMs`, each call timed; which returned ok, by seq.
          const target = req.target as string
          const session = req.session as number
          const count = req.count as number
          const everyMs = req.everyMs as number
          yield* Effect.forkDaemon(
            Effect.gen(function* () {
              for (let seq = 0; seq < count; seq++) {
                const t0 = performance.now()
                paced.sentAt.push(Date.now())
                const r = yield* Effect.either(engine.sendNotification(target, Stamp.stamp(session, seq, "standalone")))
                paced.maxCallMs = Math.max(paced.maxCallMs, performance.now() - t0)
                if (r._tag === "Right") paced.ok.push(seq)
                else paced.failed++
                yield* Effect.sleep(everyMs)
              }
              paced.done = true
            })
          )
          return { ok: true }
        }
        case "pacedResult": {
          return {
            done: paced.done,
            attempted: paced.ok.length + paced.failed,
            ok: req.full === true ? paced.ok : paced.ok.length,
            failed: paced.failed,
            maxCallMs: Math.round(paced.maxCallMs),
            undelivered: undelivered,
            unreceipted: diagnostics.counters.receipts?.unreceipted ?? 0,
            rdmaSent: rdma.sent,
            rebuilt: rdma.rebuilt
          }
        }
        case "stopLoop":
          if (loop !== undefined) yield* Fiber.interrupt(loop)
          return { sent: loopSent, failed: loopFailed, closedInFlight: rdma.closedInFlight }
        default:
          return { error: `unknown request ${String(req.cmd)}` }
      }
    })

  const lines = createInterface({ input: process.stdin })
  lines.on("line", (line) => {
    const req = JSON.parse(line) as Reply
    Effect.runPromise(
      handle(req).pipe(Effect.catchAllCause((c) => Effect.succeed({ error: String(c) } as Reply)))
    ).then((reply) => process.stdout.write(`${JSON.stringify({ id: req.id, ...reply })}\n`))
  })
  // The probe went away (or closed stdin to stop this node): leave at once.
  lines.on("close", () => process.exit(0))
  process.stdout.write(`${JSON.stringify({ segment: engine.segmentName, addr: segment.addr })}\n`)
  return yield* Effect.never
})

// Logs go to stderr: stdout carries the JSON lines.
const logger = Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.logfmtLogger))
Effect.runPromise(
  Effect.scoped(Effect.flatMap(Layer.build(layer), (ctx) => Effect.provide(program, ctx))).pipe(Effect.provide(logger))
).catch((e) => {
  process.stderr.write(`tent probe ${opts.role}: ${String(e)}\n`)
  process.exit(1)
})
