/**
 * The inputs of the `rpc-frames` target: mutated lean frames (from the frames the real `RpcAgent` sent, captured by
 * `Corpus.ts`) and mutated coro_rpc requests (from TENT's encoders), each mutation aware of the structure it starts
 * from — the frame's length, kind, id and RPC index; `Bootstrap`'s JSON and its `BootstrapDesc` fields; `Notify`'s
 * lengths and trailers; the `{addr, len}` headers of `SendData`/`RecvData` aimed at the edges of the registered
 * regions and the limits — then, often, havoc on the bytes. Some inputs are several frames, some random bytes, and
 * some go first on a fresh connection (the wire sniff).
 */
import { Bodies } from "@tent/rpc"
import { havoc, INTERESTING_64, interesting32, putU32, putU64 } from "./Mutate.js"
import type { Prng } from "./Prng.js"
import type { RegionInfo } from "./Regions.js"
import { GUARD } from "./Regions.js"
import * as Wire from "./Wire.js"

/** The valid inputs mutations start from. */
export interface Corpus {
  /** Lean frames the real client sent, by RPC tag (`Interrupt` for interrupt frames). */
  readonly lean: ReadonlyMap<string, ReadonlyArray<Buffer>>
  /** coro_rpc requests from TENT's encoders. */
  readonly tent: ReadonlyArray<Buffer>
}

/** What the mutations aim at: the victim's regions and limits. */
export interface Layout {
  readonly target: RegionInfo
  readonly canary: RegionInfo
  readonly maxNotifyBytes: number
  readonly maxDataBytes: number
  readonly maxFrame: number
  /** The victim's segment name and device (its NIC paths). */
  readonly segment: string
  readonly device: string
}

/** One input: its bytes, the wire it is meant for, whether it opens a fresh connection, and its class. */
export interface Input {
  readonly wire: "lean" | "tent"
  readonly bytes: Buffer
  readonly fresh: boolean
  readonly what: string
}

const json = (v: unknown): string => JSON.stringify(v)

/** A JSON value from a menu of awkward ones. */
const awkward = (rng: Prng): unknown => {
  switch (rng.int(14)) {
    case 0:
      return interesting32(rng)
    case 1:
      return -interesting32(rng)
    case 2:
      return rng.pick([0.5, 1e308, -0, 2 ** 53, 2 ** 53 + 2, 2 ** 64, -1e-300])
    case 3:
      return rng.pick(["", "x", "0", "-1", "18446744073709551615", "18446744073709551616", "1e3", " 1", "٣"])
    case 4:
      return "A".repeat(rng.pick([255, 256, 4096, 65535, 65536, 70000]))
    case 5:
      return rng.pick([true, false, null])
    case 6:
      return []
    case 7:
      return {}
    case 8:
      return Array.from({ length: rng.int(12) }, () => interesting32(rng))
    case 9:
      return Array.from({ length: rng.pick([100, 1000, 10000]) }, (_, i) => i)
    case 10: {
      let v: unknown = 1
      for (let i = 0, d = rng.pick([10, 63, 64, 65, 1000]); i < d; i++) v = rng.chance(0.5) ? [v] : { a: v }
      return v
    }
    case 11:
      return rng.bytes(rng.int(40)).toString("latin1")
    case 12:
      return '\ud800\u0000\u001f"\\'
    default:
      return rng.u64().toString()
  }
}

const BOOTSTRAP_KEYS = [
  "local_nic_path",
  "peer_nic_path",
  "qp_num",
  "local_lid",
  "local_gid",
  "reply_msg",
  "notify_qp_num",
  "notify_proto",
  "notify_slot_bytes",
  "notify_incarnation",
  "notify_imm_recvs",
  "qp_psn",
  "notify_psn",
  "qp_token",
  "__proto__",
  "constructor"
]

/** `Bootstrap`'s JSON with some of its fields set to awkward values, removed, or added. */
const mutateBootstrap = (rng: Prng, body: Buffer, layout: Layout): Buffer => {
  let o: Record<string, unknown>
  try {
    o = JSON.parse(body.toString("utf8")) as Record<string, unknown>
  } catch {
    return havoc(rng, body)
  }
  for (let i = 0, n = 1 + rng.int(3); i < n; i++) {
    const key = rng.pick(BOOTSTRAP_KEYS)
    switch (rng.int(6)) {
      case 0:
        delete o[key]
        break
      case 1: {
        const nic = rng.pick([layout.device, "mlx9", "", "@", "mlx0@x"])
        const server = rng.pick([layout.segment, "", "fz", "a@b", "x".repeat(5000)])
        o[rng.pick(["local_nic_path", "peer_nic_path"])] = `${server}${rng.chance(0.9) ? "@" : ""}${nic}`
        break
      }
      case 2: {
        const gid = Array.from({ length: rng.pick([15, 16, 17, 0]) }, () => rng.int(256).toString(16).padStart(2, "0"))
        o.local_gid = rng.chance(0.8) ? gid.join(":") : gid.join("")
        break
      }
      case 3:
        o[rng.pick(["qp_num", "qp_psn"])] = Array.from({ length: rng.pick([0, 1, 2, 3, 64]) }, () =>
          rng.chance(0.5) ? interesting32(rng) : rng.int(0x1000000)
        )
        break
      default:
        // an own property, so that `__proto__` and `constructor` go out as keys of the JSON
        Object.defineProperty(o, key, { value: awkward(rng), enumerable: true, configurable: true, writable: true })
    }
  }
  let text = json(o)
  if (rng.chance(0.2)) text = havoc(rng, Buffer.from(text)).toString("latin1")
  return Buffer.from(text, rng.chance(0.9) ? "utf8" : "latin1")
}

/** A `Notify` payload (`[u32 name_len][name][u32 msg_len][msg][trailer]`) with its lengths and trailer changed. */
const mutateNotify = (rng: Prng, payload: Buffer, layout: Layout): Buffer => {
  const nameLen = payload.length >= 4 ? payload.readUInt32LE(0) : 0
  let b: Buffer = Buffer.from(payload)
  switch (rng.int(5)) {
    case 0:
      putU32(b, 0, interesting32(rng, [nameLen, payload.length, layout.maxNotifyBytes]))
      break
    case 1:
      putU32(b, 4 + nameLen, interesting32(rng, [payload.length - 8 - nameLen, layout.maxNotifyBytes]))
      break
    case 2: {
      const total = layout.maxNotifyBytes + rng.range(-1, 1)
      const name = Buffer.from("fz-big")
      b = Buffer.alloc(8 + total)
      b.writeUInt32LE(name.length, 0)
      name.copy(b, 4)
      b.writeUInt32LE(total - name.length, 4 + name.length)
      break
    }
    case 3: {
      const trailer = rng.bytes(rng.pick([15, 16, 17, 23, 24, 25, 27, 28, 40]))
      if (trailer.length >= 28) putU32(trailer, 24, interesting32(rng, [trailer.length - 28]))
      b = Buffer.concat([b, trailer])
      break
    }
    default:
      b = b.subarray(0, rng.int(b.length + 1))
  }
  return b
}

/** An address near an edge of `r` (or an awkward u64), for a data header. */
const addrNear = (rng: Prng, r: RegionInfo, len: number): bigint => {
  switch (rng.int(7)) {
    case 0:
      return BigInt(r.addr + rng.int(r.length))
    case 1:
      return BigInt(r.addr + r.length - len + rng.range(-1, 1))
    case 2:
      return BigInt(r.addr - rng.range(1, GUARD))
    case 3:
      return BigInt(r.addr + r.length + rng.int(GUARD))
    case 4:
      return BigInt(r.addr)
    default:
      return rng.pick(INTERESTING_64) + BigInt(rng.range(-1, 1))
  }
}

/** A `SendData`/`RecvData` payload (`[u64 addr][u64 len][data]`) with its header aimed at edges and limits. */
const mutateData = (rng: Prng, tag: string, payload: Buffer, layout: Layout): Buffer => {
  const send = tag === "SendData"
  const big = rng.chance(0.004)
  const dataLen = !send
    ? 0
    : big
      ? layout.maxDataBytes + rng.range(-1, 1)
      : rng.chance(0.3)
        ? rng.int(64)
        : rng.int(4096)
  const b = Buffer.alloc(16 + dataLen, rng.int(256))
  if (dataLen > 0 && rng.chance(0.5)) rng.bytes(Math.min(dataLen, 256)).copy(b, 16)
  // SendData is never aimed at the canary (a write there would be one the harness asked for); RecvData may read it.
  const region = !send && rng.chance(0.3) ? layout.canary : layout.target
  const claimed = send
    ? rng.chance(0.7)
      ? BigInt(dataLen)
      : BigInt(Math.max(0, dataLen + rng.range(-2, 2)))
    : BigInt(
        rng.chance(0.6) ? rng.int(region.length + 1) : rng.pick([0, 1, layout.maxDataBytes, layout.maxDataBytes + 1])
      )
  const addr = addrNear(rng, region, Number(claimed))
  putU64(b, 0, addr)
  putU64(b, 8, rng.chance(0.9) ? claimed : rng.pick(INTERESTING_64))
  return rng.chance(0.1) ? havoc(rng, b.subarray(0, Math.min(b.length, 64)), [payload]) : b
}

/** A lean frame with its framing fields changed: length prefix, kind, id, RPC index. */
const mutateFraming = (rng: Prng, f: Buffer, layout: Layout): Buffer => {
  const b = Buffer.from(f)
  switch (rng.int(4)) {
    case 0:
      putU32(b, 0, interesting32(rng, [b.length - 4, Wire.MIN_LEN - 1, layout.maxFrame, layout.maxFrame + 1]))
      return b
    case 1:
      b[4] = rng.chance(0.5) ? rng.int(256) : rng.range(0, 8)
      return b
    case 2:
      putU32(b, 5, interesting32(rng))
      return b
    default:
      if (b.length > 9) b[9] = rng.chance(0.5) ? rng.range(0, 7) : rng.int(256)
      return b
  }
}

const leanTags = ["Bootstrap", "Notify", "GetSegmentDesc", "Probe", "SendData", "RecvData"] as const

/** One lean frame: a seed of a random RPC, structure-aware mutations, then maybe havoc. */
const leanFrame = (rng: Prng, corpus: Corpus, layout: Layout, id: number): { bytes: Buffer; what: string } => {
  const tag = rng.chance(0.03) ? "Interrupt" : rng.pick(leanTags)
  const seeds = corpus.lean.get(tag) ?? corpus.lean.get("Probe") ?? []
  const seed = rng.pick(seeds)
  let what = tag
  let bytes: Buffer
  if (tag === "Interrupt" || !rng.chance(0.7)) {
    bytes = Buffer.from(seed)
  } else {
    const payload = seed.subarray(Wire.HEADER_BYTES + 1)
    const body =
      tag === "Bootstrap"
        ? mutateBootstrap(rng, payload, layout)
        : tag === "Notify"
          ? mutateNotify(rng, payload, layout)
          : tag === "SendData" || tag === "RecvData"
            ? mutateData(rng, tag, payload, layout)
            : rng.chance(0.5)
              ? payload
              : rng.bytes(rng.int(16))
    bytes = Wire.request(tag, id, body)
    what = `${tag}/fields`
  }
  bytes.writeUInt32LE(id >>> 0, 5)
  if (rng.chance(0.25)) {
    bytes = mutateFraming(rng, bytes, layout)
    what = `${tag}/framing`
  }
  if (rng.chance(0.2)) {
    const donors = Array.from(corpus.lean.values()).flat()
    bytes = havoc(rng, bytes, donors, Math.max(bytes.length + 4096, 1 << 16))
    what = `${tag}/havoc`
  }
  return { bytes, what }
}

/** TENT's funcs and awkward ones, for the coro_rpc argument. */
const FUNC_IDS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0, 12, 255, -1, 0x7fffffff]

/** A coro_rpc request: a seed, its header fields, argument or attachment (data header, Notify JSON) changed. */
const tentFrame = (rng: Prng, corpus: Corpus, layout: Layout, seq: number): { bytes: Buffer; what: string } => {
  const seed = rng.pick(corpus.tent)
  let b: Buffer = Buffer.from(seed)
  b.writeUInt32LE(seq >>> 0, 4)
  let what = "tent"
  switch (rng.int(6)) {
    case 0: {
      const at = rng.pick([0, 1, 2, 3, 8, 12, 16])
      if (at < 4) b[at] = rng.chance(0.5) ? rng.int(256) : rng.range(0, 2)
      else putU32(b, at, interesting32(rng, [b.length - Wire.TENT_REQUEST_HEADER, layout.maxDataBytes + 16]))
      what = "tent/header"
      break
    }
    case 1: {
      const funcId = rng.pick(FUNC_IDS)
      b = Wire.tentRequest(seq, funcId, b.subarray(Wire.TENT_REQUEST_HEADER + b.readUInt32LE(12)))
      what = "tent/func"
      break
    }
    case 2: {
      const send = rng.chance(0.5)
      // a TENT SendData is aimed at the target only (one at the canary would be a write the harness asked for)
      const addr = addrNear(rng, send || rng.chance(0.7) ? layout.target : layout.canary, 64)
      const len = rng.chance(0.7) ? rng.int(4096) : Number(rng.pick(INTERESTING_64) & 0xffffn)
      const claimed = rng.chance(0.8) ? BigInt(len) : rng.pick(INTERESTING_64)
      const data = send ? Buffer.alloc(Math.max(0, rng.chance(0.8) ? len : len + rng.range(-2, 2)), 0x5a) : undefined
      b = Wire.tentRequest(seq, send ? 3 : 4, Bodies.encodeXferData({ peerMemAddr: addr, length: claimed }, data))
      what = "tent/data"
      break
    }
    case 3: {
      const fields: Record<string, unknown> = { msg: "fz-tent", name: "fz-tent" }
      fields[rng.pick(["msg", "name", "extra"])] = awkward(rng)
      if (rng.chance(0.2)) delete fields[rng.pick(["msg", "name"])]
      let text: Buffer = Buffer.from(json(fields))
      if (rng.chance(0.3)) text = havoc(rng, text)
      b = Wire.tentRequest(seq, 5, text)
      what = "tent/notify"
      break
    }
    default:
      b = havoc(rng, b, corpus.tent as Array<Buffer>)
      what = "tent/havoc"
  }
  return { bytes: b, what }
}

/** The next input. `id` is a request id the connection has not used (mutations may change it). */
export const next = (rng: Prng, corpus: Corpus, layout: Layout, id: number): Input => {
  const roll = rng.int(100)
  if (roll < 3) return { wire: "lean", bytes: rng.bytes(1 + rng.int(300)), fresh: rng.chance(0.5), what: "random" }
  if (roll < 18) {
    const { bytes, what } = tentFrame(rng, corpus, layout, id)
    return { wire: "tent", bytes, fresh: rng.chance(0.05), what }
  }
  if (roll < 25) {
    const parts: Array<Buffer> = []
    for (let i = 0, n = 2 + rng.int(3); i < n; i++) parts.push(leanFrame(rng, corpus, layout, id + i).bytes)
    return { wire: "lean", bytes: Buffer.concat(parts), fresh: false, what: "several" }
  }
  const { bytes, what } = leanFrame(rng, corpus, layout, id)
  return { wire: "lean", bytes, fresh: rng.chance(0.02), what }
}
