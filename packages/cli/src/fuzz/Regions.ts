/**
 * Registered memory the fuzz may and may not change, and what the victim reports of its own process: each region is
 * its bytes with an unregistered guard on either side (a write past a region's bounds lands there), a fill the
 * fuzzer can reproduce from the seed, and the memory after a full GC (`node --expose-gc`).
 */
import { createHash } from "node:crypto"
import koffi from "koffi"

/** Bytes of unregistered guard on each side of a region. */
export const GUARD = 4096

/** A region and its guards: `all` is guard + `bytes` + guard in one allocation; `bytes` is what is registered. */
export interface Guarded {
  readonly all: Buffer
  readonly bytes: Buffer
}

/** A region of `length` bytes between guards, filled from `seed` (guards included). */
export const guarded = (length: number, seed: number): Guarded => {
  const all = Buffer.alloc(GUARD + length + GUARD)
  fill(all, seed)
  return { all, bytes: all.subarray(GUARD, GUARD + length) }
}

/** The deterministic fill of a region: an LCG of `seed`. */
export const fill = (buf: Buffer, seed: number): void => {
  let s = seed >>> 0 || 1
  for (let i = 0; i < buf.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    buf[i] = s >>> 24
  }
}

/** SHA-256 of bytes, hex. */
export const sha256 = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex")

/** Where a registered region is, as the victim reports it. */
export interface RegionInfo {
  readonly addr: number
  readonly length: number
  readonly rkey?: number
}

/** A half-open byte range `[start, end)` of addresses. */
export interface Range {
  readonly start: number
  readonly end: number
}

/** `ranges` merged into disjoint ranges, sorted by start. */
export const merge = (ranges: ReadonlyArray<Range>): Array<Range> => {
  const sorted = [...ranges].filter((r) => r.end > r.start).sort((a, b) => a.start - b.start)
  const out: Array<Range> = []
  for (const r of sorted) {
    const last = out[out.length - 1]
    if (last !== undefined && r.start <= last.end)
      out[out.length - 1] = { start: last.start, end: Math.max(last.end, r.end) }
    else out.push(r)
  }
  return out
}

/** Whether address `a` lies in one of the disjoint sorted `ranges`. */
const covered = (ranges: ReadonlyArray<Range>, a: number): boolean => {
  let lo = 0
  let hi = ranges.length - 1
  while (lo <= hi) {
    const mid = (lo + hi) >> 1
    const r = ranges[mid] as Range
    if (a < r.start) hi = mid - 1
    else if (a >= r.end) lo = mid + 1
    else return true
  }
  return false
}

/**
 * Compares a region (guards included, starting at address `addr - GUARD`) before and after; returns how many bytes
 * changed outside `allowed` (ranges of addresses the fuzz asked to write: an accepted write may have changed them),
 * how many changed inside, and the first offending address. Guards are never allowed.
 */
export const diff = (
  before: Buffer,
  after: Buffer,
  addr: number,
  allowed: ReadonlyArray<Range>
): { readonly outside: number; readonly inside: number; readonly firstOutside: number | undefined } => {
  const ranges = merge(allowed)
  let outside = 0
  let inside = 0
  let firstOutside: number | undefined
  const base = addr - GUARD
  const regionEnd = addr + (before.length - 2 * GUARD)
  for (let i = 0; i < before.length; i++) {
    if (before[i] === after[i]) continue
    const a = base + i
    if (a >= addr && a < regionEnd && covered(ranges, a)) inside++
    else {
      outside++
      if (firstOutside === undefined) firstOutside = a
    }
  }
  return { outside, inside, firstOutside }
}

let trim: ((pad: number) => number) | null | undefined

/** glibc's `malloc_trim`: returns the free pages of every arena to the kernel (elsewhere: nothing to call). */
const mallocTrim = (): boolean => {
  if (trim === undefined) {
    trim = null
    if (process.platform === "linux") {
      try {
        trim = koffi.load("libc.so.6").func("int malloc_trim(size_t pad)") as (pad: number) => number
      } catch {
        trim = null
      }
    }
  }
  if (trim === null) return false
  trim(0)
  return true
}

/**
 * The victim process's memory after two full GCs (when `--expose-gc` made `gc` available) and a `malloc_trim(0)`
 * (SoftVerbs keeps up to 64 MiB of freed C heap for its datagrams: without the trim that would count as growth).
 */
export const afterGc = async (): Promise<{
  rss: number
  heapUsed: number
  external: number
  gc: boolean
  trimmed: boolean
}> => {
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc !== undefined) {
    gc()
    await new Promise((r) => setImmediate(r))
    gc()
  }
  const trimmed = mallocTrim()
  const m = process.memoryUsage()
  return { rss: m.rss, heapUsed: m.heapUsed, external: m.external + m.arrayBuffers, gc: gc !== undefined, trimmed }
}
