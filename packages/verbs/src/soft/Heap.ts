/**
 * The C heap under SoftVerbs' datagram path. Node gives every datagram it reads a backing store of its own, allocated
 * with `calloc` from the C heap and freed only when the garbage collector frees its `Buffer`: a WRITE stream of 4 KiB
 * packets takes ~32 MiB from the heap between two scavenges and gives it back in one go. glibc then returns the free
 * top of its heap to the kernel (`brk` down) once it exceeds `M_TRIM_THRESHOLD` (128 KiB by default), and the next
 * 32 MiB is faulted in again, one fresh zeroed page per packet. Whether that happens depends on what else lives at the
 * top of the heap, so it differed from process to process: measured on loopback, a receiving process took ~16,000
 * minor page faults per 64 MiB written and 5–8 ms of CPU per MiB in one process, ~150 faults and 2.2–2.5 ms per MiB in
 * another, the same code and the same packets. Raising the trim threshold keeps the freed top for the next datagrams.
 *
 * The setting is process-wide (it is the C library's), best effort (glibc only: elsewhere `mallopt` is missing or a
 * no-op and the heap is left as it is) and reported, so a figure can say which heap it was measured on.
 *
 * @internal
 */
import koffi from "koffi"

/** What `keepHeapTop` did. */
export type HeapTrim =
  | { readonly _tag: "Set"; readonly thresholdBytes: number }
  | { readonly _tag: "Left"; readonly reason: string }

/** `M_TRIM_THRESHOLD` of glibc's `<malloc.h>`. */
const M_TRIM_THRESHOLD = -1

/** The default: well above one scavenge's worth of datagrams (~32 MiB), a fraction of what a receiver maps anyway. */
export const DEFAULT_TRIM_THRESHOLD = 64 * 1024 * 1024

let mallopt: ((param: number, value: number) => number) | undefined | null
let current: HeapTrim = { _tag: "Left", reason: "not asked" }

const load = (): ((param: number, value: number) => number) | null => {
  if (mallopt !== undefined) return mallopt
  mallopt = null
  if (process.platform !== "linux") return null
  try {
    // glibc's soname; on musl this fails to load (its mallopt is a no-op anyway) and the heap is left alone.
    const libc = koffi.load("libc.so.6")
    mallopt = libc.func("int mallopt(int param, int value)") as (param: number, value: number) => number
  } catch {
    mallopt = null
  }
  return mallopt
}

/**
 * Sets glibc's trim threshold to `bytes` (0: leave it as it is). `mallopt` returns 1 on success; anything else, or no
 * glibc, leaves the heap as it was and says why. A threshold set earlier in the process cannot be taken back (glibc
 * has no "default" to return to once its dynamic threshold is off), so 0 after it still reports it.
 */
export const keepHeapTop = (bytes: number): HeapTrim => {
  if (bytes === 0) {
    if (current._tag === "Left")
      current = { _tag: "Left", reason: "mallocTrimThreshold is 0: the C library's own setting" }
    return current
  }
  const fn = load()
  if (fn === null) {
    current = { _tag: "Left", reason: "no glibc mallopt on this platform" }
    return current
  }
  current =
    fn(M_TRIM_THRESHOLD, bytes) === 1
      ? { _tag: "Set", thresholdBytes: bytes }
      : { _tag: "Left", reason: `mallopt(M_TRIM_THRESHOLD, ${bytes}) refused` }
  return current
}

/** What the last `keepHeapTop` in this process did. */
export const heapTrim = (): HeapTrim => current
