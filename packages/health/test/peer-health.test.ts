/**
 * RFC PR 4's `PeerHealth`: the cooldown and its doubling, clearing by any reply, the prober, forgetting old entries,
 * the `peer_health/*` keys, and the record as `RpcAgent.decorate`'s guard. Time is `TestClock`'s throughout.
 */
import { describe, expect, it } from "@effect/vitest"
import { RpcAgent, TransportFailure } from "@tent/rpc"
import { Chunk, ConfigProvider, Deferred, Duration, Effect, Either, Fiber, Layer, TestClock } from "effect"
import { PeerHealth } from "../src/index.js"

const ms = (n: number) => Duration.millis(n)

const failure = (address: string) =>
  new TransportFailure({ address, reason: "Timeout", message: "no reply within 2000 ms" })

/** A probe that calls `count` and answers when `answers()` says so; otherwise it fails as a dead peer does. */
const countingProbe =
  (count: () => void, answers: () => boolean = () => false) =>
  (address: string): Effect.Effect<void, TransportFailure> =>
    Effect.suspend(() => {
      count()
      return answers() ? Effect.void : Effect.fail(failure(address))
    })

/** Runs `f` against a fresh record built by `layer` (the RFC's defaults unless given). */
const withPeers = <A, E>(
  f: (peers: PeerHealth.PeerHealthShape) => Effect.Effect<A, E>,
  layer: Layer.Layer<PeerHealth.PeerHealth, unknown> = PeerHealth.layer()
) => Effect.flatMap(PeerHealth.PeerHealth, f).pipe(Effect.provide(layer))

/** `admit`'s refusal, or undefined when it lets the call through. */
const refusal = (peers: PeerHealth.PeerHealthShape, address: string) =>
  Effect.map(Effect.either(peers.admit(address)), (e) => (Either.isLeft(e) ? e.left : undefined))

/** The cooldown a refusal names, or undefined when `admit` lets the call through. */
const cooldownOf = (peers: PeerHealth.PeerHealthShape, address: string) =>
  Effect.map(refusal(peers, address), (f) => {
    if (f === undefined) return undefined
    const m = /cooldown (\d+) ms/.exec(f.message)
    return m === null ? f.message : Number(m[1])
  })

describe("PeerHealth: marks and cooldowns", () => {
  it("has the RFC's defaults: 5 s cooldown doubling to 60 s, probe every 1 s, forget after 600 s", () => {
    expect(PeerHealth.defaults).toEqual({
      cooldownMs: 5000,
      maxCooldownMs: 60000,
      probeIntervalMs: 1000,
      maxAgeMs: 600000
    })
  })

  it.effect(
    "a transport failure marks the peer for 5 s: admit fails fast, naming PeerHealth; at 5 s it lets through",
    () =>
      withPeers((peers) =>
        Effect.gen(function* () {
          expect(yield* refusal(peers, "a:1")).toBeUndefined()
          yield* peers.record("a:1", failure("a:1"))
          const first = yield* refusal(peers, "a:1")
          expect(first).toBeInstanceOf(TransportFailure)
          expect(first).toMatchObject({
            _tag: "TransportFailure",
            address: "a:1",
            reason: "Timeout",
            transportLevel: true
          })
          expect(first?.message).toBe(
            "peer marked unreachable by PeerHealth 0 ms ago after Timeout (no reply within 2000 ms); " +
              "failing fast for 5000 ms more (cooldown 5000 ms)"
          )
          expect(yield* refusal(peers, "b:1")).toBeUndefined() // peers are independent
          // the same answer read synchronously, counting nothing (the notify slot wait asks it)
          expect([peers.unreachable("a:1"), peers.unreachable("b:1")]).toEqual([true, false])
          yield* TestClock.adjust(ms(4999))
          expect(peers.unreachable("a:1")).toBe(true)
          expect((yield* refusal(peers, "a:1"))?.message).toMatch(/PeerHealth 4999 ms ago .* for 1 ms more/)
          expect(yield* peers.snapshot).toMatchObject({ marked: 1, marks: 1, fastFailures: 2, clears: 0 })
          yield* TestClock.adjust(ms(1))
          expect(peers.unreachable("a:1")).toBe(false)
          expect(yield* refusal(peers, "a:1")).toBeUndefined()
          // let through, but still marked until a reply: the prober keeps probing it
          expect(yield* peers.markedPeers).toEqual(["a:1"])
          expect(yield* peers.snapshot).toMatchObject({ marked: 1, fastFailures: 2 })
        })
      )
  )

  it.effect("each failure at the re-check doubles the cooldown: 5, 10, 20, 40 s, then 60 s (the cap)", () =>
    withPeers((peers) =>
      Effect.gen(function* () {
        for (const c of [5000, 10000, 20000, 40000, 60000, 60000]) {
          yield* peers.record("a:1", failure("a:1"))
          expect(yield* cooldownOf(peers, "a:1")).toBe(c)
          yield* TestClock.adjust(ms(c - 1))
          expect(yield* cooldownOf(peers, "a:1")).toBe(c)
          yield* TestClock.adjust(ms(1))
          expect(yield* cooldownOf(peers, "a:1")).toBeUndefined()
        }
      })
    )
  )

  it.effect("a failure while marked doubles the cooldown and restarts it from that failure", () =>
    withPeers((peers) =>
      Effect.gen(function* () {
        yield* peers.record("a:1", failure("a:1"))
        yield* TestClock.adjust(ms(1000))
        yield* peers.record("a:1", failure("a:1"))
        expect((yield* refusal(peers, "a:1"))?.message).toMatch(/0 ms ago .* for 10000 ms more \(cooldown 10000 ms\)/)
      })
    )
  )

  it.effect(
    "backoff memory lasts one cooldown's length after the cooldown ran out: 10 s doubles, 10.001 s does not",
    () =>
      Effect.gen(function* () {
        for (const [at, expected] of [
          [10_000, 10_000],
          [10_001, 5_000]
        ] as const) {
          const seen = yield* withPeers((peers) =>
            Effect.gen(function* () {
              yield* peers.record("a:1", failure("a:1"))
              yield* TestClock.adjust(ms(at))
              yield* peers.record("a:1", failure("a:1"))
              return yield* cooldownOf(peers, "a:1")
            })
          )
          expect({ at, cooldown: seen }).toEqual({ at, cooldown: expected })
        }
      })
  )

  it.effect("a reply clears the mark at once and resets the backoff: the next failure is 5 s again", () =>
    withPeers((peers) =>
      Effect.gen(function* () {
        yield* peers.record("a:1", undefined) // a reply from a peer never marked changes nothing
        expect(yield* peers.snapshot).toMatchObject({ marked: 0, clears: 0 })
        yield* peers.record("a:1", failure("a:1"))
        yield* peers.record("a:1", failure("a:1"))
        yield* peers.record("a:1", failure("a:1"))
        expect(yield* cooldownOf(peers, "a:1")).toBe(20000)
        yield* peers.record("a:1", undefined)
        expect(yield* refusal(peers, "a:1")).toBeUndefined()
        expect(yield* peers.markedPeers).toEqual([])
        expect(yield* peers.snapshot).toMatchObject({ marked: 0, marks: 3, clears: 1 })
        yield* peers.record("a:1", failure("a:1"))
        expect(yield* cooldownOf(peers, "a:1")).toBe(5000)
      })
    )
  )

  it.effect("layer options override the defaults (cooldown 100 ms, cap 250 ms)", () =>
    withPeers(
      (peers) =>
        Effect.gen(function* () {
          const seen: Array<number | string | undefined> = []
          for (let i = 0; i < 4; i++) {
            yield* peers.record("a:1", failure("a:1"))
            seen.push(yield* cooldownOf(peers, "a:1"))
          }
          expect(seen).toEqual([100, 200, 250, 250])
        }),
      PeerHealth.layer({ cooldownMs: 100, maxCooldownMs: 250 })
    )
  )

  it.effect("negative control: layerLegacy never refuses a call", () =>
    withPeers(
      (peers) =>
        Effect.gen(function* () {
          yield* peers.record("a:1", failure("a:1"))
          expect(yield* refusal(peers, "a:1")).toBeUndefined()
          expect(yield* peers.markedPeers).toEqual([])
        }),
      PeerHealth.layerLegacy
    )
  )
})

describe("PeerHealth: forgetting entries after peer_health/max_age_ms", () => {
  it.effect("an entry nobody asked about for 600 s is forgotten, with its backoff memory", () =>
    withPeers((peers) =>
      Effect.gen(function* () {
        yield* peers.record("a:1", failure("a:1"))
        yield* TestClock.adjust(ms(599_999))
        expect(yield* peers.markedPeers).toEqual(["a:1"])
        yield* TestClock.adjust(ms(1))
        expect(yield* peers.markedPeers).toEqual([])
        expect(yield* peers.snapshot).toMatchObject({ marked: 0, marks: 1, clears: 0 })
      })
    )
  )

  it.effect("admit keeps an entry alive: the age counts from the last admit or record", () =>
    withPeers((peers) =>
      Effect.gen(function* () {
        yield* peers.record("a:1", failure("a:1"))
        yield* TestClock.adjust(ms(300_000))
        expect(yield* refusal(peers, "a:1")).toBeUndefined()
        yield* TestClock.adjust(ms(599_999))
        expect(yield* peers.markedPeers).toEqual(["a:1"])
        yield* TestClock.adjust(ms(1))
        expect(yield* peers.markedPeers).toEqual([])
      })
    )
  )

  it.effect("checked on access: admit forgets an old entry even inside its cooldown (max age 3 s < cooldown 5 s)", () =>
    withPeers(
      (peers) =>
        Effect.gen(function* () {
          yield* peers.record("a:1", failure("a:1"))
          yield* TestClock.adjust(ms(3001))
          // 3.001 s old, untouched since: forgotten, though its 5 s cooldown would still run
          expect(yield* refusal(peers, "a:1")).toBeUndefined()
          yield* peers.record("a:1", failure("a:1"))
          expect(yield* cooldownOf(peers, "a:1")).toBe(5000) // no backoff memory left
        }),
      PeerHealth.layer({ maxAgeMs: 3000 })
    )
  )

  it.effect("the prober's failures do not keep a peer nobody calls: it is forgotten and no longer probed", () =>
    withPeers(
      (peers) =>
        Effect.scoped(
          Effect.gen(function* () {
            let probes = 0
            yield* peers.record("a:1", failure("a:1"))
            yield* Effect.forkScoped(peers.runProber(countingProbe(() => probes++)))
            yield* TestClock.adjust(ms(9000))
            expect(probes).toBe(9)
            expect(yield* peers.markedPeers).toEqual(["a:1"])
            yield* TestClock.adjust(ms(1000)) // the round at 10 s forgets it before probing
            yield* TestClock.adjust(ms(5000))
            expect(probes).toBe(9)
            expect(yield* peers.snapshot).toMatchObject({ marked: 0, probes: 9, probeFailures: 9 })
          })
        ),
      PeerHealth.layer({ maxAgeMs: 10_000 })
    )
  )
})

describe("PeerHealth: the prober", () => {
  it.effect("probeRound probes only marked peers: an answer clears one, a failure re-marks the other (doubling)", () =>
    withPeers((peers) =>
      Effect.gen(function* () {
        const probed: Array<string> = []
        yield* peers.record("up:1", failure("up:1"))
        yield* peers.record("down:1", failure("down:1"))
        yield* peers.record("cleared:1", failure("cleared:1"))
        yield* peers.record("cleared:1", undefined)
        yield* peers.record("fine:1", undefined)
        yield* TestClock.adjust(ms(1000))
        yield* peers.probeRound((a) =>
          Effect.suspend(() => {
            probed.push(a)
            return a === "up:1" ? Effect.void : Effect.fail(failure(a))
          })
        )
        expect(probed.sort()).toEqual(["down:1", "up:1"])
        expect(yield* refusal(peers, "up:1")).toBeUndefined()
        expect(yield* peers.markedPeers).toEqual(["down:1"])
        expect(yield* cooldownOf(peers, "down:1")).toBe(10000)
        expect(yield* peers.snapshot).toMatchObject({
          marked: 1,
          probes: 2,
          probeSuccesses: 1,
          probeFailures: 1,
          marks: 4, // three by calls, one by the failed probe
          clears: 2
        })
      })
    )
  )

  it.effect("probeRound never fails: a probe that dies is counted as a failure and leaves the mark as it was", () =>
    withPeers((peers) =>
      Effect.gen(function* () {
        yield* peers.record("a:1", failure("a:1"))
        yield* peers.probeRound(() => Effect.die("bug in the probe"))
        expect(yield* peers.markedPeers).toEqual(["a:1"])
        expect(yield* cooldownOf(peers, "a:1")).toBe(5000)
        expect(yield* peers.snapshot).toMatchObject({ probes: 1, probeFailures: 1, probeSuccesses: 0 })
      })
    )
  )

  for (const limit of [undefined, 2] as const) {
    const expected = limit ?? 4
    it.effect(`probeRound runs at most ${expected} probes at once (concurrency ${limit ?? "default"})`, () =>
      withPeers((peers) =>
        Effect.gen(function* () {
          const gate = yield* Deferred.make<void>()
          const full = yield* Deferred.make<void>()
          let active = 0
          let most = 0
          let started = 0
          const probe = (_: string) =>
            Effect.gen(function* () {
              started++
              active++
              most = Math.max(most, active)
              if (active === expected) yield* Deferred.succeed(full, undefined)
              yield* Deferred.await(gate)
              active--
            })
          for (let i = 0; i < 10; i++) yield* peers.record(`p${i}:1`, failure(`p${i}:1`))
          const round = yield* Effect.fork(peers.probeRound(probe, limit))
          yield* Deferred.await(full)
          for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
          expect(started).toBe(expected)
          yield* Deferred.succeed(gate, undefined)
          yield* Fiber.join(round)
          expect({ started, most }).toEqual({ started: 10, most: expected })
          expect(yield* peers.markedPeers).toEqual([])
        })
      )
    )
  }

  it.effect("runProber, forked in a scope, probes every marked peer each interval and stops with the scope", () =>
    withPeers((peers) =>
      Effect.gen(function* () {
        let probes = 0
        let answer = false
        const probe = countingProbe(
          () => probes++,
          () => answer
        )
        yield* peers.record("a:1", failure("a:1"))
        yield* Effect.scoped(
          Effect.gen(function* () {
            yield* Effect.forkScoped(peers.runProber(probe))
            yield* TestClock.adjust(ms(999))
            expect(probes).toBe(0)
            yield* TestClock.adjust(ms(1))
            expect(probes).toBe(1)
            yield* TestClock.adjust(ms(1000))
            expect(probes).toBe(2)
            expect(yield* cooldownOf(peers, "a:1")).toBe(20000) // 5 s, doubled by each failed probe
            answer = true
            yield* TestClock.adjust(ms(1000))
            expect(probes).toBe(3)
            expect(yield* refusal(peers, "a:1")).toBeUndefined()
            yield* TestClock.adjust(ms(3000))
            expect(probes).toBe(3) // nothing marked, nothing probed
            yield* peers.record("a:1", failure("a:1"))
            yield* TestClock.adjust(ms(1000))
            expect(probes).toBe(4)
            yield* peers.record("a:1", failure("a:1"))
          })
        )
        yield* TestClock.adjust(ms(5000))
        expect(probes).toBe(4)
      })
    )
  )

  it.effect(
    "runProber holds no timer while no peer is marked: a mark wakes it, its first round an interval later",
    () =>
      withPeers((peers) =>
        Effect.scoped(
          Effect.gen(function* () {
            let probes = 0
            yield* Effect.forkScoped(peers.runProber(countingProbe(() => probes++)))
            yield* TestClock.adjust(ms(5000))
            // parked on the marks, not sleeping: an idle engine's prober wakes for nothing (red: one sleep pending)
            expect(Chunk.size(yield* TestClock.sleeps())).toBe(0)
            yield* TestClock.adjust(ms(500))
            yield* peers.record("a:1", failure("a:1"))
            yield* Effect.yieldNow()
            expect(Chunk.size(yield* TestClock.sleeps())).toBe(1)
            yield* TestClock.adjust(ms(999))
            expect(probes).toBe(0)
            yield* TestClock.adjust(ms(1))
            expect(probes).toBe(1)
            // the probe failed: still marked, the prober goes on
            expect(Chunk.size(yield* TestClock.sleeps())).toBe(1)
          })
        )
      )
  )

  it.effect("runProber takes its interval from the options, or from its argument", () =>
    withPeers(
      (peers) =>
        Effect.scoped(
          Effect.gen(function* () {
            const seen = { configured: 0, given: 0 }
            yield* peers.record("a:1", failure("a:1"))
            yield* Effect.forkScoped(peers.runProber(countingProbe(() => seen.configured++)))
            yield* Effect.forkScoped(
              peers.runProber(
                countingProbe(() => seen.given++),
                500
              )
            )
            yield* TestClock.adjust(ms(3000))
            expect(seen).toEqual({ configured: 1, given: 6 })
          })
        ),
      PeerHealth.layer({ probeIntervalMs: 3000 })
    )
  )
})

describe("PeerHealth as RpcAgent.decorate's guard", () => {
  /** An agent whose every call counts itself and ends as `next` says; nothing goes on a wire. */
  const stubAgent = () => {
    const state = { sent: 0, next: Effect.void as Effect.Effect<void, TransportFailure> }
    const send = Effect.suspend(() => {
      state.sent++
      return state.next
    })
    const agent: RpcAgent.RpcAgentShape = {
      call: (() => send) as unknown as RpcAgent.RpcAgentShape["call"],
      bootstrap: (_, desc) => Effect.as(send, desc),
      notify: () => send,
      getSegmentDesc: () => Effect.die("not used"),
      probe: () => send,
      sendData: () => send,
      recvData: () => Effect.as(send, new Uint8Array(0)),
      disconnect: () => Effect.void,
      connections: Effect.succeed([])
    }
    return { state, agent }
  }

  /** A failed call, a second call, then calls after the cooldown: what each returned and how many were sent. */
  const scenario = (health: PeerHealth.PeerHealthShape) =>
    Effect.gen(function* () {
      const { state, agent } = stubAgent()
      const guarded = RpcAgent.decorate(agent, PeerHealth.guard(health))
      const outcome = (e: Either.Either<void, TransportFailure>) =>
        Either.isRight(e) ? "ok" : /PeerHealth/.test(e.left.message) ? "fast" : "sent"
      const seen: Array<[string, number]> = []
      const call = Effect.gen(function* () {
        const result = yield* Effect.either(guarded.probe("peer:1"))
        seen.push([outcome(result), state.sent])
      })
      state.next = Effect.fail(failure("peer:1"))
      yield* call
      yield* call
      yield* TestClock.adjust(ms(5000))
      state.next = Effect.void
      yield* call
      yield* call
      return seen
    })

  it.effect("after a TransportFailure the second call fails fast without being sent; after a success calls pass", () =>
    withPeers((health) =>
      Effect.gen(function* () {
        // the shape is a CallGuard as it is
        const asGuard: RpcAgent.CallGuard = health
        expect(typeof asGuard.admit).toBe("function")
        expect(yield* scenario(health)).toEqual([
          ["sent", 1],
          ["fast", 1],
          ["ok", 2],
          ["ok", 3]
        ])
        expect(yield* health.snapshot).toMatchObject({ marked: 0, marks: 1, clears: 1, fastFailures: 1 })
      })
    )
  )

  it.effect("negative control: with layerLegacy the second call is sent and waits out its own failure", () =>
    withPeers(
      (health) =>
        Effect.gen(function* () {
          expect(yield* scenario(health)).toEqual([
            ["sent", 1],
            ["sent", 2],
            ["ok", 3],
            ["ok", 4]
          ])
        }),
      PeerHealth.layerLegacy
    )
  )
})

describe("PeerHealth: config keys peer_health/*", () => {
  const readConfig = (provider: ConfigProvider.ConfigProvider) =>
    PeerHealth.config.pipe(Effect.withConfigProvider(provider), Effect.either)

  it("declares its four keys (peer_health/enable is core's), each a positive integer with a description", () => {
    expect(Object.keys(PeerHealth.keys).sort()).toEqual([
      "peer_health/cooldown_ms",
      "peer_health/max_age_ms",
      "peer_health/max_cooldown_ms",
      "peer_health/probe_interval_ms"
    ])
    for (const spec of Object.values(PeerHealth.keys)) {
      expect(spec.kind).toBe("int")
      expect(spec.description.length).toBeGreaterThan(10)
      expect([spec.valid.check(0), spec.valid.check(1)]).toEqual([false, true])
    }
  })

  it.effect("absent keys take the RFC's defaults", () =>
    Effect.gen(function* () {
      expect(yield* readConfig(ConfigProvider.fromJson({}))).toEqual(Either.right(PeerHealth.defaults))
      expect(yield* readConfig(ConfigProvider.fromJson({ peer_health: { enable: false } }))).toEqual(
        Either.right(PeerHealth.defaults)
      )
    })
  )

  it.effect("nested JSON keys and flat peer_health/* keys (path delimiter /) are read", () =>
    Effect.gen(function* () {
      const json = { peer_health: { cooldown_ms: 100, max_cooldown_ms: 800, probe_interval_ms: 50, max_age_ms: 9000 } }
      expect(yield* readConfig(ConfigProvider.fromJson(json))).toEqual(
        Either.right({ cooldownMs: 100, maxCooldownMs: 800, probeIntervalMs: 50, maxAgeMs: 9000 })
      )
      const flat = ConfigProvider.fromMap(new Map([["peer_health/max_age_ms", "1234"]]), { pathDelim: "/" })
      expect(yield* readConfig(flat)).toEqual(Either.right({ ...PeerHealth.defaults, maxAgeMs: 1234 }))
    })
  )

  it.effect("layerConfig applies the keys to the rules", () =>
    withPeers(
      (peers) =>
        Effect.gen(function* () {
          yield* peers.record("a:1", failure("a:1"))
          yield* peers.record("a:1", failure("a:1"))
          yield* peers.record("a:1", failure("a:1"))
          expect(yield* cooldownOf(peers, "a:1")).toBe(300)
        }),
      PeerHealth.layerConfig.pipe(
        Layer.provide(
          Layer.setConfigProvider(ConfigProvider.fromJson({ peer_health: { cooldown_ms: 200, max_cooldown_ms: 300 } }))
        )
      )
    )
  )

  it.effect("a value below 1 fails, naming the key", () =>
    Effect.gen(function* () {
      for (const key of ["cooldown_ms", "max_cooldown_ms", "probe_interval_ms", "max_age_ms"]) {
        const result = yield* readConfig(ConfigProvider.fromJson({ peer_health: { [key]: 0 } }))
        expect(Either.isLeft(result)).toBe(true)
        if (Either.isLeft(result)) {
          expect(String(result.left)).toContain(`peer_health.${key}`)
          expect(String(result.left)).toContain("must be a positive integer")
        }
      }
    })
  )

  it.effect("a value of the wrong type fails layerConfig at start, naming the key", () =>
    Effect.gen(function* () {
      const bad = Layer.setConfigProvider(ConfigProvider.fromJson({ peer_health: { cooldown_ms: "x" } }))
      const result = yield* Layer.build(PeerHealth.layerConfig.pipe(Layer.provide(bad))).pipe(
        Effect.scoped,
        Effect.either
      )
      expect(Either.isLeft(result)).toBe(true)
      if (Either.isLeft(result)) {
        expect(String(result.left)).toContain("peer_health.cooldown_ms")
        expect(String(result.left)).toContain("integer")
      }
    })
  )
})
