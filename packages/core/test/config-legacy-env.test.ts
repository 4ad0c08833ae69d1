/**
 * TENT's legacy `MC_*` variables (`ConfigHelper::loadFromEnv`, `tent/src/common/config.cpp:137-185`): each one sets
 * the key TENT maps it to, a wrong value fails at start naming the variable, and those whose keys this engine lacks
 * are accepted with a warning naming them.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import { EngineConfig } from "../src/index.js"

const settings = (env: Record<string, string>) =>
  Effect.gen(function* () {
    const ctx = yield* Layer.build(EngineConfig.layer({ env }))
    return ctx.unsafeMap.get(EngineConfig.EngineConfig.key) as EngineConfig.EngineSettings
  }).pipe(Effect.scoped)

/** Variable, a value other than the default, where the settings carry it, and a value the key refuses. */
const table: ReadonlyArray<
  readonly [name: string, value: string, read: (s: EngineConfig.EngineSettings) => unknown, want: unknown, bad: string]
> = [
  ["MC_RDMA_BIND_ADDRESS", "10.0.0.7", (s) => s.rdmaBindAddress, "10.0.0.7", ""],
  ["MC_NUM_QP_PER_EP", "4", (s) => s.numLanes, 4, "0"],
  ["MC_NUM_CQ_PER_CTX", "3", (s) => s.device.numCqList, 3, "0"],
  ["MC_IB_PORT", "2", (s) => s.device.port, 2, "0"],
  ["MC_GID_INDEX", "3", (s) => s.device.gidIndex, 3, "-2"],
  ["NCCL_IB_GID_INDEX", "5", (s) => s.device.gidIndex, 5, "x"],
  ["MC_MAX_CQE_PER_CTX", "1024", (s) => s.device.maxCqe, 1024, "0"],
  ["MC_MAX_EP_PER_CTX", "128", (s) => s.endpoint.endpointStoreCap, 128, "0"],
  ["MC_MAX_SGE", "2", (s) => s.endpoint.maxSge, 2, "0"],
  ["MC_MAX_WR", "512", (s) => s.endpoint.maxQpWr, 512, "0"],
  ["MC_MAX_INLINE", "32", (s) => s.endpoint.maxInlineBytes, 32, "-1"],
  ["MC_PKEY_INDEX", "1", (s) => s.endpoint.pkeyIndex, 1, "-1"],
  ["MC_MTU", "1024", (s) => s.endpoint.pathMtu, 1024, "1000"],
  ["MC_IB_TC", "106", (s) => s.endpoint.trafficClass, 106, "256"],
  ["MC_IB_SL", "3", (s) => s.endpoint.serviceLevel, 3, "16"],
  ["MC_WORKERS_PER_CTX", "4", (s) => s.workers.numWorkers, 4, "0"],
  ["MC_SLICE_SIZE", "131072", (s) => s.workers.blockSize, 131072, "0"],
  ["MC_RETRY_CNT", "3", (s) => s.workers.maxRetryCount, 3, "0"],
  ["MC_TE_FILTERS", " mlx5_0, mlx5_1 ,", (s) => s.whitelist, ["mlx5_0", "mlx5_1"], ""],
  ["MC_TE_FILTERS_EXCLUDE", "mlx5_2", (s) => s.blacklist, ["mlx5_2"], ""]
]

describe("TENT's legacy MC_* variables", () => {
  it("the table covers every variable EngineConfig.legacyEnv maps (besides the metrics ones)", () => {
    const mapped = Object.keys(EngineConfig.legacyEnv).filter((n) => !n.startsWith("TENT_METRICS"))
    expect(new Set(table.map(([name]) => name))).toEqual(new Set(mapped))
  })

  for (const [name, value, read, want, bad] of table) {
    it.effect(`${name}=${JSON.stringify(value)} sets ${EngineConfig.legacyEnv[name]}`, () =>
      Effect.gen(function* () {
        const before = read(yield* settings({}))
        expect(before).not.toEqual(want)
        expect(read(yield* settings({ [name]: value }))).toEqual(want)
      })
    )
    if (bad !== "") {
      it.effect(`${name}=${JSON.stringify(bad)} fails at start naming ${name}`, () =>
        Effect.gen(function* () {
          const e = yield* Effect.flip(settings({ [name]: bad }))
          expect(String(e)).toContain(`${name}=${JSON.stringify(bad)}`)
          expect(String(e)).toContain(EngineConfig.legacyEnv[name])
        })
      )
    }
  }

  it.effect("NCCL_IB_GID_INDEX wins over MC_GID_INDEX (TENT sets it later); the key's own name wins over both", () =>
    Effect.gen(function* () {
      expect((yield* settings({ MC_GID_INDEX: "1", NCCL_IB_GID_INDEX: "2" })).device.gidIndex).toBe(2)
      const own = yield* settings({ MC_GID_INDEX: "1", TRANSPORTS_RDMA_DEVICE_GID_INDEX: "4" })
      expect(own.device.gidIndex).toBe(4)
    })
  )

  it.effect("variables for keys this engine lacks are accepted and each logged as a warning naming it", () =>
    Effect.gen(function* () {
      const lines: Array<string> = []
      const logger = Logger.make(({ logLevel, message }) => {
        lines.push(`${logLevel.label} ${Array.isArray(message) ? message.join(" ") : String(message)}`)
      })
      const env = Object.fromEntries(Object.keys(EngineConfig.ignoredLegacyEnv).map((n) => [n, "1"]))
      yield* settings(env).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)))
      for (const [name, key] of Object.entries(EngineConfig.ignoredLegacyEnv)) {
        expect(lines.some((l) => l.startsWith("WARN") && l.includes(name) && l.includes(key))).toBe(true)
      }
      expect(lines.filter((l) => l.startsWith("WARN"))).toHaveLength(Object.keys(EngineConfig.ignoredLegacyEnv).length)
    })
  )
})
