import { describe, expect, it } from "@effect/vitest"
import { NotifyWire } from "@tent/rpc"
import { FastCheck as fc } from "effect"
import { CtrlFrame, Dedup } from "../src/index.js"

const u64 = fc.bigUintN(64)
const bytes = fc.uint8Array({ maxLength: 200 })
const frameArb: fc.Arbitrary<CtrlFrame.Frame> = fc.record({
  session: u64,
  epoch: u64,
  seq: u64,
  ackSeq: u64,
  flags: fc.constantFrom(0, CtrlFrame.FLAG_NEEDS_ACK),
  name: bytes,
  msg: bytes
})

const hex = (s: string) => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ""), "hex"))
const text = (s: string) => Uint8Array.from(Buffer.from(s, "latin1"))
const view = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, b.byteLength)
const codeOf = (b: Uint8Array) =>
  CtrlFrame.decodeInto(Buffer.from(b.buffer, b.byteOffset, b.byteLength), 0, b.length, new CtrlFrame.StampedRanges())

/** Written out from the layout by hand, not by the encoder. */
const GOLDEN = hex(`
  4d434b43 01 0a 0100
  1032547698badcfe
  0700000000000000
  0300000000000000
  0807060504030201
  0d000000
  02000000 6869 03000000 6f6b21
`)
const GOLDEN_FRAME: CtrlFrame.Frame = {
  session: 0xfedcba9876543210n,
  epoch: 7n,
  seq: 3n,
  ackSeq: 0x0102030405060708n,
  flags: 1,
  name: text("hi"),
  msg: text("ok!")
}

/** A NOTIFY_COMPAT header (epoch, ack_seq 0) followed by `payload` as is, with `payload_len` as given. */
const withPayload = (payload: Uint8Array, payloadLen = payload.length) => {
  const b = Buffer.alloc(CtrlFrame.HEADER_BYTES + payload.length)
  b.writeUInt32LE(CtrlFrame.MAGIC, 0)
  b[4] = 1
  b[5] = 10
  b.writeBigUInt64LE(5n, 8)
  b.writeBigUInt64LE(6n, 24)
  b.writeUInt32LE(payloadLen, 40)
  b.set(payload, 44)
  return Uint8Array.from(b)
}
/** `[u32 name_len][name][u32 msg_len][msg]` with lengths as given, whatever the bytes. */
const rawPayload = (nameLen: number, name: Uint8Array, msgLen: number, msg: Uint8Array) => {
  const b = Buffer.alloc(8 + name.length + msg.length)
  b.writeUInt32LE(nameLen, 0)
  b.set(name, 4)
  b.writeUInt32LE(msgLen, 4 + name.length)
  b.set(msg, 8 + name.length)
  return Uint8Array.from(b)
}
const patch = (b: Uint8Array, at: number, ...values: Array<number>) => {
  const c = Uint8Array.from(b)
  c.set(values, at)
  return c
}

describe("CtrlFrame", () => {
  it("round-trips any u64 header fields, flags 0 or NeedsAck, and binary name/msg", () => {
    fc.assert(
      fc.property(frameArb, (frame) => {
        const encoded = CtrlFrame.encode(frame)
        expect(encoded.length).toBe(CtrlFrame.HEADER_BYTES + 8 + frame.name.length + frame.msg.length)
        expect(CtrlFrame.decode(encoded)).toEqual(frame)
      })
    )
  })

  it("decodes the hand-written golden frame, and encode reproduces it byte for byte", () => {
    expect(CtrlFrame.decode(GOLDEN)).toEqual(GOLDEN_FRAME)
    expect(Buffer.from(CtrlFrame.encode(GOLDEN_FRAME)).toString("hex")).toBe(Buffer.from(GOLDEN).toString("hex"))
    expect(CtrlFrame.isCtrlFrame(Buffer.from(GOLDEN), 0, GOLDEN.length)).toBe(true)
  })

  it("decodes a frame lying at an offset in a larger buffer, and returns copies of name and msg", () => {
    const big = new Uint8Array(GOLDEN.length + 10)
    big.set(GOLDEN, 7)
    const slice = big.subarray(7, 7 + GOLDEN.length)
    const frame = CtrlFrame.decode(slice)
    expect(frame).toEqual(GOLDEN_FRAME)
    big.fill(0)
    expect(frame?.name).toEqual(text("hi"))
    expect(frame?.msg).toEqual(text("ok!"))
  })

  describe("every single-byte mutation of the header decodes to the mutated field or is rejected", () => {
    // The oracle, from the C++ decoder: magic (0-3), version (4), type (5) and payload_len (40-43) accept only their
    // original value; flags (6-7) accept 0 and 1; session, epoch, seq, ack_seq (8-39) accept anything.
    const check = (frame: CtrlFrame.Frame, at: number, value: number) => {
      const mutated = patch(CtrlFrame.encode(frame), at, value)
      const v = view(mutated)
      const flags = v.getUint16(6, true)
      const unchanged = CtrlFrame.encode(frame)[at] === value
      const accepts = at >= 8 && at < 40 ? true : at === 6 || at === 7 ? flags === 0 || flags === 1 : unchanged
      const decoded = CtrlFrame.decode(mutated)
      if (accepts) {
        expect(decoded).toEqual({
          session: v.getBigUint64(8, true),
          epoch: v.getBigUint64(16, true),
          seq: v.getBigUint64(24, true),
          ackSeq: v.getBigUint64(32, true),
          flags,
          name: frame.name,
          msg: frame.msg
        })
      } else {
        expect(decoded).toBeUndefined()
      }
    }

    it("exhaustively on the golden frame (44 × 256)", () => {
      for (let at = 0; at < CtrlFrame.HEADER_BYTES; at++) {
        for (let value = 0; value < 256; value++) check(GOLDEN_FRAME, at, value)
      }
    })

    it("on arbitrary frames", () => {
      fc.assert(
        fc.property(frameArb, fc.nat(CtrlFrame.HEADER_BYTES - 1), fc.nat(255), (frame, at, value) =>
          check(frame, at, value)
        )
      )
    })
  })

  it("never throws on arbitrary bytes, nor on arbitrary bytes behind a valid magic, version and type", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 120 }), fc.boolean(), (junk, typed) => {
        const b = typed && junk.length >= 6 ? patch(junk, 0, 0x4d, 0x43, 0x4b, 0x43, 1, 10) : junk
        const frame = CtrlFrame.decode(b)
        const code = codeOf(b)
        expect(frame === undefined).toBe(code !== 0)
      })
    )
  })

  describe("rejects what the C++ decoder rejects", () => {
    const good = CtrlFrame.encode({ ...GOLDEN_FRAME, flags: 0 })
    const cases: ReadonlyArray<readonly [string, Uint8Array, number]> = [
      ["empty input (cpp:217)", new Uint8Array(0), CtrlFrame.Reject.Short],
      ["43 bytes (cpp:217)", good.subarray(0, 43), CtrlFrame.Reject.Short],
      ["bad magic (cpp:226)", patch(good, 3, 0x44), CtrlFrame.Reject.Magic],
      ["version 0 (cpp:233)", patch(good, 4, 0), CtrlFrame.Reject.Version],
      ["version 2 (cpp:233)", patch(good, 4, 2), CtrlFrame.Reject.Version],
      ["type 0 (cpp:234)", patch(good, 5, 0), CtrlFrame.Reject.Type],
      ["type 11 (cpp:234)", patch(good, 5, 11), CtrlFrame.Reject.Type],
      ["type 255 (cpp:234)", patch(good, 5, 255), CtrlFrame.Reject.Type],
      ["type 9 CTRL_ACK: a known type, not a notification", patch(good, 5, 9), CtrlFrame.Reject.NotNotify],
      ["flags 0x0002 (cpp:235)", patch(good, 6, 2, 0), CtrlFrame.Reject.Flags],
      ["flags 0x8000 (cpp:235)", patch(good, 6, 0, 0x80), CtrlFrame.Reject.Flags],
      ["flags 0x0003 (cpp:235)", patch(good, 6, 3, 0), CtrlFrame.Reject.Flags],
      ["payload_len one past the end (cpp:236)", patch(good, 40, (good[40] ?? 0) + 1), CtrlFrame.Reject.PayloadLength],
      ["payload_len 0xFFFFFFFF (cpp:236)", patch(good, 40, 255, 255, 255, 255), CtrlFrame.Reject.PayloadLength],
      ["a byte after the payload (cpp:236)", Uint8Array.from([...good, 0]), CtrlFrame.Reject.PayloadLength],
      ["header only, payload_len 0 (cpp:63)", withPayload(new Uint8Array(0)), CtrlFrame.Reject.PayloadShort],
      ["payload of 7 bytes (cpp:63)", withPayload(new Uint8Array(7)), CtrlFrame.Reject.PayloadShort],
      [
        "name_len past the payload (cpp:68)",
        withPayload(rawPayload(3, text("hi"), 0, text(""))),
        CtrlFrame.Reject.NameTooLong
      ],
      [
        "name_len leaving no room for msg_len (cpp:72)",
        withPayload(rawPayload(4, text("hi"), 0, text(""))),
        CtrlFrame.Reject.NameTooLong
      ],
      [
        "name_len 0xFFFFFFFF (cpp:68)",
        withPayload(rawPayload(0xffffffff, text("hi"), 0, text(""))),
        CtrlFrame.Reject.NameTooLong
      ],
      [
        "msg_len past the payload (cpp:73)",
        withPayload(rawPayload(2, text("hi"), 4, text("ok!"))),
        CtrlFrame.Reject.MsgTooLong
      ],
      [
        "a byte after an empty msg (cpp:76)",
        withPayload(Uint8Array.from([...rawPayload(1, text("h"), 0, text("")), 0x21])),
        CtrlFrame.Reject.Trailing
      ],
      [
        "msg_len short: bytes after msg (cpp:76)",
        withPayload(rawPayload(2, text("hi"), 2, text("ok!"))),
        CtrlFrame.Reject.Trailing
      ]
    ]
    it.each(cases)("%s", (_, b, code) => {
      expect(CtrlFrame.decode(b)).toBeUndefined()
      expect(codeOf(b)).toBe(code)
    })

    it("accepts an empty name and an empty msg (the smallest frame, 52 bytes)", () => {
      const b = withPayload(rawPayload(0, text(""), 0, text("")))
      expect(b.length).toBe(52)
      expect(CtrlFrame.decode(b)).toMatchObject({ session: 5n, seq: 6n, name: text(""), msg: text("") })
    })

    it("is stricter than TENT's raw slot decoder about bytes after msg", () => {
      const payload = rawPayload(2, text("hi"), 2, text("ok!"))
      const raw = new NotifyWire.DecodedRanges()
      expect(NotifyWire.decode(Buffer.from(payload), 0, payload.length, raw)).toBe(0)
      expect(CtrlFrame.decode(withPayload(payload))).toBeUndefined()
    })

    it("leaves the output untouched on a reject (cpp:78-81, 239-248)", () => {
      const out = new Dedup.DecodedFrame()
      const bad = withPayload(rawPayload(2, text("hi"), 2, text("ok!")))
      expect(CtrlFrame.decodeInto(Buffer.from(bad), 0, bad.length, out)).toBe(CtrlFrame.Reject.Trailing)
      expect({ ...out }).toEqual({ ...new Dedup.DecodedFrame() })
    })
  })

  describe("the notify slot's encodeInto / decodeInto", () => {
    it("agree with encode / decode, at any offset, and fill a Dedup.DecodedFrame", () => {
      fc.assert(
        fc.property(u64, u64, bytes, bytes, fc.nat(64), (session, seq, name, msg, offset) => {
          const buf = Buffer.alloc(offset + NotifyWire.SLOT_BYTES, 0xee)
          const len = CtrlFrame.encodeInto(buf, offset, session, seq, name, msg)
          const whole = CtrlFrame.encode({ session, epoch: 0n, seq, ackSeq: 0n, flags: 0, name, msg })
          expect(buf.subarray(offset, offset + len)).toEqual(Buffer.from(whole))
          expect(CtrlFrame.isCtrlFrame(buf, offset, len)).toBe(true)

          const out = new Dedup.DecodedFrame()
          expect(CtrlFrame.decodeInto(buf, offset, len, out)).toBe(0)
          expect(out.stamped).toBe(true)
          expect(out.session).toBe(session)
          expect(out.seq).toBe(seq)
          expect(buf.subarray(out.nameStart, out.nameEnd)).toEqual(Buffer.from(name))
          expect(buf.subarray(out.msgStart, out.msgEnd)).toEqual(Buffer.from(msg))
          expect(out.msgEnd).toBe(offset + len)
        })
      )
    })

    it("write and read every u64 field as Node's BigInt codec does, across values a double holds and large ones that repeat or alternate", () => {
      // The codec's u64 fast paths: arithmetic below 2^53, the last four large values kept with their halves. Values
      // that share one half with a kept one, the boundaries, and runs that alternate among more than four large ones.
      const edges = [0n, 1n, 2n ** 32n - 1n, 2n ** 32n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 64n - 1n]
      const large = fc.bigInt(2n ** 53n, 2n ** 64n - 1n)
      const value = fc.oneof(fc.constantFrom(...edges), u64, large)
      fc.assert(
        fc.property(fc.array(fc.tuple(value, value, value), { minLength: 1, maxLength: 12 }), (acks) => {
          const buf = Buffer.alloc(CtrlFrame.HEADER_BYTES)
          const out = new CtrlFrame.AckFields()
          for (const [session, epoch, ackSeq] of acks) {
            // and one sharing its low half with `session`, its high half with `epoch`
            const mixed = (session & 0xffffffffn) | ((epoch >> 32n) << 32n)
            for (const [s, e, a] of [
              [session, epoch, ackSeq],
              [mixed, session, epoch]
            ] as const) {
              expect(CtrlFrame.encodeAckInto(buf, 0, s, e, a)).toBe(CtrlFrame.HEADER_BYTES)
              expect(buf.readBigUInt64LE(8)).toBe(s)
              expect(buf.readBigUInt64LE(16)).toBe(e)
              expect(buf.readBigUInt64LE(32)).toBe(a)
              expect(CtrlFrame.decodeAckInto(buf, 0, CtrlFrame.HEADER_BYTES, out)).toBe(true)
              expect([out.session, out.epoch, out.ackSeq]).toEqual([s, e, a])
            }
          }
        })
      )
      const buf = Buffer.alloc(CtrlFrame.HEADER_BYTES)
      expect(() => CtrlFrame.encodeAckInto(buf, 0, -1n, 0n, 0n)).toThrow(RangeError)
      expect(() => CtrlFrame.encodeAckInto(buf, 0, 0n, 2n ** 64n, 0n)).toThrow(RangeError)
    })

    it("reports the same verdict as decode on mutated frames", () => {
      fc.assert(
        fc.property(frameArb, fc.nat(), fc.nat(255), (frame, at, value) => {
          const encoded = CtrlFrame.encode(frame)
          const b = patch(encoded, at % encoded.length, value)
          expect(codeOf(b) === 0).toBe(CtrlFrame.decode(b) !== undefined)
        })
      )
    })

    it("fills a slot exactly at MAX_PAYLOAD and returns -1, writing nothing, one byte above", () => {
      const buf = Buffer.alloc(NotifyWire.SLOT_BYTES + 8, 0xee)
      const name = new Uint8Array(100).fill(1)
      expect(CtrlFrame.MAX_PAYLOAD).toBe(65_484)
      const fits = new Uint8Array(CtrlFrame.MAX_PAYLOAD - name.length).fill(2)
      expect(CtrlFrame.encodeInto(buf, 0, 1n, 2n, name, fits)).toBe(NotifyWire.SLOT_BYTES)
      expect(CtrlFrame.decodeInto(buf, 0, NotifyWire.SLOT_BYTES, new CtrlFrame.StampedRanges())).toBe(0)

      const before = Buffer.from(buf)
      const over = new Uint8Array(fits.length + 1)
      expect(CtrlFrame.encodeInto(buf, 4, 1n, 2n, name, over)).toBe(-1)
      expect(buf.equals(before)).toBe(true)
    })
  })

  describe("isCtrlFrame", () => {
    it("checks the magic only, and needs four bytes", () => {
      const slot = Buffer.from(patch(new Uint8Array(8), 0, 0x4d, 0x43, 0x4b, 0x43))
      expect(CtrlFrame.isCtrlFrame(slot, 0, 4)).toBe(true)
      expect(CtrlFrame.isCtrlFrame(slot, 0, 3)).toBe(false)
      expect(CtrlFrame.isCtrlFrame(slot, 1, 7)).toBe(false)
    })

    it("never takes a raw frame for a typed one: a raw frame starting with the magic fails to decode in a slot", () => {
      const buf = Buffer.alloc(NotifyWire.SLOT_BYTES)
      expect(NotifyWire.encode(buf, 0, text("segment"), text("msg"))).toBeGreaterThan(0)
      expect(CtrlFrame.isCtrlFrame(buf, 0, 18)).toBe(false)
      buf.writeUInt32LE(CtrlFrame.MAGIC, 0)
      expect(NotifyWire.decode(buf, 0, NotifyWire.SLOT_BYTES, new NotifyWire.DecodedRanges())).not.toBe(0)
    })
  })

  it("refuses to encode flags the C++ encoder refuses (cpp:197)", () => {
    for (const flags of [2, 0x8000, 3, -1, 0.5]) {
      expect(() => CtrlFrame.encode({ ...GOLDEN_FRAME, flags })).toThrow(RangeError)
    }
  })
})
