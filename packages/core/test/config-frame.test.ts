import { describe, expect, it } from "@effect/vitest"
import { RpcConfig } from "@tent/rpc"
import { Effect, Layer } from "effect"
import { EngineConfig, NotifyFrame } from "../src/index.js"

const read = (source: EngineConfig.ConfigSource) =>
  Effect.gen(function* () {
    const ctx = yield* Layer.build(EngineConfig.layer(source))
    return {
      engine: ctx.unsafeMap.get(EngineConfig.EngineConfig.key) as EngineConfig.EngineSettings,
      rpc: ctx.unsafeMap.get(RpcConfig.RpcConfig.key) as RpcConfig.RpcSettings
    }
  }).pipe(Effect.scoped)

describe("EngineConfig", () => {
  it.effect("has TENT's defaults", () =>
    Effect.gen(function* () {
      const { engine, rpc } = yield* read({})
      expect(engine.endpoint).toMatchObject({
        pathMtu: 4096,
        minRnrTimer: 12,
        sendTimeout: 14,
        sendRetryCount: 7,
        sendRnrCount: 7,
        maxQpWr: 256,
        endpointStoreCap: 65536
      })
      expect(engine.numLanes).toBe(6)
      expect(engine.workers).toEqual({ numWorkers: 6, maxRetryCount: 8, blockSize: 65536 })
      expect(rpc.notifyTimeoutMs).toBe(30_000)
    })
  )

  it.effect("reads nested objects and flat 'a/b' keys alike, and the environment over the file", () =>
    Effect.gen(function* () {
      const { engine, rpc } = yield* read({
        json: { transports: { rdma: { endpoint: { path_mtu: 1024 } } }, "transports/rdma/num_lanes": 2 },
        env: { MC_RETRY_CNT: "3", RPC_NOTIFY_TIMEOUT_MS: "500" }
      })
      expect(engine.endpoint.pathMtu).toBe(1024)
      expect(engine.numLanes).toBe(2)
      expect(engine.workers.maxRetryCount).toBe(3)
      expect(rpc.notifyTimeoutMs).toBe(500)
    })
  )

  it.effect("fails at start naming the key on a wrong type or an unknown value (TENT would use the default)", () =>
    Effect.gen(function* () {
      const wrongType = yield* Effect.flip(read({ json: { transports: { tcp: { enable: "false" } } } }))
      expect(String(wrongType)).toContain("transports")
      expect(String(wrongType)).toContain("enable")
      const badMtu = yield* Effect.flip(read({ json: { "transports/rdma/endpoint/path_mtu": 3000 } }))
      expect(String(badMtu)).toContain("path_mtu")
      const badEnv = yield* Effect.flip(read({ env: { MC_MTU: "big" } }))
      expect(String(badEnv)).toContain("path_mtu")
      const badRpc = yield* Effect.flip(read({ json: { rpc: { notify_timeout_ms: 0 } } }))
      expect(String(badRpc)).toContain("notify_timeout_ms")
      const badInline = yield* Effect.flip(read({ env: { MC_TENT_CONF: "{not json" } }))
      expect(String(badInline)).toContain("MC_TENT_CONF")
    })
  )
})

describe("NotifyFrame", () => {
  const enc = new TextEncoder()
  it("round-trips, little-endian, and rejects what overruns", () => {
    const buf = Buffer.alloc(NotifyFrame.SLOT_BYTES)
    const n = NotifyFrame.encode(buf, 0, enc.encode("ab"), enc.encode("xyz"))
    expect(n).toBe(13)
    expect([...buf.subarray(0, 13)]).toEqual([2, 0, 0, 0, 97, 98, 3, 0, 0, 0, 120, 121, 122])
    const r = new NotifyFrame.DecodedRanges()
    expect(NotifyFrame.decode(buf, 0, 13, r)).toBe(0)
    expect(buf.subarray(r.msgStart, r.msgEnd).toString()).toBe("xyz")
    expect(NotifyFrame.decode(buf, 0, 0, r)).toBe(NotifyFrame.Reject.Empty)
    expect(NotifyFrame.decode(buf, 0, 7, r)).toBe(NotifyFrame.Reject.Short)
    expect(NotifyFrame.decode(buf, 0, 12, r)).toBe(NotifyFrame.Reject.MsgTooLong)
    buf.writeUInt32LE(100, 0)
    expect(NotifyFrame.decode(buf, 0, 13, r)).toBe(NotifyFrame.Reject.NameTooLong)
    expect(NotifyFrame.encode(buf, 0, new Uint8Array(1), new Uint8Array(NotifyFrame.MAX_PAYLOAD))).toBe(-1)
    expect(NotifyFrame.encode(buf, 0, new Uint8Array(0), new Uint8Array(NotifyFrame.MAX_PAYLOAD))).toBe(65536)
  })

  it("never throws on 100,000 random payloads (fuzz)", () => {
    const buf = Buffer.alloc(NotifyFrame.SLOT_BYTES)
    const r = new NotifyFrame.DecodedRanges()
    let seed = 12345
    const rand = () => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff
      return seed
    }
    for (let i = 0; i < 100_000; i++) {
      const len = rand() % 64
      for (let k = 0; k < len; k++) buf[k] = rand() & 0xff
      if (i % 3 === 0) buf.writeUInt32LE(rand() % 64, 0)
      const rc = NotifyFrame.decode(buf, 0, len, r)
      if (rc === 0) expect(r.msgEnd).toBeLessThanOrEqual(len)
    }
  })
})
