import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import {
  DescriptorCache,
  InvalidEntry,
  NeedsRefreshCache,
  Registry,
  RpcAgent,
  type SegmentDesc,
  TransportFailure
} from "../src/index.js"
import { makeAgent, startServer } from "./helpers.js"

const seg = (name: string, addr: string): SegmentDesc => ({ name, rpc_server_addr: addr, devices: [], buffers: [] })
const down = (address: string) => new TransportFailure({ address, reason: "Refused", message: "down" })

/** A cache over an in-memory (central) registry with the given classifier. */
const cacheOver = (memory: Registry.MemoryRegistry, classifier = DescriptorCache.legacy) =>
  DescriptorCache.make().pipe(
    Effect.provideService(Registry.Registry, memory),
    Effect.provideService(DescriptorCache.StaleClassifier, classifier)
  )

/** What the later DescriptorPolicy does: a failed call is not stale under the peer registry. */
const policyLike: DescriptorCache.StaleClassifierShape = {
  classify: (e, registry) =>
    e instanceof NeedsRefreshCache || (e instanceof TransportFailure && registry.kind === "central") ? "stale" : "keep",
  rerun: (previous, fresh) => previous.rpc_server_addr !== fresh.rpc_server_addr,
  onRefetchFailure: "original"
}

describe("peer registry", () => {
  it.scopedLive("resolves a segment name (the peer's host:port) with GetSegmentDesc to that peer", () =>
    Effect.gen(function* () {
      const server = yield* startServer()
      const agent = yield* makeAgent({ request_timeout_ms: 2000 })
      const registry = yield* Registry.makePeer.pipe(Effect.provideService(RpcAgent.RpcAgent, agent))
      expect(registry.kind).toBe("peer")
      const desc = yield* registry.getSegmentDesc(server.address)
      expect(desc.rpc_server_addr).toBe(server.address)
      const error = yield* Effect.flip(registry.getSegmentDesc("127.0.0.1:1"))
      expect(error).toMatchObject({ _tag: "TransportFailure", reason: "Refused" })
    })
  )
})

describe("descriptor cache", () => {
  it.effect("keeps a descriptor for its lifetime (1 h) and fetches it again after", () =>
    Effect.gen(function* () {
      const memory = Registry.makeMemory([seg("s", "h:1")])
      const cache = yield* cacheOver(memory)
      yield* cache.get("s")
      yield* TestClock.adjust("59 minutes")
      yield* cache.get("s")
      expect(memory.lookups("s")).toBe(1)
      yield* TestClock.adjust("2 minutes")
      yield* cache.get("s")
      expect(memory.lookups("s")).toBe(2)
    })
  )

  it.effect("does not cache a failed lookup", () =>
    Effect.gen(function* () {
      const memory = Registry.makeMemory()
      const cache = yield* cacheOver(memory)
      expect(yield* Effect.flip(cache.get("s"))).toBeInstanceOf(InvalidEntry)
      yield* memory.putSegmentDesc(seg("s", "h:1"))
      expect((yield* cache.get("s")).rpc_server_addr).toBe("h:1")
    })
  )

  it.effect("legacy: a failed control-plane call drops the descriptor, refetches and runs the operation again", () =>
    Effect.gen(function* () {
      const memory = Registry.makeMemory([seg("s", "h:1")])
      const cache = yield* cacheOver(memory)
      let calls = 0
      const result = yield* cache.withSegment("s", (d) => {
        calls++
        return calls === 1 ? Effect.fail(down(d.rpc_server_addr)) : Effect.succeed(d.rpc_server_addr)
      })
      expect(result).toBe("h:1")
      expect(calls).toBe(2)
      expect(memory.lookups("s")).toBe(2)
    })
  )

  it.effect("legacy: stale twice becomes InvalidEntry (refetched but still invalid)", () =>
    Effect.gen(function* () {
      const memory = Registry.makeMemory([seg("s", "h:1")])
      const cache = yield* cacheOver(memory)
      const error = yield* Effect.flip(
        cache.withSegment("s", () => Effect.fail(new NeedsRefreshCache({ segment: "s", message: "rkey" })))
      )
      expect(error).toBeInstanceOf(InvalidEntry)
      expect(error.message).toContain("refetched from registry but still invalid")
    })
  )

  it.effect("legacy: a failed refetch reports the refetch's error instead of the operation's", () =>
    Effect.gen(function* () {
      const memory = Registry.makeMemory([seg("s", "h:1")])
      const cache = yield* cacheOver(memory)
      const error = yield* Effect.flip(
        cache.withSegment("s", (d) =>
          Effect.zipRight(memory.deleteSegmentDesc("s"), Effect.fail(down(d.rpc_server_addr)))
        )
      )
      expect(error).toBeInstanceOf(InvalidEntry)
    })
  )

  it.effect(
    "the classification is a seam: a classifier that keeps failures neither refetches nor reruns (legacy does)",
    () =>
      Effect.gen(function* () {
        for (const [classifier, lookups, calls] of [
          [DescriptorCache.legacy, 2, 2],
          [{ ...DescriptorCache.legacy, classify: () => "keep" as const }, 1, 1]
        ] as const) {
          const memory = Registry.makeMemory([seg("s", "h:1")])
          const cache = yield* cacheOver(memory, classifier)
          let n = 0
          const error = yield* Effect.flip(
            cache.withSegment("s", (d) => {
              n++
              return Effect.fail(down(d.rpc_server_addr))
            })
          )
          expect(memory.lookups("s")).toBe(lookups)
          expect(n).toBe(calls)
          expect(error._tag).toBe(lookups === 1 ? "TransportFailure" : "InvalidEntry")
        }
      })
  )

  it.effect("a central registry's new address for the same name: refetch once, rerun only if the address changed", () =>
    Effect.gen(function* () {
      const memory = Registry.makeMemory([seg("s", "h:1")])
      const cache = yield* cacheOver(memory, policyLike)
      const seen: Array<string> = []
      const op = (d: SegmentDesc) =>
        Effect.suspend(() => {
          seen.push(d.rpc_server_addr)
          return d.rpc_server_addr === "h:1" ? Effect.fail(down(d.rpc_server_addr)) : Effect.succeed(d.rpc_server_addr)
        })
      // unchanged address: the operation's own failure, no second call
      const error = yield* Effect.flip(cache.withSegment("s", op))
      expect(error).toBeInstanceOf(TransportFailure)
      expect(seen).toEqual(["h:1"])
      expect(memory.lookups("s")).toBe(2)
      // moved: the rerun goes to the new address
      yield* memory.putSegmentDesc(seg("s", "h:2"))
      yield* cache.invalidate("s")
      yield* memory.putSegmentDesc(seg("s", "h:1"))
      seen.length = 0
      const moved = cache.withSegment("s", (d) =>
        Effect.zipRight(d.rpc_server_addr === "h:1" ? memory.putSegmentDesc(seg("s", "h:2")) : Effect.void, op(d))
      )
      expect(yield* moved).toBe("h:2")
      expect(seen).toEqual(["h:1", "h:2"])
    })
  )
})
