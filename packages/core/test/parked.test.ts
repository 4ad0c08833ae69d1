/**
 * `Parked` (the receipts ticker, the slice-timeout check, the reclaim pass): a pass every interval while there is
 * work, no timer at all while there is none, and a wake that is never missed.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Duration, Effect, TestClock } from "effect"
import { parked } from "../src/internal/Parked.js"

const sleeps = Effect.map(TestClock.sleeps(), Chunk.size)

describe("Parked", () => {
  it.scoped("holds no timer while idle; a wake runs a pass one interval later, until idle again", () =>
    Effect.gen(function* () {
      let work = 0
      let passes = 0
      const p = parked(
        Duration.millis(100),
        Effect.sync(() => {
          passes++
          if (work > 0) work--
        }),
        () => work === 0
      )
      yield* Effect.forkScoped(p.loop)
      yield* TestClock.adjust(Duration.seconds(5))
      expect(passes).toBe(0)
      expect(yield* sleeps).toBe(0) // red if the loop slept while idle
      work = 2
      p.wake()
      p.wake() // a second wake while awake changes nothing
      yield* Effect.yieldNow()
      expect(yield* sleeps).toBe(1)
      yield* TestClock.adjust(Duration.millis(99))
      expect(passes).toBe(0)
      yield* TestClock.adjust(Duration.millis(1))
      expect(passes).toBe(1)
      yield* TestClock.adjust(Duration.millis(100))
      expect(passes).toBe(2)
      expect(yield* sleeps).toBe(0) // the work is done: parked again
      yield* TestClock.adjust(Duration.seconds(5))
      expect(passes).toBe(2)
    })
  )

  it.scoped("starts awake when asked, and parks after its first pass finds nothing", () =>
    Effect.gen(function* () {
      let passes = 0
      const p = parked(
        Duration.millis(100),
        Effect.sync(() => {
          passes++
        }),
        () => true,
        true
      )
      yield* Effect.forkScoped(p.loop)
      yield* TestClock.adjust(Duration.seconds(1))
      expect(passes).toBe(1)
      expect(yield* sleeps).toBe(0)
    })
  )
})
