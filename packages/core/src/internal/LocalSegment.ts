/**
 * This engine's own segment: the memory registered with `registerSegment`, on every device (TENT
 * `registerLocalMemory`). Read by the slice engines (lkeys, local buffers) and by the control plane's `SendData` /
 * `RecvData` handlers; one region lookup serves all of them.
 */
import type { MemoryRegion } from "@tent/verbs"
import { Context, Layer } from "effect"

/** One registered region: its bytes, its MR per device, and the address requests use. */
export interface Region {
  readonly buffer: Buffer
  readonly mrs: ReadonlyArray<MemoryRegion>
  /** Its first MR's address, or one of the engine's own when no device registered it. */
  readonly addr: number
}

/** The regions of this engine's segment. */
export class Regions {
  readonly list: Array<Region> = []

  /** The region holding `[addr, addr + length)` and the offset of `addr` in it. */
  find(addr: number, length: number): { readonly region: Region; readonly offset: number } | undefined {
    for (const r of this.list)
      if (addr >= r.addr && addr + length <= r.addr + r.buffer.length) return { region: r, offset: addr - r.addr }
    return undefined
  }
}

/** Addresses for memory no device registered (no RDMA): distinct, page-aligned, one free page between regions. */
let virtualNext = 0x10_0000_0000
export const nextVirtualAddr = (length: number): number => {
  const addr = virtualNext
  virtualNext += Math.ceil(length / 4096) * 4096 + 4096
  return addr
}

/** This engine's segment as a service. */
export class LocalSegment extends Context.Tag("@tent/core/internal/LocalSegment")<LocalSegment, Regions>() {}

/** A fresh, empty segment. */
export const layer: Layer.Layer<LocalSegment> = Layer.sync(LocalSegment, () => new Regions())
