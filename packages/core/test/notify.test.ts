/**
 * The notify path between two real processes, two SoftVerbs devices each: this process runs one engine, a child
 * process the other (fixtures/engine-peer.ts).
 */
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, NotificationTooLarge } from "@tent/rpc"
import { Effect } from "effect"
import { payload } from "./fixtures/engine.js"
import type { Peer } from "./fixtures/pair.js"
import * as Pair from "./fixtures/pair.js"

interface Check {
  readonly count: number
  readonly distinct: number
  readonly outOfOrder: number
  readonly corrupt: number
  readonly duplicates: number
}

const withEngines = <A, E>(
  body: (engine: Pair.TestEngine, peer: Peer) => Effect.Effect<A, E>,
  json: unknown = {},
  peerJson: unknown = {}
) => Pair.withEngines({ json, peerJson }, body)
const { request } = Pair

describe("notifications over the notify QP (two processes)", () => {
  it.live(
    "2000 standalone notifications arrive in order and byte-exact, empty and full-slot ones included",
    () =>
      withEngines((engine, peer) =>
        Effect.gen(function* () {
          for (let i = 0; i < 2000; i++) yield* engine.sendNotification(peer.ready.segment, payload("s", i))
          let got: Check = { count: 0, distinct: 0, outOfOrder: 0, corrupt: 0, duplicates: 0 }
          const deadline = Date.now() + 20_000
          while (got.count < 2000 && Date.now() < deadline) {
            yield* Effect.sleep("50 millis")
            got = yield* request<Check>(peer, { cmd: "received", prefix: "s" })
          }
          expect(got).toEqual({ count: 2000, distinct: 2000, outOfOrder: 0, corrupt: 0, duplicates: 0 })
          expect(engine.rdma?.counters.sent).toBe(2000)
          // One slot is 65 536 bytes: 8 bytes of lengths + 65 528 of name and message. One byte more is a typed error.
          const tooBig = makeNotification("x", new Uint8Array(65528))
          const err = yield* Effect.flip(engine.sendNotification(peer.ready.segment, tooBig))
          expect(err).toBeInstanceOf(NotificationTooLarge)
          expect(err).toMatchObject({ size: 65529, max: 65528 })
          const fits = makeNotification("x", new Uint8Array(65527))
          yield* engine.sendNotification(peer.ready.segment, fits)
        })
      ),
    Pair.testTimeout()
  )

  it.live(
    "the peer's notifications arrive in this engine's stream, in order",
    () =>
      withEngines((engine, peer) =>
        Effect.gen(function* () {
          const reply = yield* request<{ failed: number }>(peer, {
            cmd: "send",
            target: engine.segmentName,
            prefix: "p",
            count: 500
          })
          expect(reply.failed).toBe(0)
          const received: Array<import("@tent/rpc").Notification> = []
          const { Stream } = yield* Effect.promise(() => import("effect"))
          yield* engine.notifications.pipe(
            Stream.take(500),
            Stream.runForEach((n) => Effect.sync(() => received.push(n))),
            Effect.timeout("20 seconds")
          )
          const { check } = yield* Effect.promise(() => import("./fixtures/engine.js"))
          expect(check("p", received)).toEqual({ count: 500, distinct: 500, outOfOrder: 0, corrupt: 0, duplicates: 0 })
        })
      ),
    Pair.testTimeout()
  )
})
