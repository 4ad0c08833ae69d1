/**
 * A READ response implicitly acknowledges every older request (IBA 9.7.5.1.3; rxe's completer): the older WRs
 * complete before the READ, and a response the requester cannot use fails the READ, not another WR, each WR exactly
 * once and in order. Responses come in order: one for a younger READ while an older READ's are missing says those were
 * lost, and the older READ is asked for again (nothing is scattered ahead of it). The responder is a raw UDP socket, so
 * the test sends exactly the responses it means.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { QpState, WcOpcode, WcStatus } from "../src/index.js"
import { Op } from "../src/soft/Packet.js"
import { rawResponder } from "./fixtures/raw-responder.js"
import { drain, waitFor } from "./support.js"

describe("SoftVerbs requester: READ responses and the WRs before them", () => {
  it.scopedLive(
    "a READ response that cannot be scattered: the older SEND completes, then the READ LOC_PROT_ERR, once",
    () =>
      Effect.gen(function* () {
        const { qp, cq, requests, readResponse, send, read } = yield* rawResponder(20)
        expect(send(1, 0, 64)).toBe(0)
        expect(read(2, 1024, 100)).toBe(0)
        expect(send(3, 0, 64)).toBe(0)
        expect(yield* waitFor(() => requests.length >= 3)).toBe(true)
        expect(requests.map((r) => r.psn)).toEqual([0, 1, 2])
        // A response at the READ's PSN whose offset lies beyond the READ's 100-byte buffer (the header claims a long
        // message, so it is well formed): the local SGE cannot take it.
        yield* readResponse(1, Buffer.alloc(100, 1), 4096, 2048)
        expect(qp.state).toBe(QpState.ERR)
        expect(drain(cq).map((w) => ({ wrId: w.wrId, status: w.status }))).toEqual([
          { wrId: 1, status: WcStatus.SUCCESS },
          { wrId: 2, status: WcStatus.LOC_PROT_ERR },
          { wrId: 3, status: WcStatus.WR_FLUSH_ERR }
        ])
      })
  )

  it.scopedLive("a response for a younger READ while an older READ's is missing: the older READ is asked again", () =>
    Effect.gen(function* () {
      const { qp, cq, buf, device, requests, readResponse, read } = yield* rawResponder(20)
      expect(read(1, 1024, 64)).toBe(0)
      expect(read(2, 2048, 64)).toBe(0)
      expect(yield* waitFor(() => requests.length >= 2)).toBe(true)
      yield* readResponse(1, Buffer.alloc(64, 2), 64, 0)
      // Not scattered ahead of READ 1, and READ 1 is requested again at once (the ACK timeout here is 4.3 s).
      expect(yield* waitFor(() => requests.length >= 3, 2000)).toBe(true)
      expect(requests[2]).toEqual({ op: Op.READ_REQ, psn: 0 })
      expect(device.counters.retransmits).toBe(0)
      expect(buf.subarray(2048, 2048 + 64).every((x) => x === 0)).toBe(true)
      expect(drain(cq)).toEqual([])
      yield* readResponse(0, Buffer.alloc(64, 1), 64, 0)
      yield* readResponse(1, Buffer.alloc(64, 2), 64, 0)
      expect(drain(cq).map((w) => ({ wrId: w.wrId, status: w.status, opcode: w.opcode }))).toEqual([
        { wrId: 1, status: WcStatus.SUCCESS, opcode: WcOpcode.RDMA_READ },
        { wrId: 2, status: WcStatus.SUCCESS, opcode: WcOpcode.RDMA_READ }
      ])
      expect(buf.subarray(1024, 1024 + 64).every((x) => x === 1)).toBe(true)
      expect(buf.subarray(2048, 2048 + 64).every((x) => x === 2)).toBe(true)
      expect(qp.state).toBe(QpState.RTS)
    })
  )
})
