/**
 * A soak child: one engine node built as `tent serve` builds it (`Node.makeNode`: two SoftVerbs devices, each on its
 * rail's address, the control plane on its own, the arm's policies, the configuration from a file), in a network
 * namespace, driven over JSON lines on stdin/stdout. No fault is made from in here: the soak makes them with the
 * kernel and signals.
 *
 * Receiver: appends a line `seq at rdma` to its log file as it admits each stamped notification (synchronously, so a
 * process killed mid-stream leaves what it admitted). Sender: `open`, `run` (the paced stream), `progress`, `retarget`,
 * `result` (writes every call and every `Undelivered` to files).
 *
 * Planted faults, for the soak's own test only: `dropEvery` (the receiver leaves every n-th admitted notification out
 * of its log, as an application that loses one) and `duplicateSeq` (the sender sends that seq twice).
 *
 * @since 0.2.0
 */
import { appendFileSync, writeFileSync } from "node:fs"
import { createInterface } from "node:readline"
import { Effect, Logger, Option } from "effect"
import { makeNode } from "../Node.js"
import * as Stamp from "../probe/Stamp.js"

interface Options {
  readonly role: "receiver" | "sender"
  readonly arm: "legacy" | "series"
  readonly configFile: string
  readonly host: string
  readonly rails: readonly [string, string]
  readonly logFile?: string
  readonly dropEvery?: number
  readonly duplicateSeq?: number
}

if (process.env.TENT_SOAK_CHILD !== "1") {
  process.stderr.write("this is a tent soak child process; run `tent soak` instead\n")
  process.exit(2)
}
const opts = JSON.parse(process.argv[2] ?? "{}") as Options
const TRANSFER_BYTES = 4096
const SLOTS = 64
/** Calls in flight at most (the pacing waits for a free one: a stalled peer stalls the stream). */
const IN_FLIGHT = 16

type Reply = Record<string, unknown>

interface CallRecord {
  seq: number
  kind: "standalone" | "transfer"
  start: number
  end: number
  ok: boolean
  error: string
}

const program = Effect.gen(function* () {
  const { engine, diagnostics } = yield* makeNode({
    config: Option.some(opts.configFile),
    provider: "soft",
    arm: opts.arm,
    softDevices: Option.some("soft0,soft1"),
    host: Option.some(opts.host),
    deviceHosts: Option.some(`soft0=${opts.rails[0]},soft1=${opts.rails[1]}`)
  })
  const rdma = diagnostics.counters.rdma as NonNullable<typeof diagnostics.counters.rdma>
  const memory = Buffer.alloc(SLOTS * TRANSFER_BYTES)
  const segment = yield* engine.registerSegment(memory)

  if (opts.role === "receiver") {
    const logFile = opts.logFile as string
    let admitted = 0
    yield* engine.subscribe(
      (n) => {
        const d = Stamp.decode(n)
        if (d._tag !== "Stamp") return
        admitted++
        if (opts.dropEvery !== undefined && admitted % opts.dropEvery === 0) return
        appendFileSync(logFile, `${d.seq} ${Date.now()} ${rdma.received}\n`)
      },
      { consume: true }
    )
  }

  const undelivered: Array<string> = []
  yield* engine.onUndelivered((u) => {
    const d = Stamp.decode({ name: u.name, msg: u.msg })
    if (d._tag === "Stamp") undelivered.push(`${d.seq} ${u.reason} ${Date.now()}`)
  })
  const calls: Array<CallRecord> = []
  const state = { attempted: 0, done: false, remoteAddr: 0, inFlight: 0 }

  const oneCall = (target: string, session: number, seq: number, kind: CallRecord["kind"]) =>
    Effect.gen(function* () {
      const rec: CallRecord = { seq, kind, start: Date.now(), end: -1, ok: false, error: "" }
      calls.push(rec)
      if (kind === "standalone") {
        const r = yield* Effect.either(engine.sendNotification(target, Stamp.stamp(session, seq, "standalone")))
        if (seq === opts.duplicateSeq)
          yield* Effect.either(engine.sendNotification(target, Stamp.stamp(session, seq, "standalone")))
        rec.ok = r._tag === "Right"
        rec.error = r._tag === "Left" ? r.left._tag : ""
      } else {
        const batch = yield* engine.allocateBatch
        const off = (seq % SLOTS) * TRANSFER_BYTES
        const request = {
          opcode: "WRITE",
          source: segment.addr + off,
          target,
          targetOffset: state.remoteAddr + off,
          length: TRANSFER_BYTES
        } as const
        const r = yield* Effect.either(engine.submitTransfer(batch, [request], Stamp.stamp(session, seq, "transfer")))
        if (r._tag === "Left") rec.error = r.left._tag
        else {
          const s = yield* Effect.either(engine.waitTransfer(batch, 30_000))
          rec.ok = s._tag === "Right" && s.right.status === "COMPLETED"
          rec.error = rec.ok ? "" : s._tag === "Left" ? s.left._tag : s.right.status
        }
        yield* engine.freeBatch(batch)
      }
      rec.end = Date.now()
    })

  const handle = (req: Reply): Effect.Effect<Reply, unknown> =>
    Effect.gen(function* () {
      switch (req.cmd) {
        case "open": {
          // The peer may still be starting: a few tries, each bounded by the engine's own timeouts.
          const target = req.target as string
          let last = ""
          for (let i = 0; i < 20; i++) {
            const r = yield* Effect.either(
              Effect.zipRight(
                engine.openSegment(target),
                engine.sendNotification(target, { name: new Uint8Array([119]), msg: new Uint8Array(0) })
              )
            )
            if (r._tag === "Right") return { ok: true }
            last = r.left._tag
            yield* Effect.sleep(250)
          }
          return { error: `cannot reach ${target}: ${last}` }
        }
        case "retarget":
          state.remoteAddr = req.remoteAddr as number
          return { ok: true }
        case "run": {
          const target = req.target as string
          const session = req.session as number
          const count = req.count as number
          const rate = req.rate as number
          const transferEvery = req.transferEvery as number
          const deadline = Date.now() + (req.deadlineMs as number)
          state.remoteAddr = req.remoteAddr as number
          yield* Effect.forkDaemon(
            Effect.gen(function* () {
              const sem = yield* Effect.makeSemaphore(IN_FLIGHT)
              const t0 = Date.now()
              for (let seq = 0; seq < count && Date.now() < deadline; seq++) {
                const due = t0 + (seq * 1000) / rate
                const wait = due - Date.now()
                if (wait > 0) yield* Effect.sleep(wait)
                yield* sem.take(1)
                state.attempted++
                state.inFlight++
                const kind = transferEvery > 0 && seq % transferEvery === 0 ? "transfer" : "standalone"
                yield* Effect.forkDaemon(
                  oneCall(target, session, seq, kind).pipe(
                    Effect.catchAllCause(() => Effect.void),
                    Effect.ensuring(
                      Effect.zipRight(
                        sem.release(1),
                        Effect.sync(() => {
                          state.inFlight--
                        })
                      )
                    )
                  )
                )
              }
              state.done = true
            })
          )
          return { ok: true }
        }
        case "progress": {
          let ok = 0
          let failed = 0
          for (const c of calls) if (c.end >= 0) c.ok ? ok++ : failed++
          return {
            attempted: state.attempted,
            ok,
            failed,
            inFlight: state.inFlight,
            done: state.done,
            undelivered: undelivered.length,
            unreceipted: diagnostics.counters.receipts?.unreceipted ?? 0,
            rdmaSent: rdma.sent
          }
        }
        case "result": {
          writeFileSync(
            req.callsFile as string,
            calls.map((c) => `${c.seq} ${c.kind} ${c.start} ${c.end} ${c.ok ? 1 : 0} ${c.error || "-"}`).join("\n")
          )
          writeFileSync(req.undeliveredFile as string, undelivered.join("\n"))
          return { calls: calls.length, undelivered: undelivered.length }
        }
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
  // The soak went away (or closed stdin to stop this node): leave at once.
  lines.on("close", () => process.exit(0))
  process.stdout.write(`${JSON.stringify({ segment: engine.segmentName, addr: segment.addr, pid: process.pid })}\n`)
  return yield* Effect.never
})

// Logs go to stderr: stdout carries the JSON lines.
const logger = Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.logfmtLogger))
Effect.runPromise(Effect.scoped(program).pipe(Effect.provide(logger))).catch((e) => {
  process.stderr.write(`tent soak ${opts.role}: ${String(e)}\n`)
  process.exit(1)
})
