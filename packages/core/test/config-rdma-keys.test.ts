/**
 * `transports/rdma/endpoint/qp_mul_factor` (TENT's legacy name of `num_lanes`, `rdma_transport.cpp:86-154`),
 * `transports/rdma/endpoint/qp_pools` (validated, accepted, not applied) and `transports/rdma/bind_address` (the
 * host of this engine's NIC paths, published as `rdma_server_name`, `rdma_transport.cpp:328-343, 633-640`).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { EngineConfig } from "../src/index.js"
import { rdmaServerName } from "../src/internal/rdma/NicPath.js"
import { testConfig } from "./fixtures/engine.js"
import * as Pair from "./fixtures/pair.js"

const settings = (source: EngineConfig.ConfigSource) =>
  Effect.gen(function* () {
    const ctx = yield* Layer.build(EngineConfig.layer(source))
    return ctx.unsafeMap.get(EngineConfig.EngineConfig.key) as EngineConfig.EngineSettings
  }).pipe(Effect.scoped)

describe("qp_mul_factor", () => {
  it.effect("unset (-1) leaves num_lanes; set alone it is the lane count; equal to num_lanes it is accepted", () =>
    Effect.gen(function* () {
      expect((yield* settings({})).numLanes).toBe(6)
      expect((yield* settings({ json: { transports: { rdma: { num_lanes: 3 } } } })).numLanes).toBe(3)
      expect((yield* settings({ json: { "transports/rdma/endpoint/qp_mul_factor": 2 } })).numLanes).toBe(2)
      const both = { transports: { rdma: { num_lanes: 4, endpoint: { qp_mul_factor: 4 } } } }
      expect((yield* settings({ json: both })).numLanes).toBe(4)
    })
  )
  it.effect("set with a different num_lanes, or out of range, fails at start naming qp_mul_factor", () =>
    Effect.gen(function* () {
      const clash = { transports: { rdma: { num_lanes: 4, endpoint: { qp_mul_factor: 2 } } } }
      const e = yield* Effect.flip(settings({ json: clash }))
      expect(String(e)).toContain("qp_mul_factor")
      expect(String(e)).toContain("num_lanes is 4")
      const zero = yield* Effect.flip(settings({ json: { "transports/rdma/endpoint/qp_mul_factor": 0 } }))
      expect(String(zero)).toContain("qp_mul_factor")
    })
  )
})

describe("qp_pools", () => {
  it.effect("default []; TENT's pool objects are read (SL/TC -1 when absent)", () =>
    Effect.gen(function* () {
      expect((yield* settings({})).qpPools).toEqual([])
      const json = { transports: { rdma: { endpoint: { qp_pools: [{ name: "kv", num_qp: 2, service_level: 3 }] } } } }
      expect((yield* settings({ json })).qpPools).toEqual([{ name: "kv", numQp: 2, serviceLevel: 3, trafficClass: -1 }])
    })
  )
  it.effect("a pool without a name or with num_qp ≤ 0 fails at start naming qp_pools", () =>
    Effect.gen(function* () {
      for (const pool of [{ num_qp: 2 }, { name: "kv", num_qp: 0 }, { name: "kv", num_qp: 1, traffic_class: 300 }]) {
        const e = yield* Effect.flip(settings({ json: { "transports/rdma/endpoint/qp_pools": [pool] } }))
        expect(String(e)).toContain("qp_pools")
      }
    })
  )
})

describe("bind_address", () => {
  it("NIC paths use the bind host with the segment name's port (else rpc_server_port); empty = the segment name", () => {
    expect(rdmaServerName("", "10.1.0.5:17000", 0)).toBe("10.1.0.5:17000")
    expect(rdmaServerName("192.168.7.5", "10.1.0.5:17000", 0)).toBe("192.168.7.5:17000")
    expect(rdmaServerName("192.168.7.5", "node-a", 15000)).toBe("192.168.7.5:15000")
  })

  const peerPaths = (peerJson: unknown) =>
    Pair.withEngines({ json: {}, peerJson: { ...testConfig, ...(peerJson as object) } }, (engine, peer) =>
      Effect.gen(function* () {
        const remote = yield* Pair.request<{ addr: number }>(peer, { cmd: "register", size: 1 << 16 })
        const local = Buffer.alloc(1 << 16, 7)
        const mem = yield* engine.registerSegment(local)
        const target = yield* engine.openSegment(peer.ready.segment)
        const batch = yield* engine.allocateBatch
        yield* engine.submitTransfer(batch, [
          { opcode: "WRITE", source: mem.addr, target, targetOffset: remote.addr, length: local.length }
        ])
        expect((yield* engine.waitTransfer(batch, 30_000)).status).toBe("COMPLETED")
        const digest = yield* Pair.request<{ sha: string }>(peer, { cmd: "digest", offset: 0, length: local.length })
        expect(digest.sha).toBe(Pair.sha(local))
        const eps = yield* (engine.rdma as NonNullable<typeof engine.rdma>).endpoints
        return { segment: peer.ready.segment, paths: eps.map((e) => e.peerNicPath) }
      })
    )

  it.live(
    "a peer with bind_address publishes rdma_server_name; this engine's endpoints to it are named by it, and WRITE works",
    () =>
      Effect.gen(function* () {
        const { segment, paths } = yield* peerPaths({ transports: { rdma: { bind_address: "localhost" } } })
        const port = segment.slice(segment.lastIndexOf(":") + 1)
        expect(paths.length).toBeGreaterThan(0)
        for (const p of paths) expect(p.startsWith(`localhost:${port}@`)).toBe(true)
      }),
    Pair.testTimeout()
  )

  it.live(
    "negative control: without bind_address the endpoints are named by the peer's segment name",
    () =>
      Effect.gen(function* () {
        const { segment, paths } = yield* peerPaths({})
        expect(paths.length).toBeGreaterThan(0)
        for (const p of paths) expect(p.startsWith(`${segment}@`)).toBe(true)
      }),
    Pair.testTimeout()
  )
})
