import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { AccessFlags, EventType, QpState, WcStatus, WrOpcode } from "../src/index.js"
import { collectEvents, makePair, pollN, sendWr, waitFor } from "./support.js"

type Violation = "rkey" | "bounds" | "access"

const cases: ReadonlyArray<{ op: "WRITE" | "WRITE_WITH_IMM" | "READ"; violation: Violation }> = [
  { op: "WRITE", violation: "rkey" },
  { op: "WRITE", violation: "bounds" },
  { op: "WRITE", violation: "access" },
  { op: "WRITE_WITH_IMM", violation: "rkey" },
  { op: "READ", violation: "rkey" },
  { op: "READ", violation: "bounds" },
  { op: "READ", violation: "access" }
]

describe("SoftVerbs remote access checks (rule 7)", () => {
  for (const { op, violation } of cases) {
    it.scopedLive(`${op} with a bad ${violation}: REM_ACCESS_ERR, both QPs in ERR, target memory untouched`, () =>
      Effect.gen(function* () {
        // The target MR of the "access" case lacks the right the op needs.
        const targetAccess =
          violation === "access"
            ? op === "READ"
              ? AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE
              : AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_READ
            : AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ
        const { a, b } = yield* makePair({ bufSize: 65536 })
        const target = Buffer.alloc(4096, 0x5a)
        const mr = yield* b.pd.regMr(target, targetAccess)
        const events = yield* collectEvents(b.ctx)
        a.buf.fill(0x11, 0, 8192)
        const rkey = violation === "rkey" ? mr.rkey ^ 0x55 : mr.rkey
        const len = violation === "bounds" ? 4097 : 4096
        const opcode =
          op === "READ" ? WrOpcode.RDMA_READ : op === "WRITE" ? WrOpcode.RDMA_WRITE : WrOpcode.RDMA_WRITE_WITH_IMM
        a.qp.postSend(sendWr(a, 1, 0, len, { opcode, remoteAddr: mr.addr, rkey }))
        a.qp.postSend(sendWr(a, 2, 0, 8))
        const wcs = yield* pollN(a.cq, 2)
        expect(wcs.map((w) => w.status)).toEqual([WcStatus.REM_ACCESS_ERR, WcStatus.WR_FLUSH_ERR])
        expect(a.qp.state).toBe(QpState.ERR)
        expect(b.qp.state).toBe(QpState.ERR)
        expect(target.every((x) => x === 0x5a)).toBe(true)
        if (op === "READ") expect(a.buf.subarray(0, 4096).every((x) => x === 0x11)).toBe(true)
        yield* waitFor(() => events.length >= 1)
        const [event] = events
        expect(event).toMatchObject({ eventType: EventType.QP_ACCESS_ERR, qpNum: b.qp.qpNum })
      })
    )
  }

  it.scopedLive("the QP's own access flags are checked too: a QP without REMOTE_WRITE refuses a WRITE", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair({ paramsB: { accessFlags: AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_READ } })
      a.qp.postSend(sendWr(a, 1, 0, 16, { opcode: WrOpcode.RDMA_WRITE, remoteAddr: b.mr.addr, rkey: b.mr.rkey }))
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.REM_ACCESS_ERR)
      expect(b.buf.subarray(0, 16).every((x) => x === 0)).toBe(true)
    })
  )

  it.scopedLive("a deregistered MR's rkey no longer works", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair()
      const target = Buffer.alloc(1024)
      const scoped = yield* Effect.scoped(
        Effect.map(b.pd.regMr(target, AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE), (mr) => mr)
      )
      a.qp.postSend(sendWr(a, 1, 0, 16, { opcode: WrOpcode.RDMA_WRITE, remoteAddr: scoped.addr, rkey: scoped.rkey }))
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.REM_ACCESS_ERR)
    })
  )

  it.scopedLive("a bad local lkey completes LOC_PROT_ERR and moves the QP to ERR", () =>
    Effect.gen(function* () {
      const { a } = yield* makePair()
      a.qp.postSend({ ...sendWr(a, 1, 0, 16), sgList: [{ addr: a.mr.addr, length: 16, lkey: a.mr.lkey + 1 }] })
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.LOC_PROT_ERR)
      expect(a.qp.state).toBe(QpState.ERR)
    })
  )

  it.scopedLive("a SEND longer than the RECV: LOC_LEN_ERR at the responder, REM_INV_REQ_ERR at the requester", () =>
    Effect.gen(function* () {
      const { a, b } = yield* makePair()
      b.qp.postRecv({ wrId: 5, sgList: [{ addr: b.mr.addr, length: 8, lkey: b.mr.lkey }] })
      a.qp.postSend(sendWr(a, 1, 0, 64))
      expect((yield* pollN(b.cq, 1))[0]).toMatchObject({ wrId: 5, status: WcStatus.LOC_LEN_ERR })
      expect((yield* pollN(a.cq, 1))[0]?.status).toBe(WcStatus.REM_INV_REQ_ERR)
    })
  )
})
