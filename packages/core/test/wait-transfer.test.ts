/**
 * `waitTransfer`'s deadline: a batch whose completions are held back (the sending engine's pollers paused by
 * `Diagnostics.freezeApplication`) is reported PENDING once the deadline has passed, not before; thawed, the next wait
 * returns COMPLETED. Two engines in this process over SoftVerbs and the real control plane on 127.0.0.1.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { engine, rdmaOnly } from "./fixtures/policies.js"

const KiB = 1024

describe("waitTransfer", () => {
  it.scopedLive("returns the batch's status at its deadline when the batch has not settled, not before", () =>
    Effect.gen(function* () {
      const a = yield* engine(rdmaOnly)
      const b = yield* engine(rdmaOnly)
      const dst = yield* b.engine.registerSegment(Buffer.alloc(256 * KiB))
      const src = yield* a.engine.registerSegment(Buffer.alloc(256 * KiB, 5))
      const target = yield* a.engine.openSegment(b.engine.segmentName)
      const write = { opcode: "WRITE", source: src.addr, target, targetOffset: dst.addr, length: 256 * KiB } as const
      // The endpoints up first: the held batch waits for its completions only.
      const warm = yield* a.engine.allocateBatch
      yield* a.engine.submitTransfer(warm, [write])
      expect((yield* a.engine.waitTransfer(warm, 30_000)).status).toBe("COMPLETED")

      yield* a.diag.freezeApplication(true)
      const batch = yield* a.engine.allocateBatch
      yield* a.engine.submitTransfer(batch, [write])
      const start = performance.now()
      const held = yield* a.engine.waitTransfer(batch, 300)
      const waited = performance.now() - start
      expect(held.status).toBe("PENDING")
      expect(waited).toBeGreaterThanOrEqual(299)
      yield* a.diag.freezeApplication(false)
      expect((yield* a.engine.waitTransfer(batch, 30_000)).status).toBe("COMPLETED")
    })
  )
})
