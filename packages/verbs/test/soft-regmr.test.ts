import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { AccessFlags, Errno, WcStatus } from "../src/index.js"
import { makePair, pollN, recvWr, sendWr } from "./support.js"

const { LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC } = AccessFlags

describe("SoftVerbs ibv_reg_mr access rules and fault-setting checks", () => {
  it.scopedLive(
    "REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is EINVAL; with it, or read-only access, registers",
    () =>
      Effect.gen(function* () {
        const { a } = yield* makePair()
        const buffer = Buffer.alloc(4096)
        for (const access of [REMOTE_WRITE, REMOTE_ATOMIC, REMOTE_WRITE | REMOTE_READ, REMOTE_ATOMIC | REMOTE_READ]) {
          const err = yield* Effect.flip(a.pd.regMr(buffer, access))
          expect(err._tag).toBe("RdmaError")
          expect(err).toMatchObject({ op: "ibv_reg_mr", errno: Errno.EINVAL })
          expect(err.message).toContain("LOCAL_WRITE")
        }
        for (const access of [0, REMOTE_READ, LOCAL_WRITE | REMOTE_WRITE, LOCAL_WRITE | REMOTE_ATOMIC]) {
          const mr = yield* a.pd.regMr(buffer, access)
          expect(mr.access).toBe(access)
        }
        const notFlags = yield* Effect.flip(a.pd.regMr(buffer, -1))
        expect(notFlags).toMatchObject({ op: "ibv_reg_mr", errno: Errno.EINVAL })
      })
  )

  it.scopedLive("setFaults with a bad value fails InvalidFaults naming the field, and changes nothing", () =>
    Effect.gen(function* () {
      const { a, b, control } = yield* makePair({ params: { timeout: 14, retryCnt: 7 } })
      const bad: ReadonlyArray<readonly [unknown, string | undefined, string]> = [
        [{ dropIn: -0.1 }, undefined, "dropIn"],
        [{ dropIn: Number.NaN }, undefined, "dropIn"],
        [{ dropOut: 1.5 }, undefined, "dropOut"],
        [{ dropOut: "0.5" }, undefined, "dropOut"],
        [{ delayMs: -1 }, undefined, "delayMs"],
        [{ delayMs: Number.POSITIVE_INFINITY }, undefined, "delayMs"],
        [{ dropIn: 0.1, lossIn: 0.5 }, undefined, "lossIn"],
        [null, undefined, "faults"],
        [{ dropIn: 1 }, "127.0.0.1", "peer"],
        [{ dropIn: 1 }, "127.0.0.1:70000", "peer"]
      ]
      for (const [faults, peer, field] of bad) {
        const err = yield* Effect.flip(control.setFaults("a", faults as never, peer))
        expect(err._tag).toBe("InvalidFaults")
        expect(err._tag === "InvalidFaults" && err.field).toBe(field)
        expect(err.message).toContain(field)
        // The device method answers the same without throwing.
        expect(a.device.setFaults(faults as never, peer)?.field).toBe(field)
      }
      // Nothing was applied: traffic flows (a refused { dropIn: 1 } would have cut it).
      b.qp.postRecv(recvWr(b, 1, 0, 64))
      a.qp.postSend(sendWr(a, 1, 0, 8))
      expect((yield* pollN(b.cq, 1))[0]?.status).toBe(WcStatus.SUCCESS)
      expect(a.device.counters.droppedFault).toBe(0)
      // Good values at the edges are accepted.
      yield* control.setFaults("a", { dropIn: 0, dropOut: 1, delayMs: 0 })
      yield* control.setFaults("a", { dropIn: 1 }, yield* control.address("b"))
      yield* control.setFaults("a", {})
      const noDevice = yield* Effect.flip(control.setFaults("zz", {}))
      expect(noDevice._tag).toBe("DeviceNotFound")
    })
  )
})
