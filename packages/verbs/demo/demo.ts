/**
 * `pnpm demo`: two Node processes on this host, each with a SoftVerbs device (a user-space RC NIC over UDP), connect
 * an RC QP pair, exchange SENDs and an RDMA WRITE, then show what a dead peer does to an RC QP: the responder is
 * frozen with a real SIGSTOP and the initiator's work request fails RETRY_EXC_ERR after the IB retry budget.
 */
import { fork } from "node:child_process"
import { fileURLToPath, pathToFileURL } from "node:url"
import { Effect } from "effect"
import {
  AccessFlags,
  ackTimeoutMs,
  gidFromString,
  gidToString,
  Rc,
  SoftVerbs,
  WcStatus,
  WorkCompletion,
  WrOpcode,
  wcStatusName
} from "../src/index.js"

interface Ready {
  readonly gid: string
  readonly qpNum: number
  readonly psn: number
  readonly addr: number
  readonly rkey: number
}

const t0 = performance.now()
const stamp = () => `${((performance.now() - t0) / 1000).toFixed(3).padStart(7)}s`
const log = (who: string, line: string) => console.log(`${stamp()} [${who}] ${line}`)

const root = fileURLToPath(new URL("../../../", import.meta.url))
const tsx = pathToFileURL(`${root}node_modules/tsx/dist/loader.mjs`).href

const program = Effect.gen(function* () {
  const child = yield* Effect.acquireRelease(
    Effect.sync(() =>
      fork(fileURLToPath(new URL("responder.ts", import.meta.url)), [], { execArgv: ["--import", tsx] })
    ),
    (c) =>
      Effect.sync(() => {
        c.kill("SIGCONT")
        c.kill("SIGKILL")
      })
  )
  const messages: Array<Record<string, unknown>> = []
  const waiters: Array<() => void> = []
  child.on("message", (m: Record<string, unknown>) => {
    if (typeof m.log === "string") log("responder", m.log)
    else messages.push(m)
    for (const w of waiters.splice(0)) w()
  })
  const next = <A>(key: string) =>
    Effect.async<A, Error>((resume) => {
      const check = () => {
        const i = messages.findIndex((m) => key in m)
        if (i >= 0) resume(Effect.succeed((messages.splice(i, 1)[0] as Record<string, A>)[key] as A))
        else waiters.push(check)
      }
      check()
    }).pipe(
      Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error(`no "${key}" from the responder`) })
    )
  log("initiator", `started the responder as process ${child.pid}`)

  const { control, verbs } = yield* SoftVerbs.make({ devices: [{ name: "soft0" }] })
  const { ctx, pd, cq, qp } = yield* Rc.open(verbs, "soft0", { cqe: 256, maxSendWr: 64, maxRecvWr: 64 })
  const buf = Buffer.alloc(1 << 20)
  const mr = yield* pd.regMr(buf, AccessFlags.LOCAL_WRITE)
  const psn = Rc.randomPsn()
  log("initiator", `opened ${ctx.device.name} at ${yield* control.address("soft0")}, QP ${qp.qpNum}`)

  const peer = yield* next<Ready>("ready")
  child.send({ gid: gidToString(yield* ctx.queryGid(1, 0)), qpNum: qp.qpNum, psn })
  yield* Rc.connect(qp, psn, { gid: gidFromString(peer.gid) as Uint8Array, qpNum: peer.qpNum, psn: peer.psn })
  log("initiator", `QP ${qp.qpNum} is RTS towards QP ${peer.qpNum} at GID ${peer.gid}`)
  qp.postRecv({ wrId: 1, sgList: [{ addr: mr.addr + 0x8000, length: 4096, lkey: mr.lkey }] })

  const wc = WorkCompletion.array(8)
  const completions = (n: number, timeoutMs: number) =>
    Effect.gen(function* () {
      const out: Array<WorkCompletion> = []
      const deadline = Date.now() + timeoutMs
      while (out.length < n && Date.now() < deadline) {
        const got = cq.pollCq(8, wc)
        for (let i = 0; i < got; i++) out.push(Object.assign(new WorkCompletion(), wc[i]))
        if (got === 0) yield* cq.awaitNotify.pipe(Effect.timeoutOption(Math.max(1, deadline - Date.now())))
      }
      return out
    })

  // 1. A SEND; the responder answers with a SEND of its own.
  const hello = Buffer.from("hello from the initiator")
  buf.set(hello, 0)
  qp.postSend({
    wrId: 10,
    opcode: WrOpcode.SEND,
    sendFlags: 2,
    sgList: [{ addr: mr.addr, length: hello.length, lkey: mr.lkey }]
  })
  for (const w of yield* completions(2, 5000)) {
    if (w.opcode === 128) {
      log("initiator", `RECV ${w.byteLen} bytes: "${buf.toString("utf8", 0x8000, 0x8000 + w.byteLen)}"`)
    } else {
      log("initiator", `SEND wr_id ${w.wrId} completed: ${wcStatusName(w.status)}`)
    }
  }

  // 2. A 64 KiB RDMA WRITE with immediate into the responder's registered memory.
  let sum = 0
  for (let i = 0; i < 65536; i++) {
    buf[0x10000 + i] = (i * 131 + 7) & 0xff
    sum = (sum + (buf[0x10000 + i] as number)) >>> 0
  }
  qp.postSend({
    wrId: 11,
    opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
    sendFlags: 2,
    immData: 0x7e57,
    remoteAddr: peer.addr + 0x10000,
    rkey: peer.rkey,
    sgList: [{ addr: mr.addr + 0x10000, length: 65536, lkey: mr.lkey }]
  })
  const [written] = yield* completions(1, 5000)
  log("initiator", `RDMA WRITE_WITH_IMM of 64 KiB completed: ${wcStatusName(written?.status ?? -1)} (checksum ${sum})`)
  const theirs = yield* next<number>("checksum")
  log("initiator", theirs === sum ? "the responder's bytes match" : `MISMATCH: responder saw checksum ${theirs}`)

  // 3. A frozen peer: SIGSTOP the responder; RC retries 7 times at 4.096 us x 2^14, then gives up.
  child.kill("SIGSTOP")
  log(
    "initiator",
    `froze the responder (SIGSTOP); sending anyway, retry_cnt 7, timeout 14 = ${ackTimeoutMs(14).toFixed(1)} ms`
  )
  const sentAt = performance.now()
  qp.postSend({
    wrId: 12,
    opcode: WrOpcode.SEND,
    sendFlags: 2,
    sgList: [{ addr: mr.addr, length: hello.length, lkey: mr.lkey }]
  })
  const [failed] = yield* completions(1, 10_000)
  log(
    "initiator",
    `wr_id 12 completed ${wcStatusName(failed?.status ?? -1)} after ${(performance.now() - sentAt).toFixed(0)} ms; QP state ${qp.state === 6 ? "ERR" : qp.state}`
  )
  child.kill("SIGCONT")
  log(
    "initiator",
    "resumed the responder (SIGCONT): it drains the stale packets and carries on; the message the initiator gave up on may still be delivered (an RC error leaves the outcome unknown: the engine must deduplicate resends)"
  )
  yield* Effect.sleep("300 millis")
  const c = yield* control.counters("soft0")
  log("initiator", `counters: ${c.txPackets} packets sent, ${c.rxPackets} received, ${c.retransmits} retransmits`)
  if (failed?.status !== WcStatus.RETRY_EXC_ERR || theirs !== sum) return yield* Effect.fail(new Error("demo failed"))
  log("initiator", "done")
})

Effect.runPromise(Effect.scoped(program)).then(
  () => process.exit(0),
  (e) => {
    console.error(`demo failed: ${String(e)}`)
    process.exit(1)
  }
)
