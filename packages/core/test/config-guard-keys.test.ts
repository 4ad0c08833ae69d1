/**
 * The keys of the bounds on what peers can make an engine hold: `transports/rdma/max_endpoints_per_peer`,
 * `transports/rdma/max_accepted_bytes` (-1: half the host's memory) and `notification/max_queued_bytes`. Their
 * defaults, and a wrong value failing the engine's start with a `ConfigError` naming the key.
 */
import * as Os from "node:os"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { EngineConfig, Series } from "../src/index.js"
import { endpointBoundsConfig, maxQueuedBytesConfig } from "../src/internal/config/guards.js"
import { type Delivery, EngineDelivery } from "../src/internal/Delivery.js"
import { BootstrapGuard, QP_BYTES } from "../src/internal/rdma/BootstrapGuard.js"
import { RdmaTransport, type RdmaTransportShape } from "../src/internal/rdma/RdmaTransport.js"
import { engineLayer } from "./fixtures/engine.js"

const read = <A>(config: import("effect").Config.Config<A>, json: unknown) =>
  Effect.flatMap(EngineConfig.provider({ json }), (p) => Effect.withConfigProvider(config, p))

describe("the guards' keys", () => {
  it.effect("defaults: 256 endpoints per peer, half the host's memory for all accepted ones, 64 MiB queued", () =>
    Effect.gen(function* () {
      expect(yield* read(endpointBoundsConfig, {})).toEqual({
        perPeer: 256,
        acceptedBytes: Math.floor(Os.totalmem() / 2)
      })
      expect(yield* read(maxQueuedBytesConfig, {})).toBe(64 * 1024 * 1024)
      const json = {
        transports: { rdma: { max_endpoints_per_peer: 8, max_accepted_bytes: 1 << 30 } },
        notification: { max_queued_bytes: 4096 }
      }
      expect(yield* read(endpointBoundsConfig, json)).toEqual({ perPeer: 8, acceptedBytes: 1 << 30 })
      expect(yield* read(maxQueuedBytesConfig, json)).toBe(4096)
      // TENT's slots: an accepted endpoint is counted at 2 × 256 × 64 KiB, plus its QPs
      expect(BootstrapGuard.reservation({ lazy: false, slots: 256, slotBytes: 65536, initialRecvSlots: 256 }, 6)).toBe(
        32 * 1024 * 1024 + 7 * QP_BYTES
      )
    })
  )

  for (const [key, value] of [
    ["transports/rdma/max_endpoints_per_peer", 0],
    ["transports/rdma/max_accepted_bytes", 0],
    ["transports/rdma/max_accepted_bytes", -2],
    ["notification/max_queued_bytes", 0],
    ["notification/max_queued_bytes", 1.5]
  ] as const) {
    it.scopedLive(`${key}: ${value} fails the engine's start naming the key`, () =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(Layer.build(engineLayer({ [key]: value }, ["mlx0"], Series.all)))
        expect(String(error)).toContain(key.split("/").at(-1))
      })
    )
  }

  it.scopedLive("an engine reads them: its acceptor's bounds and its delivery point's", () =>
    Effect.gen(function* () {
      const json = {
        transports: { rdma: { max_endpoints_per_peer: 3, max_accepted_bytes: 1 << 28 } },
        notification: { max_queued_bytes: 12_345 }
      }
      const ctx = yield* Layer.build(engineLayer(json, ["mlx0"], Series.all))
      const rdma = Context.unsafeGet(ctx, RdmaTransport) as RdmaTransportShape
      expect(rdma.guard.bounds).toEqual({ perPeer: 3, acceptedBytes: 1 << 28 })
      expect((ctx.unsafeMap.get(EngineDelivery.key) as Delivery).maxQueuedBytes).toBe(12_345)
    })
  )
})
