import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { WcStatus } from "../src/index.js"
import { Flag, HDR, Op, writeHeader } from "../src/soft/Packet.js"
import { makePair, pollN, recvWr, sendWr, udpSocket, waitFor } from "./support.js"

/** A plain UDP socket on 127.0.0.1 that throws datagrams at a device. */
const attacker = udpSocket

const packet = (op: number, flags: number, dstQpn: number, srcQpn: number, psn: number, payload = 0): Buffer => {
  const b = Buffer.alloc(HDR + payload)
  writeHeader(b, op, flags, 0, dstQpn, srcQpn, psn, 0, 0, 0, payload, 0, 0, payload)
  return b
}

describe("SoftVerbs malformed datagrams (rule 11)", () => {
  it.scopedLive("short, unknown version or op, bad lengths and unknown QPNs are counted and dropped", () =>
    Effect.gen(function* () {
      const { a, b, control } = yield* makePair()
      const sock = yield* attacker
      const port = Number((yield* control.address("b")).split(":")[1])
      const good = packet(Op.SEND, Flag.FIRST | Flag.LAST, b.qp.qpNum, a.qp.qpNum, 0, 8)
      const badVersion = Buffer.from(good)
      badVersion[0] = 9
      const badOp = Buffer.from(good)
      badOp[1] = 77
      const lengthPastEnd = Buffer.from(good)
      lengthPastEnd.writeUInt16LE(5000, 44)
      const offsetPastMessage = Buffer.from(good)
      offsetPastMessage.writeUInt32LE(100, 40)
      const unknownQpn = packet(Op.SEND, Flag.FIRST | Flag.LAST, 0xfffff0, a.qp.qpNum, 0, 8)
      const datagrams = [
        Buffer.alloc(0),
        Buffer.alloc(3),
        badVersion,
        badOp,
        lengthPastEnd,
        offsetPastMessage,
        unknownQpn
      ]
      for (const d of datagrams) sock.send(d, port, "127.0.0.1")
      // A well-formed packet from the wrong address is not the connected peer's.
      sock.send(good, port, "127.0.0.1")
      const c = b.device.counters
      expect(yield* waitFor(() => c.rxPackets >= datagrams.length + 1)).toBe(true)
      expect(c).toMatchObject({
        malformedShort: 2,
        malformedVersion: 1,
        malformedOp: 1,
        malformedLength: 2,
        malformed: 6,
        unknownQpn: 1,
        foreignSource: 1,
        handlerErrors: 0
      })
      // The QP still works.
      b.qp.postRecv(recvWr(b, 1, 0, 64))
      a.qp.postSend(sendWr(a, 1, 0, 8))
      expect((yield* pollN(b.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
    })
  )

  it.scopedLive("fuzz: 100,000 random and mutated datagrams at a live device crash nothing", () =>
    Effect.gen(function* () {
      const { a, b, control } = yield* makePair()
      const sock = yield* attacker
      const port = Number((yield* control.address("b")).split(":")[1])
      let seed = 0x2545f491
      const rand = () => {
        seed ^= seed << 13
        seed ^= seed >>> 17
        seed ^= seed << 5
        return (seed >>> 0) / 0x1_0000_0000
      }
      const templates = [
        packet(Op.SEND, Flag.FIRST | Flag.LAST | Flag.ACK_REQ, b.qp.qpNum, a.qp.qpNum, 0, 64),
        packet(Op.WRITE, Flag.FIRST, b.qp.qpNum, a.qp.qpNum, 5, 256),
        packet(Op.READ_REQ, Flag.FIRST | Flag.LAST, b.qp.qpNum, a.qp.qpNum, 9),
        packet(Op.ACK, Flag.ACK_VALID, b.qp.qpNum, a.qp.qpNum, 0),
        packet(Op.NAK, Flag.ACK_VALID, b.qp.qpNum, a.qp.qpNum, 3),
        packet(Op.READ_RESP, Flag.FIRST, b.qp.qpNum, a.qp.qpNum, 1, 100)
      ]
      const total = 100_000
      const batch = 500
      let sent = 0
      const start = b.device.counters.rxPackets
      while (sent < total) {
        for (let i = 0; i < batch; i++, sent++) {
          let d: Buffer
          if (rand() < 0.3) {
            d = Buffer.alloc(Math.floor(rand() * 200))
            for (let k = 0; k < d.length; k++) d[k] = Math.floor(rand() * 256)
            if (d.length >= 8 && rand() < 0.5) {
              d[0] = 1
              d.writeUInt32LE(b.qp.qpNum, 4)
            }
          } else {
            d = Buffer.from(templates[Math.floor(rand() * templates.length)] as Buffer)
            const flips = 1 + Math.floor(rand() * 4)
            for (let k = 0; k < flips; k++) d[Math.floor(rand() * d.length)] = Math.floor(rand() * 256)
            if (rand() < 0.2) d = d.subarray(0, Math.floor(rand() * d.length))
          }
          sock.send(d, port, "127.0.0.1")
        }
        // Let the device drain its socket before the next batch (bounded wait).
        yield* waitFor(() => b.device.counters.rxPackets - start >= sent - 50, 2000)
      }
      const c = b.device.counters
      expect(c.handlerErrors).toBe(0)
      expect(c.rxPackets - start).toBeGreaterThan(total * 0.9)
      expect(c.malformed + c.unknownQpn + c.foreignSource).toBeGreaterThan(total * 0.8)
      // The device still serves: a fresh pair on the same process works, and b's QP is intact (not the fuzzer's peer).
      b.qp.postRecv(recvWr(b, 1, 0, 64))
      a.qp.postSend(sendWr(a, 1, 0, 8))
      expect((yield* pollN(b.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
    })
  )

  it.scopedLive("fuzz from the connected peer's own address: the QP may fail, the process never does", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair()
      let seed = 0x9e3779b9
      const rand = () => {
        seed ^= seed << 13
        seed ^= seed >>> 17
        seed ^= seed << 5
        return (seed >>> 0) / 0x1_0000_0000
      }
      // Inject straight into b's receive path as if the datagrams came from a's address: past the source check.
      const deliver = (b.device as unknown as { onMessage: (m: Buffer, r: { address: string; port: number }) => void })
        .onMessage
      const from = { address: a.device.host, port: a.device.port }
      const ops = [Op.SEND, Op.WRITE, Op.READ_REQ, Op.READ_RESP, Op.ACK, Op.NAK]
      for (let i = 0; i < 20_000; i++) {
        const payload = Math.floor(rand() * 300)
        const d = Buffer.alloc(HDR + payload)
        writeHeader(
          d,
          ops[Math.floor(rand() * ops.length)] as number,
          Math.floor(rand() * 64),
          Math.floor(rand() * 6),
          b.qp.qpNum,
          a.qp.qpNum,
          Math.floor(rand() * 0x1000000),
          Math.floor(rand() * 0x1000000),
          Math.floor(rand() * 2 ** 32),
          rand() < 0.5 ? b.mr.rkey : Math.floor(rand() * 2 ** 32),
          payload + Math.floor(rand() * 5000),
          rand() < 0.5 ? b.mr.addr + Math.floor(rand() * 2 ** 20) : Math.floor(rand() * 2 ** 40),
          Math.floor(rand() * 5000),
          payload
        )
        if (i % 7 === 0) b.qp.postRecv(recvWr(b, i, 0, 256))
        deliver(d, from)
      }
      expect(b.device.counters.handlerErrors).toBe(0)
    })
  )
})
