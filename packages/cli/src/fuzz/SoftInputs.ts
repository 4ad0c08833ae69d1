/**
 * The inputs of the `softverbs` target: SoftVerbs datagrams (wire version 2: a 56-byte header, then the payload; the
 * layout is `@tent/verbs` `soft/Packet.ts`'s) mutated from datagrams the fuzzer's QP really sent to V1 — WRITEs of one
 * and of several packets, a WRITE with immediate, SENDs, a READ request, the ACKs, the READ responses and the RNR NAK
 * it answered V1's own requests with. Most go to V1 with the right token, so the parser and the handlers behind the
 * token check are reached; the PSN is put at or near the one V1 expects (or, for a response, near the ones V1 has
 * outstanding); then fields are set to awkward values (op, flags, syndrome, rkey — V1's target, the canary of another
 * protection domain, the read-only region — remote address, lengths, offset) and, sometimes, havoc. The rest carry a
 * wrong token (half the bits of a half wrong, or none), go to V2 (always with a wrong token: V2 is the real client's)
 * or to a QP number no QP has.
 */
import { HDR, Off, Op, PSN_MASK } from "@tent/verbs/testing/packet"
import { havoc, interesting32, putU32 } from "./Mutate.js"
import type { Prng } from "./Prng.js"

/** The SoftVerbs wire's header (version 2), as the provider reads it. */
export { HDR, Off, Op } from "@tent/verbs/testing/packet"

/** What the mutations aim at: the QPs, V1's position and the victim's regions. */
export interface Aim {
  readonly v1: number
  readonly v2: number
  readonly p1: number
  readonly token: bigint
  readonly ePsn: number
  readonly psnNext: number
  readonly acked: number
  readonly mrs: Readonly<Record<string, { readonly addr: number; readonly length: number; readonly rkey: number }>>
}

const setToken = (d: Buffer, token: bigint): void => {
  if (d.length < HDR) return
  d.writeUInt32LE(Number(token & 0xffffffffn), Off.tokenLo)
  d.writeUInt32LE(Number(token >> 32n), Off.tokenHi)
}

/** A token that is not `right`: one bit of one half flipped, a half zeroed, zero, or random. */
const wrongToken = (rng: Prng, right: bigint): bigint => {
  switch (rng.int(4)) {
    case 0:
      return right ^ (1n << BigInt(rng.int(64)))
    case 1:
      return right & (rng.chance(0.5) ? 0xffffffffn : 0xffffffff00000000n)
    case 2:
      return 0n
    default:
      return rng.u64() | 1n
  }
}

/** A remote address for a header: inside or at an edge of a region, or awkward as a double. */
const raddr = (rng: Prng, r: { readonly addr: number; readonly length: number }): number => {
  switch (rng.int(6)) {
    case 0:
      return r.addr + rng.int(r.length)
    case 1:
      return r.addr + r.length - rng.int(64)
    case 2:
      return r.addr - rng.range(1, 64)
    case 3:
      return rng.pick([0, 2 ** 53 - 1, 2 ** 53, -1, Number.NaN, 1.5, Number.POSITIVE_INFINITY])
    default:
      return r.addr
  }
}

/** Sets one field to an awkward value. */
const mutateField = (rng: Prng, d: Buffer, aim: Aim): void => {
  const payload = d.length - HDR
  const region = aim.mrs[rng.pick(["target", "target", "canary", "readonly"])] as Aim["mrs"][string]
  switch (rng.int(10)) {
    case 0:
      d[Off.op] = rng.chance(0.8) ? rng.range(1, 6) : rng.int(256)
      break
    case 1:
      d[Off.flags] = rng.chance(0.7) ? rng.int(64) : rng.int(256)
      break
    case 2:
      d[Off.syndrome] = rng.chance(0.8) ? rng.range(0, 5) : rng.int(256)
      break
    case 3:
      putU32(d, Off.rkey, rng.chance(0.8) ? region.rkey : interesting32(rng))
      break
    case 4:
      d.writeDoubleLE(raddr(rng, region), Off.raddr)
      putU32(d, Off.rkey, region.rkey)
      break
    case 5:
      putU32(d, Off.msgLen, interesting32(rng, [payload, region.length, region.length + 1]))
      break
    case 6:
      putU32(d, Off.offset, interesting32(rng, [d.readUInt32LE(Off.msgLen) - payload, 1024]))
      break
    case 7:
      d.writeUInt16LE(interesting32(rng, [payload]) & 0xffff, Off.payloadLen)
      break
    case 8:
      d[Off.version] = rng.pick([0, 1, 3, 255])
      break
    default:
      putU32(d, Off.imm, interesting32(rng))
  }
}

/** The next datagram (a new buffer: the socket may hold it after `send` returns). */
export const next = (rng: Prng, captured: ReadonlyArray<Buffer>, aim: Aim): { bytes: Buffer; what: string } => {
  let d: Buffer = Buffer.from(rng.pick(captured))
  let what = "captured"
  const roll = rng.int(100)
  const toV1 = roll < 90
  const rightToken = toV1 && rng.chance(0.65)
  if (rng.chance(0.2)) {
    d = havoc(rng, d, captured as Array<Buffer>, HDR + 4096)
    what = "havoc"
    // most of the time the length field is made to match again, so the datagram passes the framing check
    if (d.length >= HDR && rng.chance(0.7)) d.writeUInt16LE(Math.min(0xffff, d.length - HDR), Off.payloadLen)
  }
  if (d.length < HDR) return { bytes: d, what: "short" }
  putU32(d, Off.dstQpn, toV1 ? aim.v1 : roll < 95 ? aim.v2 : rng.int(PSN_MASK + 1))
  if (rng.chance(0.9)) putU32(d, Off.srcQpn, aim.p1)
  const op = d[Off.op] as number
  if (op === Op.SEND || op === Op.WRITE || op === Op.READ_REQ) {
    const psn = rng.chance(0.6) ? aim.ePsn : rng.chance(0.8) ? aim.ePsn + rng.range(-8, 8) : rng.u32()
    putU32(d, Off.psn, psn & PSN_MASK)
  } else if (op === Op.ACK || op === Op.NAK || op === Op.READ_RESP) {
    const ack = rng.chance(0.6) ? aim.psnNext - 1 : aim.acked + rng.range(-4, 8)
    putU32(d, Off.ack, ack & PSN_MASK)
    if (op === Op.READ_RESP) putU32(d, Off.psn, (aim.acked + 1 + rng.range(0, 4)) & PSN_MASK)
  }
  if (rng.chance(0.5)) {
    for (let i = 0, n = 1 + rng.int(2); i < n; i++) mutateField(rng, d, aim)
    what = what === "havoc" ? "havoc+fields" : "fields"
  }
  if (rng.chance(0.97)) setToken(d, rightToken ? aim.token : wrongToken(rng, aim.token))
  return { bytes: d, what: `${what}/${rightToken ? "token" : "no-token"}` }
}
