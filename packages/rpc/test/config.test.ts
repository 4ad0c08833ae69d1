import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect } from "effect"
import { RpcConfig } from "../src/index.js"

const read = (json: unknown) => RpcConfig.config.pipe(Effect.withConfigProvider(ConfigProvider.fromJson(json)))

describe("RpcConfig.keys: the rpc/* keys, declared once and read from the table", () => {
  it("declares every rpc/* key as an integer; defaults are TENT's: -1 timeouts, 16 MiB limits; the RFC's 2 s probe timeout", () => {
    expect(Object.keys(RpcConfig.keys)).toEqual([
      "rpc/request_timeout_ms",
      "rpc/bootstrap_timeout_ms",
      "rpc/notify_timeout_ms",
      "rpc/connect_timeout_ms",
      "rpc/max_notify_bytes",
      "rpc/max_data_bytes",
      "rpc/probe_timeout_ms"
    ])
    for (const spec of Object.values(RpcConfig.keys)) expect(spec.kind).toBe("int")
    expect(RpcConfig.defaults).toEqual({
      request_timeout_ms: -1,
      bootstrap_timeout_ms: -1,
      notify_timeout_ms: -1,
      connect_timeout_ms: -1,
      max_notify_bytes: 16 * 1024 * 1024,
      max_data_bytes: 16 * 1024 * 1024,
      probe_timeout_ms: 2000
    })
  })

  it.effect("a value its table entry rejects fails naming the key, with the entry's message", () =>
    Effect.gen(function* () {
      for (const [key, spec] of Object.entries(RpcConfig.keys)) {
        const name = key.slice("rpc/".length)
        const error = String(yield* Effect.flip(read({ rpc: { [name]: -7 } })))
        expect(error).toContain(`rpc.${name}`)
        expect(error).toContain(spec.valid.message)
        expect(spec.valid.check(spec.default)).toBe(true)
      }
    })
  )

  it.effect("an accepted value is read; -1 timeouts resolve to the library default", () =>
    Effect.gen(function* () {
      const c = yield* read({ rpc: { request_timeout_ms: 250, max_notify_bytes: 1024 } })
      expect(c.requestTimeoutMs).toBe(250)
      expect(c.maxNotifyBytes).toBe(1024)
      expect(c.bootstrapTimeoutMs).toBe(RpcConfig.LIBRARY_DEFAULT_TIMEOUT_MS)
    })
  )
})
