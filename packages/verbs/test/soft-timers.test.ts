import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { ackTimeoutMs, QpState, WcStatus } from "../src/index.js"
import { makePair, pollN, sendWr } from "./support.js"

/** Busy-waits `ms` of real time: the event loop is blocked, as a busy process blocks it. */
const spin = (ms: number): void => {
  const until = performance.now() + ms
  while (performance.now() < until) {
    // blocked on purpose
  }
}

/**
 * Blocks the event loop `blockMs` out of every `blockMs + gapMs` until stopped (at most `maxMs` in all), and measures
 * the lag the loop actually shows: a 1 ms ticker sums how much later than due each tick ran (only stalls of more
 * than 2 ms count, so timer jitter does not inflate it). The lag counts the blocks and any time the OS took the CPU.
 */
const loadTheLoop = (blockMs: number, gapMs: number, maxMs: number) => {
  const start = performance.now()
  let stopped = false
  let blocks = 0
  let lagMs = 0
  let last = performance.now()
  const tick = () => {
    const t = performance.now()
    const late = t - last - 1
    if (late > 2) lagMs += late
    last = t
    if (!stopped) setTimeout(tick, 1)
  }
  const block = () => {
    if (stopped || performance.now() - start > maxMs) return
    blocks++
    spin(blockMs)
    setTimeout(block, gapMs)
  }
  setTimeout(tick, 1)
  setTimeout(block, 0)
  return {
    stop: () => {
      stopped = true
    },
    get blocks() {
      return blocks
    },
    get lagMs() {
      return lagMs
    }
  }
}

describe("SoftVerbs retransmit timer under event-loop lag (rule 3)", () => {
  it.scopedLive(
    "a dead peer is detected within the retry budget plus the lag the loop showed, on a loop blocked 120 ms of every 130",
    () =>
      Effect.gen(function* () {
        // timeout 14 (67.1 ms), retry_cnt 3: the budget is 4 timeouts. Each block outlasts what is left of a timeout
        // armed in the gap before it, so every retry timer fires late, by more than half a timeout.
        const timeout = 14
        const retryCnt = 3
        const T = ackTimeoutMs(timeout)
        const budget = (retryCnt + 1) * T
        const { a, b } = yield* makePair({ params: { timeout, retryCnt } })
        b.device.setFaults({ dropIn: 1 })
        const load = loadTheLoop(120, 10, 8000)
        yield* Effect.addFinalizer(() => Effect.sync(load.stop))
        const start = performance.now()
        a.qp.postSend(sendWr(a, 1, 0, 16))
        const wcs = yield* pollN(a.cq, 1, 9000)
        const elapsed = performance.now() - start
        load.stop()
        console.log(
          `dead peer detected after ${elapsed.toFixed(0)} ms: budget ${budget.toFixed(0)} ms, loop lag ${load.lagMs.toFixed(0)} ms over ${load.blocks} blocks; retransmits ${a.device.counters.retransmits}`
        )
        expect(wcs.map((w) => w.status)).toEqual([WcStatus.RETRY_EXC_ERR])
        expect(a.qp.state).toBe(QpState.ERR)
        expect(a.device.counters.retransmits).toBe(retryCnt)
        // Never before the budget: each retry waits a whole timeout after its transmission.
        expect(elapsed).toBeGreaterThanOrEqual(budget - 2)
        // No later than the budget plus the lag the loop showed (a late timer still counts its retry), with 10 ms per
        // timeout for the ticks and the turn a retry waits for incoming ACKs, and 100 ms for the machine.
        expect(elapsed).toBeLessThanOrEqual(budget + load.lagMs + 10 * (retryCnt + 1) + 100)
      })
  )
})
