import type * as dgram from "node:dgram"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { ackTimeoutMs, WcOpcode, WcStatus, WrOpcode } from "../src/index.js"
import { Off, Op } from "../src/soft/Packet.js"
import type { SoftDevice } from "../src/soft/SoftDevice.js"
import { makePair, pollN, sendWr, waitFor } from "./support.js"

const KIB64 = 64 * 1024
const READS = 30

/** The device's own UDP socket: a second `message` listener sees every datagram it receives (read only). */
const socketOf = (device: SoftDevice): dgram.Socket => (device as unknown as { socket: dgram.Socket }).socket

describe("SoftVerbs READ under loss (rule 3 for READ)", () => {
  it.scopedLive(
    "with 10% loss each way (timeout 12, retry_cnt 7), 30 READs of 64 KiB complete with the right bytes; a lost response is re-requested from the first missing PSN",
    () =>
      Effect.gen(function* () {
        const { a, b } = yield* makePair({ params: { timeout: 12, retryCnt: 7 }, bufSize: READS * KIB64 })
        for (let i = 0; i < b.buf.length; i += 4) b.buf.writeUInt32LE((i * 2654435761) >>> 0, i)
        // Every READ request b's socket receives: its PSN and the payload offset it asks for.
        const requests: Array<{ readonly psn: number; readonly offset: number }> = []
        socketOf(b.device).on("message", (msg: Buffer) => {
          if (msg.length >= 48 && msg[Off.op] === Op.READ_REQ) {
            requests.push({ psn: msg.readUInt32LE(Off.psn), offset: msg.readUInt32LE(Off.offset) })
          }
        })
        // 10 % each way. A READ fails, here as on a NIC, when 8 exchanges in a row make no progress (the request lost,
        // or its first missing response and the re-request after it): the test must not fail by that chance. At 20 %
        // one exchange in 0.27-0.33 made none, and 0.6-1.5 % of runs went past retry_cnt 7. At 15 % (0.19-0.22 made
        // none) the estimate was ~3e-4 a run, and a loaded CI run still lost one READ that way (RETRY_EXC_ERR at the
        // 7th). At 10 % a 16-response READ still loses one of its responses four times in five, so re-requests from
        // the middle stay common, while 8 exchanges in a row without progress become ~1e-6 a run. The code before
        // the rule (the whole READ asked for again, partial progress not counted) would still fail: a whole READ gets
        // through an attempt with 0.9^17 = 0.17, so about one READ in four runs out of its 8 attempts, and all 30
        // complete in ~5e-4 of runs.
        a.device.setFaults({ dropOut: 0.1, dropIn: 0.1 })
        for (let i = 0; i < READS; i++) {
          const rc = a.qp.postSend(
            sendWr(a, i, i * KIB64, KIB64, {
              opcode: WrOpcode.RDMA_READ,
              remoteAddr: b.mr.addr + i * KIB64,
              rkey: b.mr.rkey
            })
          )
          expect(rc).toBe(0)
        }
        const wcs = yield* pollN(a.cq, READS, 60_000)
        const statuses = wcs.map((w) => w.status)
        const failed = statuses.filter((s) => s !== WcStatus.SUCCESS).length
        console.log(
          `READs: ${wcs.length - failed}/${READS} SUCCESS, ${failed} failed (first failure ${statuses.findIndex((s) => s !== WcStatus.SUCCESS)}: status ${statuses.find((s) => s !== WcStatus.SUCCESS)}); ` +
            `retransmits ${a.device.counters.retransmits}, dropped by the fault ${a.device.counters.droppedFault}, ` +
            `READ requests at b ${requests.length}, of them from the middle of a READ ${requests.filter((r) => r.offset > 0).length} (${a.device.counters.readRerequests} on a gap)`
        )
        expect(wcs).toHaveLength(READS)
        expect(statuses).toEqual(Array.from({ length: READS }, () => WcStatus.SUCCESS))
        expect(wcs.map((w) => w.wrId)).toEqual(Array.from({ length: READS }, (_, i) => i))
        expect(wcs.every((w) => w.opcode === WcOpcode.RDMA_READ && w.byteLen === KIB64)).toBe(true)
        expect(a.buf.equals(b.buf)).toBe(true)
        // The loss was real and was recovered by retransmission, not by luck.
        expect(a.device.counters.droppedFault).toBeGreaterThan(0)
        expect(a.device.counters.retransmits).toBeGreaterThan(0)
        // Re-requests start at the first missing response: some ask for the middle of a READ, and each such request's
        // offset is its PSN's distance from the READ's first PSN times the MTU (4096 here).
        const resumed = requests.filter((r) => r.offset > 0)
        expect(resumed.length).toBeGreaterThan(0)
        for (const r of resumed) expect(r.offset % 4096).toBe(0)
        expect(a.device.counters.handlerErrors + b.device.counters.handlerErrors).toBe(0)
      })
  )
  it.scopedLive("a READ whose last responses are lost is re-requested by the timer from the first missing one", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ params: { timeout: 12, retryCnt: 7 }, bufSize: KIB64 })
      for (let i = 0; i < KIB64; i++) b.buf[i] = (i * 7 + 3) & 0xff
      const requests: Array<{ readonly psn: number; readonly offset: number }> = []
      socketOf(b.device).on("message", (msg: Buffer) => {
        if (msg[Off.op] === Op.READ_REQ)
          requests.push({ psn: msg.readUInt32LE(Off.psn), offset: msg.readUInt32LE(Off.offset) })
      })
      // a takes the first 4 responses; every later one is lost until the fault is cleared.
      let responses = 0
      socketOf(a.device).on("message", (msg: Buffer) => {
        if (msg[Off.op] === Op.READ_RESP && ++responses === 4) a.device.setFaults({ dropIn: 1 })
      })
      a.qp.postSend(sendWr(a, 1, 0, KIB64, { opcode: WrOpcode.RDMA_READ, remoteAddr: b.mr.addr, rkey: b.mr.rkey }))
      // The timer asks again while the responses are still lost (12 of the first burst and 12 answering the timer's
      // request dropped), then once more after the loss ends.
      yield* waitFor(() => requests.length >= 2 && a.device.counters.droppedFault >= 24, 5000)
      a.device.setFaults({})
      const [wc] = yield* pollN(a.cq, 1, 5000)
      expect(wc).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS, byteLen: KIB64 })
      expect(a.buf.equals(b.buf)).toBe(true)
      expect(a.device.counters.retransmits).toBeGreaterThanOrEqual(2)
      expect(requests.length).toBeGreaterThanOrEqual(3)
      const [first, ...again] = requests
      expect(first?.offset).toBe(0)
      // Every re-request starts at response 4: PSN first + 4, offset 4 × 4096 (none asks for the whole READ again).
      for (const r of again) expect(r).toEqual({ psn: ((first?.psn ?? 0) + 4) & 0xffffff, offset: 4 * 4096 })
    })
  )

  it.scopedLive(
    "each READ response in sequence is forward progress: it resets the retry count (retry_cnt 1, 16 timeouts)",
    () =>
      Effect.gen(function* () {
        const { a, b } = yield* makePair({ params: { timeout: 12, retryCnt: 1 }, bufSize: KIB64 })
        for (let i = 0; i < KIB64; i++) b.buf[i] = (i * 13 + 5) & 0xff
        // Every request (the first and each timer's) gets exactly one response through: the first of the burst.
        let requests = 0
        socketOf(b.device).on("message", (msg: Buffer) => {
          if (msg[Off.op] === Op.READ_REQ) {
            requests++
            a.device.setFaults({})
          }
        })
        socketOf(a.device).on("message", (msg: Buffer) => {
          if (msg[Off.op] === Op.READ_RESP) a.device.setFaults({ dropIn: 1 })
        })
        a.qp.postSend(sendWr(a, 1, 0, KIB64, { opcode: WrOpcode.RDMA_READ, remoteAddr: b.mr.addr, rkey: b.mr.rkey }))
        const [wc] = yield* pollN(a.cq, 1, 20_000)
        // 16 responses, one per request: 15 timeouts with progress between each, far past retry_cnt 1.
        expect(wc).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS, byteLen: KIB64 })
        expect(a.buf.equals(b.buf)).toBe(true)
        expect(requests).toBeGreaterThanOrEqual(16)
        expect(a.device.counters.retransmits).toBeGreaterThanOrEqual(15)
      })
  )
  it.scopedLive("a response lost inside a burst is re-requested at once, when a later one arrives (no timer)", () =>
    Effect.gen(function* () {
      // timeout 20 (4.3 s): a recovery by the timer could not finish inside the bound below.
      const { a, b } = yield* makePair({ params: { timeout: 20, retryCnt: 7 }, bufSize: KIB64 })
      for (let i = 0; i < KIB64; i++) b.buf[i] = (i * 11 + 1) & 0xff
      // The third response of the burst is lost; the fourth on arrive.
      let responses = 0
      socketOf(a.device).on("message", (msg: Buffer) => {
        if (msg[Off.op] !== Op.READ_RESP) return
        responses++
        if (responses === 2) a.device.setFaults({ dropIn: 1 })
        if (responses === 3) a.device.setFaults({})
      })
      const start = performance.now()
      a.qp.postSend(sendWr(a, 1, 0, KIB64, { opcode: WrOpcode.RDMA_READ, remoteAddr: b.mr.addr, rkey: b.mr.rkey }))
      const [wc] = yield* pollN(a.cq, 1, 10_000)
      const elapsed = performance.now() - start
      expect(wc).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS, byteLen: KIB64 })
      expect(a.buf.equals(b.buf)).toBe(true)
      expect(a.device.counters.droppedFault).toBe(1)
      expect(a.device.counters.readRerequests).toBe(1)
      expect(a.device.counters.retransmits).toBe(0)
      expect(elapsed).toBeLessThan(ackTimeoutMs(20))
    })
  )
  it.scopedLive(
    "a READ of 64 responses that lost those past the 40th is asked for again from the 41st after a timeout: the responses it has do not count against the window (cut to 16 by the timeout)",
    () =>
      Effect.gen(function* () {
        const KIB256 = 4 * KIB64
        // timeout 14 (67 ms), retry_cnt 7: the re-request must go out within the budget, not be held until it runs out.
        const { a, b } = yield* makePair({ params: { timeout: 14, retryCnt: 7 }, bufSize: KIB256 })
        for (let i = 0; i < KIB256; i++) b.buf[i] = (i * 17 + 9) & 0xff
        const requests: Array<{ readonly psn: number; readonly offset: number }> = []
        // b answers every request it receives at once (its own listener runs first); the second one is the re-request,
        // and the loss ends as b sends its answer, so that answer arrives whole.
        socketOf(b.device).on("message", (msg: Buffer) => {
          if (msg[Off.op] !== Op.READ_REQ) return
          requests.push({ psn: msg.readUInt32LE(Off.psn), offset: msg.readUInt32LE(Off.offset) })
          if (requests.length === 2) a.device.setFaults({})
        })
        // a takes the first 40 responses of the first burst; the other 24 are lost.
        let responses = 0
        socketOf(a.device).on("message", (msg: Buffer) => {
          if (msg[Off.op] === Op.READ_RESP && ++responses === 40) a.device.setFaults({ dropIn: 1 })
        })
        a.qp.postSend(sendWr(a, 1, 0, KIB256, { opcode: WrOpcode.RDMA_READ, remoteAddr: b.mr.addr, rkey: b.mr.rkey }))
        const [wc] = yield* pollN(a.cq, 1, 10_000)
        console.log(
          `READ of 64 responses: status ${wc?.status}, requests at b ${requests.length}, retransmits ${a.device.counters.retransmits}, dropped ${a.device.counters.droppedFault}`
        )
        expect(wc).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS, byteLen: KIB256 })
        expect(a.buf.equals(b.buf)).toBe(true)
        expect(a.device.counters.droppedFault).toBe(24)
        expect(a.device.counters.retransmits).toBeGreaterThanOrEqual(1)
        const [first, again] = requests
        expect(requests).toHaveLength(2)
        expect(first?.offset).toBe(0)
        // The re-request starts at response 40: PSN first + 40, offset 40 × 4096 (past the recovery window of 16).
        expect(again).toEqual({ psn: ((first?.psn ?? 0) + 40) & 0xffffff, offset: 40 * 4096 })
      })
  )
})
