import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { WcOpcode, WcStatus, WrOpcode } from "../src/index.js"
import { makePair, pollN, recvWr, sendWr } from "./support.js"

describe("SoftVerbs basics", () => {
  it.scopedLive("SEND, WRITE, WRITE_WITH_IMM and READ move the bytes", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair()
      a.buf.write("hello over RC", 0)
      b.qp.postRecv(recvWr(b, 1, 0, 4096))
      expect(a.qp.postSend(sendWr(a, 10, 0, 13))).toBe(0)
      const [rb] = yield* pollN(b.cq, 1)
      expect(rb).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS, opcode: WcOpcode.RECV, byteLen: 13 })
      expect(b.buf.toString("utf8", 0, 13)).toBe("hello over RC")
      const [sa] = yield* pollN(a.cq, 1)
      expect(sa).toMatchObject({ wrId: 10, status: WcStatus.SUCCESS, opcode: WcOpcode.SEND })

      // A 64 KiB RDMA WRITE lands at the remote address.
      for (let i = 0; i < 65536; i++) a.buf[8192 + i] = (i * 7) & 0xff
      a.qp.postSend(
        sendWr(a, 11, 8192, 65536, { opcode: WrOpcode.RDMA_WRITE, remoteAddr: b.mr.addr + 100_000, rkey: b.mr.rkey })
      )
      const [sw] = yield* pollN(a.cq, 1)
      expect(sw).toMatchObject({ wrId: 11, status: WcStatus.SUCCESS, opcode: WcOpcode.RDMA_WRITE })
      expect(b.buf.subarray(100_000, 100_000 + 65536).equals(a.buf.subarray(8192, 8192 + 65536))).toBe(true)

      // WRITE_WITH_IMM consumes a RECV and delivers the immediate.
      b.qp.postRecv(recvWr(b, 2, 0, 0))
      a.qp.postSend(
        sendWr(a, 12, 0, 100, {
          opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
          remoteAddr: b.mr.addr + 200_000,
          rkey: b.mr.rkey,
          immData: 0xdeadbeef
        })
      )
      const [ri] = yield* pollN(b.cq, 1)
      expect(ri).toMatchObject({
        wrId: 2,
        status: WcStatus.SUCCESS,
        opcode: WcOpcode.RECV_RDMA_WITH_IMM,
        immData: 0xdeadbeef,
        byteLen: 100
      })
      yield* pollN(a.cq, 1)

      // READ pulls remote bytes into local memory.
      b.buf.write("remote bytes to read", 300_000)
      a.qp.postSend(
        sendWr(a, 13, 400_000, 20, { opcode: WrOpcode.RDMA_READ, remoteAddr: b.mr.addr + 300_000, rkey: b.mr.rkey })
      )
      const [rr] = yield* pollN(a.cq, 1)
      expect(rr).toMatchObject({ wrId: 13, status: WcStatus.SUCCESS, opcode: WcOpcode.RDMA_READ, byteLen: 20 })
      expect(a.buf.toString("utf8", 400_000, 400_020)).toBe("remote bytes to read")
    })
  )
})
