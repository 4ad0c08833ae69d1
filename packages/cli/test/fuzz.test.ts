/**
 * `tent fuzz`'s short form, as the test suite runs it: every target (`rpc-frames`, `notify-slots`, `softverbs`) with
 * 10^4 inputs under a fixed seed and under one random seed (printed, so a failure replays with `pnpm fuzz --seed S`),
 * each against a victim in a child process while a real client is served: 0 crashes, 0 handler errors or defects,
 * RSS growth after GC under 64 MiB, no registered byte changed that no accepted write asked for. `TENT_FUZZ_COUNT`
 * sets the count. The negative control injects each kind of violation into the victim halfway through a run — a write
 * to the canary region, a packet handler that throws, a crash — and requires the harness to report it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fuzz from "../src/fuzz/Fuzz.js"
import { freshSeed } from "../src/fuzz/Prng.js"
import { type Inject, type TargetName, targets } from "../src/fuzz/Target.js"

const FIXED_SEED = 20260917
const COUNT = Number(process.env.TENT_FUZZ_COUNT ?? 10_000)

const fuzz = (seed: number, count: number, chosen: ReadonlyArray<TargetName>, inject?: Inject) =>
  Fuzz.run({ seed, count, targets: chosen, inject, progress: () => {} })

describe("tent fuzz, short form", () => {
  it.live(
    `${COUNT} inputs per target, seed ${FIXED_SEED} and a random seed: no crash, no handler error, RSS growth < 64 MiB, no byte changed outside accepted writes, the real client served`,
    () =>
      Effect.gen(function* () {
        const random = freshSeed()
        console.log(
          `tent fuzz short form: seeds ${FIXED_SEED} and ${random} (replay: pnpm fuzz --seed ${random} --count ${COUNT})`
        )
        for (const seed of [FIXED_SEED, random]) {
          const results = yield* fuzz(seed, COUNT, targets)
          for (const r of results) console.log(`seed ${seed}\n${Fuzz.render(r).join("\n")}`)
          expect(results.map((r) => [r.target, r.violations])).toEqual(targets.map((t) => [t, []]))
          for (const r of results) {
            expect(r.inputs).toBe(COUNT)
            expect(r.client.rounds).toBeGreaterThan(0)
            expect(Object.values(r.regions).every((c) => c.changedOutside === 0)).toBe(true)
          }
        }
      }),
    150_000
  )

  it.live(
    "negative control: a canary byte written, a packet handler that throws and a victim that crashes are each reported as violations",
    () =>
      Effect.gen(function* () {
        const [canary] = yield* fuzz(FIXED_SEED, 2000, ["rpc-frames"], "canary")
        expect(canary?.counters.injected).toBe("canary")
        expect(canary?.violations.join("\n")).toMatch(
          /1 byte\(s\) of canary .*changed that no accepted write asked for/
        )
        const [thrown] = yield* fuzz(FIXED_SEED, 4000, ["softverbs"], "throw")
        expect(thrown?.counters.injected).toBe("throw")
        expect(thrown?.violations.join("\n")).toMatch(/the victim's NIC counted \d+ handler error/)
        const [crashed] = yield* fuzz(FIXED_SEED, 4000, ["notify-slots"], "crash")
        expect(crashed?.violations.join("\n")).toMatch(/the victim process exited \(70\): a crash/)
      }),
    90_000
  )
})
