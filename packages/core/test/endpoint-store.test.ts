/**
 * The endpoint store (TENT `tent_endpoint_store_test`, capacity 4, no device): SIEVE eviction against FIFO on the
 * same accesses, eviction retires into the reclaim list, `reclaim` and `clear`. The reclaim and clear cases run on
 * both policies, as TENT's parameterised suite does.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as EndpointStore from "../src/internal/EndpointStore.js"
import type { RdmaEndpoint } from "../src/internal/rdma/RdmaEndpoint.js"
import { bareEndpoint, makeHost, settings } from "./fixtures/endpoints.js"

/** `policy` undefined: the store's default. */
const withStore = <A, E>(
  policy: EndpointStore.EvictionPolicy | undefined,
  body: (store: EndpointStore.EndpointStore, make: (key: string) => RdmaEndpoint) => Effect.Effect<A, E>
) =>
  Effect.gen(function* () {
    const host = makeHost(yield* settings(), yield* Effect.clock)
    const store = new EndpointStore.EndpointStore(4, policy === undefined ? undefined : { policy })
    return yield* body(store, (key) => bareEndpoint(host, key))
  })

/** Runs `ops` ("+x" inserts or hits `x`) and returns the keys evicted, in order. */
const run = (store: EndpointStore.EndpointStore, make: (key: string) => RdmaEndpoint, ops: ReadonlyArray<string>) => {
  const byEp = new Map<RdmaEndpoint, string>()
  const evicted: Array<string> = []
  for (const key of ops) {
    const before = new Set(store.waiting)
    const ep = store.getOrInsert(key, () => make(key))
    byEp.set(ep, key)
    for (const w of store.waiting) if (!before.has(w)) evicted.push(byEp.get(w) ?? "?")
  }
  return evicted
}

const accesses = ["a@0", "b@0", "c@0", "d@0", "a@0", "e@0", "a@0", "d@0", "f@0", "g@0"]

describe("EndpointStore", () => {
  it.effect(
    "SIEVE keeps an endpoint hit since it was inserted and evicts an unvisited one (FIFO evicts the oldest)",
    () =>
      Effect.gen(function* () {
        // a b c d inserted; a hit; e inserted: SIEVE clears a's bit and evicts b, FIFO evicts a. Then a and d are
        // looked up (SIEVE: hits; FIFO: a is new again and evicts b), f and g inserted: SIEVE's hand goes on from c
        // (evicted), passes d (visited, cleared) and evicts e; FIFO evicts c and then d, which was just used.
        const sieve = yield* withStore("sieve", (store, make) => Effect.sync(() => run(store, make, accesses)))
        const fifo = yield* withStore("fifo", (store, make) => Effect.sync(() => run(store, make, accesses)))
        expect(sieve).toEqual(["b@0", "c@0", "e@0"])
        expect(fifo).toEqual(["a@0", "b@0", "c@0", "d@0"])
      })
  )

  it.effect("SIEVE's hand sweeps once round when every endpoint was hit, then goes on from where it stopped", () =>
    Effect.gen(function* () {
      const ops = ["a@0", "b@0", "c@0", "d@0", "a@0", "b@0", "c@0", "d@0", "e@0", "c@0", "f@0", "g@0"]
      const sieve = yield* withStore("sieve", (store, make) =>
        Effect.sync(() => ({ evicted: run(store, make, ops), active: [...store.active.keys()].sort() }))
      )
      const fifo = yield* withStore("fifo", (store, make) => Effect.sync(() => run(store, make, ops)))
      // e: all four visited → every bit cleared on one round, a evicted, the hand rests on b; c hit; f: b evicted;
      // g: the hand passes c (visited) and evicts d. FIFO evicts c, the endpoint just used.
      expect(sieve.evicted).toEqual(["a@0", "b@0", "d@0"])
      expect(sieve.active).toEqual(["c@0", "e@0", "f@0", "g@0"])
      expect(fifo).toEqual(["a@0", "b@0", "c@0"])
    })
  )

  it.effect("`get` counts as a use for SIEVE, a lookup in `active` does not", () =>
    withStore("sieve", (store, make) =>
      Effect.sync(() => {
        for (const k of ["a@0", "b@0", "c@0", "d@0"]) store.getOrInsert(k, () => make(k))
        expect(store.get("a@0")?.peerNicPath).toBe("a@0")
        expect(store.get("x@0")).toBeUndefined()
        expect(store.active.get("b@0")?.peerNicPath).toBe("b@0")
        store.getOrInsert("e@0", () => make("e@0"))
        expect([...store.active.keys()].sort()).toEqual(["a@0", "c@0", "d@0", "e@0"])
      })
    )
  )

  it.effect("with no policy given, the store evicts as SIEVE does (FIFO would evict other endpoints)", () =>
    Effect.gen(function* () {
      const byDefault = yield* withStore(undefined, (store, make) => Effect.sync(() => run(store, make, accesses)))
      expect(byDefault).toEqual(["b@0", "c@0", "e@0"])
    })
  )

  it.effect("an evicted endpoint is retired (DESTROYING), leaves `active` and waits in `waiting`", () =>
    withStore("sieve", (store, make) =>
      Effect.sync(() => {
        const eps = ["a@0", "b@0", "c@0", "d@0"].map((k) => store.getOrInsert(k, () => make(k)))
        const e = store.getOrInsert("e@0", () => make("e@0"))
        const victim = eps[0] as RdmaEndpoint
        expect(victim.status).toBe("DESTROYING")
        expect(store.waiting.has(victim)).toBe(true)
        expect(store.active.has("a@0")).toBe(false)
        expect(store.active.get("e@0")).toBe(e)
        expect(store.size).toBe(4)
        expect(store.evictions).toBe(1)
        // A later lookup of the evicted key gets a new endpoint (endpoints are never reused).
        const again = store.getOrInsert("a@0", () => make("a@0"))
        expect(again).not.toBe(victim)
        expect(again.status).toBe("UNINIT")
      })
    )
  )

  it.effect("a retiring endpoint found by lookup is replaced and handed to reclaim", () =>
    withStore("sieve", (store, make) =>
      Effect.gen(function* () {
        const first = store.getOrInsert("a@0", () => make("a@0"))
        yield* first.retire
        const second = store.getOrInsert("a@0", () => make("a@0"))
        expect(second).not.toBe(first)
        expect(store.waiting.has(first)).toBe(true)
        expect(store.active.get("a@0")).toBe(second)
        expect(store.evictions).toBe(0)
      })
    )
  )

  for (const policy of ["fifo", "sieve"] as const) {
    describe(policy, () => {
      it.effect("ReclaimDrainsQuiescentEntries", () =>
        withStore(policy, (store, make) =>
          Effect.gen(function* () {
            const eps = Array.from({ length: 10 }, (_, i) => make(`p${i}@0`))
            for (const ep of eps) store.remove(ep)
            expect(store.waiting.size).toBe(10)
            expect(eps.every((ep) => ep.status === "DESTROYING")).toBe(true)
            yield* store.reclaim
            expect(store.waiting.size).toBe(0)
            expect(eps.every((ep) => ep.status === "DESTROYED")).toBe(true)
          })
        )
      )

      it.effect("ReclaimIsIdempotentWhenEmpty", () =>
        withStore(policy, (store, make) =>
          Effect.gen(function* () {
            yield* store.reclaim
            expect(store.waiting.size).toBe(0)
            const ep = make("p@0")
            store.remove(ep)
            yield* store.reclaim
            expect(store.waiting.size).toBe(0)
            yield* store.reclaim
            expect(store.waiting.size).toBe(0)
            expect(ep.status).toBe("DESTROYED")
          })
        )
      )

      it.effect("ReclaimDrainsBacklogWithoutActiveMapEntries", () =>
        withStore(policy, (store, make) =>
          Effect.gen(function* () {
            for (let i = 0; i < 1000; i++) store.remove(make(`p${i}@0`))
            expect(store.size).toBe(0)
            expect(store.active.size).toBe(0)
            expect(store.waiting.size).toBe(1000)
            yield* store.reclaim
            expect(store.waiting.size).toBe(0)
          })
        )
      )

      it.effect("reclaim drains evicted endpoints and leaves the live ones alone", () =>
        withStore(policy, (store, make) =>
          Effect.gen(function* () {
            for (let i = 0; i < 10; i++) store.getOrInsert(`p${i}@0`, () => make(`p${i}@0`))
            expect(store.evictions).toBe(6)
            expect(store.waiting.size).toBe(6)
            const waiting = [...store.waiting]
            yield* store.reclaim
            expect(store.waiting.size).toBe(0)
            expect(waiting.every((ep) => ep.status === "DESTROYED")).toBe(true)
            expect([...store.active.values()].every((ep) => ep.status === "UNINIT")).toBe(true)
            expect(store.size).toBe(4)
          })
        )
      )

      it.effect("ClearDeconstructsExternallyOwnedWaitingEndpoint (and the live ones)", () =>
        withStore(policy, (store, make) =>
          Effect.gen(function* () {
            const waiting = make("w@0")
            store.remove(waiting)
            const live = ["a@0", "b@0"].map((k) => store.getOrInsert(k, () => make(k)))
            yield* store.clear
            expect(store.waiting.size).toBe(0)
            expect(store.active.size).toBe(0)
            expect(store.size).toBe(0)
            expect(waiting.status).toBe("DESTROYED")
            expect(live.map((ep) => ep.status)).toEqual(["DESTROYED", "DESTROYED"])
            // The store works again after clear.
            const next = store.getOrInsert("a@0", () => make("a@0"))
            expect(next.status).toBe("UNINIT")
            expect(store.size).toBe(1)
          })
        )
      )
    })
  }
})
