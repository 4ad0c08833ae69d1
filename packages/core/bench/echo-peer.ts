/**
 * The floor's peer: two SoftVerbs devices (`echo0`, `echo1`, the engine's two rails), one RC QP on each, and a 64 MiB
 * buffer open to RDMA WRITE on both. The QP on `echo0` echoes every SEND it receives; the one on `echo1` only takes
 * WRITEs. Prints `{rails: [{gid, qpNum, psn, addr, rkey}, ...]}`, then takes
 * `{"cmd":"connect","rails":[{gid, qpNum, psn}, ...]}` on stdin (one entry per rail, in order).
 */
import { createInterface } from "node:readline"
import { AccessFlags, gidFromString, gidToString, Rc, SoftVerbs, WorkCompletion, WrOpcode } from "@tent/verbs"
import { Effect } from "effect"

const SLOT = 256
const SLOTS = 4096
const RAILS = ["echo0", "echo1"]

const program = Effect.gen(function* () {
  const { verbs } = yield* SoftVerbs.make({ devices: RAILS.map((name) => ({ name })) })
  const sink = Buffer.alloc(64 << 20)
  const rails = yield* Effect.forEach(RAILS, (name) =>
    Effect.gen(function* () {
      const { ctx, pd, cq, qp } = yield* Rc.open(verbs, name, { cqe: 16384, maxSendWr: SLOTS, maxRecvWr: SLOTS })
      const sinkMr = yield* pd.regMr(sink, AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE)
      const gid = yield* ctx.queryGid(1, 0)
      return { pd, cq, qp, sinkMr, gid, psn: Rc.randomPsn() }
    })
  )
  const { pd, cq, qp } = rails[0] as (typeof rails)[number]
  const ring = Buffer.alloc(SLOT * SLOTS)
  const ringMr = yield* pd.regMr(ring, AccessFlags.LOCAL_WRITE)
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
    const req = JSON.parse(line) as { rails?: ReadonlyArray<{ gid: string; qpNum: number; psn: number }> }
    const remote = req.rails ?? []
    if (remote.length !== rails.length) {
      process.stdout.write(`${JSON.stringify({ error: `${remote.length} rails given, ${rails.length} expected` })}\n`)
      return
    }
    Effect.runPromise(
      Effect.forEach(rails, (r, i) => {
        const peer = remote[i] as { gid: string; qpNum: number; psn: number }
        return Rc.connect(r.qp, r.psn, { gid: gidFromString(peer.gid) as Uint8Array, qpNum: peer.qpNum, psn: peer.psn })
      })
    ).then(
      () => {
        for (let i = 0; i < SLOTS; i++) repost(i)
        process.stdout.write(`${JSON.stringify({ ok: true })}\n`)
      },
      (e) => process.stdout.write(`${JSON.stringify({ error: String(e) })}\n`)
    )
  })
  lines.on("close", () => process.exit(0))
  process.stdout.write(
    `${JSON.stringify({
      rails: rails.map((r) => ({
        gid: gidToString(r.gid),
        qpNum: r.qp.qpNum,
        psn: r.psn,
        addr: r.sinkMr.addr,
        rkey: r.sinkMr.rkey
      }))
    })}\n`
  )
  yield* Effect.never
})

Effect.runPromise(Effect.scoped(program)).catch((e) => {
  process.stderr.write(`echo-peer failed: ${String(e)}\n`)
  process.exit(1)
})
