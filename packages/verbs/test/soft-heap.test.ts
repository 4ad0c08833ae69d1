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

/** Frees 16 MiB of 4 KiB blocks in a fresh process made with `threshold`; glibc's free bytes at its heap top. */
const trimIn = (threshold: string) =>
  Effect.map(spawnChild<HeapTrimReport>(fixture("heap-trim.ts"), [threshold]), (child) => child.ready)

const MiB = 1024 * 1024

describe("SoftVerbs keeps the C heap's top (datagram memory is not faulted in afresh)", () => {
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
})
