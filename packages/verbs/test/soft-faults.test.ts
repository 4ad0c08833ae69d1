import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { EventType, PortState, QpState, SoftVerbs, WcStatus } from "../src/index.js"
import { collectEvents, drain, makePair, pollN, recvWr, sendWr, sleep, waitFor } from "./support.js"

describe("SoftVerbs fault injection (rule 10, in one process)", () => {
  it.scopedLive("a port taken down raises PORT_ERR and loses all traffic; up again raises PORT_ACTIVE", () =>
    Effect.gen(function* () {
      const { a, b, control } = yield* makePair({ params: { timeout: 10, retryCnt: 2 } })
      const events = yield* collectEvents(b.ctx)
      yield* control.setPortState("b", false)
      expect((yield* b.ctx.queryPort(1)).state).toBe(PortState.DOWN)
      b.qp.postRecv(recvWr(b, 1, 0, 64))
      a.qp.postSend(sendWr(a, 1, 0, 8))
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.RETRY_EXC_ERR)
      expect(b.device.counters.droppedPortDown).toBeGreaterThanOrEqual(3)
      expect(drain(b.cq)).toHaveLength(0)
      // Nothing leaves a port that is down either.
      const aReceived = a.device.counters.rxPackets
      b.qp.postSend(sendWr(b, 2, 0, 8))
      expect((yield* pollN(b.cq, 1))[0]?.status).toBe(WcStatus.RETRY_EXC_ERR)
      expect(a.device.counters.rxPackets).toBe(aReceived)
      yield* control.setPortState("b", true)
      expect((yield* b.ctx.queryPort(1)).state).toBe(PortState.ACTIVE)
      yield* waitFor(() => events.length >= 2)
      expect(events.map((e) => e.eventType)).toEqual([EventType.PORT_ERR, EventType.PORT_ACTIVE])
    })
  )

  it.scopedLive("forceQpError moves a QP to ERR from outside its owner: QP_FATAL, and its WRs flush", () =>
    Effect.gen(function* () {
      const { b, control } = yield* makePair()
      const events = yield* collectEvents(b.ctx)
      b.qp.postRecv(recvWr(b, 1, 0, 64))
      yield* control.forceQpError("b", b.qp.qpNum)
      expect(b.qp.state).toBe(QpState.ERR)
      expect((yield* pollN(b.cq, 1))[0]).toMatchObject({ wrId: 1, status: WcStatus.WR_FLUSH_ERR })
      yield* waitFor(() => events.length >= 1)
      expect(events[0]).toMatchObject({ eventType: EventType.QP_FATAL, qpNum: b.qp.qpNum })
      const missing = yield* control.forceQpError("b", 0xabcdef).pipe(Effect.flip)
      expect(missing._tag).toBe("RdmaError")
      const noDevice = yield* control.forceQpError("zz", 1).pipe(Effect.flip)
      expect(noDevice._tag).toBe("DeviceNotFound")
      expect(noDevice._tag === "DeviceNotFound" && noDevice.reason).toBe("Absent")
      expect(noDevice.message).toContain("present: a, b")
    })
  )

  it.scopedLive("loss towards one peer only hits that peer; delay holds packets back", () =>
    Effect.gen(function* () {
      // timeout 14 (67 ms) outlasts the 30 ms delay below; retry_cnt 3 leaves room for a starved process.
      const { a, b, control } = yield* makePair({ paramsA: { timeout: 14, retryCnt: 3 } })
      const bAddress = yield* control.address("b")
      yield* control.setFaults("a", { dropOut: 1 }, "127.0.0.1:1") // another peer: no effect on b
      b.qp.postRecv(recvWr(b, 1, 0, 64))
      a.qp.postSend(sendWr(a, 1, 0, 8))
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
      yield* control.setFaults("a", {}, "127.0.0.1:1")
      // A 30 ms delay on a's egress: the message takes at least that long.
      yield* control.setFaults("a", { delayMs: 30 }, bAddress)
      b.qp.postRecv(recvWr(b, 2, 0, 64))
      const start = performance.now()
      a.qp.postSend(sendWr(a, 2, 0, 8))
      expect((yield* pollN(b.cq, 2)).map((w) => w.wrId)).toEqual([1, 2])
      expect(performance.now() - start).toBeGreaterThanOrEqual(29)
      yield* control.setFaults("a", {}, bAddress)
      // Total loss towards b: the budget runs out.
      yield* control.setFaults("a", { dropOut: 1 }, bAddress)
      a.qp.postSend(sendWr(a, 3, 0, 8))
      yield* sleep(1)
      const wcs = yield* pollN(a.cq, 2)
      expect(wcs.map((w) => w.status)).toEqual([WcStatus.SUCCESS, WcStatus.RETRY_EXC_ERR])
    })
  )

  it.scopedLive("fault values are checked: a drop rate outside 0..1 is refused", () =>
    Effect.gen(function* () {
      const { a } = yield* makePair()
      expect(a.device.setFaults({ dropIn: 2 })).toMatchObject({ _tag: "InvalidFaults", field: "dropIn" })
    })
  )

  it.scopedLive("a device that cannot bind fails with RdmaError naming it; a duplicate name is refused", () =>
    Effect.gen(function* () {
      const { control } = yield* makePair()
      const taken = Number((yield* control.address("a")).split(":")[1])
      const err = yield* SoftVerbs.make({ devices: [{ name: "x", port: taken }] }).pipe(Effect.flip)
      expect(err.message).toContain('"x"')
      expect(err.op).toBe("bind")
      const dup = yield* SoftVerbs.make({ devices: [{ name: "x" }, { name: "x" }] }).pipe(Effect.flip)
      expect(dup.message).toContain("twice")
    })
  )
})
