/**
 * The control plane's port serves two wires; a connection's first bytes pick one (`internal/tentWire.ts`). Lean frames
 * whose length prefix happens to read as coro_rpc's magic must stay lean; a coro_rpc request to TENT's function goes
 * to TENT's handlers, whatever way its first bytes are chunked.
 */
import { describe, expect, it } from "@effect/vitest"
import { CoroRpc } from "../../src/index.js"
import { Kind } from "../../src/internal/frame.js"
import { classify } from "../../src/internal/tentWire.js"

/** A lean request frame: `[u32 len][u8 kind][u32 id][u8 rpc index][payload]`. */
const leanFrame = (id: number, index: number, payload: number): Buffer => {
  const b = Buffer.alloc(4 + 1 + 4 + 1 + payload, 0x61)
  b.writeUInt32LE(b.length - 4, 0)
  b[4] = Kind.Request
  b.writeUInt32LE(id, 5)
  b[9] = index
  return b
}

describe("which wire a connection speaks", () => {
  it("a coro_rpc request to CoroRpcAgent::process is TENT's, decided at its 12th byte", () => {
    for (const funcId of [1, 2, 3, 4, 5, 6, 42]) {
      const head = CoroRpc.encodeRequest({ seqNum: funcId * 977, funcId })
      for (let n = 0; n < 12; n++) expect(classify(head.subarray(0, n)), `${n} bytes`).toBeUndefined()
      expect(classify(head.subarray(0, 12))).toBe("tent")
      expect(classify(head)).toBe("tent")
    }
  })

  it("every lean frame is lean, those with a 21-byte length (15 00 00 00) included", () => {
    for (let id = 0; id < 4096; id += 13) {
      for (const index of [0, 1, 2, 3, 4, 5]) {
        for (const payload of [0, 1, 11, 15, 200, 70_000]) {
          const frame = leanFrame(id, index, payload)
          expect(classify(frame), `id ${id} index ${index} payload ${payload}`).toBe("lean")
        }
      }
    }
    // the one shape that starts like coro_rpc: decided lean once the function id's place is read
    const look = leanFrame(1, 1, 15)
    expect(look.subarray(0, 4)).toEqual(Buffer.from([21, 0, 0, 0]))
    expect(classify(look.subarray(0, 11))).toBeUndefined()
    expect(classify(look)).toBe("lean")
  })

  it("negative controls: one byte off in magic, version, serialize type or function id is not TENT's", () => {
    const head = CoroRpc.encodeRequest({ seqNum: 1, funcId: CoroRpc.TentFuncId.Notify })
    for (const at of [0, 1, 2, 3, 8, 9, 10, 11]) {
      const bad = Buffer.from(head)
      bad[at] = (bad[at] as number) ^ 0x01
      expect(classify(bad), `byte ${at}`).toBe("lean")
    }
  })
})
