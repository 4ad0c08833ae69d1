import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import {
  AccessFlags,
  ackTimeoutMs,
  gidFromString,
  gidToString,
  QpState,
  Rc,
  SoftVerbs,
  WcStatus,
  WrOpcode
} from "../src/index.js"
import { fixture, spawnChild } from "./fixtures/child.js"
import { pollN, sleep, waitFor } from "./support.js"

interface PeerReady {
  readonly gid: string
  readonly qpNum: number
  readonly psn: number
  readonly addr: number
  readonly rkey: number
  readonly port: number
}

interface PeerStats {
  readonly received: number
  readonly duplicates: number
  readonly outOfOrder: number
  readonly recvErrors: number
  readonly sendsDone: number
  readonly sendErrors: number
  readonly state: number
  readonly counters: Record<string, number>
}

/** The peer's stats once `done` holds of them, asked every 20 ms for at most `timeoutMs` (then the last ones). */
const statsWhen = (stats: () => Effect.Effect<PeerStats>, done: (s: PeerStats) => boolean, timeoutMs: number) =>
  Effect.gen(function* () {
    const deadline = Date.now() + timeoutMs
    let s = yield* stats()
    while (!done(s) && Date.now() < deadline) {
      yield* sleep(20)
      s = yield* stats()
    }
    return s
  })

/** This process's side: one SoftVerbs device and a QP connected to a peer process. */
const connectToPeer = (params: Partial<Rc.RcParams>) =>
  Effect.gen(function* () {
    const peer = yield* spawnChild<PeerReady>(fixture("soft-peer.ts"))
    const { control, verbs } = yield* SoftVerbs.make({ devices: [{ name: "local" }] })
    const { ctx, pd, cq, qp } = yield* Rc.open(verbs, "local", { cqe: 4096, maxSendWr: 1024, maxRecvWr: 64 })
    const device = yield* control.device("local")
    const buf = Buffer.alloc(1 << 20)
    const mr = yield* pd.regMr(buf, AccessFlags.LOCAL_WRITE)
    const psn = Rc.randomPsn()
    const p = { ...Rc.defaultParams, ...params }
    const gid = gidToString(yield* ctx.queryGid(1, 0))
    const reply = yield* Effect.promise(() =>
      peer.request({
        cmd: "connect",
        gid,
        qpNum: qp.qpNum,
        psn,
        params
      })
    )
    expect(reply).toEqual({ ok: true })
    yield* Rc.connect(
      qp,
      psn,
      { gid: gidFromString(peer.ready.gid) as Uint8Array, qpNum: peer.ready.qpNum, psn: peer.ready.psn },
      p
    )
    const send = (seq: number, len = 64) => {
      buf.writeUInt32LE(seq, seq * 64)
      return qp.postSend({
        wrId: seq,
        opcode: WrOpcode.SEND,
        sendFlags: 2,
        sgList: [{ addr: mr.addr + seq * 64, length: len, lkey: mr.lkey }]
      })
    }
    const stats = () => Effect.promise(() => peer.request<PeerStats>({ cmd: "stats" }))
    return { peer, device, cq, qp, buf, mr, send, stats }
  })

// Each test starts a peer process: up to READY_WITHIN_MS (90 s) on a loaded machine, then its own waits.
describe("SoftVerbs between two processes (rules 2, 3, 9)", { timeout: 150_000 }, () => {
  it.scopedLive("with 20% loss each way, 500 SENDs to another process arrive exactly once and in order", () =>
    Effect.gen(function* () {
      const { device, cq, send, stats } = yield* connectToPeer({ timeout: 14, retryCnt: 7 })
      device.setFaults({ dropIn: 0.2, dropOut: 0.2 })
      const n = 500
      for (let i = 0; i < n; i++) expect(send(i)).toBe(0)
      const wcs = yield* pollN(cq, n, 60_000)
      expect(wcs.filter((w) => w.status !== WcStatus.SUCCESS)).toEqual([])
      expect(wcs).toHaveLength(n)
      const s = yield* stats()
      expect(s).toMatchObject({ received: n, duplicates: 0, outOfOrder: 0, recvErrors: 0 })
      expect(s.counters.handlerErrors).toBe(0)
      expect(device.counters.retransmits + s.counters.duplicates).toBeGreaterThan(0)
    })
  )

  it.scopedLive(
    "a SIGSTOPped peer: RETRY_EXC_ERR after the IB retry budget; after SIGCONT the peer survives stale packets",
    () =>
      Effect.gen(function* () {
        // TENT's defaults: timeout 14 (67 ms), retry_cnt 7: the budget is 8 timeouts, about 0.54 s.
        const { peer, device, cq, qp, send, stats } = yield* connectToPeer({})
        expect(send(0)).toBe(0)
        expect((yield* pollN(cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
        // On a loaded machine message 0's ACK may come after a retransmit: count only the frozen peer's.
        const retransmitsBefore = device.counters.retransmits
        peer.signal("SIGSTOP")
        yield* sleep(50)
        const start = performance.now()
        for (let i = 1; i <= 5; i++) send(i)
        const wcs = yield* pollN(cq, 5, 10_000)
        const elapsed = performance.now() - start
        expect(wcs.map((w) => w.status)).toEqual([
          WcStatus.RETRY_EXC_ERR,
          WcStatus.WR_FLUSH_ERR,
          WcStatus.WR_FLUSH_ERR,
          WcStatus.WR_FLUSH_ERR,
          WcStatus.WR_FLUSH_ERR
        ])
        expect(qp.state).toBe(QpState.ERR)
        expect(device.counters.retransmits - retransmitsBefore).toBe(7)
        const budget = 8 * ackTimeoutMs(14)
        expect(elapsed).toBeGreaterThanOrEqual(budget - 5)
        // The IB local ACK timeout may run up to 4x its nominal value; this bound is generous for a busy machine.
        expect(elapsed).toBeLessThan(budget * 4 + 2000)
        // The frozen peer's socket holds messages 1-5 as first sent and the retransmits. Wake it up: it reads them
        // late, delivers each message once, and its ACKs reach a QP in ERR here, which drops them.
        peer.signal("SIGCONT")
        expect(yield* waitFor(() => device.counters.droppedState > 0, 5000)).toBe(true)
        const s = yield* statsWhen(stats, (s) => s.received >= 6, 5000)
        expect(s.counters.handlerErrors).toBe(0)
        expect(s.state).toBe(QpState.RTS)
        // Only the stop explains these: 5 messages sent while the peer was frozen, delivered after SIGCONT, once each
        // and in order; the retransmits it had queued meanwhile were seen as duplicates.
        expect(s).toMatchObject({ received: 6, duplicates: 0, outOfOrder: 0, recvErrors: 0 })
        expect(s.counters.duplicates).toBeGreaterThan(0)
      })
  )

  it.scopedLive("the peer's SENDs are NAKed RNR until this process posts RECVs, then all arrive in order", () =>
    Effect.gen(function* () {
      const { peer, device, cq, qp, buf, mr, stats } = yield* connectToPeer({ minRnrTimer: 1 })
      yield* Effect.promise(() => peer.request({ cmd: "send", n: 20 }))
      expect(yield* waitFor(() => device.counters.rnrNaksSent > 0, 3000)).toBe(true)
      for (let i = 0; i < 20; i++)
        expect(qp.postRecv({ wrId: i, sgList: [{ addr: mr.addr + i * 64, length: 64, lkey: mr.lkey }] })).toBe(0)
      const wcs = yield* pollN(cq, 20, 10_000)
      expect(wcs.map((w) => [w.wrId, w.status, w.byteLen])).toEqual(
        Array.from({ length: 20 }, (_, i) => [i, WcStatus.SUCCESS, 64])
      )
      expect(Array.from({ length: 20 }, (_, i) => buf.readUInt32LE(i * 64))).toEqual(
        Array.from({ length: 20 }, (_, i) => i)
      )
      // The peer retried after the RNR NAKs (a retry precedes each delivery, so it has counted them by now).
      expect((yield* stats()).counters.rnrRetries).toBeGreaterThan(0)
      // And every one of the peer's SENDs completes SUCCESS: no WR already acknowledged is failed by a later retry.
      const done = yield* statsWhen(stats, (s) => s.sendsDone + s.sendErrors >= 20, 10_000)
      expect(done).toMatchObject({ sendsDone: 20, sendErrors: 0 })
    })
  )
})
