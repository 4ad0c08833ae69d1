/**
 * The agent's reply timeouts (deadline queues behind one timer per connection) and its interruption of calls.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { ControlPlane, InvalidEntry, makeNotification, notificationText } from "../src/index.js"
import { besideTimer, eventually, makeAgent, startServer } from "./helpers.js"

/** A server whose `Notify` named `sleep` holds its reply for `msg` ms; counts handler interruptions. */
const sleepyServer = Effect.gen(function* () {
  const state = { interrupted: 0, started: 0 }
  const server = yield* startServer({}, () =>
    ControlPlane.toLayer({
      Bootstrap: (d) => Effect.succeed(d),
      Notify: (n) => {
        const { name, msg } = notificationText(n)
        if (name !== "sleep") return Effect.void
        return Effect.sync(() => void state.started++).pipe(
          Effect.zipRight(Effect.sleep(Number(msg))),
          Effect.onInterrupt(() => Effect.sync(() => void state.interrupted++))
        )
      },
      GetSegmentDesc: () => Effect.fail(new InvalidEntry({ segment: "", message: "none" })),
      Probe: () => Effect.void
    })
  )
  return { server, state }
})

const sleep = (ms: number) => makeNotification("sleep", String(ms))

describe("reply timeouts", () => {
  it.scopedLive("calls with different timeouts on one connection each time out at their own deadline", () =>
    Effect.gen(function* () {
      const { server, state } = yield* sleepyServer
      const agent = yield* makeAgent({ notify_timeout_ms: 5000 })
      // 500 ms apart, so that "before the next deadline" leaves a loaded machine room
      const timeouts = [1500, 500, 1000, 500, 1500]
      const nextDeadline = (ms: number) => Math.min(5000, ...timeouts.filter((t) => t > ms))
      const results = yield* Effect.forEach(
        timeouts,
        (ms) => besideTimer(ms, Effect.flip(agent.notify(server.address, sleep(10_000), { timeout: ms }))),
        { concurrency: "unbounded" }
      )
      results.forEach(({ value: error, took, late }, i) => {
        const ms = timeouts[i] as number
        expect(error).toMatchObject({ _tag: "TransportFailure", reason: "Timeout" })
        expect(error.message).toContain(`within ${ms} ms`)
        expect(took).toBeGreaterThanOrEqual(ms)
        // not at another call's deadline (nor at the agent's 5 s): it ends less than the gap to the next deadline
        // after a plain timer of its own timeout armed with it (which a loaded machine delays as much)
        expect(late).toBeLessThan(nextDeadline(ms) - ms)
      })
      // each abandoned call interrupted its handler on the server
      yield* eventually(() => state.interrupted >= timeouts.length)
      expect(state.interrupted).toBe(timeouts.length)
      // and the connection keeps serving
      yield* agent.notify(server.address, makeNotification("ok", ""))
      expect(yield* agent.connections).toEqual([server.address])
    })
  )

  it.scopedLive("a slow call after many quick ones times out at its own deadline, not earlier", () =>
    Effect.gen(function* () {
      const { server } = yield* sleepyServer
      const agent = yield* makeAgent({ notify_timeout_ms: 300 })
      // the first quick call armed the connection's timer for its deadline; the quick calls are long answered
      for (let i = 0; i < 200; i++) yield* agent.notify(server.address, makeNotification("ok", ""))
      yield* Effect.sleep(150)
      const {
        value: error,
        took,
        late
      } = yield* besideTimer(300, Effect.flip(agent.notify(server.address, sleep(5000))))
      expect(error).toMatchObject({ reason: "Timeout" })
      expect(took).toBeGreaterThanOrEqual(300)
      expect(late).toBeLessThan(300) // nor a whole period after a plain 300 ms timer armed with it
      // a call that answers in time is not timed out by the timer armed for others
      yield* agent.notify(server.address, sleep(100), { timeout: 250 })
    })
  )

  it.scopedLive("interrupting a call (the caller's own timeout) abandons it at the peer; a late reply is ignored", () =>
    Effect.gen(function* () {
      const { server, state } = yield* sleepyServer
      const agent = yield* makeAgent({ notify_timeout_ms: 5000 })
      const fiber = yield* Effect.fork(agent.notify(server.address, sleep(10_000)))
      expect(yield* eventually(() => state.started > 0)).toBe(true)
      yield* Fiber.interrupt(fiber)
      yield* eventually(() => state.interrupted > 0)
      expect(state.interrupted).toBe(1)

      // Effect.timeout around a call whose reply comes after the caller gave up
      const outcome = yield* agent
        .notify(server.address, sleep(100))
        .pipe(Effect.timeoutTo({ duration: "30 millis", onTimeout: () => "gave up", onSuccess: () => "answered" }))
      expect(outcome).toBe("gave up")
      yield* Effect.sleep(150)
      // the connection is intact and the next calls are answered
      yield* agent.notify(server.address, makeNotification("ok", ""))
      expect(yield* agent.connections).toEqual([server.address])
    })
  )

  it.scopedLive("calls made while the connection opens are sent once it is up", () =>
    Effect.gen(function* () {
      const { server } = yield* sleepyServer
      const agent = yield* makeAgent()
      const exits = yield* Effect.forEach(
        Array.from({ length: 50 }, (_, i) => i),
        () => Effect.exit(agent.notify(server.address, makeNotification("ok", ""))),
        { concurrency: "unbounded" }
      )
      expect(exits.every((e) => e._tag === "Success")).toBe(true)
      expect(yield* agent.connections).toEqual([server.address])
    })
  )
})
