/**
 * The floor's peer: one SoftVerbs device, one RC QP that echoes every SEND it receives, and a 64 MiB buffer open to
 * RDMA WRITE. Prints `{gid, qpNum, psn, addr, rkey}`, then takes `{"cmd":"connect",...}` on stdin.
 */
import { createInterface } from "node:readline"
import { AccessFlags, gidFromString, gidToString, Rc, SoftVerbs, WorkCompletion, WrOpcode } from "@tent/verbs"
import { Effect } from "effect"

const SLOT = 256
const SLOTS = 4096

const program = Effect.gen(function* () {
  const { verbs } = yield* SoftVerbs.make({ devices: [{ name: "echo0" }] })
  const { ctx, pd, cq, qp } = yield* Rc.open(verbs, "echo0", { cqe: 16384, maxSendWr: SLOTS, maxRecvWr: SLOTS })
  const ring = Buffer.alloc(SLOT * SLOTS)
  const ringMr = yield* pd.regMr(ring, AccessFlags.LOCAL_WRITE)
  const sink = Buffer.alloc(64 << 20)
  const sinkMr = yield* pd.regMr(sink, AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE)
  const psn = Rc.randomPsn()
  const gid = yield* ctx.queryGid(1, 0)
  const wc = WorkCompletion.array(64)
  const rsge = { addr: 0, length: SLOT, lkey: ringMr.lkey }
  const rwr = { wrId: 0, sgList: [rsge] }
  const ssge = { addr: 0, length: 0, lkey: ringMr.lkey }
  const swr = { wrId: 0, opcode: WrOpcode.SEND, sendFlags: 2, sgList: [ssge] }
  const repost = (i: number) => {
    rwr.wrId = i
    rsge.addr = ringMr.addr + i * SLOT
    qp.postRecv(rwr)
  }
  cq.setNotify(() => {
    for (;;) {
      const n = cq.pollCq(64, wc)
      for (let i = 0; i < n; i++) {
        const w = wc[i] as WorkCompletion
        if (w.opcode !== 128 || w.status !== 0) continue
        ssge.addr = ringMr.addr + w.wrId * SLOT
        ssge.length = w.byteLen
        qp.postSend(swr)
        repost(w.wrId)
      }
      if (n < 64) break
    }
    cq.reqNotifyCq()
  })
  cq.reqNotifyCq()
  const lines = createInterface({ input: process.stdin })
  lines.on("line", (line) => {
    const req = JSON.parse(line) as { gid: string; qpNum: number; psn: number }
    Effect.runPromise(
      Rc.connect(qp, psn, { gid: gidFromString(req.gid) as Uint8Array, qpNum: req.qpNum, psn: req.psn })
    ).then(() => {
      for (let i = 0; i < SLOTS; i++) repost(i)
      process.stdout.write(`${JSON.stringify({ ok: true })}\n`)
    })
  })
  lines.on("close", () => process.exit(0))
  process.stdout.write(
    `${JSON.stringify({ gid: gidToString(gid), qpNum: qp.qpNum, psn, addr: sinkMr.addr, rkey: sinkMr.rkey })}\n`
  )
  yield* Effect.never
})

Effect.runPromise(Effect.scoped(program)).catch((e) => {
  process.stderr.write(`echo-peer failed: ${String(e)}\n`)
  process.exit(1)
})
