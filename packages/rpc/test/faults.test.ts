import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { makeNotification, TransportFailure } from "../src/index.js"
import { READY_WITHIN_MS, spawnPeer } from "./fixtures/process.js"
import { besideTimer, makeAgent, timed } from "./helpers.js"

const note = makeNotification("n", Buffer.alloc(64, 1))

describe("killed peer (a real process, SIGKILL)", () => {
  it.scopedLive(
    "in-flight call fails Closed, a new one Refused, neither waiting for a timer; after a restart the next call succeeds",
    () =>
      Effect.gen(function* () {
        const peer = yield* spawnPeer()
        const { address, port } = peer.ready
        const agent = yield* makeAgent({
          notify_timeout_ms: 20_000,
          request_timeout_ms: 20_000,
          connect_timeout_ms: 20_000
        })
        yield* agent.probe(address)

        const inflight = yield* Effect.fork(
          timed(Effect.flip(agent.notify(address, makeNotification("sleep", "15000"))))
        )
        yield* Effect.sleep(200)
        peer.signal("SIGKILL")
        const [closed, closedMs] = yield* Fiber.join(inflight)
        expect(closed).toBeInstanceOf(TransportFailure)
        expect(closed).toMatchObject({ reason: "Closed", transportLevel: true, address })
        // The socket's close ends the call (not before the kill), not its 20 s timeout.
        expect(closedMs).toBeGreaterThanOrEqual(200)
        expect(closedMs).toBeLessThan(20_000)
        yield* Effect.promise(() => peer.exited)

        const [refused, refusedMs] = yield* timed(Effect.flip(agent.probe(address)))
        expect(refused).toMatchObject({ _tag: "TransportFailure", reason: "Refused", transportLevel: true })
        expect(refusedMs).toBeLessThan(20_000) // the kernel's refusal, not the 20 s connect timeout

        yield* spawnPeer(["--port", String(port)])
        // No reconnect backoff left over: the first call after the restart succeeds, well before its 20 s timeout.
        const [, againMs] = yield* timed(agent.notify(address, note))
        expect(againMs).toBeLessThan(20_000)
      }),
    // two peer starts (each up to READY_WITHIN_MS on a loaded machine) and the calls
    2 * READY_WITHIN_MS + 30_000
  )
})

describe("frozen peer (a real process, SIGSTOP)", () => {
  it.scopedLive(
    "the connect succeeds, the call fails Timeout at its own deadline (not earlier, nor at a later one); after SIGCONT the next call succeeds",
    () =>
      Effect.gen(function* () {
        const peer = yield* spawnPeer()
        const { address } = peer.ready
        // a long connect timeout: a Timeout at ~500 ms can only be the request's, so the connect succeeded
        const agent = yield* makeAgent({ notify_timeout_ms: 500, request_timeout_ms: 5000, connect_timeout_ms: 10_000 })
        peer.signal("SIGSTOP")
        yield* Effect.sleep(100)

        const call = yield* besideTimer(500, Effect.flip(agent.notify(address, note)))
        expect(call.value).toMatchObject({ _tag: "TransportFailure", reason: "Timeout", transportLevel: true })
        expect(call.value.message).toContain("no reply within 500 ms")
        expect(call.took).toBeGreaterThanOrEqual(499) // timers have 1 ms granularity
        // A deadline looked at only once per timeout period would fire up to a period late: the call ends less than
        // a period after a plain 500 ms timer armed with it (which a loaded machine delays as much).
        expect(call.late).toBeLessThan(500)

        // the same for a per-call timeout on another RPC: its own 300 ms, not the agent's 5 s for Probe
        const probe = yield* besideTimer(300, Effect.flip(agent.probe(address, { timeout: 300 })))
        expect(probe.value).toMatchObject({ reason: "Timeout" })
        expect(probe.value.message).toContain("no reply within 300 ms")
        expect(probe.took).toBeGreaterThanOrEqual(299)
        expect(probe.late).toBeLessThan(300)

        peer.signal("SIGCONT")
        yield* agent.notify(address, note)
        yield* agent.probe(address)
      }),
    READY_WITHIN_MS + 30_000
  )

  it.scopedLive(
    "a stream of calls to a frozen peer does not slow calls to a healthy peer",
    () =>
      Effect.gen(function* () {
        const [frozen, healthy] = yield* Effect.all([spawnPeer(), spawnPeer()], { concurrency: 2 })
        // A healthy call held behind the frozen peer's calls would wait for one of them to time out (2 s).
        const frozenTimeout = 2000
        const agent = yield* makeAgent({ notify_timeout_ms: frozenTimeout, request_timeout_ms: frozenTimeout })
        yield* agent.probe(frozen.ready.address)
        yield* agent.probe(healthy.ready.address)
        frozen.signal("SIGSTOP")

        const stream = yield* Effect.fork(
          Effect.forEach(Array.from({ length: 200 }), () => Effect.flip(agent.notify(frozen.ready.address, note)), {
            concurrency: 100
          })
        )
        yield* Effect.sleep(50)
        const latencies: Array<number> = []
        let overlapped = 0
        for (let i = 0; i < 200; i++) {
          const [, ms] = yield* timed(agent.notify(healthy.ready.address, note))
          latencies.push(ms)
          if (stream.unsafePoll() === null) overlapped++
        }
        const frozenErrors = yield* Fiber.join(stream)
        expect(frozenErrors.every((e) => e._tag === "TransportFailure" && e.reason === "Timeout")).toBe(true)
        // A healthy call held behind the frozen peer would end no sooner than a frozen call's timeout: every one ends
        // before that deadline (the rule; how fast a healthy call is on this machine is the bench's business).
        const sorted = [...latencies].sort((x, y) => x - y)
        const at = (q: number) => (sorted[Math.floor((sorted.length - 1) * q)] as number).toFixed(1)
        console.log(
          `healthy calls beside a frozen peer: p50 ${at(0.5)} ms, p90 ${at(0.9)} ms, max ${at(1)} ms (${overlapped} of 200 while its calls were pending)`
        )
        expect(Math.max(...latencies)).toBeLessThan(frozenTimeout)
        // The frozen peer's 200 calls (2 rounds of 2 s) were in flight during the healthy calls.
        expect(overlapped).toBeGreaterThanOrEqual(20)
      }),
    READY_WITHIN_MS + 30_000
  )
})
