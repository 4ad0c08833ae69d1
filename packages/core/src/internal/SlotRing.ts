/**
 * Notify slot memory in chunks (`NotifyChannel`'s send and receive rings): a chunk registered in the endpoint's
 * protection domain, and per slot its chunk's buffer, offset, address and lkey in typed arrays, so the hot path finds
 * a slot with three typed-array reads whichever chunk holds it.
 */
import { AccessFlags, Errno, type MemoryRegion, type ProtectionDomain, RdmaError } from "@tent/verbs"
import { Effect, Either, Scope } from "effect"

/** A chunk of slot memory, registered in the endpoint's protection domain. */
export interface SlotChunk {
  readonly buf: Buffer
  readonly mr: MemoryRegion
}

/** Allocates and registers `bytes` of slot memory (deregistered when the endpoint's scope closes). */
export type ChunkAllocator = (bytes: number) => Either.Either<SlotChunk, RdmaError>

/** An allocator of chunks in `pd`, registered in `scope` (run synchronously: both providers register at once). */
export const chunkAllocator =
  (pd: ProtectionDomain, scope: Scope.Scope): ChunkAllocator =>
  (bytes) =>
    Effect.runSync(
      Effect.either(
        Effect.map(Scope.extend(pd.regMr(Buffer.allocUnsafeSlow(bytes), AccessFlags.LOCAL_WRITE), scope), (mr) => ({
          buf: mr.buffer,
          mr
        }))
      )
    )

/** Arrays of no slot, shared by every ring that has none (never written: `grow` makes new ones). */
export const NONE = { i32: new Int32Array(0), f64: new Float64Array(0), u32: new Uint32Array(0) } as const

/**
 * Slots of one direction, in chunks: per slot its chunk's buffer, its offset there, its address and lkey, so the hot
 * path finds a slot with three typed-array reads whichever chunk holds it.
 */
export class SlotRing {
  /** Slots allocated. */
  capacity = 0
  bufs: Array<Buffer | undefined> = []
  // Until the first slot: the shared empty arrays (an idle lazy ring allocates none).
  offsets: Int32Array = NONE.i32
  addrs: Float64Array = NONE.f64
  lkeys: Uint32Array = NONE.u32

  constructor(
    readonly max: number,
    readonly slotBytes: number
  ) {}

  /**
   * Adds up to `count` slots in one chunk from `alloc`; returns the first new slot, or the allocation's error. The
   * per-slot arrays are as long as the ring (re-made when it grows): an idle lazy ring keeps a few bytes of them.
   */
  grow(alloc: ChunkAllocator | undefined, count: number): number | RdmaError {
    const n = Math.min(count, this.max - this.capacity)
    if (alloc === undefined || n <= 0) {
      return new RdmaError({ op: "ibv_reg_mr", errno: Errno.ENOMEM, message: "no notify slot memory to grow into" })
    }
    const chunk = alloc(n * this.slotBytes)
    if (Either.isLeft(chunk)) return chunk.left
    const first = this.capacity
    const size = first + n
    this.offsets = extend(this.offsets, new Int32Array(size))
    this.addrs = extend(this.addrs, new Float64Array(size))
    this.lkeys = extend(this.lkeys, new Uint32Array(size))
    const { buf, mr } = chunk.right
    for (let i = 0; i < n; i++) {
      this.bufs[first + i] = buf
      this.offsets[first + i] = i * this.slotBytes
      this.addrs[first + i] = mr.addr + i * this.slotBytes
      this.lkeys[first + i] = mr.lkey
    }
    this.capacity = size
    return first
  }

  /** Forgets every slot (the endpoint's scope deregisters them). */
  clear(): void {
    this.bufs = []
    this.capacity = 0
  }
}

/** `into` with `from` copied to its start. */
const extend = <T extends Int32Array | Float64Array | Uint32Array>(from: T, into: T): T => {
  into.set(from as never)
  return into
}
