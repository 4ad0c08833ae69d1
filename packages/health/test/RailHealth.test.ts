import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Either, Layer, Logger, LogLevel, TestClock } from "effect"
import { RailHealth } from "../src/index.js"

const S = (s: number) => Duration.seconds(s)

/** Runs `f` against a fresh RailHealth built by `layer` (TENT's defaults unless given). */
const withRails = <A, E>(
  f: (rails: RailHealth.RailHealthShape) => Effect.Effect<A, E>,
  layer: Layer.Layer<RailHealth.RailHealth, unknown> = RailHealth.layer()
) => Effect.flatMap(RailHealth.RailHealth, f).pipe(Effect.provide(layer))

const stateOf = (rails: RailHealth.RailHealthShape, local: string, remote: string) =>
  Effect.map(rails.snapshot, (all) => all.find((s) => s.local === local && s.remote === remote))

/** `n` errors on a rail, `gap` apart (the clock advances between errors, not after the last). */
const errors = (rails: RailHealth.RailHealthShape, local: string, remote: string, n: number, gap = S(1)) =>
  Effect.gen(function* () {
    for (let i = 0; i < n; i++) {
      if (i > 0) yield* TestClock.adjust(gap)
      yield* rails.recordError(local, remote)
    }
  })

describe("RailHealth: TENT's RailMonitor rules", () => {
  it("has TENT's defaults: threshold 3, window 10 s, cooldown 30 s, cap 300 s", () => {
    expect(RailHealth.defaults).toEqual({
      errorThreshold: 3,
      errorWindowSecs: 10,
      cooldownSecs: 30,
      maxCooldownSecs: 300
    })
  })

  it.effect("a rail never seen is available", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        expect(yield* rails.available("mlx5_0", "mlx5_1")).toBe(true)
        expect(yield* rails.snapshot).toEqual([
          { local: "mlx5_0", remote: "mlx5_1", paused: false, errors: 0, pausedUntil: 0, cooldownMs: 0 }
        ])
      })
    )
  )

  it.effect("three errors within the window pause the pair; two do not", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* errors(rails, "a", "x", 2, S(4))
        expect(yield* rails.available("a", "x")).toBe(true)
        yield* TestClock.adjust(S(4))
        yield* rails.recordError("a", "x")
        expect(yield* rails.available("a", "x")).toBe(false)
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({ paused: true, errors: 3 })
      })
    )
  )

  it.effect("the window is measured from the previous error: a gap of exactly 10 s still counts", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* errors(rails, "a", "x", 3, S(10))
        expect(yield* rails.available("a", "x")).toBe(false)
      })
    )
  )

  it.effect("the window slides from error to error: errors 0 s, 9 s, 18 s pause the pair", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* errors(rails, "a", "x", 3, S(9))
        expect(yield* rails.available("a", "x")).toBe(false)
      })
    )
  )

  it.effect("errors more than the window apart do not add up: the count restarts at 1", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* errors(rails, "a", "x", 2, S(1))
        yield* TestClock.adjust(Duration.millis(10_001))
        yield* rails.recordError("a", "x")
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({ paused: false, errors: 1 })
        expect(yield* rails.available("a", "x")).toBe(true)
        // ...and counts up again from there
        yield* TestClock.adjust(S(1))
        yield* errors(rails, "a", "x", 2, S(1))
        expect(yield* rails.available("a", "x")).toBe(false)
      })
    )
  )

  it.effect("the cooldown doubles on every error, even below the threshold: the first pause lasts 120 s", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* rails.recordError("a", "x")
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({ errors: 1, cooldownMs: 30_000, paused: false })
        yield* TestClock.adjust(S(1))
        yield* rails.recordError("a", "x")
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({ errors: 2, cooldownMs: 60_000, paused: false })
        yield* TestClock.adjust(S(1))
        yield* rails.recordError("a", "x")
        // paused at t = 2 s for 30 → 60 → 120 s
        expect(yield* stateOf(rails, "a", "x")).toEqual({
          local: "a",
          remote: "x",
          paused: true,
          errors: 3,
          pausedUntil: 122_000,
          cooldownMs: 120_000
        })
        yield* TestClock.adjust(Duration.millis(119_999))
        expect(yield* rails.available("a", "x")).toBe(false)
        yield* TestClock.adjust(Duration.millis(1))
        expect(yield* rails.available("a", "x")).toBe(true)
      })
    )
  )

  it.effect("the cooldown's expiry clears the count, the pause and the cooldown", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* errors(rails, "a", "x", 3)
        yield* TestClock.adjust(S(120))
        expect(yield* rails.available("a", "x")).toBe(true)
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({
          paused: false,
          errors: 0,
          pausedUntil: 0,
          cooldownMs: 0
        })
        // a new cycle starts from 30 s and needs three errors again
        yield* errors(rails, "a", "x", 2)
        expect(yield* rails.available("a", "x")).toBe(true)
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({ errors: 2, cooldownMs: 60_000 })
      })
    )
  )

  it.effect("an expired pause is cleared by time alone: the next error starts a new cycle", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* errors(rails, "a", "x", 3)
        yield* TestClock.adjust(S(121))
        // no `available` in between: the snapshot already shows the rail clean, and an error starts afresh
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({
          paused: false,
          errors: 0,
          pausedUntil: 0,
          cooldownMs: 0
        })
        yield* rails.recordError("a", "x")
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({ paused: false, errors: 1, cooldownMs: 30_000 })
      })
    )
  )

  it.effect("further errors on a paused pair re-arm the pause, doubling up to 300 s", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* errors(rails, "a", "x", 3)
        const seen: Array<[number | undefined, number | undefined]> = []
        for (let i = 0; i < 3; i++) {
          yield* TestClock.adjust(S(1))
          yield* rails.recordError("a", "x")
          const s = yield* stateOf(rails, "a", "x")
          seen.push([s?.cooldownMs, s?.pausedUntil])
        }
        // errors at 3, 4, 5 s: 240 s, then capped at 300 s
        expect(seen).toEqual([
          [240_000, 243_000],
          [300_000, 304_000],
          [300_000, 305_000]
        ])
        yield* TestClock.adjust(Duration.millis(299_999))
        expect(yield* rails.available("a", "x")).toBe(false)
        yield* TestClock.adjust(Duration.millis(1))
        expect(yield* rails.available("a", "x")).toBe(true)
      })
    )
  )

  it.effect("a success un-pauses the pair and clears its backoff memory", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* errors(rails, "a", "x", 4)
        expect(yield* rails.available("a", "x")).toBe(false)
        yield* rails.recordSuccess("a", "x")
        expect(yield* rails.available("a", "x")).toBe(true)
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({
          paused: false,
          errors: 0,
          pausedUntil: 0,
          cooldownMs: 0
        })
        yield* TestClock.adjust(S(1))
        yield* rails.recordError("a", "x")
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({ errors: 1, cooldownMs: 30_000 })
      })
    )
  )

  it.effect("a success below the threshold resets the count", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* errors(rails, "a", "x", 2)
        yield* rails.recordSuccess("a", "x")
        yield* errors(rails, "a", "x", 2)
        expect(yield* rails.available("a", "x")).toBe(true)
      })
    )
  )

  it.effect("pairs are independent", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        yield* errors(rails, "a", "x", 3)
        expect(yield* rails.available("a", "x")).toBe(false)
        expect(yield* rails.available("a", "y")).toBe(true)
        expect(yield* rails.available("b", "x")).toBe(true)
      })
    )
  )

  it.effect("choose skips paused pairs, keeps the preferred order, and returns undefined when all are paused", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        expect(yield* rails.choose("a", ["x", "y", "z"])).toBe("x")
        yield* errors(rails, "a", "x", 3)
        expect(yield* rails.choose("a", ["x", "y", "z"])).toBe("y")
        expect(yield* rails.choose("a", ["z", "y", "x"])).toBe("z")
        yield* errors(rails, "a", "y", 3)
        yield* errors(rails, "a", "z", 3)
        expect(yield* rails.choose("a", ["x", "y", "z"])).toBeUndefined()
        expect(yield* rails.choose("b", ["x", "y", "z"])).toBe("x")
        expect(yield* rails.choose("a", [])).toBeUndefined()
        // x paused at 2 s until 122 s, y at 4 s until 124 s, z at 6 s until 126 s: at 123 s only x is back
        yield* TestClock.adjust(S(117))
        expect(yield* rails.choose("a", ["z", "y", "x"])).toBe("x")
      })
    )
  )

  it.effect("layer options override the defaults (threshold 1, cooldown 5 s, cap 8 s)", () =>
    withRails(
      (rails) =>
        Effect.gen(function* () {
          yield* rails.recordError("a", "x")
          expect(yield* stateOf(rails, "a", "x")).toMatchObject({ paused: true, pausedUntil: 5_000 })
          yield* errors(rails, "a", "x", 2)
          expect(yield* stateOf(rails, "a", "x")).toMatchObject({ cooldownMs: 8_000, pausedUntil: 9_000 })
        }),
      RailHealth.layer({ errorThreshold: 1, cooldownSecs: 5, maxCooldownSecs: 8 })
    )
  )

  it.effect("negative control: the same ten errors pause the rail under `layer` and not under `layerTest`", () =>
    Effect.gen(function* () {
      // One scenario, two layers: the rule's checks hold for the real layer and fail for the double (threshold ∞).
      const afterTenErrors = (rails: RailHealth.RailHealthShape) =>
        Effect.gen(function* () {
          yield* errors(rails, "a", "x", 10)
          return {
            available: yield* rails.available("a", "x"),
            chosen: yield* rails.choose("a", ["x", "y"]),
            paused: (yield* stateOf(rails, "a", "x"))?.paused
          }
        })
      expect(yield* withRails(afterTenErrors)).toEqual({ available: false, chosen: "y", paused: true })
      expect(yield* withRails(afterTenErrors, RailHealth.layerTest)).toEqual({
        available: true,
        chosen: "x",
        paused: false
      })
    })
  )
})

describe("RailHealth: logs", () => {
  it.effect("one warning per pause: errors that re-arm it log at debug level", () =>
    Effect.gen(function* () {
      const lines: Array<{ level: string; message: string }> = []
      const capture = Logger.make(({ logLevel, message }) => {
        lines.push({ level: logLevel.label, message: String(message) })
      })
      yield* withRails((rails) => errors(rails, "a", "x", 8)).pipe(
        Effect.provide(Logger.replace(Logger.defaultLogger, capture)),
        Logger.withMinimumLogLevel(LogLevel.All)
      )
      expect(lines.filter((l) => l.level === "WARN").map((l) => l.message)).toEqual([
        "Rail paused for 120 s after 3 errors"
      ])
      expect(lines.filter((l) => l.level === "DEBUG")).toHaveLength(5)
    })
  )
})

describe("RailHealth: the synchronous fast path (unsafe)", () => {
  it.effect("agrees with the Effect API, and hands every logged transition back to it", () =>
    withRails((rails) =>
      Effect.gen(function* () {
        expect(rails.unsafe.available("a", "x")).toBe(true)
        expect(rails.unsafe.recordSuccess("a", "x")).toBe(true)
        // Errors below the threshold: still available; a success clears them without a log line.
        yield* errors(rails, "a", "x", 2)
        expect(rails.unsafe.available("a", "x")).toBe(true)
        expect(rails.unsafe.recordSuccess("a", "x")).toBe(true)
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({ errors: 0, cooldownMs: 0 })
        // Paused: unavailable; clearing a pause is left to the Effect call (it logs "recovered").
        yield* errors(rails, "a", "x", 3)
        expect(rails.unsafe.available("a", "x")).toBe(false)
        expect(rails.unsafe.recordSuccess("a", "x")).toBeUndefined()
        expect(yield* stateOf(rails, "a", "x")).toMatchObject({ paused: true })
        // The pause (120 s: 30 → 60 → 120) expires: the fast path says "ask the Effect API", which clears it.
        yield* TestClock.adjust(S(120))
        expect(rails.unsafe.available("a", "x")).toBeUndefined()
        expect(yield* rails.available("a", "x")).toBe(true)
        expect(rails.unsafe.available("a", "x")).toBe(true)
      })
    )
  )
})

describe("RailHealth: config keys transports/rdma/rail_*", () => {
  const readConfig = (provider: ConfigProvider.ConfigProvider) =>
    RailHealth.config.pipe(Effect.withConfigProvider(provider), Effect.either)

  it.effect("absent keys take TENT's defaults", () =>
    Effect.gen(function* () {
      expect(yield* readConfig(ConfigProvider.fromJson({}))).toEqual(Either.right(RailHealth.defaults))
      expect(yield* readConfig(ConfigProvider.fromJson({ transports: { rdma: { num_lanes: 2 } } }))).toEqual(
        Either.right(RailHealth.defaults)
      )
    })
  )

  it.effect("nested JSON keys are read", () =>
    Effect.gen(function* () {
      const json = {
        transports: { rdma: { rail_error_threshold: 5, rail_error_window_secs: 60, rail_cooldown_secs: 7 } }
      }
      expect(yield* readConfig(ConfigProvider.fromJson(json))).toEqual(
        Either.right({ errorThreshold: 5, errorWindowSecs: 60, cooldownSecs: 7, maxCooldownSecs: 300 })
      )
    })
  )

  it.effect("flat transports/rdma/rail_* keys are read from a provider with path delimiter /", () =>
    Effect.gen(function* () {
      const flat = ConfigProvider.fromMap(
        new Map([
          ["transports/rdma/rail_error_threshold", "2"],
          ["transports/rdma/rail_cooldown_secs", "9"]
        ]),
        { pathDelim: "/" }
      )
      expect(yield* readConfig(flat)).toEqual(
        Either.right({ errorThreshold: 2, errorWindowSecs: 10, cooldownSecs: 9, maxCooldownSecs: 300 })
      )
    })
  )

  it.effect("layerConfig under Layer.setConfigProvider applies the keys to the rules", () =>
    withRails(
      (rails) =>
        Effect.gen(function* () {
          yield* errors(rails, "a", "x", 2, S(30))
          // window 60 s: two errors 30 s apart pause at threshold 2, for 7 s then doubled: 14 s
          expect(yield* stateOf(rails, "a", "x")).toMatchObject({ paused: true, cooldownMs: 14_000 })
          yield* TestClock.adjust(S(14))
          expect(yield* rails.available("a", "x")).toBe(true)
        }),
      RailHealth.layerConfig.pipe(
        Layer.provide(
          Layer.setConfigProvider(
            ConfigProvider.fromJson({
              transports: { rdma: { rail_error_threshold: 2, rail_error_window_secs: 60, rail_cooldown_secs: 7 } }
            })
          )
        )
      )
    )
  )

  it.effect("a value of the wrong type fails at start, naming the key", () =>
    Effect.gen(function* () {
      const bad = Layer.setConfigProvider(
        ConfigProvider.fromJson({ transports: { rdma: { rail_cooldown_secs: "soon" } } })
      )
      const result = yield* Layer.build(RailHealth.layerConfig.pipe(Layer.provide(bad))).pipe(
        Effect.scoped,
        Effect.either
      )
      expect(Either.isLeft(result)).toBe(true)
      if (Either.isLeft(result)) {
        expect(String(result.left)).toContain("transports.rdma.rail_cooldown_secs")
        expect(String(result.left)).toContain("integer")
      }
    })
  )

  it.effect("a value below 1 fails, naming the key", () =>
    Effect.gen(function* () {
      for (const [key, value] of [
        ["rail_error_threshold", 0],
        ["rail_error_window_secs", -1],
        ["rail_cooldown_secs", 0]
      ] as const) {
        const result = yield* readConfig(ConfigProvider.fromJson({ transports: { rdma: { [key]: value } } }))
        expect(Either.isLeft(result)).toBe(true)
        if (Either.isLeft(result)) {
          expect(String(result.left)).toContain(`transports.rdma.${key}`)
          expect(String(result.left)).toContain("must be a positive integer")
        }
      }
    })
  )
})
