/**
 * Cumulative ACKs after a go-back-N. A retransmit timeout rewinds to the oldest unacknowledged PSN and resends a
 * recovery window; an ACK that then arrives may cover WRs not resent yet: they arrived, so they complete and
 * transmission resumes after them. An ACK never completes a READ (a READ completes only with its response data): an
 * ACK (or a sequence NAK) past an outstanding READ says its responses were lost, and the requester goes back to the
 * READ at once (rxe's `COMPST_ERROR_RETRY`).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { QpState, WcOpcode, WcStatus } from "../src/index.js"
import { Nak, Op } from "../src/soft/Packet.js"
import { type RawResponder, rawResponder } from "./fixtures/raw-responder.js"
import { drain, makePair, pollN, recvWr, sendWr, waitFor } from "./support.js"

describe("SoftVerbs requester: ACKs after a go-back-N", () => {
  it.scopedLive("an ACK covering WRs not yet resent after a timeout completes them: 20 SENDs, 20 SUCCESS", () =>
    Effect.gen(function* () {
      // timeout 12 = 16.8 ms; b's ACKs are delayed 30 ms, so a times out, rewinds and resends 16 of the 20 SENDs
      // before the ACK for all 20 arrives. On a loaded host the event loop may stall past the ACK's arrival, which then
      // lands before the timeout is confirmed (no go-back): such an attempt still must complete all 20, and up to 3
      // attempts are made until one went back.
      let wentBack = 0
      for (let attempt = 1; attempt <= 3 && wentBack === 0; attempt++) {
        yield* Effect.scoped(
          Effect.gen(function* () {
            const { a, b } = yield* makePair({ params: { timeout: 12, retryCnt: 7 } })
            for (let i = 0; i < 20; i++) expect(b.qp.postRecv(recvWr(b, i, i * 64, 64))).toBe(0)
            b.device.setFaults({ delayMs: 30 })
            for (let i = 0; i < 20; i++) expect(a.qp.postSend(sendWr(a, i, 0, 8))).toBe(0)
            const wcs = yield* pollN(a.cq, 20, 10_000)
            expect(wcs.map((w) => ({ wrId: w.wrId, status: w.status }))).toEqual(
              Array.from({ length: 20 }, (_, i) => ({ wrId: i, status: WcStatus.SUCCESS }))
            )
            expect(yield* pollN(b.cq, 20, 10_000)).toHaveLength(20)
            wentBack = a.device.counters.retransmits
            console.log(`attempt ${attempt}: ${wentBack} retransmit timeouts`)
          })
        )
      }
      expect(wentBack).toBeGreaterThan(0)
    })
  )

  // An ACK for PSN 2, or a sequence NAK expecting PSN 2 (the responder executed the READ at 1, whose response was
  // lost), after a SEND (0), a READ (1) and a SEND (2): the first SEND completes, not the READ; the requester goes
  // back to the READ at once (no retransmit timeout: the ACK timeout here is 4.3 s) and resends it and the SEND after.
  const pastTheRead = [
    { what: "an ACK", fill: 3, trigger: (r: RawResponder) => r.ack(2) },
    { what: "a sequence NAK", fill: 4, trigger: (r: RawResponder) => r.nak(Nak.SEQ, 2) }
  ]
  for (const { what, fill, trigger } of pastTheRead) {
    it.scopedLive(
      `${what} past an outstanding READ completes the WRs before it, not the READ; the READ is asked again`,
      () =>
        Effect.gen(function* () {
          const r = yield* rawResponder(20)
          const { qp, cq, buf, device, requests, readResponse, ack, send, read } = r
          expect(send(1, 0, 64)).toBe(0)
          expect(read(2, 1024, 64)).toBe(0)
          expect(send(3, 0, 64)).toBe(0)
          expect(yield* waitFor(() => requests.length >= 3)).toBe(true)
          yield* trigger(r)
          expect(drain(cq).map((w) => ({ wrId: w.wrId, status: w.status }))).toEqual([
            { wrId: 1, status: WcStatus.SUCCESS }
          ])
          expect(yield* waitFor(() => requests.length >= 5, 2000)).toBe(true)
          expect(requests.slice(3)).toEqual([
            { op: Op.READ_REQ, psn: 1 },
            { op: Op.SEND, psn: 2 }
          ])
          expect(device.counters.retransmits).toBe(0)
          yield* readResponse(1, Buffer.alloc(64, fill), 64, 0)
          yield* ack(2)
          expect(drain(cq).map((w) => ({ wrId: w.wrId, status: w.status, opcode: w.opcode }))).toEqual([
            { wrId: 2, status: WcStatus.SUCCESS, opcode: WcOpcode.RDMA_READ },
            { wrId: 3, status: WcStatus.SUCCESS, opcode: WcOpcode.SEND }
          ])
          expect(buf.subarray(1024, 1024 + 64).every((x) => x === fill)).toBe(true)
          expect(qp.state).toBe(QpState.RTS)
        })
    )
  }
})
