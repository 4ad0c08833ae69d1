/**
 * TENT's own wire on the engine's control-plane port: a client speaking yalantinglibs coro_rpc as a Mooncake TENT node
 * does (`@tent/rpc`'s `TentClient`, whose bytes were checked against a real ylt client and server) calls an engine of
 * this project in this process, and the engine's own peers keep using the same port with this project's framing.
 */
import { describe, expect, it } from "@effect/vitest"
import { Bodies, CoroRpc, notificationText, parseAddress, TentClient } from "@tent/rpc"
import { Effect, Layer, Stream } from "effect"
import { Series } from "../src/index.js"
import { engine, rdmaOnly } from "./fixtures/policies.js"

/** The whole series; its config errors (none here) as defects, as the fixture's engines take them. */
const series = Layer.orDie(Series.all)

const hostPort = (address: string) => {
  const at = parseAddress(address)
  if (at === undefined) throw new Error(`not host:port: ${address}`)
  return at
}

describe("an engine answers TENT's coro_rpc on its control-plane port", () => {
  it.scopedLive("Probe, Notify, GetSegmentDesc, SendData/RecvData as TENT answers them; BootstrapRdma refused", () =>
    Effect.gen(function* () {
      const rx = yield* engine({}, series)
      const tent = yield* TentClient.make({ ...hostPort(rx.engine.segmentName), requestTimeout: "10 seconds" })

      yield* tent.probe()

      // Notify: TENT's JSON body, delivered to the engine's consumers byte for byte
      yield* tent.notify("req-17", "prefill done: 4 blocks")
      const got = yield* rx.engine.notifications.pipe(Stream.runHead, Effect.flatten, Effect.timeout("10 seconds"))
      expect(notificationText(got)).toEqual({ name: "req-17", msg: "prefill done: 4 blocks" })

      // GetSegmentDesc: TENT's SegmentDesc JSON, naming the segment and its registered memory
      const memory = Buffer.alloc(4096, 0x5a)
      const local = yield* rx.engine.registerSegment(memory)
      const desc = yield* tent.getSegmentDesc()
      expect(desc.name).toBe(rx.engine.segmentName)
      expect(desc.type).toBe("memory")
      if (desc.type !== "memory") return
      expect(desc.rpc_server_addr).toBe(rx.engine.segmentName)
      const buffer = desc.detail.buffers.find((b) => Number(b.addr) === local.addr)
      expect(Number(buffer?.length)).toBe(4096)

      // SendData then RecvData: the bytes land in the registered buffer and come back
      const bytes = Buffer.from("written by a TENT peer")
      const sent = yield* tent.call(
        CoroRpc.TentFuncId.SendData,
        Bodies.encodeXferData({ peerMemAddr: BigInt(local.addr + 100), length: BigInt(bytes.length) }, bytes)
      )
      expect(sent.length).toBe(0) // empty = OK in TENT's `sendData`
      expect(memory.subarray(100, 100 + bytes.length)).toEqual(bytes)
      const back = yield* tent.call(
        CoroRpc.TentFuncId.RecvData,
        Bodies.encodeXferData({ peerMemAddr: BigInt(local.addr + 100), length: BigInt(bytes.length) })
      )
      expect(back).toEqual(bytes)
      // outside the registered buffer: TENT's error text, memory untouched
      const refused = yield* tent.call(
        CoroRpc.TentFuncId.SendData,
        Bodies.encodeXferData({ peerMemAddr: BigInt(local.addr + 4090), length: 16n }, Buffer.alloc(16))
      )
      expect(refused.toString()).toMatch(/^SendData failed: /)
      expect(memory.subarray(4090)).toEqual(Buffer.alloc(6, 0x5a))
      const short = yield* tent.call(
        CoroRpc.TentFuncId.RecvData,
        Bodies.encodeXferData({ peerMemAddr: 16n, length: 8n })
      )
      expect(short.toString()).toMatch(/^RecvData failed: /)

      // BootstrapRdma: a descriptor whose reply_msg says why, and no GID (TENT's initiator stops at "Missing peer GID")
      const boot = yield* tent.bootstrap({ ...Bodies.emptyBootstrapDesc, local_nic_path: "tent-peer@mlx5_0" })
      expect(boot.reply_msg).toMatch(/^NOT_SUPPORTED/)
      expect(boot.local_gid).toBe("")

      // an id TENT has no handler for: an empty success, as TENT's `process` answers
      expect((yield* tent.call(42)).length).toBe(0)
    })
  )

  it.scopedLive("the engine's own peers keep this project's framing on the same port", () =>
    Effect.gen(function* () {
      const rx = yield* engine({}, series)
      const tx = yield* engine(rdmaOnly, series)
      const tent = yield* TentClient.make(hostPort(rx.engine.segmentName))
      yield* tent.notify("from-tent", "1")
      yield* tx.engine.sendNotification(rx.engine.segmentName, {
        name: Buffer.from("from-tent-ts"),
        msg: Buffer.from("2")
      })
      yield* tent.notify("from-tent", "3")
      const got = yield* rx.engine.notifications.pipe(Stream.take(3), Stream.runCollect, Effect.timeout("20 seconds"))
      const seen = Array.from(got, (n) => notificationText(n).name + notificationText(n).msg).sort()
      expect(seen).toEqual(["from-tent-ts2", "from-tent1", "from-tent3"])
    })
  )

  it.scopedLive(
    "a TENT Notify above rpc/max_notify_bytes is dropped as the lean wire refuses it (TENT's wire answers empty)",
    () =>
      Effect.gen(function* () {
        const rx = yield* engine({ rpc: { max_notify_bytes: 64 } }, series)
        const tent = yield* TentClient.make(hostPort(rx.engine.segmentName))
        yield* tent.notify("big", "x".repeat(100))
        yield* tent.notify("small", "fits")
        const got = yield* rx.engine.notifications.pipe(Stream.runHead, Effect.flatten, Effect.timeout("10 seconds"))
        // without the limit on this wire the 100-byte one arrives first
        expect(notificationText(got)).toEqual({ name: "small", msg: "fits" })
      })
  )
})
