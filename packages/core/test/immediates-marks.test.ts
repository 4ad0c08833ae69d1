/**
 * The receiver's table of immediates and held records (`TransferMarks`) and the held record's wire form
 * (`HeldRecord`), as plain code: release only once every lane's immediate and the record are in (either order),
 * copies of a record counted once, expiry, the byte bound's accounting.
 */
import { describe, expect, it } from "@effect/vitest"
import * as CtrlFrame from "../src/CtrlFrame.js"
import { FLAG_HELD, HELD_TTL_MS, makeHeld, takeHeld } from "../src/internal/HeldRecord.js"
import { HELD_BYTES_CAP, TransferMarks } from "../src/internal/rdma/Immediates.js"

describe("TransferMarks", () => {
  it("releases a record once every lane's immediate arrived, whichever comes first; not a lane before", () => {
    const m = new TransferMarks()
    let released = 0
    m.mark("peer", 7)
    m.hold("peer", 7, 3, 100, () => void released++)
    expect(released).toBe(0) // 1 of 3 lanes
    m.mark("peer", 7)
    expect(released).toBe(0)
    m.mark("other-peer", 7) // another sender's tag 7 counts for that sender only
    expect(released).toBe(0)
    m.mark("peer", 7)
    expect(released).toBe(1)
    expect(m.size).toBe(1) // other-peer's immediate waits
    expect(m.heldBytes).toBe(0)
  })

  it("a copy of a held record is held once; a record with all its immediates in is released at once", () => {
    const m = new TransferMarks()
    let released = 0
    m.hold("peer", 1, 2, 10, () => void released++)
    m.hold("peer", 1, 2, 10, () => void released++)
    expect(m.counters.held).toBe(1)
    m.mark("peer", 1)
    m.mark("peer", 1)
    expect(released).toBe(1)
    m.mark("peer", 2)
    m.mark("peer", 2)
    m.hold("peer", 2, 2, 10, () => void released++)
    expect(released).toBe(2)
    expect(m.size).toBe(0)
  })

  it("drops what waited past the TTL, counted as expired", () => {
    let now = 0
    const m = new TransferMarks(() => now)
    m.hold("peer", 1, 2, 10, () => {})
    m.mark("peer", 2)
    now = HELD_TTL_MS / 2
    m.mark("peer", 3)
    now = HELD_TTL_MS + 1
    expect(m.sweep()).toBe(2)
    expect(m.size).toBe(1)
    expect(m.counters.expired).toBe(2)
    expect(m.heldBytes).toBe(0)
  })

  it("keeps held copies under the byte bound, oldest first, and its count of bytes exact", () => {
    const m = new TransferMarks()
    const big = Math.floor(HELD_BYTES_CAP / 3)
    m.mark("peer", 1) // an immediate-only entry, the oldest: holds no bytes
    for (let tag = 2; tag <= 6; tag++) m.hold("peer", tag, 2, big, () => {})
    expect(m.heldBytes).toBeLessThanOrEqual(HELD_BYTES_CAP)
    expect(m.heldBytes).toBe(3 * big)
    // The record whose entry was the oldest (made by its immediate) is held without dropping itself.
    m.hold("peer", 1, 2, big, () => {})
    expect(m.heldBytes).toBe(3 * big)
    // Past the bound again: the oldest other copy goes; a release gives its bytes back.
    let released = 0
    m.hold("peer", 9, 1, 5, () => void released++)
    expect(m.heldBytes).toBe(2 * big + 5)
    m.mark("peer", 9)
    expect(released).toBe(1)
    expect(m.heldBytes).toBe(2 * big)
  })
})

describe("HeldRecord on the wire", () => {
  const frame = () => {
    const f = CtrlFrame.encode({
      flags: CtrlFrame.FLAG_NEEDS_ACK,
      session: 5n,
      epoch: 6n,
      seq: 7n,
      ackSeq: 0n,
      name: new TextEncoder().encode("n"),
      msg: new TextEncoder().encode("msg")
    })
    const buf = Buffer.alloc(f.length + 16)
    buf.set(f, 4)
    return { buf, len: f.length, original: Buffer.from(f) }
  }

  it("makeHeld adds flag bit 2 and [u32 tag][u32 lanes]; takeHeld gives the frame back byte for byte", () => {
    const { buf, len, original } = frame()
    const held = makeHeld(buf, 4, len, buf.length - 4, { tag: 0xfeedbeef, lanes: 3, active: true })
    expect(held).toBe(len + 8)
    expect(buf.readUInt16LE(4 + 6) & FLAG_HELD).toBe(FLAG_HELD)
    const out = { tag: 0, lanes: 0 }
    expect(takeHeld(buf, 4, held, out)).toBe(len)
    expect(out).toEqual({ tag: 0xfeedbeef, lanes: 3 })
    expect(Buffer.compare(buf.subarray(4, 4 + len), original)).toBe(0)
    expect(CtrlFrame.decode(buf.subarray(4, 4 + len))).toMatchObject({ seq: 7n })
  })

  it("refuses what is not a held record, and a frame with no room for the trailer", () => {
    const { buf, len } = frame()
    const out = { tag: 0, lanes: 0 }
    expect(takeHeld(buf, 4, len, out)).toBe(-1) // no flag
    expect(makeHeld(buf, 4, len, len + 7, { tag: 1, lanes: 1, active: true })).toBe(-1)
    const held = makeHeld(buf, 4, len, buf.length - 4, { tag: 1, lanes: 0, active: true })
    expect(takeHeld(buf, 4, held, out)).toBe(-1) // zero lanes
    // Without takeHeld, the C++ decoder's rule refuses the unknown flag bit.
    expect(CtrlFrame.decode(buf.subarray(4, 4 + held))).toBeUndefined()
  })
})
