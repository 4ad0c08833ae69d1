/**
 * `CoroRpc`: yalantinglibs coro_rpc framing as TENT uses it. Vectors are written out by hand from the sources cited
 * in each test (ylt at 7801bc9, the commit Mooncake pins; Mooncake at 3b5a594); each has a negative control.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import * as CoroRpc from "../../src/tent/CoroRpc.js"

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ""), "hex")

const right = <A, E>(e: Either.Either<A, E>): A => {
  if (Either.isLeft(e)) throw new Error(`expected Right, got ${String(e.left)}`)
  return e.right
}
const left = <A, E>(e: Either.Either<A, E>): E => {
  if (Either.isRight(e)) throw new Error("expected Left")
  return e.left
}

/** A seeded PRNG (mulberry32) so the random cases are the same on every run. */
const rng = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = seed
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

describe("CoroRpc function id", () => {
  // ylt util/utils.hpp:23-29 + md5_constexpr.hpp:309-323: SwapEndian(MD5 state word a) of
  // "mooncake::tent::CoroRpcAgent::process" (rpc.h:35-36,104; magic_names.hpp:138-203).
  it("is MD5(name) bytes 0..3 read big-endian: 0xff74660d", () => {
    expect(CoroRpc.functionIdOf(CoroRpc.PROCESS_FUNCTION_NAME)).toBe(0xff74660d)
    expect(CoroRpc.PROCESS_FUNCTION_ID).toBe(0xff74660d)
  })
  it("negative control: the unqualified or differently-namespaced name gives another id", () => {
    expect(CoroRpc.functionIdOf("CoroRpcAgent::process")).not.toBe(0xff74660d)
    expect(CoroRpc.functionIdOf("mooncake::CoroRpcAgent::process")).not.toBe(0xff74660d)
  })
  // type_calculate.hpp:508-516 (hash & ~1), type_id.hpp:25-81 (literals)
  it("struct_pack type hashes of int, monostate, string, pair<u16,string>", () => {
    expect(CoroRpc.typeHashOf(CoroRpc.TypeLiteral.int32)).toBe(CoroRpc.TypeHash.int32)
    expect(CoroRpc.typeHashOf(CoroRpc.TypeLiteral.monostate)).toBe(CoroRpc.TypeHash.monostate)
    expect(CoroRpc.typeHashOf(CoroRpc.TypeLiteral.string)).toBe(CoroRpc.TypeHash.string)
    expect(CoroRpc.typeHashOf(CoroRpc.TypeLiteral.errorPair)).toBe(CoroRpc.TypeHash.errorPair)
    expect(CoroRpc.typeHashOf([2])).not.toBe(CoroRpc.TypeHash.int32) // uint32_t is another type
  })
})

describe("CoroRpc request", () => {
  // coro_rpc_protocol.hpp:60-69 (field order), :250 (magic 21), coro_rpc_client.hpp:1251-1299 (prepare_buffer),
  // 1371-1391 (args packed by struct_pack), endian_wrapper.hpp:137-152 (little-endian).
  const notifyCall = Buffer.concat([
    hex("15 00 00 00"), // magic 21, version 0, serialize_type 0, msg_type 0
    hex("07 00 00 00"), // seq_num 7
    hex("0d 66 74 ff"), // function_id 0xff74660d
    hex("08 00 00 00"), // length 8
    hex("03 00 00 00"), // attach_length 3
    hex("08 40 a5 55 05 00 00 00"), // struct_pack int 5 (Notify): type hash 0x55a54008, i32 LE
    Buffer.from("abc") // attachment
  ])

  it("encodes process(5) with attachment 'abc' exactly as ylt's client does", () => {
    const want = notifyCall
    const got = CoroRpc.encodeRequest({ seqNum: 7, funcId: CoroRpc.TentFuncId.Notify, attachment: Buffer.from("abc") })
    expect(got.toString("hex")).toBe(want.toString("hex"))
    const f = right(CoroRpc.decodeRequest(want))
    expect(f.header).toEqual({
      magic: 21,
      version: 0,
      serializeType: 0,
      msgType: 0,
      seqNum: 7,
      functionId: 0xff74660d,
      length: 8,
      attachLength: 3
    })
    expect(right(CoroRpc.decodeIntArg(f.body))).toBe(5)
    expect(f.attachment.toString()).toBe("abc")
  })

  it("the int argument for every TENT func id 1..11 is 08 40 a5 55 then the id LE", () => {
    for (let id = 1; id <= 11; id++) {
      expect(CoroRpc.encodeIntArg(id).toString("hex")).toBe(`0840a555${id.toString(16).padStart(2, "0")}000000`)
    }
  })

  it("decodes a debug build's int argument (metainfo 0x04 + type literal 01 00, type_calculate.hpp:744-752)", () => {
    expect(right(CoroRpc.decodeIntArg(hex("0940a555 04 0100 05000000")))).toBe(5)
    // negative control: the literal says uint32_t (02)
    expect(left(CoroRpc.decodeIntArg(hex("0940a555 04 0200 05000000"))).reason).toBe("BadBody")
  })

  it("negative controls: one byte changed in magic, version, serialize_type, hash", () => {
    const good = CoroRpc.encodeRequest({ seqNum: 1, funcId: 6 })
    const bad = (i: number, v: number) => {
      const b = Buffer.from(good)
      b[i] = v
      return b
    }
    expect(left(CoroRpc.decodeRequest(bad(0, 22))).reason).toBe("BadMagic")
    expect(left(CoroRpc.decodeRequest(bad(1, 1))).reason).toBe("BadVersion")
    expect(left(CoroRpc.decodeRequest(bad(2, 1))).reason).toBe("BadSerializeType")
    const f = right(CoroRpc.decodeRequest(bad(20, 0x09))) // hash low bit set: metainfo expected, body too short
    expect(Either.isLeft(CoroRpc.decodeIntArg(f.body))).toBe(true)
    const g = right(CoroRpc.decodeRequest(bad(21, 0x41)))
    expect(left(CoroRpc.decodeIntArg(g.body)).reason).toBe("BadBody")
  })

  it("refuses oversized lengths before allocating; truncated and trailing bytes are errors", () => {
    const h = Buffer.alloc(20)
    CoroRpc.writeRequestHeader(h, 0, { seqNum: 1, functionId: 1, length: 8, attachLength: 0xffffffff })
    expect(left(CoroRpc.decodeRequest(h)).reason).toBe("Oversized")
    CoroRpc.writeRequestHeader(h, 0, { seqNum: 1, functionId: 1, length: 0x7fffffff, attachLength: 0 })
    expect(left(CoroRpc.decodeRequest(h, { maxBody: 1024, maxAttachment: 1024 })).reason).toBe("Oversized")
    const good = CoroRpc.encodeRequest({ seqNum: 1, funcId: 6, attachment: Buffer.from("xy") })
    expect(left(CoroRpc.decodeRequest(good.subarray(0, good.length - 1))).reason).toBe("Truncated")
    expect(left(CoroRpc.decodeRequest(Buffer.concat([good, Buffer.from([0])]))).reason).toBe("Truncated")
  })
})

describe("CoroRpc response", () => {
  // coro_rpc_protocol.hpp:71-79, 191-240 (prepare_response), rpc_execute.hpp:209-219 + struct_pack_protocol.hpp:34-36
  // (void result = struct_pack(monostate)), coro_connection.hpp:586-604 (header, body, attachment).
  it("encodes a void result with attachment 'ok'", () => {
    const want = hex("15 00 00 00 07000000 04000000 02000000 eacf0189 6f6b")
    expect(CoroRpc.encodeResponse({ seqNum: 7, attachment: Buffer.from("ok") }).toString("hex")).toBe(
      want.toString("hex")
    )
    const f = right(CoroRpc.decodeResponse(want))
    expect(f.header.errCode).toBe(0)
    expect(Either.isRight(CoroRpc.decodeVoidResult(f.body))).toBe(true)
    expect(f.attachment.toString()).toBe("ok")
    // negative control: another type hash in the body
    const bad = Buffer.from(want)
    bad[16] = 0xeb ^ 0x02
    expect(Either.isLeft(CoroRpc.decodeVoidResult(right(CoroRpc.decodeResponse(bad)).body))).toBe(true)
  })

  it("accepts a debug build's void result (eb cf 01 89 04 fa 00)", () => {
    expect(Either.isRight(CoroRpc.decodeVoidResult(hex("ebcf0189 04 fa00")))).toBe(true)
    expect(Either.isLeft(CoroRpc.decodeVoidResult(hex("ebcf0189 04 fb00")))).toBe(true)
  })

  // router.hpp:263-266 (function_not_registered, "the rpc function not registered"), coro_rpc_protocol.hpp:222-235
  it("encodes the error of an unknown function id: err_code 11, struct_pack string", () => {
    const msg = "the rpc function not registered"
    const want = Buffer.concat([
      hex("15 00 0b 00 02000000"),
      Buffer.from([4 + 1 + msg.length, 0, 0, 0]),
      hex("00000000 76facf9d"),
      Buffer.from([msg.length]),
      Buffer.from(msg)
    ])
    const got = CoroRpc.encodeResponse({
      seqNum: 2,
      error: { code: CoroRpc.Errc.function_not_registered, message: msg }
    })
    expect(got.toString("hex")).toBe(want.toString("hex"))
    const f = right(CoroRpc.decodeResponse(want))
    expect(right(CoroRpc.decodeErrorBody(f.header.errCode, f.body))).toEqual({ code: 11, message: msg })
    // negative control: the length byte one too large runs past the body
    const bad = Buffer.from(want)
    bad[20] = msg.length + 1
    expect(left(CoroRpc.decodeErrorBody(11, right(CoroRpc.decodeResponse(bad)).body)).reason).toBe("BadBody")
  })

  it("a message of 256+ bytes takes metainfo 0x08 and a 2-byte length (calculate_size.hpp:425-447)", () => {
    const msg = "x".repeat(300)
    const e = CoroRpc.encodeErrorBody(10, msg)
    expect(e.body.subarray(0, 7).toString("hex")).toBe("77facf9d082c01")
    expect(right(CoroRpc.decodeErrorBody(10, e.body)).message).toBe(msg)
    // debug form (metainfo 0x0c, literal 80 0c 00), as g++ without NDEBUG writes it
    const dbg = Buffer.concat([hex("77facf9d 0c 800c00 2c01"), Buffer.from(msg)])
    expect(right(CoroRpc.decodeErrorBody(10, dbg)).message).toBe(msg)
  })

  it("an error code above 255 travels as 255 + pair<u16, string> (coro_rpc_protocol.hpp:225-230)", () => {
    const e = CoroRpc.encodeErrorBody(300, "ab")
    expect(e.errCode).toBe(255)
    expect(e.body.toString("hex")).toBe("4ce62b372c01026162")
    expect(right(CoroRpc.decodeErrorBody(255, e.body))).toEqual({ code: 300, message: "ab" })
    expect(Either.isLeft(CoroRpc.decodeErrorBody(254, e.body))).toBe(true)
  })
})

describe("CoroRpc bytes captured from yalantinglibs itself", () => {
  // Captured on 127.0.0.1 from a coro_rpc_client built with g++ 12 against the pinned ylt headers, calling
  // call<&mooncake::tent::CoroRpcAgent::process>(6) (Probe); seq_num starts at 0 in ylt.
  it("release (NDEBUG) build's request decodes to process(6); debug build's too", () => {
    const release = Buffer.from("15000000000000000d6674ff08000000000000000840a55506000000", "hex")
    const debug = Buffer.from("15000000000000000d6674ff0b000000000000000940a55504010006000000", "hex")
    for (const wire of [release, debug]) {
      const f = right(CoroRpc.decodeRequest(wire))
      expect([f.header.functionId, f.header.seqNum, right(CoroRpc.decodeIntArg(f.body))]).toEqual([0xff74660d, 0, 6])
    }
    expect(CoroRpc.encodeRequest({ seqNum: 0, funcId: 6 }).toString("hex")).toBe(release.toString("hex"))
    // negative control: one byte of the function id changed
    const other = Buffer.from(release)
    other[8] = 0x0e
    expect(right(CoroRpc.decodeRequest(other)).header.functionId).not.toBe(CoroRpc.PROCESS_FUNCTION_ID)
  })
})

describe("CoroRpc FrameDecoder", () => {
  it("round-trips random requests and responses under random chunking (seeded)", () => {
    const r = rng(42)
    for (let round = 0; round < 200; round++) {
      const n = 1 + Math.floor(r() * 5)
      const reqs = Array.from({ length: n }, (_, k) => ({
        seqNum: Math.floor(r() * 2 ** 32),
        funcId: 1 + Math.floor(r() * 11),
        attachment: Buffer.from(Array.from({ length: Math.floor(r() * (k === 0 ? 3000 : 40)) }, () => (r() * 256) | 0))
      }))
      const resps = reqs.map((q, k) =>
        k % 3 === 2
          ? { seqNum: q.seqNum, error: { code: 10, message: `boom ${k}` } }
          : { seqNum: q.seqNum, attachment: q.attachment }
      )
      const check = (kind: "request" | "response", wire: Buffer) => {
        const d = new CoroRpc.FrameDecoder(kind)
        const got: Array<CoroRpc.RequestFrame | CoroRpc.ResponseFrame> = []
        for (let i = 0; i < wire.length; ) {
          const step = 1 + Math.floor(r() * (r() < 0.5 ? 7 : 600))
          got.push(...right(d.push(wire.subarray(i, i + step))))
          i += step
        }
        expect(d.buffered()).toBe(0)
        return got
      }
      const reqFrames = check(
        "request",
        Buffer.concat(reqs.map((q) => CoroRpc.encodeRequest(q)))
      ) as Array<CoroRpc.RequestFrame>
      expect(
        reqFrames.map((f) => [f.header.seqNum, right(CoroRpc.decodeIntArg(f.body)), f.attachment.toString("hex")])
      ).toEqual(reqs.map((q) => [q.seqNum, q.funcId, q.attachment.toString("hex")]))
      const respFrames = check(
        "response",
        Buffer.concat(resps.map((p) => CoroRpc.encodeResponse(p)))
      ) as Array<CoroRpc.ResponseFrame>
      respFrames.forEach((f, k) => {
        const p = resps[k] as (typeof resps)[number]
        expect(f.header.seqNum).toBe(p.seqNum)
        if ("error" in p && p.error !== undefined) {
          expect(right(CoroRpc.decodeErrorBody(f.header.errCode, f.body))).toEqual(p.error)
          expect(f.attachment.length).toBe(0)
        } else {
          expect(Either.isRight(CoroRpc.decodeVoidResult(f.body))).toBe(true)
          expect(f.attachment.toString("hex")).toBe((p as { attachment: Buffer }).attachment.toString("hex"))
        }
      })
    }
  })

  it("memory grows with the bytes that come, not with a header's announced size; a frame sent in pieces is whole", () => {
    const big = 90 * 1024 * 1024
    const limits = { maxBody: 1024, maxAttachment: big }
    const whole = CoroRpc.encodeRequest({ seqNum: 3, funcId: 6, attachment: Buffer.alloc(200_000, 7) })
    const header = whole.subarray(0, 20)
    // 100 connections announcing 90 MiB each and sending only their 20-byte headers
    const before = process.memoryUsage().arrayBuffers
    const held = Array.from({ length: 100 }, () => {
      const d = new CoroRpc.FrameDecoder("request", limits)
      const announced = Buffer.from(header)
      announced.writeUInt32LE(big, 16) // the header's attach_length (a u32 LE at byte 16)
      expect(Either.getOrThrow(d.push(announced))).toEqual([])
      return d
    })
    const grown = process.memoryUsage().arrayBuffers - before
    expect(grown).toBeLessThan(64 * 1024 * 1024) // 100 × 90 MiB when the header's size was allocated at once
    expect(held.length).toBe(100)
    // the same frame in 1000-byte pieces decodes to the bytes sent
    const d = new CoroRpc.FrameDecoder("request", limits)
    const frames = []
    for (let i = 0; i < whole.length; i += 1000) frames.push(...Either.getOrThrow(d.push(whole.subarray(i, i + 1000))))
    expect(frames.length).toBe(1)
    expect(Buffer.from(frames[0]?.attachment ?? []).equals(Buffer.alloc(200_000, 7))).toBe(true)
  })

  it("malformed input never throws: random garbage yields frames or a typed error, and stays failed", () => {
    const r = rng(7)
    let refused = 0
    for (let round = 0; round < 500; round++) {
      const junk = Buffer.from(Array.from({ length: Math.floor(r() * 100) }, () => (r() * 256) | 0))
      if (r() < 0.5 && junk.length > 0) junk[0] = 21
      const d = new CoroRpc.FrameDecoder("request", { maxBody: 64, maxAttachment: 64 })
      const res = d.push(junk)
      if (Either.isLeft(res)) {
        refused++
        expect(res.left._tag).toBe("CoroRpcFrameError")
        expect(Either.isLeft(d.push(CoroRpc.encodeRequest({ seqNum: 1, funcId: 6 })))).toBe(true)
      } else {
        for (const f of res.right) CoroRpc.decodeIntArg(f.body)
      }
    }
    // the garbage did reach the checks: most rounds are refused (a bad magic at once), some wait for more bytes
    expect(refused).toBeGreaterThan(100)
    expect(refused).toBeLessThan(500)
  })
})
