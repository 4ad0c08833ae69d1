import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Errno, RdmaError, SoftVerbs } from "../src/index.js"
import { fixture, spawnChild } from "./fixtures/child.js"

/** glibc's version when this process runs on glibc (the C heap setting is glibc's `mallopt`). */
const glibc = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header
  ?.glibcVersionRuntime
if (glibc === undefined) console.log("[soft-heap] the heap tests skipped: this process does not run on glibc")

interface HeapTrimReport {
  readonly heap: SoftVerbs.HeapTrim
  readonly keptBytes: number
}

interface ScavengeReport {
  readonly heap: SoftVerbs.HeapSettings
  readonly forcedMinorGcs: number
}

/** 32 MiB of 4 KiB datagrams read in a fresh process made with `every`; the young-generation GCs it forced. */
const scavengesIn = (every: string) =>
  Effect.map(spawnChild<ScavengeReport>(fixture("heap-scavenge.ts"), [every]), (child) => child.ready)

/** Frees 16 MiB of 4 KiB blocks in a fresh process made with `threshold`; glibc's free bytes at its heap top. */
const trimIn = (threshold: string) =>
  Effect.map(spawnChild<HeapTrimReport>(fixture("heap-trim.ts"), [threshold]), (child) => child.ready)

const MiB = 1024 * 1024

describe("SoftVerbs and the heaps under its datagram path (C heap's top kept, scavenges paced)", () => {
  it.scopedLive.skipIf(glibc === undefined)(
    "by default 16 MiB freed at the top of the heap stays there; with glibc's 128 KiB it goes back to the kernel",
    () =>
      Effect.gen(function* () {
        const kept = yield* trimIn("default")
        expect(kept.heap).toEqual({ _tag: "Set", thresholdBytes: 64 * MiB })
        expect(kept.keptBytes).toBeGreaterThanOrEqual(15 * MiB)
        // The same process with the C library's initial threshold: the measure sees a trim when there is one.
        const trimmed = yield* trimIn(String(128 * 1024))
        expect(trimmed.heap).toEqual({ _tag: "Set", thresholdBytes: 128 * 1024 })
        expect(trimmed.keptBytes).toBeLessThan(1 * MiB)
        const left = yield* trimIn("0")
        expect(left.heap._tag).toBe("Left")
      }),
    120_000
  )

  it.scopedLive(
    "a young-generation GC after every scavengeEveryBytes of datagrams read (4 MiB by default), none with 0",
    () =>
      Effect.gen(function* () {
        const byDefault = yield* scavengesIn("default")
        expect(byDefault.heap.scavenge).toEqual({ _tag: "Paced", everyBytes: 4 * MiB })
        expect(byDefault.heap.scavenges).toBe(8)
        expect(byDefault.forcedMinorGcs).toBe(8)
        const seldom = yield* scavengesIn(String(16 * MiB))
        expect(seldom.heap.scavenges).toBe(2)
        expect(seldom.forcedMinorGcs).toBe(2)
        // Off: V8 alone forces none (its own scavenges are not "forced").
        const off = yield* scavengesIn("0")
        expect(off.heap.scavenge._tag).toBe("Off")
        expect(off.heap.scavenges).toBe(0)
        expect(off.forcedMinorGcs).toBe(0)
      }),
    120_000
  )

  it.scoped.skipIf(glibc === undefined)(
    "a threshold once set stays, and is reported, when a later SoftVerbs asks for 0 (glibc has no default to go back to)",
    () =>
      Effect.gen(function* () {
        yield* SoftVerbs.make({ devices: [{ name: "h1" }], mallocTrimThreshold: 32 * MiB })
        const { control } = yield* SoftVerbs.make({ devices: [{ name: "h2" }], mallocTrimThreshold: 0 })
        expect(control.heap().trim).toEqual({ _tag: "Set", thresholdBytes: 32 * MiB })
      })
  )

  it.scoped("a mallocTrimThreshold that is not an integer of bytes fails at start, naming the key", () =>
    Effect.gen(function* () {
      for (const bad of [-1, 1.5, Number.NaN, 2 ** 31]) {
        const error = yield* Effect.flip(SoftVerbs.make({ devices: [{ name: "h" }], mallocTrimThreshold: bad }))
        expect(error).toBeInstanceOf(RdmaError)
        expect(error.errno).toBe(Errno.EINVAL)
        expect(error.message).toContain("mallocTrimThreshold")
        expect(error.message).toContain(String(bad))
      }
    })
  )

  it.scoped("a scavengeEveryBytes that is not an integer of bytes fails at start, naming the key", () =>
    Effect.gen(function* () {
      for (const bad of [-1, 0.5, Number.NaN, Number.POSITIVE_INFINITY]) {
        const error = yield* Effect.flip(SoftVerbs.make({ devices: [{ name: "h" }], scavengeEveryBytes: bad }))
        expect(error).toBeInstanceOf(RdmaError)
        expect(error.errno).toBe(Errno.EINVAL)
        expect(error.message).toContain("scavengeEveryBytes")
        expect(error.message).toContain(String(bad))
      }
    })
  )
})
