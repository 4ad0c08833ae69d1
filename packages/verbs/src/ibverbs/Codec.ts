/**
 * Reading and writing C structs in place: 64-bit values as two 32-bit halves (no bigint on the hot path), memory that
 * koffi can hand to C without it moving, and a small field codec for the lifecycle structs (`ibv_qp_attr`,
 * `ibv_port_attr`, `ibv_qp_init_attr`) that maps the interface's camelCase names onto the header's snake_case ones.
 *
 * @internal
 */
import koffi, { type TypeObject } from "koffi"
import { type MemberLayout, members } from "./Layout.js"

const TWO_32 = 2 ** 32

/**
 * A zeroed Buffer whose memory never moves: backed by its own `ArrayBuffer` (never on the V8 heap, never from the
 * Buffer pool), so its address can be written into C structs and kept by C.
 */
export const stableBuffer = (size: number): Buffer => Buffer.from(new ArrayBuffer(size))

/** The user-space address of a Buffer's first byte, as a number. */
export const addressOf = (buffer: Uint8Array): number => Number(koffi.address(buffer))

/** A DataView over C memory at `address` (no copy). */
export const viewAt = (address: number, size: number): DataView => new DataView(koffi.view(BigInt(address), size))

/** Reads a little-endian uint64 that fits in 53 bits (addresses, wr_id). */
export const readU64 = (view: DataView, offset: number): number =>
  view.getUint32(offset, true) + view.getUint32(offset + 4, true) * TWO_32

/** Writes a non-negative integer below 2^53 as a little-endian uint64. */
export const writeU64 = (view: DataView, offset: number, value: number): void => {
  view.setUint32(offset, value >>> 0, true)
  view.setUint32(offset + 4, Math.floor(value / TWO_32) >>> 0, true)
}

/** The members of a struct by C designator, for the field codec. */
export type Fields = ReadonlyMap<string, MemberLayout>

/** Indexes a koffi struct's members by designator (`ah_attr.grh.sgid_index`). */
export const fieldsOf = (type: TypeObject): Fields => new Map(members(type).map((m) => [m.path, m]))

const snake = (key: string): string => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)

const field = (fields: Fields, path: string): MemberLayout => {
  const m = fields.get(path)
  if (m === undefined) throw new Error(`no member ${path} in the verbs layout`)
  return m
}

/**
 * Writes an interface object (`{ qpState, ahAttr: { grh: { dgid } } }`) into a struct: numbers into scalar members of
 * their size, booleans as 0/1, byte arrays (GIDs) into array members, nested objects recursively. Absent keys are left
 * as they are (the caller zeroes the struct first).
 */
export const encodeFields = (view: DataView, fields: Fields, value: object, prefix = ""): void => {
  for (const [key, v] of Object.entries(value)) {
    if (v === undefined || v === null) continue
    const path = prefix + snake(key)
    if (v instanceof Uint8Array) {
      const m = field(fields, path)
      new Uint8Array(view.buffer, view.byteOffset + m.offset, m.size).set(v.subarray(0, m.size))
    } else if (typeof v === "object") {
      encodeFields(view, fields, v, `${path}.`)
    } else {
      writeField(view, field(fields, path), typeof v === "boolean" ? (v ? 1 : 0) : (v as number))
    }
  }
}

/** Writes a scalar member by its size. */
export const writeField = (view: DataView, m: MemberLayout, value: number): void => {
  switch (m.size) {
    case 1:
      view.setUint8(m.offset, value)
      return
    case 2:
      view.setUint16(m.offset, value, true)
      return
    case 4:
      view.setUint32(m.offset, value >>> 0, true)
      return
    default:
      writeU64(view, m.offset, value)
  }
}

/** Reads a scalar member (unsigned) by its designator. */
export const readField = (view: DataView, fields: Fields, path: string): number => {
  const m = field(fields, path)
  switch (m.size) {
    case 1:
      return view.getUint8(m.offset)
    case 2:
      return view.getUint16(m.offset, true)
    case 4:
      return view.getUint32(m.offset, true)
    default:
      return readU64(view, m.offset)
  }
}

/** Reads the given interface keys of a struct into an object (`prefix` is the C designator prefix). */
export const decodeFields = <K extends string>(
  view: DataView,
  fields: Fields,
  keys: ReadonlyArray<K>,
  prefix = ""
): Record<K, number> => {
  const out = {} as Record<K, number>
  for (const key of keys) out[key] = readField(view, fields, prefix + snake(key))
  return out
}

/** Copies an array member's bytes (a GID) out of a struct. */
export const readBytes = (view: DataView, fields: Fields, path: string): Uint8Array => {
  const m = field(fields, path)
  return new Uint8Array(view.buffer.slice(view.byteOffset + m.offset, view.byteOffset + m.offset + m.size))
}
