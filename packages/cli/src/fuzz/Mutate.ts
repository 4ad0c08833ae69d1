/**
 * Byte-level mutations shared by the targets, in the manner of AFL's havoc stage: bit flips, random and
 * "interesting" integers (0, 1, 2^31-1, 2^32-1, lengths just above a limit, ...) written at a random or a chosen
 * offset in either byte order, small additions, deleted, inserted, duplicated and spliced ranges, truncation. The
 * targets start from valid encodings (made by the real codecs or captured from real traffic) and call these on
 * them, usually after a structure-aware change of a field they know.
 */
import type { Prng } from "./Prng.js"

/** 32-bit values that sit on boundaries: signs, byte and word edges, the largest values. */
export const INTERESTING_32: ReadonlyArray<number> = [
  0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 512, 1000, 1024, 4095, 4096, 32767, 32768, 65535,
  65536, 65537, 0x00ffffff, 0x01000000, 0x7ffffffe, 0x7fffffff, 0x80000000, 0x80000001, 0xfffffffe, 0xffffffff
]

/** 64-bit values that sit on boundaries, including the edges of a JS number's safe range. */
export const INTERESTING_64: ReadonlyArray<bigint> = [
  0n,
  1n,
  0x7fffffffn,
  0xffffffffn,
  0x1_0000_0000n,
  0x1f_ffff_ffff_ffffn,
  0x20_0000_0000_0000n,
  0x20_0000_0000_0001n,
  0x7fff_ffff_ffff_ffffn,
  0x8000_0000_0000_0000n,
  0xffff_ffff_ffff_fffen,
  0xffff_ffff_ffff_ffffn
]

/** One of {@link INTERESTING_32}, or one of them ± 1, or a value near `near` (a limit the target knows). */
export const interesting32 = (rng: Prng, near?: ReadonlyArray<number>): number => {
  if (near !== undefined && near.length > 0 && rng.chance(0.5)) return (rng.pick(near) + rng.range(-2, 2)) >>> 0
  const v = rng.pick(INTERESTING_32)
  return rng.chance(0.8) ? v : (v + (rng.chance(0.5) ? 1 : -1)) >>> 0
}

/** Writes `v` as a u32 at `at` (little- or big-endian), clipped to the buffer. */
export const putU32 = (buf: Buffer, at: number, v: number, bigEndian = false): void => {
  if (at < 0 || at + 4 > buf.length) return
  if (bigEndian) buf.writeUInt32BE(v >>> 0, at)
  else buf.writeUInt32LE(v >>> 0, at)
}

/** Writes `v` as a u64 little-endian at `at`, clipped to the buffer. */
export const putU64 = (buf: Buffer, at: number, v: bigint): void => {
  if (at < 0 || at + 8 > buf.length) return
  buf.writeBigUInt64LE(BigInt.asUintN(64, v), at)
}

const MAX_GROW = 4096

/** One havoc step on `buf`; returns the new buffer (it may be the same one, changed in place, or a new one). */
const step = (rng: Prng, buf: Buffer, donors: ReadonlyArray<Buffer>, maxLen: number): Buffer => {
  const n = buf.length
  switch (rng.int(12)) {
    case 0:
    case 1: {
      if (n === 0) return buf
      const at = rng.int(n)
      buf[at] = (buf[at] as number) ^ (1 << rng.int(8))
      return buf
    }
    case 2: {
      if (n === 0) return buf
      buf[rng.int(n)] = rng.chance(0.5) ? rng.int(256) : rng.pick([0, 1, 0x7f, 0x80, 0xff])
      return buf
    }
    case 3: {
      if (n < 2) return buf
      const at = rng.int(n - 1)
      const v = interesting32(rng) & 0xffff
      if (rng.chance(0.5)) buf.writeUInt16LE(v, at)
      else buf.writeUInt16BE(v, at)
      return buf
    }
    case 4: {
      if (n < 4) return buf
      putU32(buf, rng.int(n - 3), interesting32(rng), rng.chance(0.25))
      return buf
    }
    case 5: {
      if (n < 8) return buf
      putU64(buf, rng.int(n - 7), rng.pick(INTERESTING_64))
      return buf
    }
    case 6: {
      if (n === 0) return buf
      const at = rng.int(n)
      buf[at] = ((buf[at] as number) + rng.range(-16, 16)) & 0xff
      return buf
    }
    case 7: {
      if (n === 0) return buf
      const at = rng.int(n)
      const len = Math.min(n - at, 1 + rng.int(rng.chance(0.8) ? 16 : n))
      return Buffer.concat([buf.subarray(0, at), buf.subarray(at + len)])
    }
    case 8: {
      const len = Math.min(Math.max(0, maxLen - n), 1 + rng.int(rng.chance(0.8) ? 16 : MAX_GROW))
      if (len === 0) return buf
      const at = rng.int(n + 1)
      const fill = rng.chance(0.5) ? rng.bytes(len) : Buffer.alloc(len, rng.int(256))
      return Buffer.concat([buf.subarray(0, at), fill, buf.subarray(at)])
    }
    case 9: {
      if (n === 0 || n >= maxLen) return buf
      const from = rng.int(n)
      const len = Math.min(n - from, maxLen - n, 1 + rng.int(64))
      const at = rng.int(n + 1)
      return Buffer.concat([buf.subarray(0, at), Buffer.from(buf.subarray(from, from + len)), buf.subarray(at)])
    }
    case 10: {
      if (donors.length === 0) return buf
      const d = rng.pick(donors)
      if (d.length === 0) return buf
      const from = rng.int(d.length)
      const len = Math.min(d.length - from, 1 + rng.int(256))
      const at = rng.int(n + 1)
      const tail = rng.chance(0.5) ? buf.subarray(Math.min(n, at + len)) : buf.subarray(at)
      return Buffer.concat([buf.subarray(0, at), d.subarray(from, from + len), tail]).subarray(0, maxLen)
    }
    default: {
      if (n === 0) return buf
      return buf.subarray(0, rng.int(n))
    }
  }
}

/**
 * A mutated copy of `input`: 1 to 2^k havoc steps (mostly few). `donors` are other valid inputs to splice from;
 * the result is never longer than `maxLen`.
 */
export const havoc = (rng: Prng, input: Uint8Array, donors: ReadonlyArray<Buffer> = [], maxLen = 1 << 16): Buffer => {
  let buf: Buffer = Buffer.from(input)
  const steps = 1 << rng.int(rng.chance(0.7) ? 2 : 5)
  for (let i = 0; i < steps; i++) buf = step(rng, buf, donors, maxLen)
  return buf.length > maxLen ? buf.subarray(0, maxLen) : buf
}
