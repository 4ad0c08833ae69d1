import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Redacted } from "effect"
import { RpcConfig } from "../src/index.js"

const read = (json: unknown) => RpcConfig.config.pipe(Effect.withConfigProvider(ConfigProvider.fromJson(json)))

describe("RpcConfig.keys: the rpc/* keys, declared once and read from the table", () => {
  it("declares the rpc/* keys; defaults are TENT's: -1 timeouts, 16 MiB limits, no secret; the RFC's 2 s probe timeout", () => {
    expect(Object.keys(RpcConfig.keys)).toEqual([
      "rpc/request_timeout_ms",
      "rpc/bootstrap_timeout_ms",
      "rpc/notify_timeout_ms",
      "rpc/connect_timeout_ms",
      "rpc/max_notify_bytes",
      "rpc/max_data_bytes",
      "rpc/probe_timeout_ms",
      "rpc/max_connections",
      "rpc/max_inflight",
      "rpc/max_unread_reply_bytes",
      "rpc/auth_secret_file",
      "rpc/allow_cidrs"
    ])
    for (const spec of Object.values(RpcConfig.intKeys)) expect(spec.kind).toBe("int")
    expect(RpcConfig.defaults).toEqual({
      request_timeout_ms: -1,
      bootstrap_timeout_ms: -1,
      notify_timeout_ms: -1,
      connect_timeout_ms: -1,
      max_notify_bytes: 16 * 1024 * 1024,
      max_data_bytes: 16 * 1024 * 1024,
      probe_timeout_ms: 2000,
      max_connections: 1024,
      max_inflight: 1024,
      max_unread_reply_bytes: 16 * 1024 * 1024
    })
    expect(RpcConfig.textKeys["rpc/auth_secret_file"].default).toBe("")
    expect(RpcConfig.textKeys["rpc/allow_cidrs"].default).toEqual([])
  })

  it.effect("a value its table entry rejects fails naming the key, with the entry's message", () =>
    Effect.gen(function* () {
      for (const [key, spec] of Object.entries(RpcConfig.intKeys)) {
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
      expect(c.secret).toBeUndefined()
    })
  )

  it.effect("the secret: from rpc/auth_secret_file, checked at start naming the key; never printed", () =>
    Effect.gen(function* () {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "tent-secret-"))
      const file = Path.join(dir, "secret")
      Fs.writeFileSync(file, "0123456789abcdef0123456789abcdef\n")
      const c = yield* read({ rpc: { auth_secret_file: file, allow_cidrs: "10.0.0.0/8,127.0.0.1" } })
      expect(Redacted.value(c.secret as Redacted.Redacted<string>)).toBe("0123456789abcdef0123456789abcdef")
      expect(String(c.secret)).not.toContain("0123")
      expect(c.allowCidrs).toEqual(["10.0.0.0/8", "127.0.0.1"])
      Fs.writeFileSync(file, "short")
      const short = String(yield* Effect.flip(read({ rpc: { auth_secret_file: file } })))
      expect(short).toContain("auth_secret_file")
      expect(short).toContain("at least 16 bytes")
      const missing = String(yield* Effect.flip(read({ rpc: { auth_secret_file: Path.join(dir, "none") } })))
      expect(missing).toContain("auth_secret_file")
      expect(missing).toContain("ENOENT")
      const cidr = String(yield* Effect.flip(read({ rpc: { allow_cidrs: "10.0.0.0/33" } })))
      expect(cidr).toContain("allow_cidrs")
      Fs.rmSync(dir, { recursive: true, force: true })
    })
  )
})
