/**
 * The "k of N frozen" figures of the scale bench (`bench/scale-frozen.ts`): each frozen set is read against the mean
 * of the two all-healthy sets around it, so a drift over the face (the peers warming up) weighs on both sides alike,
 * and a real slowdown of the frozen sets still shows.
 */
import { median } from "@tent/verbs/bench"
import { describe, expect, it } from "vitest"
import { faceFigures } from "../bench/scale-frozen.js"
import type { SetFigures } from "../bench/scale-measure.js"

const set = (msgsPerS: number, oneWayUs: number): SetFigures => ({ msgsPerS, oneWayUs, p90Us: 2 * oneWayUs })
/** Healthy sets rising 10 → 16 k msgs/s (and one-way falling) over a face: the peers warming up. */
const healthy = [set(10_000, 300), set(12_000, 280), set(14_000, 260), set(16_000, 240)]

describe("scale bench: the frozen faces' figures", () => {
  it("a steady drift over the face reads 1 ×, where the medians of each side read it as a loss", () => {
    // each frozen set halfway between the healthy sets around it
    const frozen = [set(11_000, 290), set(13_000, 270), set(15_000, 250)]
    const f = faceFigures(frozen, healthy)
    expect(f.frozen.msgsPerS / f.healthy.msgsPerS).toBeCloseTo(1, 10)
    expect(f.frozen.oneWayUs / f.healthy.oneWayUs).toBeCloseTo(1, 10)
    // the figure is a measured set beside the mean of the two measured sets around it
    expect(frozen.map((x) => x.msgsPerS)).toContain(f.frozen.msgsPerS)
    expect(f.healthy.msgsPerS).toBe(f.frozen.msgsPerS)
    // the medians of each side (of the four healthy sets, the upper of the middle two) read 13 ÷ 14
    const medians = median(frozen.map((x) => x.msgsPerS)) / median(healthy.map((x) => x.msgsPerS))
    expect(medians).toBeCloseTo(13 / 14, 10)
    expect(f.ratios).toBe("one-way 1.00 / 1.00 / 1.00, msgs/s 1.00 / 1.00 / 1.00")
  })

  it("frozen sets slower than the healthy ones around them read below 1 ×, whatever the drift", () => {
    const frozen = [set(5_500, 580), set(9_100, 405), set(7_500, 500)]
    const f = faceFigures(frozen, healthy)
    // ratios 0.5, 0.7, 0.5 for msgs/s: the median round is one at 0.5
    expect(f.frozen.msgsPerS / f.healthy.msgsPerS).toBeCloseTo(0.5, 10)
    // one-way ratios 2.0, 1.5, 2.0
    expect(f.frozen.oneWayUs / f.healthy.oneWayUs).toBeCloseTo(2, 10)
  })

  it("one outlying round does not set the figure", () => {
    const steady = [set(10_000, 300), set(10_000, 300), set(10_000, 300), set(10_000, 300)]
    const frozen = [set(10_000, 300), set(2_000, 3000), set(10_000, 300)]
    const f = faceFigures(frozen, steady)
    expect(f.frozen.msgsPerS / f.healthy.msgsPerS).toBe(1)
    expect(f.frozen.oneWayUs / f.healthy.oneWayUs).toBe(1)
  })
})
