/**
 * Target `notify-slots`: `CtrlFrame` and TENT notify records written into a real engine's notify-QP receive slots. The
 * fuzzer is a peer: a SoftVerbs NIC of its own (`fz0`) with RC QPs, bootstrapped with the victim over the control plane
 * like any engine (its `BootstrapDesc` offers `notify_proto` 3, so the victim's poller decodes typed frames, failure
 * notices, held records and acks), whose notify QP SENDs the fuzzed payloads into the victim's receive slots: the
 * decoders behind them are the notify poller's (`NotifyPoller.ts`: `CtrlFrame.decodeAckInto`, `takeHeld`, the
 * `Dedup` seam's `CtrlFrame`/`NotifyFrame` decoders). Should the victim tear the channel down, the fuzzer bootstraps
 * again with a NIC path of its own. A real client — a `TransferEngine` on a NIC of its own — sends notifications to the
 * victim throughout; each must be delivered once.
 */
import { Series, TransferEngine } from "@tent/core"
import { type BootstrapDesc, makeNotification, RpcAgent, RpcConfig } from "@tent/rpc"
import {
  AccessFlags,
  type CompletionQueue,
  type MemoryRegion,
  QpAttrMask,
  QpState,
  QpType,
  type QueuePair,
  Rc,
  SendFlags,
  SoftVerbs,
  WcOpcode,
  WcStatus,
  WorkCompletion,
  WrOpcode
} from "@tent/verbs"
import { Context, Effect, Fiber, Layer } from "effect"
import * as EngineRun from "./EngineRun.js"
import * as NotifyInputs from "./NotifyInputs.js"
import { Prng } from "./Prng.js"
import type { TargetOptions, TargetResult } from "./Target.js"
import { CLIENT_PREFIX, type EngineStats, LANES } from "./victimEngine.js"

/** SENDs in flight on the fuzzer's notify QP. */
const WINDOW = 128
/** Receives the fuzzer keeps posted on its notify QP (the victim's acks land there). */
const RECVS = 32
const SLOT = NotifyInputs.SLOT_BYTES
const RECV_WR_BASE = 1 << 30

const hex = (gid: Uint8Array) => Array.from(gid, (b) => b.toString(16).padStart(2, "0")).join(":")
const parseGid = (text: string) => Uint8Array.from(text.split(":").map((h) => Number.parseInt(h, 16)))

/** The fuzzer as a peer: its NIC, QPs and slots. */
const attacker = Effect.gen(function* () {
  const { verbs } = yield* SoftVerbs.make({ devices: [{ name: "fz0", host: "127.0.0.1" }] })
  const ctx = yield* verbs.openDevice("fz0")
  const pd = yield* ctx.allocPd
  const cq = yield* ctx.createCq(4 * (WINDOW + RECVS))
  const gid = yield* ctx.queryGid(1, 0)
  const cap = { maxSendWr: WINDOW, maxRecvWr: RECVS, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 }
  const qp = () => pd.createQp({ sendCq: cq, recvCq: cq, qpType: QpType.RC, cap })
  const data: Array<QueuePair> = []
  for (let i = 0; i < LANES; i++) data.push(yield* qp())
  const notify = yield* qp()
  const slots = Buffer.alloc((WINDOW + RECVS) * SLOT)
  const mr = yield* pd.regMr(slots, AccessFlags.LOCAL_WRITE)
  return { gid, cq, data, notify, slots, mr }
})
type Attacker = Effect.Effect.Success<typeof attacker>

/** Bootstraps the attacker's QPs with the victim as `nicPath` and connects them; fails if the victim refuses. */
const bootstrap = (a: Attacker, agent: RpcAgent.RpcAgentShape, ready: EngineRun.EngineReady, nicPath: string) =>
  Effect.gen(function* () {
    const token = SoftVerbs.randomToken()
    const psns = a.data.map(() => Rc.randomPsn())
    const notifyPsn = Rc.randomPsn()
    for (const q of [...a.data, a.notify]) yield* q.modifyQp({ qpState: QpState.RESET }, QpAttrMask.STATE)
    const desc: BootstrapDesc = {
      local_nic_path: nicPath,
      peer_nic_path: `${ready.segment}@${ready.device}`,
      qp_num: a.data.map((q) => q.qpNum),
      local_lid: 0,
      local_gid: hex(a.gid),
      reply_msg: "",
      notify_qp_num: a.notify.qpNum,
      notify_proto: 3,
      notify_incarnation: "1",
      qp_psn: psns,
      notify_psn: notifyPsn,
      qp_token: String(token)
    }
    const reply = yield* agent.bootstrap(ready.address, desc)
    const gid = parseGid(reply.local_gid)
    const tokens = { local: token, remote: BigInt(reply.qp_token ?? "0") }
    for (let i = 0; i < a.data.length; i++) {
      const q = a.data[i] as QueuePair
      yield* SoftVerbs.setQpToken(q, tokens)
      const remote = { gid, qpNum: reply.qp_num[i] as number, psn: reply.qp_psn?.[i] ?? 0 }
      yield* Rc.connect(q, psns[i] as number, remote, Rc.defaultParams)
    }
    yield* SoftVerbs.setQpToken(a.notify, tokens)
    const remote = { gid, qpNum: reply.notify_qp_num, psn: reply.notify_psn ?? 0 }
    yield* Rc.connect(a.notify, notifyPsn, remote, Rc.defaultParams)
    for (let r = 0; r < RECVS; r++) postRecv(a.notify, a.mr, r)
  })

const postRecv = (qp: QueuePair, mr: MemoryRegion, r: number): void => {
  qp.postRecv({
    wrId: RECV_WR_BASE + r,
    sgList: [{ addr: mr.addr + (WINDOW + r) * SLOT, length: SLOT, lkey: mr.lkey }]
  })
}

/** The real client: a `TransferEngine` that sends a notification to the victim every 20 ms until stopped. */
const clientLoop = (segment: string, client: { rounds: number; errors: Array<string> }, stop: { done: boolean }) =>
  Effect.gen(function* () {
    const ctx = yield* Layer.build(
      TransferEngine.layerSoft({
        devices: [{ name: "fzc0" }],
        series: Series.all,
        config: { transports: { rdma: { num_lanes: LANES, device: { num_cq_list: 1 }, workers: { num_workers: 2 } } } }
      })
    )
    const engine = Context.get(ctx, TransferEngine.TransferEngine)
    while (!stop.done && client.errors.length < 20) {
      const k = client.rounds
      yield* engine
        .sendNotification(segment, makeNotification(`${CLIENT_PREFIX}${k}`, `round ${k}`))
        .pipe(
          Effect.catchAll((e) =>
            Effect.sync(() => client.errors.push(`round ${k}: ${String((e as Error).message ?? e)}`))
          )
        )
      client.rounds++
      yield* Effect.sleep("20 millis")
    }
  }).pipe(Effect.scoped)

/** Waits until the victim has delivered `count` client notifications (at most `ms`). */
const delivered = (victim: EngineRun.EngineVictim["victim"], count: number, ms: number) =>
  Effect.gen(function* () {
    const deadline = Date.now() + ms
    for (;;) {
      const s = yield* victim.request<EngineStats>({ cmd: "stats" })
      if (s.client.distinct >= count || Date.now() > deadline) return
      yield* Effect.sleep("100 millis")
    }
  }).pipe(Effect.ignore)

/** Runs the target. */
export const run = (o: TargetOptions): Effect.Effect<TargetResult, unknown> =>
  Effect.scoped(
    Effect.gen(function* () {
      const e = yield* EngineRun.start(o, "immediate")
      const { victim, ready } = e
      const agent = yield* Effect.provide(
        RpcAgent.make,
        RpcConfig.layer({ request_timeout_ms: 10_000, bootstrap_timeout_ms: 10_000, connect_timeout_ms: 5000 })
      )
      const a = yield* attacker
      let paths = 0
      const connect = Effect.suspend(() => bootstrap(a, agent, ready, `fz-attacker-${++paths}:1@fz0`)).pipe(
        Effect.retry({ times: 5 })
      )
      yield* connect
      const corpus = NotifyInputs.seeds()
      const baseline = yield* victim.request<EngineStats>({ cmd: "stats" })
      const stop = { done: false }
      const client = { rounds: 0, errors: [] as Array<string> }
      const clientFiber = yield* Effect.fork(clientLoop(ready.segment, client, stop))
      const counters = { posted: 0, completed: 0, failed: 0, reconnects: 0, stalls: 0, acksReceived: 0 }
      const progress = { done: 0, stop: false }
      const watching = yield* EngineRun.watch(
        "notify-slots",
        o,
        victim,
        progress,
        baseline.memory.rss,
        () => `${counters.reconnects} reconnects`
      )
      const rng = Prng.forTarget(o.seed, "notify-slots")
      const classes: Record<string, number> = {}
      const wc = WorkCompletion.array(64)
      const cq: CompletionQueue = a.cq
      const started = performance.now()
      let inFlight = 0
      let lastProgress = Date.now()
      // a failed SEND took the QP to ERR: nothing more is posted until the channel is set up again
      let broken = false
      while (progress.done < o.count && !progress.stop) {
        while (!broken && inFlight < WINDOW && counters.posted - counters.failed < o.count) {
          const slot = counters.posted % WINDOW
          const { bytes, what } = NotifyInputs.next(rng, corpus)
          const kind = what.split("/")[0] as string
          classes[kind] = (classes[kind] ?? 0) + 1
          bytes.copy(a.slots, slot * SLOT)
          const rc = a.notify.postSend({
            wrId: counters.posted,
            opcode: WrOpcode.SEND,
            sendFlags: SendFlags.SIGNALED,
            sgList: [{ addr: a.mr.addr + slot * SLOT, length: bytes.length, lkey: a.mr.lkey }]
          })
          if (rc !== 0) break
          counters.posted++
          inFlight++
        }
        const n = cq.pollCq(64, wc)
        for (let i = 0; i < n; i++) {
          const w = wc[i] as WorkCompletion
          if (w.wrId >= RECV_WR_BASE) {
            if (w.status === WcStatus.SUCCESS && w.opcode === WcOpcode.RECV) {
              counters.acksReceived++
              postRecv(a.notify, a.mr, w.wrId - RECV_WR_BASE)
            }
            continue
          }
          if (w.qpNum !== a.notify.qpNum) continue
          inFlight--
          if (w.status === WcStatus.SUCCESS) {
            counters.completed++
            progress.done++
            lastProgress = Date.now()
          } else {
            counters.failed++
            broken = true
          }
        }
        const stalled = n === 0 && Date.now() - lastProgress > 10_000
        if (stalled) counters.stalls++
        if ((broken && inFlight === 0) || stalled) {
          // the victim took the channel down (or stopped taking SENDs): a new endpoint, as a restarted peer would
          counters.reconnects++
          inFlight = 0
          broken = false
          while (cq.pollCq(64, wc) > 0) {
            // the flushed completions of the old connection
          }
          const ok = yield* Effect.either(connect)
          if (ok._tag === "Left") {
            progress.stop = true
            break
          }
          lastProgress = Date.now()
          continue
        }
        if (n === 0) yield* Effect.race(cq.awaitNotify, Effect.sleep("100 millis"))
      }
      const seconds = (performance.now() - started) / 1000
      yield* watching.stop
      stop.done = true
      yield* Fiber.join(clientFiber)
      yield* delivered(victim, client.rounds, 10_000)
      const end = yield* EngineRun.finish(
        e,
        baseline,
        watching.state.peakRss,
        {},
        { rounds: client.rounds, errors: client.errors },
        client.rounds
      )
      const violations = end.violations
      if (progress.done < o.count) violations.push(`only ${progress.done} of ${o.count} SENDs completed`)
      if (counters.stalls > 0) violations.push(`the victim took no SEND for 10 s (${counters.stalls} times)`)
      const rdma = end.final?.counters.rdma as Record<string, number> | undefined
      return {
        target: "notify-slots",
        seed: o.seed,
        inputs: progress.done,
        seconds,
        rate: progress.done / seconds,
        connections: paths,
        counters: {
          inputs: classes,
          sends: counters,
          poller: rdma,
          framesRejected: end.final?.framesRejected,
          dedup: end.final?.counters.dedup,
          receipts: end.final?.counters.receipts,
          immediates: end.final?.counters.immediates,
          fuzzNotificationsDelivered: end.final?.otherNotifications,
          endpoints: end.final?.endpoints,
          injected: watching.state.injected ? o.inject : undefined,
          victimLog: victim.logLines()
        },
        memory: end.memory,
        regions: end.regions,
        client: { rounds: client.rounds, errors: client.errors },
        violations,
        samples: violations.length > 0 ? [victim.stderr().slice(-2000)] : []
      } satisfies TargetResult
    })
  )
