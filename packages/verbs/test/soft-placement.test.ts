/**
 * A device's `placementDelayMs`: the responder acknowledges an RDMA WRITE at once and its payload lands later, as on a
 * NIC whose PCIe posted writes trail its ACK. Within a QP the order holds (a later receive completion, a READ, ERR,
 * RESET and MR deregistration all see the earlier payloads landed); across QPs it does not, which is the hazard a
 * WRITE followed by a notification on another QP runs into.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import {
  Errno,
  QpAttrMask,
  QpState,
  type RecvWr,
  SendFlags,
  type SendWr,
  SoftVerbs,
  WcFlags,
  WcOpcode,
  WcStatus,
  WrOpcode
} from "../src/index.js"
import type { SoftQp } from "../src/soft/SoftQp.js"
import {
  ALL_ACCESS,
  connectSides,
  drain,
  makePair,
  openSide,
  pollN,
  recvWr,
  type Side,
  sendWr,
  sleep,
  waitFor
} from "./support.js"

const TRIALS = 200
const SLICE = 64

/** What trial `i` writes: its number and a filler, so that neither zeroes nor another trial's bytes match. */
const pattern = (i: number): Buffer => {
  const b = Buffer.alloc(SLICE, 0xa5)
  b.writeUInt32LE(i + 1, 0)
  return b
}

/** An RDMA WRITE of `length` bytes at `offset` of `from`'s buffer to the same offset of `to`'s. */
const write = (from: Side, to: Side, wrId: number, offset: number, length: number): SendWr =>
  sendWr(from, wrId, offset, length, { opcode: WrOpcode.RDMA_WRITE, remoteAddr: to.mr.addr + offset, rkey: to.mr.rkey })

/** A 0-byte RDMA WRITE_WITH_IMM (no SGE): only the immediate, in a RECV_RDMA_WITH_IMM completion at `to`. */
const immWrite = (to: Side, wrId: number, immData: number): SendWr => ({
  wrId,
  opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
  sendFlags: SendFlags.SIGNALED,
  sgList: [],
  numSge: 0,
  remoteAddr: to.mr.addr,
  rkey: to.mr.rkey,
  immData
})

/** A RECV with no SGE: room for an immediate, not for a payload. */
const bareRecv = (wrId: number, next: RecvWr | null = null): RecvWr => ({ wrId, sgList: [], numSge: 0, next })

const visible = (side: Side, offset: number, bytes: Buffer): boolean =>
  side.buf.subarray(offset, offset + bytes.length).equals(bytes)

/**
 * TRIALS times: a WRITE on the data QP pair, then a SEND on a second QP pair between the same two devices; when the
 * SEND's RECV completion is polled at `b`, are the WRITE's bytes there? Returns how often they were not.
 */
const writeThenSendOnAnotherQp = (placementDelayMs: number) =>
  Effect.gen(function* () {
    const { a, b, verbs, control } = yield* makePair({ device: { placementDelayMs } })
    const a2 = yield* openSide(verbs, control, "a", {})
    const b2 = yield* openSide(verbs, control, "b", {})
    yield* connectSides(a2, b2)
    let early = 0
    for (let i = 0; i < TRIALS; i++) {
      const offset = i * SLICE
      pattern(i).copy(a.buf, offset)
      expect(b2.qp.postRecv(recvWr(b2, i, 0, 64))).toBe(0)
      expect(a.qp.postSend(write(a, b, i, offset, SLICE))).toBe(0)
      expect(a2.qp.postSend(sendWr(a2, i, 0, 4))).toBe(0)
      const [wc] = yield* pollN(b2.cq, 1)
      expect(wc).toMatchObject({ wrId: i, status: WcStatus.SUCCESS, opcode: WcOpcode.RECV })
      if (!visible(b, offset, pattern(i))) early++
      expect((yield* pollN(a.cq, 1))[0]).toMatchObject({ wrId: i, status: WcStatus.SUCCESS })
      expect((yield* pollN(a2.cq, 1))[0]).toMatchObject({ wrId: i, status: WcStatus.SUCCESS })
    }
    // Late, not lost: every WRITE lands.
    const all = Buffer.concat(Array.from({ length: TRIALS }, (_, i) => pattern(i)))
    expect(yield* waitFor(() => visible(b, 0, all), 5000)).toBe(true)
    console.log(
      `[soft-placement] placementDelayMs ${placementDelayMs}: ${early} of ${TRIALS} SENDs on another QP early`
    )
    return { early, delayed: b.device.counters.placementsDelayed }
  })

describe("SoftVerbs placementDelayMs (a WRITE is acknowledged before its data is placed)", () => {
  it.scopedLive(
    "placementDelayMs 5: a SEND on another QP completes before an earlier WRITE's bytes are visible (the hazard)",
    () =>
      Effect.gen(function* () {
        const { early, delayed } = yield* writeThenSendOnAnotherQp(5)
        expect(delayed).toBe(TRIALS)
        expect(early).toBeGreaterThan(0)
      })
  )

  it.scopedLive(
    "negative control for the hazard: with placementDelayMs 0 (the default) no SEND on another QP is early",
    () =>
      Effect.gen(function* () {
        const { early, delayed } = yield* writeThenSendOnAnotherQp(0)
        expect(delayed).toBe(0)
        expect(early).toBe(0)
      })
  )

  it.scopedLive(
    "placementDelayMs 5: a 0-byte WRITE_WITH_IMM after a WRITE on the same QP never completes before the WRITE's bytes",
    () =>
      Effect.gen(function* () {
        const { a, b } = yield* makePair({ device: { placementDelayMs: 5 } })
        let early = 0
        for (let i = 0; i < TRIALS; i++) {
          const offset = i * SLICE
          const imm = (0xfeed0000 + i) >>> 0 // the top bit set: an immediate is unsigned
          pattern(i).copy(a.buf, offset)
          expect(b.qp.postRecv(bareRecv(i))).toBe(0)
          expect(a.qp.postSend(write(a, b, 10_000 + i, offset, SLICE))).toBe(0)
          expect(a.qp.postSend(immWrite(b, i, imm))).toBe(0)
          const [wc] = yield* pollN(b.cq, 1)
          if (!visible(b, offset, pattern(i))) early++
          expect(wc).toMatchObject({
            wrId: i,
            status: WcStatus.SUCCESS,
            opcode: WcOpcode.RECV_RDMA_WITH_IMM,
            byteLen: 0,
            immData: imm,
            qpNum: b.qp.qpNum
          })
          expect((wc?.wcFlags ?? 0) & WcFlags.WITH_IMM).toBe(WcFlags.WITH_IMM)
          const sent = yield* pollN(a.cq, 2)
          expect(sent.map((w) => [w.wrId, w.status, w.opcode])).toEqual([
            [10_000 + i, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE],
            [i, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE]
          ])
        }
        console.log(`[soft-placement] same QP: ${early} of ${TRIALS} WRITE_WITH_IMM completions early`)
        expect(b.device.counters.placementsDelayed).toBe(TRIALS)
        expect(early).toBe(0)
      })
  )

  it.scopedLive(
    "a 0-byte WRITE_WITH_IMM is NAKed RNR while no RECV is posted, then consumes exactly one RECV with no SGE",
    () =>
      Effect.gen(function* () {
        const { a, b } = yield* makePair({ params: { minRnrTimer: 1 } })
        expect(a.qp.postSend(immWrite(b, 1, 0xabcdef01))).toBe(0)
        expect(yield* waitFor(() => a.device.counters.rnrRetries > 0, 5000)).toBe(true)
        expect(drain(b.cq)).toEqual([])
        expect(b.qp.postRecv(bareRecv(7, bareRecv(8)))).toBe(0)
        const [r] = yield* pollN(b.cq, 1)
        expect(r).toMatchObject({
          wrId: 7,
          status: WcStatus.SUCCESS,
          opcode: WcOpcode.RECV_RDMA_WITH_IMM,
          byteLen: 0,
          immData: 0xabcdef01,
          wcFlags: WcFlags.WITH_IMM
        })
        expect((yield* pollN(a.cq, 1))[0]).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS })
        expect(b.device.counters.rnrNaksSent).toBeGreaterThan(0)
        expect((b.qp as SoftQp).queueDepths.recv).toBe(1) // RECV 8 is still posted
        expect(drain(b.cq)).toEqual([])
      })
  )

  it.scopedLive("placementDelayMs 200: a READ after a WRITE on the same QP returns the WRITE's bytes", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ device: { placementDelayMs: 200 } })
      pattern(1).copy(a.buf, 0)
      expect(a.qp.postSend(write(a, b, 1, 0, SLICE))).toBe(0)
      expect(
        a.qp.postSend(sendWr(a, 2, 4096, SLICE, { opcode: WrOpcode.RDMA_READ, remoteAddr: b.mr.addr, rkey: b.mr.rkey }))
      ).toBe(0)
      const wcs = yield* pollN(a.cq, 2)
      expect(wcs.map((w) => [w.wrId, w.status])).toEqual([
        [1, WcStatus.SUCCESS],
        [2, WcStatus.SUCCESS]
      ])
      expect(visible(a, 4096, pattern(1))).toBe(true)
      expect(b.device.counters.placementsDelayed).toBe(1)
    })
  )

  it.scopedLive(
    "placementDelayMs 300: ERR lands the acknowledged WRITEs at once; the completion held behind them precedes the flush",
    () =>
      Effect.gen(function* () {
        const { a, b, control } = yield* makePair({ device: { placementDelayMs: 300 } })
        expect(b.qp.postRecv(bareRecv(1, bareRecv(2)))).toBe(0)
        pattern(1).copy(a.buf, 0)
        expect(a.qp.postSend(write(a, b, 1, 0, SLICE))).toBe(0)
        expect(a.qp.postSend(immWrite(b, 2, 77))).toBe(0)
        // Both are acknowledged (b's NIC has them) while the bytes and the completion are still on their way.
        expect((yield* pollN(a.cq, 2)).map((w) => w.status)).toEqual([WcStatus.SUCCESS, WcStatus.SUCCESS])
        expect(visible(b, 0, pattern(1))).toBe(false)
        expect(drain(b.cq)).toEqual([])
        yield* control.forceQpError("b", b.qp.qpNum)
        expect(visible(b, 0, pattern(1))).toBe(true)
        expect(drain(b.cq).map((w) => [w.wrId, w.status, w.opcode])).toEqual([
          [1, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM],
          [2, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV]
        ])
      })
  )

  it.scopedLive(
    "placementDelayMs 300: RESET and destroy land the acknowledged WRITEs at once and drop the completion held",
    () =>
      Effect.gen(function* () {
        const { a, b, verbs, control } = yield* makePair({ device: { placementDelayMs: 300 } })
        const a2 = yield* openSide(verbs, control, "a", {})
        const b2 = yield* openSide(verbs, control, "b", {})
        yield* connectSides(a2, b2)
        for (const [from, to] of [
          [a, b],
          [a2, b2]
        ] as const) {
          expect(to.qp.postRecv(bareRecv(1))).toBe(0)
          pattern(1).copy(from.buf, 0)
          expect(from.qp.postSend(write(from, to, 1, 0, SLICE))).toBe(0)
          expect(from.qp.postSend(immWrite(to, 2, 5))).toBe(0)
          expect((yield* pollN(from.cq, 2)).map((w) => w.status)).toEqual([WcStatus.SUCCESS, WcStatus.SUCCESS])
          expect(visible(to, 0, pattern(1))).toBe(false)
        }
        yield* b.qp.modifyQp({ qpState: QpState.RESET }, QpAttrMask.STATE)
        yield* b2.qp.destroy
        expect(visible(b, 0, pattern(1))).toBe(true)
        expect(visible(b2, 0, pattern(1))).toBe(true)
        yield* sleep(400) // past the delay: the dropped completions do not come back
        expect(drain(b.cq)).toEqual([])
        expect(drain(b2.cq)).toEqual([])
      })
  )

  it.scopedLive("placementDelayMs 300: deregistering the target MR lands the WRITEs still due to it first", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ device: { placementDelayMs: 300 } })
      const scope = yield* Scope.make()
      const target = Buffer.alloc(4096)
      const mr = yield* b.pd.regMr(target, ALL_ACCESS).pipe(Scope.extend(scope))
      pattern(1).copy(a.buf, 0)
      expect(
        a.qp.postSend(sendWr(a, 1, 0, SLICE, { opcode: WrOpcode.RDMA_WRITE, remoteAddr: mr.addr, rkey: mr.rkey }))
      ).toBe(0)
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
      expect(target.subarray(0, SLICE).equals(pattern(1))).toBe(false)
      yield* Scope.close(scope, Exit.void)
      expect(target.subarray(0, SLICE).equals(pattern(1))).toBe(true)
    })
  )

  it.scopedLive(
    "placementDelayMs must be a whole number of milliseconds in 0..1000: anything else fails RdmaError EINVAL naming it",
    () =>
      Effect.gen(function* () {
        for (const placementDelayMs of [-1, 1.5, 1001, Number.NaN, Number.POSITIVE_INFINITY, "5" as never]) {
          const err = yield* Effect.flip(SoftVerbs.make({ devices: [{ name: "x", placementDelayMs }] }))
          expect(err).toMatchObject({ _tag: "RdmaError", op: "ibv_open_device", errno: Errno.EINVAL })
          expect(err.message).toContain('device "x": placementDelayMs must be a whole number of milliseconds')
        }
        for (const placementDelayMs of [0, 1000]) {
          const { control } = yield* SoftVerbs.make({ devices: [{ name: "x", placementDelayMs }] })
          expect(control.devices[0]?.placementDelayMs).toBe(placementDelayMs)
        }
        const { control } = yield* SoftVerbs.make({ devices: [{ name: "x" }] })
        expect(control.devices[0]?.placementDelayMs).toBe(0)
      })
  )
})
