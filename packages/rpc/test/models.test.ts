import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { BootstrapDesc, makeNotification, notificationText, RpcConfig, SegmentDesc } from "../src/index.js"
import { notificationCodec } from "../src/internal/codec.js"
import { FrameReader, FrameWriter, Kind } from "../src/internal/frame.js"

const oldPeerJson = {
  local_nic_path: "10.0.0.1:12001@mlx5_0",
  peer_nic_path: "10.0.0.2:12001@mlx5_1",
  qp_num: [101, 102],
  local_lid: 0,
  local_gid: "fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:01",
  reply_msg: "",
  notify_qp_num: 103
}

describe("BootstrapDesc", () => {
  it("decodes a descriptor without notify_proto (an older peer) with notify_proto 0", () => {
    const d = Schema.decodeUnknownSync(BootstrapDesc)(oldPeerJson)
    expect(d.notify_proto).toBe(0)
    expect(d.notify_qp_num).toBe(103)
    expect(d.qp_num).toEqual([101, 102])
  })

  it("decodes a descriptor with unknown extra fields and keeps the known ones", () => {
    const d = Schema.decodeUnknownSync(BootstrapDesc)({ ...oldPeerJson, notify_proto: 1, future_field: { x: 1 } })
    expect(d.notify_proto).toBe(1)
    expect("future_field" in d).toBe(false)
  })

  it("defaults notify_qp_num to 0 (no notifications) and rejects a QP number that is not a u32", () => {
    const { notify_qp_num: _, ...withoutNotifyQp } = oldPeerJson
    expect(Schema.decodeUnknownSync(BootstrapDesc)(withoutNotifyQp).notify_qp_num).toBe(0)
    expect(() => Schema.decodeUnknownSync(BootstrapDesc)({ ...oldPeerJson, qp_num: [-1] })).toThrow()
    expect(() => Schema.decodeUnknownSync(BootstrapDesc)({ ...oldPeerJson, qp_num: [2 ** 32] })).toThrow()
  })

  it("SegmentDesc rejects a buffer without rkeys field", () => {
    expect(() =>
      Schema.decodeUnknownSync(SegmentDesc)({
        name: "a",
        rpc_server_addr: "a",
        devices: [],
        buffers: [{ addr: 1, length: 2 }]
      })
    ).toThrow()
  })
})

describe("frames", () => {
  const collect = (max: number) => {
    const frames: Array<{ kind: number; id: number; body: Buffer }> = []
    const reader = new FrameReader(max, (buf, start, end) =>
      frames.push({
        kind: buf[start] as number,
        id: buf.readUInt32LE(start + 1),
        body: Buffer.from(buf.subarray(start + 5, end))
      })
    )
    return { frames, reader }
  }

  const build = (n: number): Buffer => {
    const w = new FrameWriter()
    for (let i = 0; i < n; i++) {
      w.begin(Kind.Request, i + 1)
      w.u8(1)
      notificationCodec.encode(w, makeNotification(`name-${i}`, Buffer.alloc(i * 37, i)))
      w.end()
    }
    return w.take()
  }

  it("splits a stream into the frames written, whatever the chunking", () => {
    const bytes = build(20)
    for (const chunk of [1, 2, 3, 7, 64, 1000, bytes.length]) {
      const { frames, reader } = collect(1 << 20)
      for (let off = 0; off < bytes.length; off += chunk)
        expect(reader.push(bytes.subarray(off, off + chunk))).toBeUndefined()
      expect(frames.map((f) => f.id)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1))
      const body = frames[19]?.body as Buffer
      const n = notificationCodec.decode(body, 1, body.length) as { name: Uint8Array; msg: Uint8Array }
      expect(notificationText(n).name).toBe("name-19")
      expect(Buffer.from(n.msg).equals(Buffer.alloc(19 * 37, 19))).toBe(true)
    }
  })

  it("rejects a length prefix above the maximum as soon as its 4 bytes arrive, one byte at a time", () => {
    const { frames, reader } = collect(1024)
    const prefix = Buffer.alloc(4)
    prefix.writeUInt32LE(1 << 30)
    expect(reader.push(prefix.subarray(0, 1))).toBeUndefined()
    expect(reader.push(prefix.subarray(1, 2))).toBeUndefined()
    expect(reader.push(prefix.subarray(2, 3))).toBeUndefined()
    expect(reader.push(prefix.subarray(3, 4))).toMatch(/exceeds the maximum/)
    expect(frames).toHaveLength(0)
  })

  it("rejects a length shorter than a frame header", () => {
    const { reader } = collect(1024)
    expect(reader.push(Buffer.from([2, 0, 0, 0, 1, 0]))).toMatch(/shorter/)
  })

  it("a decoded Notify owns its bytes: no alias of the frame, none of another notification (slab and large)", () => {
    const sizes = [0, 1, 63, 64, 65, 4000, 4096, 4097, 70_000]
    const decoded: Array<{ name: Uint8Array; msg: Uint8Array; fill: number; size: number }> = []
    // enough rounds to roll the shared slab over several times
    for (let round = 0; round < 40; round++) {
      for (const [k, size] of sizes.entries()) {
        const fill = (round * sizes.length + k) % 251
        const w = new FrameWriter()
        notificationCodec.encode(w, makeNotification(`n${fill}`, Buffer.alloc(size, fill)))
        const body = w.take()
        const n = notificationCodec.decode(body, 0, body.length) as { name: Uint8Array; msg: Uint8Array }
        body.fill(0xee) // the frame buffer is reused by the reader: the notification must not change
        decoded.push({ ...n, fill, size })
      }
    }
    for (const d of decoded) {
      expect(Buffer.from(d.name).toString()).toBe(`n${d.fill}`)
      expect(d.msg.length).toBe(d.size)
      expect(d.msg.every((b) => b === d.fill)).toBe(true)
    }
  })

  it("the Notify body codec rejects lengths that overrun or underfill the body", () => {
    const ok = Buffer.from([1, 0, 0, 0, 65, 2, 0, 0, 0, 66, 67])
    expect(notificationText(notificationCodec.decode(ok, 0, ok.length) as never)).toEqual({ name: "A", msg: "BC" })
    expect(() => notificationCodec.decode(ok, 0, ok.length - 1)).toThrow()
    expect(() => notificationCodec.decode(Buffer.concat([ok, Buffer.from([0])]), 0, ok.length + 1)).toThrow()
    const huge = Buffer.from([255, 255, 255, 255, 65])
    expect(() => notificationCodec.decode(huge, 0, huge.length)).toThrow()
  })
})

describe("RpcConfig", () => {
  const read = (json: unknown) => Effect.provide(RpcConfig.RpcConfig, RpcConfig.layerFromJson(json))

  it.effect("defaults: every timeout -1 → the library's 30 s, max notify 16 MiB, no secret, any address", () =>
    Effect.gen(function* () {
      const c = yield* read({})
      expect(c).toEqual({
        requestTimeoutMs: 30_000,
        bootstrapTimeoutMs: 30_000,
        notifyTimeoutMs: 30_000,
        connectTimeoutMs: 30_000,
        maxNotifyBytes: 16 * 1024 * 1024,
        maxDataBytes: 16 * 1024 * 1024,
        probeTimeoutMs: 2000,
        maxConnections: 1024,
        maxInflight: 1024,
        maxUnreadReplyBytes: 16 * 1024 * 1024,
        secret: undefined,
        allowCidrs: []
      })
    })
  )

  it.effect("reads rpc/notify_timeout_ms nested under rpc in the engine's JSON config", () =>
    Effect.gen(function* () {
      const c = yield* read({ rpc: { notify_timeout_ms: 500, connect_timeout_ms: -1 }, other: { x: 1 } })
      expect(c.notifyTimeoutMs).toBe(500)
      expect(c.connectTimeoutMs).toBe(30_000)
    })
  )

  it.scoped("layerFromEnv reads the matching environment variable (RPC_BOOTSTRAP_TIMEOUT_MS)", () =>
    Effect.gen(function* () {
      yield* Effect.acquireRelease(
        Effect.sync(() => {
          process.env.RPC_BOOTSTRAP_TIMEOUT_MS = "750"
        }),
        () => Effect.sync(() => delete process.env.RPC_BOOTSTRAP_TIMEOUT_MS)
      )
      const c = yield* Effect.provide(RpcConfig.RpcConfig, RpcConfig.layerFromEnv)
      expect(c.bootstrapTimeoutMs).toBe(750)
      expect(c.notifyTimeoutMs).toBe(30_000)
    })
  )

  it.effect("a value of the wrong type fails at start with an error that names the key", () =>
    Effect.gen(function* () {
      for (const bad of ["soon", 0, -5, 1.5]) {
        const error = yield* Effect.flip(read({ rpc: { notify_timeout_ms: bad } }))
        expect(String(error)).toContain("notify_timeout_ms")
      }
      const error = yield* Effect.flip(read({ rpc: { max_notify_bytes: "big" } }))
      expect(String(error)).toContain("max_notify_bytes")
    })
  )
})
