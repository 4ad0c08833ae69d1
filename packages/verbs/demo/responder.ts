/**
 * The demo's responder process: one SoftVerbs device, an RC QP, a registered buffer that the initiator may write.
 * It talks to the demo over Node's IPC channel: it sends its connection details, receives the initiator's.
 */
import { Effect } from "effect"
import {
  AccessFlags,
  gidFromString,
  gidToString,
  Rc,
  SoftVerbs,
  WcOpcode,
  WorkCompletion,
  WrOpcode,
  wcStatusName
} from "../src/index.js"

const say = (line: string) => process.send?.({ log: line })

const program = Effect.gen(function* () {
  const { control, verbs } = yield* SoftVerbs.make({ devices: [{ name: "soft1" }] })
  const { ctx, pd, cq, qp } = yield* Rc.open(verbs, "soft1", { cqe: 256, maxSendWr: 64, maxRecvWr: 64 })
  const buf = Buffer.alloc(1 << 20)
  const mr = yield* pd.regMr(buf, AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE)
  const psn = Rc.randomPsn()
  const gid = gidToString(yield* ctx.queryGid(1, 0))
  say(
    `opened ${ctx.device.name} at ${yield* control.address("soft1")}, QP ${qp.qpNum}, MR rkey 0x${mr.rkey.toString(16)}`
  )

  const peer = yield* Effect.async<{ gid: string; qpNum: number; psn: number }>((resume) => {
    process.once("message", (m) => resume(Effect.succeed(m as { gid: string; qpNum: number; psn: number })))
    process.send?.({ ready: { gid, qpNum: qp.qpNum, psn, addr: mr.addr, rkey: mr.rkey } })
  })
  yield* Rc.connect(qp, psn, { gid: gidFromString(peer.gid) as Uint8Array, qpNum: peer.qpNum, psn: peer.psn })
  for (let i = 0; i < 8; i++)
    qp.postRecv({ wrId: i, sgList: [{ addr: mr.addr + 0x80000 + i * 4096, length: 4096, lkey: mr.lkey }] })
  say("QP is RTS; 8 RECVs posted")

  const reply = Buffer.from("hello back from the responder")
  buf.set(reply, 0xf0000)
  const wc = WorkCompletion.array(8)
  cq.setNotify(() => {
    const n = cq.pollCq(8, wc)
    for (let i = 0; i < n; i++) {
      const w = wc[i] as WorkCompletion
      if (w.opcode === WcOpcode.RECV) {
        const text = buf.toString("utf8", 0x80000 + w.wrId * 4096, 0x80000 + w.wrId * 4096 + w.byteLen)
        say(`RECV ${w.byteLen} bytes: "${text}" (${wcStatusName(w.status)})`)
        qp.postSend({
          wrId: 100,
          opcode: WrOpcode.SEND,
          sendFlags: 2,
          sgList: [{ addr: mr.addr + 0xf0000, length: reply.length, lkey: mr.lkey }]
        })
      } else if (w.opcode === WcOpcode.RECV_RDMA_WITH_IMM) {
        let sum = 0
        for (let k = 0; k < w.byteLen; k++) sum = (sum + (buf[0x10000 + k] as number)) >>> 0
        say(`RDMA WRITE_WITH_IMM landed: ${w.byteLen} bytes, immediate 0x${w.immData.toString(16)}, checksum ${sum}`)
        process.send?.({ checksum: sum })
      } else {
        say(`send completion wr_id ${w.wrId}: ${wcStatusName(w.status)}`)
      }
    }
    cq.reqNotifyCq()
  })
  cq.reqNotifyCq()
  process.on("disconnect", () => process.exit(0))
  yield* Effect.never
})

Effect.runPromise(Effect.scoped(program)).catch((e) => {
  say(`failed: ${String(e)}`)
  process.exit(1)
})
