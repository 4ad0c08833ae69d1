import type * as dgram from "node:dgram"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { ackTimeoutMs, type CompletionQueue, Mtu, QpState, WcStatus, WorkCompletion } from "../src/index.js"
import { Off, Op } from "../src/soft/Packet.js"
import type { SoftDevice } from "../src/soft/SoftDevice.js"
import type { SoftQp } from "../src/soft/SoftQp.js"
import { copyWc, drain, makePair, pollN, recvWr, type Side, sendWr, sleep, type Wc, waitFor } from "./support.js"

/** The device's own UDP socket: a second `message` listener sees every datagram after the device handled it. */
const socketOf = (device: SoftDevice): dgram.Socket => (device as unknown as { socket: dgram.Socket }).socket

/** What a stalled pair looks like: both QPs' send and receive positions, timers and both devices' counters. */
const describePair = (a: Side, b: Side): string => {
  const qp = (side: Side) => {
    const q = side.qp as SoftQp
    return {
      state: q.state,
      sq: { head: q.head, txIdx: q.txIdx, txPkt: q.txPkt, tail: q.tail },
      acked: q.acked,
      psnNext: q.psnNext,
      ePsn: q.ePsn,
      cwnd: q.cwnd,
      retries: q.retries,
      retryArmed: q.retryArmed,
      rnrWaiting: q.rnrWaiting,
      msSinceProgress: Math.round(performance.now() - q.lastProgress),
      ackPending: q.ackPending,
      rq: q.rq.depth
    }
  }
  return JSON.stringify({ a: qp(a), b: qp(b), countersA: a.device.counters, countersB: b.device.counters })
}

/**
 * Polls `cq` for `n` completions, at most `timeoutMs`, and fails at once when the pair stalls: a real RC QP either makes
 * progress or, after retry_cnt retransmit timeouts without it, completes a WR with RETRY_EXC_ERR. Stalled means that
 * neither device sent nor received a datagram for `stallMs` of time this process actually ran (a gap between the
 * 50 ms checks counts at most 100 ms, so a machine that starved the whole process is not taken for a stall).
 */
const pollOrStall = (cq: CompletionQueue, n: number, timeoutMs: number, stallMs: number, a: Side, b: Side) =>
  Effect.gen(function* () {
    const wc = WorkCompletion.array(64)
    const out: Array<Wc> = []
    const deadline = Date.now() + timeoutMs
    const moved = () =>
      `${a.device.counters.txPackets}/${a.device.counters.rxPackets}/${b.device.counters.txPackets}/${b.device.counters.rxPackets}`
    let last = moved()
    let stalled = 0
    let tick = performance.now()
    while (out.length < n && Date.now() < deadline) {
      const got = cq.pollCq(Math.min(64, n - out.length), wc)
      for (let i = 0; i < got; i++) out.push(copyWc(wc[i] as WorkCompletion))
      if (out.length >= n) break
      if (got === 0) yield* cq.awaitNotify.pipe(Effect.timeoutOption(50))
      const now = performance.now()
      const key = moved()
      stalled = key === last ? stalled + Math.min(100, now - tick) : 0
      last = key
      tick = now
      if ((a.qp as SoftQp).state === QpState.ERR || (b.qp as SoftQp).state === QpState.ERR) {
        // A loud failure (RETRY_EXC_ERR, a flush), not a stall: its completions are on a's CQ.
        return yield* Effect.dieMessage(`a QP went to ERR with ${out.length}/${n} completions: ${describePair(a, b)}`)
      }
      if (stalled >= stallMs) {
        return yield* Effect.dieMessage(
          `stalled: no datagram sent or received for ${Math.round(stalled)} ms with ${out.length}/${n} completions: ${describePair(a, b)}`
        )
      }
    }
    if (out.length < n) {
      // Still moving but too slow for the time given: say so, and where the pair is, rather than a bare timeout.
      return yield* Effect.dieMessage(
        `slow, not stalled: ${out.length}/${n} completions after ${timeoutMs} ms: ${describePair(a, b)}`
      )
    }
    return out
  })

describe("SoftVerbs reliability (rules 2 and 3)", () => {
  for (const mtu of [Mtu.MTU_256, Mtu.MTU_512, Mtu.MTU_1024, Mtu.MTU_2048, Mtu.MTU_4096]) {
    const bytes = 128 << mtu
    it.scopedLive(`a 10000-byte SEND is segmented at path_mtu ${bytes} and arrives intact`, () =>
      Effect.gen(function* () {
        // A retransmit timer of 4.3 s (timeout 20): the packets counted are the segmentation, not a timer that fired
        // while a loaded machine kept this process from its ACKs.
        const { a, b } = yield* makePair({ params: { pathMtu: mtu, timeout: 20 } })
        for (let i = 0; i < 10_000; i++) a.buf[i] = (i * 31 + mtu) & 0xff
        b.qp.postRecv(recvWr(b, 1, 0, 20_000))
        const before = a.device.counters.txPackets
        const retransmits = a.device.counters.retransmits
        a.qp.postSend(sendWr(a, 1, 0, 10_000))
        const [wc] = yield* pollN(b.cq, 1)
        expect(wc).toMatchObject({ status: WcStatus.SUCCESS, byteLen: 10_000 })
        expect(b.buf.subarray(0, 10_000).equals(a.buf.subarray(0, 10_000))).toBe(true)
        expect(a.device.counters.retransmits - retransmits).toBe(0)
        expect(a.device.counters.txPackets - before).toBe(Math.ceil(10_000 / bytes))
      })
    )
  }

  it.scopedLive("with 20% loss each way, 300 messages arrive exactly once, in order, intact", () =>
    Effect.gen(function* () {
      // TENT's timeout 14 (67 ms): shorter ones run out of retries when a loaded 2-core machine starves a process.
      const { a, b } = yield* makePair({ params: { timeout: 14, retryCnt: 7, pathMtu: Mtu.MTU_1024 } })
      const n = 300
      for (let i = 0; i < n; i++) b.qp.postRecv(recvWr(b, i, i * 3000, 3000))
      a.device.setFaults({ dropOut: 0.2, dropIn: 0.2 })
      const start = performance.now()
      for (let i = 0; i < n; i++) {
        const len = 1 + ((i * 977) % 2999)
        a.buf.fill(i & 0xff, i * 3000, i * 3000 + len)
        a.buf.writeUInt32LE(i, i * 3000)
        expect(a.qp.postSend(sendWr(a, i, i * 3000, Math.max(4, len)))).toBe(0)
      }
      // A silent stall fails within the retry budget (8 timeouts, 537 ms) plus a wide margin, with both QPs described.
      const stallMs = 8 * ackTimeoutMs(14) + 3000
      const got = yield* pollOrStall(b.cq, n, 50_000, stallMs, a, b)
      expect(got).toHaveLength(n)
      got.forEach((wc, i) => {
        expect(wc.status).toBe(WcStatus.SUCCESS)
        expect(wc.wrId).toBe(i)
        expect(b.buf.readUInt32LE(i * 3000)).toBe(i)
        const len = Math.max(4, 1 + ((i * 977) % 2999))
        expect(wc.byteLen).toBe(len)
        expect(b.buf.subarray(i * 3000 + 4, i * 3000 + len).every((x) => x === (i & 0xff))).toBe(true)
      })
      const sends = yield* pollOrStall(a.cq, n, 8_000, stallMs, a, b)
      console.log(
        `300 messages at 20% loss: ${Math.round(performance.now() - start)} ms, ${a.device.counters.retransmits} retransmit timeouts, ${a.device.counters.txPackets} datagrams sent by a, ${b.device.counters.seqNaksSent} sequence NAKs`
      )
      expect(sends.every((wc) => wc.status === WcStatus.SUCCESS)).toBe(true)
      expect(a.device.counters.retransmits).toBeGreaterThan(0)
      // Nothing more arrives later: no message was delivered twice.
      yield* sleep(50)
      expect(drain(b.cq)).toHaveLength(0)
      expect(a.device.counters.handlerErrors + b.device.counters.handlerErrors).toBe(0)
    })
  )

  it.scopedLive(
    "after a sequence NAK the requester resends at most 16 packets before the next ACK, not the rest of its window (200 SENDs, the second lost)",
    () =>
      Effect.gen(function* () {
        // timeout 20 (4.3 s): the NAK alone recovers the loss; no timer fires in this test.
        const { a, b } = yield* makePair({ params: { timeout: 20, retryCnt: 7 } })
        const n = 200
        for (let i = 0; i < n; i++) b.qp.postRecv(recvWr(b, i, i * 64, 64))
        // b loses exactly the second request: its own handler has taken the first when this listener sets the fault,
        // and has dropped the second when this listener clears it.
        let requests = 0
        socketOf(b.device).on("message", (msg: Buffer) => {
          if (msg[Off.op] !== Op.SEND) return
          requests++
          if (requests === 1) b.device.setFaults({ dropIn: 1 })
          if (requests === 2) b.device.setFaults({})
        })
        // What a sends while it handles the NAK: the go-back burst.
        const bursts: Array<number> = []
        let before = 0
        socketOf(a.device).on("message", (msg: Buffer) => {
          if (msg[Off.op] === Op.NAK) bursts.push(a.device.counters.txPackets - before)
          before = a.device.counters.txPackets
        })
        for (let i = 0; i < n; i++) expect(a.qp.postSend(sendWr(a, i, i * 64, 16))).toBe(0)
        before = a.device.counters.txPackets
        const got = yield* pollN(b.cq, n, 4000)
        console.log(
          `one loss in ${n} packets: go-back bursts ${JSON.stringify(bursts)}, datagrams sent by a ${a.device.counters.txPackets}`
        )
        expect(got.map((w) => w.wrId)).toEqual(Array.from({ length: n }, (_, i) => i))
        expect(got.every((w) => w.status === WcStatus.SUCCESS)).toBe(true)
        expect(b.device.counters.droppedFault).toBe(1)
        expect(b.device.counters.seqNaksSent).toBe(1)
        expect(a.device.counters.retransmits).toBe(0)
        // One NAK, one burst of 16 (the lost packet and the 15 after it), where a whole window would be 199.
        expect(bursts).toEqual([16])
        expect((yield* pollN(a.cq, n)).every((w) => w.status === WcStatus.SUCCESS)).toBe(true)
      })
  )

  it.scopedLive(
    "after a timeout inside a long message, the last packet the window lets out asks for an ACK: one timeout for a lost 1 MiB WRITE, not one per window",
    () =>
      Effect.gen(function* () {
        // timeout 16 (268 ms): a timer that fires means the window had stopped, not that a loaded machine was slow.
        const { a, b } = yield* makePair({ params: { timeout: 16, retryCnt: 7 }, bufSize: 1 << 20 })
        for (let i = 0; i < 1 << 20; i += 4) a.buf.writeUInt32LE((i * 2654435761) >>> 0, i)
        // The whole first burst (256 packets of 4 KiB) is lost; then nothing is. The retransmit timer resends 16
        // packets of the message; only every 64th packet and the last one ask for an ACK on their own.
        a.device.setFaults({ dropOut: 1 })
        a.qp.postSend(sendWr(a, 1, 0, 1 << 20, { opcode: 0, remoteAddr: b.mr.addr, rkey: b.mr.rkey }))
        a.device.setFaults({})
        const [wc] = yield* pollN(a.cq, 1, 20_000)
        console.log(`1 MiB WRITE after a lost burst: ${a.device.counters.retransmits} retransmit timeouts`)
        expect(wc).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS })
        expect(b.buf.equals(a.buf)).toBe(true)
        expect(a.device.counters.droppedFault).toBe(256)
        expect(a.device.counters.retransmits).toBe(1)
      })
  )

  it.scopedLive("a retransmit after a lost ACK is re-acknowledged, never re-delivered", () =>
    Effect.gen(function* () {
      // timeout 14 = 67 ms: about two retransmits in the 150 ms without ACKs, well inside retry_cnt 7 (537 ms).
      const { a, b } = yield* makePair({ params: { timeout: 14, retryCnt: 7 } })
      for (let i = 0; i < 4; i++) b.qp.postRecv(recvWr(b, i, i * 64, 64))
      // b receives everything but every ACK it sends is lost, so a retransmits.
      b.device.setFaults({ dropOut: 1 })
      a.qp.postSend(sendWr(a, 1, 0, 32))
      expect(yield* pollN(b.cq, 1)).toHaveLength(1)
      // a's timer (67 ms) resends; b sees a duplicate, answers it (lost too), and does not deliver it again.
      expect(yield* waitFor(() => b.device.counters.duplicates > 0, 5000)).toBe(true)
      b.device.setFaults({})
      const [sent] = yield* pollN(a.cq, 1)
      expect(sent?.status).toBe(WcStatus.SUCCESS)
      yield* sleep(20)
      expect(drain(b.cq)).toHaveLength(0)
    })
  )

  it.scopedLive("a silent peer exhausts retry_cnt: RETRY_EXC_ERR after the budget, the rest flush, QP in ERR", () =>
    Effect.gen(function* () {
      // timeout 12 = 16.8 ms; retry_cnt 3: four timeouts in all.
      const { a, b } = yield* makePair({ params: { timeout: 12, retryCnt: 3 } })
      b.device.setFaults({ dropIn: 1 })
      const start = performance.now()
      for (let i = 1; i <= 3; i++) a.qp.postSend(sendWr(a, i, 0, 16))
      const wcs = yield* pollN(a.cq, 3, 10_000)
      const elapsed = performance.now() - start
      expect(wcs.map((w) => w.status)).toEqual([WcStatus.RETRY_EXC_ERR, WcStatus.WR_FLUSH_ERR, WcStatus.WR_FLUSH_ERR])
      expect(wcs.map((w) => w.wrId)).toEqual([1, 2, 3])
      expect(a.device.counters.retransmits).toBe(3)
      expect(elapsed).toBeGreaterThanOrEqual(4 * ackTimeoutMs(12) - 2)
      expect(a.qp.state).toBe(QpState.ERR)
    })
  )

  it.scopedLive("timeout 0 means no retransmit timer: a lost packet waits forever instead of failing", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ params: { timeout: 0, retryCnt: 0 } })
      b.device.setFaults({ dropIn: 1 })
      a.qp.postSend(sendWr(a, 1, 0, 16))
      expect(yield* pollN(a.cq, 1, 200)).toHaveLength(0)
      expect(a.qp.state).toBe(QpState.RTS)
      expect(a.device.counters.retransmits).toBe(0)
    })
  )

  it.scopedLive("a window of 2000 unsignaled WRITEs and one signaled SEND completes in order", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ maxWr: 4096, cqe: 8192 })
      b.qp.postRecv(recvWr(b, 99, 0, 64))
      for (let i = 0; i < 2000; i++) {
        a.buf.writeUInt32LE(i, i * 4)
        const rc = a.qp.postSend(
          sendWr(a, i, i * 4, 4, { opcode: 0, sendFlags: 0, remoteAddr: b.mr.addr + 100_000 + i * 4, rkey: b.mr.rkey })
        )
        expect(rc).toBe(0)
      }
      a.qp.postSend(sendWr(a, 5000, 0, 4))
      const [done] = yield* pollN(a.cq, 1)
      expect(done?.wrId).toBe(5000)
      expect(drain(a.cq)).toHaveLength(0)
      for (let i = 0; i < 2000; i++) expect(b.buf.readUInt32LE(100_000 + i * 4)).toBe(i)
    })
  )
})
