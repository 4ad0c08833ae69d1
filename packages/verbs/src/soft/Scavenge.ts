/**
 * V8's heap under SoftVerbs' datagram path. Node gives every datagram it reads an `ArrayBuffer` of its own, which V8
 * counts as external memory until a scavenge has found it dead and its sweep (on a helper thread) has finished. V8
 * forces a scavenge only once the young `ArrayBuffer`s hold twice the largest semispace (32 MiB on 64-bit Node 20),
 * so a WRITE stream keeps up to ~64 MiB of dead datagrams counted; once the count passes 64 MiB above what it was at
 * the last full GC, V8 starts full (mark-compact) GCs for "external memory pressure". A full GC resets that line to
 * where the count stands when it ends: in a process whose new space had grown (an engine after a burst of
 * notifications) that was often low, and the GCs came back to back. Measured (the engine bench's receiving process, 128
 * MiB of 64 KiB WRITEs): 2–3 full GCs per 400 ms and 0.5–2.2 ms of helper-thread CPU per MiB, against 0.1–0.3 without
 * them, the rate falling from ~400 to 190–300 MB/s; the raw floor's fresh processes rarely met it.
 *
 * So a device runs a young-generation GC itself after every `scavengeEveryBytes` of datagrams read (process-wide, all
 * devices together): the dead datagrams are found and swept long before the count nears the line.
 *
 * The default was 16 MiB, and that was still too much in one process out of four: V8 also counts the external memory
 * allocated since the last full GC against the old generation's allocation limit, and starts incremental marking once
 * what is left under it is no more than the new space's capacity. A heap that V8 sized tightly (the limit ~8 MiB
 * above the live old generation, plus the new space) has no room for 16 MiB of young datagrams: measured in the engine
 * bench's receiving process (~115 MiB of registered memory and notify slots live, ~34 MiB of heap), a full GC after
 * nearly every paced scavenge, ~75 ms apart, with 1.9–2.4 ms of helper-thread CPU per MiB and the rate at 240–270
 * MB/s in 4 runs of 16; at 4 MiB, none in 12. A paced scavenge then takes 0.5–3 ms (~0.2 ms per MiB received).
 * The `gc` function comes from `--expose-gc`, set at run time and read from a fresh `vm` context, so the application's
 * global `gc` is not touched.
 *
 * @internal
 */
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"

/** The default: well under the ~8 MiB V8 may leave between the old generation and its limit (see above). */
export const DEFAULT_SCAVENGE_EVERY_BYTES = 4 * 1024 * 1024

/** What `paceScavenges` set up. */
export type ScavengePacing =
  | { readonly _tag: "Paced"; readonly everyBytes: number }
  | { readonly _tag: "Off"; readonly reason: string }

type Gc = (options: { readonly type: "minor" }) => void

/** The pacing state, read on every datagram (process-wide: one V8 heap). */
export const pacing = {
  /** 0: off. */
  everyBytes: 0,
  /** Bytes read since the last paced scavenge. */
  bytes: 0,
  /** Paced scavenges run in this process. */
  scavenges: 0,
  gc: undefined as Gc | undefined,
  state: { _tag: "Off", reason: "not asked" } as ScavengePacing
}

/** Counts `bytes` read; runs a scavenge when the pace is reached. Called by the datagram path. */
export const received = (bytes: number): void => {
  pacing.bytes += bytes
  if (pacing.bytes < pacing.everyBytes) return
  pacing.bytes = 0
  pacing.scavenges++
  ;(pacing.gc as Gc)({ type: "minor" })
}

/** Paces scavenges by `everyBytes` of datagrams read (0: off, V8 left to itself). */
export const paceScavenges = (everyBytes: number): ScavengePacing => {
  if (everyBytes === 0) {
    pacing.everyBytes = 0
    pacing.state = { _tag: "Off", reason: "scavengeEveryBytes is 0: V8 scavenges by itself" }
    return pacing.state
  }
  if (pacing.gc === undefined) {
    try {
      setFlagsFromString("--expose-gc")
      pacing.gc = runInNewContext("gc") as Gc
    } catch (e) {
      pacing.everyBytes = 0
      pacing.state = { _tag: "Off", reason: `no gc function: ${(e as Error).message}` }
      return pacing.state
    }
  }
  pacing.everyBytes = everyBytes
  pacing.state = { _tag: "Paced", everyBytes }
  return pacing.state
}
