/** The probe's counting: per `(session, seq)` stamped in the body, so a copy is a duplicate, not a receipt. */
import { describe, expect, it } from "vitest"
import * as Stamp from "../src/probe/Stamp.js"

describe("probe stamp and counter", () => {
  it("a copy of a stamp is counted as a duplicate; other sessions and the END marker are told apart", () => {
    const c = new Stamp.Counter()
    c.add(Stamp.stamp(7, 0, "transfer"))
    c.add(Stamp.stamp(7, 1, "standalone"))
    c.add(Stamp.stamp(7, 1, "standalone"))
    c.add(Stamp.stamp(8, 1, "standalone"))
    c.add({ name: new TextEncoder().encode("tent-probe"), msg: new Uint8Array(3) })
    expect(c.counts).toMatchObject({ received: 3, total: 4, duplicates: 1, end: false })
    expect(Stamp.decode(Stamp.end(7, 4000))).toEqual({ _tag: "End", session: 7, attempted: 4000 })
    c.add(Stamp.end(7, 4))
    expect(c.counts.end).toBe(true)
  })

  it("a failure notice (its batch ended FAILED) is not a receipt of its stamp", () => {
    const c = new Stamp.Counter()
    c.add({ ...Stamp.stamp(7, 0, "transfer"), failure: "RdmaTransferFailed: no path" })
    expect(c.counts).toMatchObject({ received: 0, total: 0 })
    c.add(Stamp.stamp(7, 0, "transfer"))
    expect(c.counts).toMatchObject({ received: 1, total: 1 })
  })

  it("round-trips session, seq and kind", () => {
    expect(Stamp.decode(Stamp.stamp(0xffffffff, 123456, "recovery"))).toEqual({
      _tag: "Stamp",
      session: 0xffffffff,
      seq: 123456,
      kind: "recovery"
    })
  })
})
