/**
 * `Bodies`: TENT's JSON bodies as its nlohmann/json 3.12.0 writes and reads them (Mooncake 3b5a594). The SegmentDesc
 * fixture was printed by a C++ program built with TENT's vendored json.h and TENT's struct declarations
 * (segment.h:45-130), so it is TENT's own serialiser's output, not ours.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import * as NlohmannJson from "../../src/internal/tent/NlohmannJson.js"
import * as Bodies from "../../src/tent/Bodies.js"

const right = <A, E>(e: Either.Either<A, E>): A => {
  if (Either.isLeft(e)) throw new Error(`expected Right, got ${JSON.stringify(e.left)}`)
  return e.right
}
const left = <A, E>(e: Either.Either<A, E>): E => {
  if (Either.isRight(e)) throw new Error("expected Left")
  return e.left
}
const utf8 = (s: string) => Buffer.from(s, "utf8")

describe("Notify body", () => {
  // control_plane.cpp:113-128: json{{"name"},{"msg"}}.dump(); nlohmann objects are std::map (json.h:3533-3534),
  // so "msg" comes first; escapes per dump_escaped (json.h:19203-19296): \n two-letter, 0x01 as \u0001, DEL and é raw.
  it("encodes exactly TENT's bytes", () => {
    const got = right(Bodies.encodeNotify({ name: "127.0.0.1:15001", msg: 'a"b\\\n\u0001/\u007fé' }))
    expect(got.toString("utf8")).toBe('{"msg":"a\\"b\\\\\\n\\u0001/\u007fé","name":"127.0.0.1:15001"}')
    // negative control: key order of JSON.stringify is insertion order, not TENT's
    expect(JSON.stringify({ name: "127.0.0.1:15001", msg: "x" })).not.toBe(
      right(Bodies.encodeNotify({ name: "127.0.0.1:15001", msg: "x" })).toString()
    )
  })
  it("decodes with j.at semantics: extra keys ignored, missing or mistyped fields named", () => {
    expect(right(Bodies.decodeNotify(utf8('{"name":"n","msg":"m","seq":3}')))).toEqual({ name: "n", msg: "m" })
    const missing = left(Bodies.decodeNotify(utf8('{"name":"n"}')))
    expect([missing.field, missing.reason]).toEqual(["msg", "Missing"])
    const wrong = left(Bodies.decodeNotify(utf8('{"name":1,"msg":"m"}')))
    expect([wrong.field, wrong.reason]).toEqual(["name", "WrongType"])
    expect(left(Bodies.decodeNotify(utf8('{"name":"n","msg":"m"'))).reason).toBe("Malformed")
    expect(left(Bodies.decodeNotify(Buffer.from([0x7b, 0xff, 0x7d]))).reason).toBe("NotUtf8")
    expect(left(Bodies.decodeNotify(utf8('["name","msg"]'))).reason).toBe("WrongType")
  })
  it("refuses a msg with no UTF-8 form (nlohmann's strict dump throws type_error.316)", () => {
    expect(left(Bodies.encodeNotify({ name: "n", msg: "\ud800" })).reason).toBe("NotUtf8")
  })
})

describe("Notify body: the platform's JSON beside nlohmann's exact reader and writer", () => {
  // A seeded mix of what a name or message can hold: ASCII, every control character, quotes and backslashes,
  // non-ASCII, astral characters, and lone surrogates (which nlohmann refuses to write and to read).
  const alphabet = ["a", "Z", "0", " ", '"', "\\", "/", "\u007f", "é", "中", "😀", "\ud800", "\udfff", "\u2028"]
  for (let c = 0; c < 0x20; c++) alphabet.push(String.fromCharCode(c))
  let seed = 12345
  const next = () => {
    seed = (seed * 1103515245 + 12345) >>> 0
    return seed
  }
  const text = () => {
    let t = ""
    for (let n = next() % 12; n > 0; n--) t += alphabet[next() % alphabet.length]
    return t
  }

  it("encodeNotify writes exactly what nlohmann's dump writes, or refuses as it does", () => {
    for (let i = 0; i < 3000; i++) {
      const n = { name: text(), msg: text() }
      const exact = NlohmannJson.isDumpable({ msg: n.msg, name: n.name })
        ? NlohmannJson.stringify({ msg: n.msg, name: n.name })
        : undefined
      const got = Bodies.encodeNotify(n)
      if (exact === undefined) expect(Either.isLeft(got), JSON.stringify(n)).toBe(true)
      else expect(right(got).toString("utf8"), JSON.stringify(n)).toBe(exact)
    }
  })

  it("decodeNotify reads what nlohmann's parser reads, and refuses what it refuses", () => {
    for (let i = 0; i < 3000; i++) {
      const n = { name: text(), msg: text() }
      // bodies with raw lone surrogates and \u escapes of them, as a peer could send
      const body = `{"name":${JSON.stringify(n.name)},"msg":${JSON.stringify(n.msg)}}`
      const parsed = NlohmannJson.parse(body)
      const got = Bodies.decodeNotify(utf8(body))
      const ok =
        !(parsed instanceof NlohmannJson.JsonSyntaxError) &&
        typeof parsed === "object" &&
        parsed !== null &&
        !Array.isArray(parsed)
      if (!ok) expect(Either.isLeft(got), body).toBe(true)
      else expect(right(got), body).toEqual({ name: n.name, msg: n.msg })
    }
  })
})

describe("BootstrapDesc body", () => {
  // control_plane.h:44-58 + control_plane.cpp:353-356: the NOT_READY reply, as TENT dumps it (checked with g++).
  const notReady =
    '{"local_gid":"","local_lid":0,"local_nic_path":"","notify_qp_num":0,"peer_nic_path":"","qp_num":[],"reply_msg":"NOT_READY: transport not initialized"}'
  it("encodes TENT's NOT_READY reply byte for byte; our keys are absent when unset", () => {
    const d = { ...Bodies.emptyBootstrapDesc, reply_msg: "NOT_READY: transport not initialized" }
    expect(right(Bodies.encodeBootstrapDesc(d)).toString()).toBe(notReady)
    expect(right(Bodies.decodeBootstrapDesc(utf8(notReady)))).toEqual(d)
  })
  it("writes notify_proto / notify_incarnation in sorted place when set, and reads them back", () => {
    const d: Bodies.BootstrapDesc = {
      local_nic_path: "a@mlx5_0",
      peer_nic_path: "b@mlx5_1",
      qp_num: [17, 4294967295],
      local_lid: 65535,
      local_gid: "fe:80",
      reply_msg: "",
      notify_qp_num: 99,
      notify_proto: 2,
      notify_incarnation: 18446744073709551615n
    }
    const s = right(Bodies.encodeBootstrapDesc(d)).toString()
    expect(s).toBe(
      '{"local_gid":"fe:80","local_lid":65535,"local_nic_path":"a@mlx5_0","notify_incarnation":18446744073709551615,"notify_proto":2,"notify_qp_num":99,"peer_nic_path":"b@mlx5_1","qp_num":[17,4294967295],"reply_msg":""}'
    )
    expect(right(Bodies.decodeBootstrapDesc(utf8(s)))).toEqual(d)
  })
  it("names the field that fails (negative controls)", () => {
    const without = notReady.replace('"notify_qp_num":0,', "")
    expect(left(Bodies.decodeBootstrapDesc(utf8(without))).field).toBe("notify_qp_num")
    const lid = left(Bodies.decodeBootstrapDesc(utf8(notReady.replace('"local_lid":0', '"local_lid":65536'))))
    expect([lid.field, lid.reason]).toEqual(["local_lid", "OutOfRange"])
    const qp = left(Bodies.decodeBootstrapDesc(utf8(notReady.replace('"qp_num":[]', '"qp_num":[1,"2"]'))))
    expect(qp.field).toBe("qp_num[1]")
  })
})

describe("SegmentDesc body", () => {
  const fixture = Fs.readFileSync(Path.join(import.meta.dirname, "fixtures", "segment-desc.memory.json"))
  it("decodes TENT's own dump (u64 beyond 2^53 kept exact) and re-encodes it byte for byte", () => {
    const s = right(Bodies.decodeSegmentDesc(fixture))
    expect(s.type).toBe("memory")
    if (s.type !== "memory") return
    expect(s.detail.buffers[1]?.addr).toBe(18446744073709551615n)
    expect(s.detail.buffers[0]?.transports).toEqual([Bodies.TransportType.RDMA, Bodies.TransportType.TCP])
    expect(s.detail.devices[0]?.transport_attrs).toEqual([[1, '{"mtu":4096}']])
    expect(s.detail.transport_attrs).toEqual([[7, "tcp"]])
    expect(right(Bodies.encodeSegmentDesc(s)).toString()).toBe(fixture.toString())
  })
  it("a file segment round-trips; rdma_server_name only when non-empty (segment.h:196-209)", () => {
    const f: Bodies.SegmentDesc = {
      name: "s",
      type: "file",
      machine_id: "m",
      rpc_server_addr: "h:1",
      detail: { buffers: [{ path: "/x", length: 10n, offset: 2n ** 60n }] }
    }
    const s = right(Bodies.encodeSegmentDesc(f)).toString()
    expect(s).toBe(
      '{"detail":{"buffers":[{"length":10,"offset":1152921504606846976,"path":"/x"}]},"machine_id":"m","name":"s","rpc_server_addr":"h:1","type":"file"}'
    )
    expect(right(Bodies.decodeSegmentDesc(utf8(s)))).toEqual(f)
    const withRdma = right(Bodies.encodeSegmentDesc({ ...f, rdma_server_name: "r" })).toString()
    expect(withRdma).toContain('"rdma_server_name":"r"')
  })
  it("negative controls: unknown type, missing devices, a mistyped nested field", () => {
    const t = left(Bodies.decodeSegmentDesc(utf8(fixture.toString().replace('"type":"memory"', '"type":"disk"'))))
    expect([t.field, t.reason]).toEqual(["type", "OutOfRange"])
    const dv = left(Bodies.decodeSegmentDesc(utf8(fixture.toString().replace('"devices":', '"devicez":'))))
    expect([dv.field, dv.reason]).toEqual(["detail.devices", "Missing"])
    const rk = left(Bodies.decodeSegmentDesc(utf8(fixture.toString().replace('"rkey":[4660,', '"rkey":[-1,'))))
    expect(rk.field).toBe("detail.buffers[0].rkey[0]")
  })
})

describe("XferDataDesc (SendData/RecvData header)", () => {
  // control_plane.h:60-63, control_plane.cpp:76-80 (htole64), 395-408 (checks)
  it("is {u64 LE addr, u64 LE length} then data", () => {
    const b = Bodies.encodeXferData({ peerMemAddr: 0x1122334455667788n, length: 3n }, Buffer.from("xyz"))
    expect(b.toString("hex")).toBe(`8877665544332211${"0300000000000000"}${Buffer.from("xyz").toString("hex")}`)
    const d = right(Bodies.decodeXferData(b, true))
    expect([d.desc.peerMemAddr, d.desc.length, Buffer.from(d.data).toString()]).toEqual([
      0x1122334455667788n,
      3n,
      "xyz"
    ])
    expect(left(Bodies.decodeXferData(b.subarray(0, 18), true)).message).toBe("invalid request size")
    expect(left(Bodies.decodeXferData(b.subarray(0, 15), false)).message).toBe("request too short")
  })
})

describe("NlohmannJson", () => {
  it("parse(stringify(x)) = x for a seeded set of random values", () => {
    let seed = 99
    const r = () => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0
      return seed / 2 ** 32
    }
    const chars = ["a", "é", "\u0000", "\n", '"', "\\", "/", "\u007f", "😀", "\u2028"]
    const gen = (depth: number): NlohmannJson.JsonValue => {
      const k = Math.floor(r() * (depth > 3 ? 5 : 7))
      if (k === 0) return null
      if (k === 1) return r() < 0.5
      if (k === 2) return Math.floor(r() * 2 ** 40) - 2 ** 39
      if (k === 3) return BigInt(2 ** 53) + BigInt(Math.floor(r() * 1e6))
      if (k === 4)
        return Array.from({ length: Math.floor(r() * 6) }, () => chars[Math.floor(r() * chars.length)]).join("")
      if (k === 5) return Array.from({ length: Math.floor(r() * 4) }, () => gen(depth + 1))
      const o: Record<string, NlohmannJson.JsonValue> = {}
      for (let i = Math.floor(r() * 4); i > 0; i--) o[`k${Math.floor(r() * 10)}`] = gen(depth + 1)
      return o
    }
    for (let i = 0; i < 500; i++) {
      const v = gen(0)
      expect(NlohmannJson.parse(NlohmannJson.stringify(v))).toEqual(v)
    }
  })
  it("refuses malformed text with an offset, never throws", () => {
    for (const t of ["", "{", '{"a":}', "[1,]", '"\\x"', "01", "1 2", '"\\ud800"', "[".repeat(100)]) {
      expect(NlohmannJson.parse(t)).toBeInstanceOf(NlohmannJson.JsonSyntaxError)
    }
  })
})
