/**
 * Addresses and memory regions for SoftVerbs. A Buffer has no stable pointer in JavaScript, so SoftVerbs gives every
 * backing `ArrayBuffer` a process-wide virtual base address; `addressOf(buffer)` is that base plus the Buffer's offset.
 * The same Buffer therefore has the same address on every device, as a real pointer has on every NIC, and a segment
 * registered on several devices is published with one address and one rkey per device.
 */

const bases = new WeakMap<ArrayBufferLike, number>()
const PAGE = 4096
// Start well above zero so that a zero or small address in a work request is an obvious bug, not a valid access.
let nextBase = 0x10_0000_0000

/** The virtual address of `buffer[0]` (stable for the life of the backing store). */
export const addressOf = (buffer: Uint8Array): number => {
  let base = bases.get(buffer.buffer)
  if (base === undefined) {
    base = nextBase
    nextBase += Math.ceil(buffer.buffer.byteLength / PAGE) * PAGE + PAGE
    bases.set(buffer.buffer, base)
  }
  return base + buffer.byteOffset
}

/** A registered memory region of a SoftVerbs device. */
export interface SoftMr {
  readonly addr: number
  readonly length: number
  readonly lkey: number
  readonly rkey: number
  readonly access: number
  readonly buffer: Buffer
  readonly pdId: number
}

/**
 * The device's MR table. Keys are `(index << 8) | tag`: the index finds the entry in O(1), the random tag makes a
 * stale or forged key miss, as on real hardware.
 */
export class MrTable {
  private entries: Array<SoftMr | undefined> = [undefined]
  private free: Array<number> = []

  register(buffer: Buffer, access: number, pdId: number): SoftMr {
    const index = this.free.pop() ?? this.entries.length
    if (index >= 0xffffff) throw new Error("MR table full")
    const key = ((index << 8) | (1 + Math.floor(Math.random() * 255))) >>> 0
    const mr: SoftMr = { addr: addressOf(buffer), length: buffer.length, lkey: key, rkey: key, access, buffer, pdId }
    this.entries[index] = mr
    return mr
  }

  deregister(mr: SoftMr): void {
    const index = mr.lkey >>> 8
    if (this.entries[index] === mr) {
      this.entries[index] = undefined
      this.free.push(index)
    }
  }

  /** The MR a key names, or undefined for an unknown or stale key. */
  lookup(key: number): SoftMr | undefined {
    const mr = this.entries[key >>> 8]
    return mr !== undefined && mr.lkey === key ? mr : undefined
  }

  get size(): number {
    return this.entries.length - 1 - this.free.length
  }
}
