/**
 * The far side of the verbs benchmark, in its own process. It serves both the floor (plain `node:dgram`) and
 * SoftVerbs, and prints one JSON line with its addresses, then takes JSON-line requests on stdin.
 *
 * dgram: a datagram starting with `P` is echoed back. Any other is a stream datagram `[u8 'S'][3 pad][u32 run][u32
 * seq]`: it is counted for its run (a new run number starts the count at 0), and one 12-byte ACK `[u32 run][u32
 * received in the run][u32 highest seq + 1]` is sent per event-loop turn (the windowed floor's flow control). The
 * sender credits its window from the highest seq, so a lost datagram does not hold a slot for the rest of the run.
 * SoftVerbs: RECVs are reposted as they complete; a message starting with `P` is answered with a 64-byte SEND.
 */
import * as dgram from "node:dgram"
import type { AddressInfo } from "node:net"
import { createInterface } from "node:readline"
import { Effect } from "effect"
import {
  AccessFlags,
  gidFromString,
  gidToString,
  Rc,
  type RecvWr,
  type SendWr,
  SoftVerbs,
  WorkCompletion,
  WrOpcode
} from "../src/index.js"

const SLOT = 4096
const RECVS = 2048
const MB = 1 << 20

const program = Effect.gen(function* () {
  // The floor: a plain UDP socket.
  const sock = dgram.createSocket("udp4")
  yield* Effect.promise(() => new Promise<void>((r) => sock.bind(0, "127.0.0.1", () => r())))
  sock.setRecvBufferSize(4 * MB)
  sock.setSendBufferSize(4 * MB)
  let run = -1
  let counted = 0
  let next = 0
  let ackQueued = false
  let ackTo: { port: number; address: string } = { port: 0, address: "" }
  const ack = Buffer.alloc(12)
  const flushAck = () => {
    ackQueued = false
    ack.writeUInt32LE(run >>> 0, 0)
    ack.writeUInt32LE(counted >>> 0, 4)
    ack.writeUInt32LE(next >>> 0, 8)
    sock.send(ack, ackTo.port, ackTo.address)
  }
  sock.on("message", (msg, rinfo) => {
    if (msg[0] === 0x50) {
      sock.send(msg, rinfo.port, rinfo.address)
      return
    }
    // Malformed stream datagrams are dropped uncounted.
    if (msg.length < 12) return
    const r = msg.readUInt32LE(4)
    if (r !== run) {
      run = r
      counted = 0
      next = 0
    }
    counted++
    next = Math.max(next, msg.readUInt32LE(8) + 1)
    if (!ackQueued) {
      ackQueued = true
      ackTo = rinfo
      setImmediate(flushAck)
    }
  })

  // SoftVerbs.
  const { verbs } = yield* SoftVerbs.make({ devices: [{ name: "bench1" }] })
  const { ctx, pd, cq, qp } = yield* Rc.open(verbs, "bench1", {
    cqe: 8192,
    maxSendWr: 1024,
    maxRecvWr: RECVS,
    maxInlineData: 64
  })
  const recvBuf = Buffer.alloc(SLOT * RECVS)
  const writeBuf = Buffer.alloc(64 * MB)
  const access = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE
  const recvMr = yield* pd.regMr(recvBuf, access)
  const writeMr = yield* pd.regMr(writeBuf, access)
  const pong = Buffer.alloc(64, 0x51)
  const pongMr = yield* pd.regMr(pong, AccessFlags.LOCAL_WRITE)
  const psn = Rc.randomPsn()
  const recvSge = { addr: 0, length: SLOT, lkey: recvMr.lkey }
  const recvWr: RecvWr = { wrId: 0, sgList: [recvSge] }
  const repost = (slot: number) => {
    recvWr.wrId = slot
    recvSge.addr = recvMr.addr + slot * SLOT
    qp.postRecv(recvWr)
  }
  const pongWr: SendWr = {
    wrId: 0,
    opcode: WrOpcode.SEND,
    sendFlags: 0,
    sgList: [{ addr: pongMr.addr, length: 64, lkey: pongMr.lkey }]
  }
  let sends = 0
  const wc = WorkCompletion.array(64)
  cq.setNotify(() => {
    for (;;) {
      const n = cq.pollCq(64, wc)
      for (let i = 0; i < n; i++) {
        const w = wc[i] as WorkCompletion
        if (w.opcode < 128) continue
        const slot = w.wrId
        const ping = recvBuf[slot * SLOT] === 0x50
        repost(slot)
        if (ping) {
          // Signal one pong in 64 so that the send queue's completions are reaped.
          pongWr.sendFlags = ++sends % 64 === 0 ? 2 : 0
          qp.postSend(pongWr)
        }
      }
      if (n < 64) break
    }
    cq.reqNotifyCq()
  })
  cq.reqNotifyCq()
  const gid = gidToString(yield* ctx.queryGid(1, 0))

  const lines = createInterface({ input: process.stdin })
  lines.on("line", (line) => {
    const req = JSON.parse(line) as { cmd: string; gid: string; qpNum: number; psn: number }
    if (req.cmd === "connect") {
      const remote = { gid: gidFromString(req.gid) as Uint8Array, qpNum: req.qpNum, psn: req.psn }
      Effect.runPromise(Rc.connect(qp, psn, remote)).then(
        () => {
          for (let i = 0; i < RECVS; i++) repost(i)
          process.stdout.write(`${JSON.stringify({ ok: true })}\n`)
        },
        (e) => process.stdout.write(`${JSON.stringify({ error: String(e) })}\n`)
      )
    }
  })
  lines.on("close", () => process.exit(0))
  process.stdout.write(
    `${JSON.stringify({
      dgramPort: (sock.address() as AddressInfo).port,
      gid,
      qpNum: qp.qpNum,
      psn,
      writeAddr: writeMr.addr,
      writeRkey: writeMr.rkey,
      writeLen: writeBuf.length
    })}\n`
  )
  yield* Effect.never
})

Effect.runPromise(Effect.scoped(program)).catch((e) => {
  process.stderr.write(`bench peer failed: ${String(e)}\n`)
  process.exit(1)
})
