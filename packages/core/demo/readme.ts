import { RailHealth } from "@tent/health"
import { makeNotification, notificationText } from "@tent/rpc"
import { SoftVerbs } from "@tent/verbs"
import { Context, Effect, Layer, Stream } from "effect"
import { EngineConfig, Series, TransferEngine } from "../src/index.js"

// An engine on two SoftVerbs devices with the whole series (Series.all), config from JSON.
const engine = (nic: string) =>
  TransferEngine.layer.pipe(
    Layer.provide([SoftVerbs.layer({ devices: [{ name: `${nic}0` }, { name: `${nic}1` }] }), Series.all]),
    Layer.provide(RailHealth.layerConfig),
    Layer.provide(EngineConfig.layerProvider({ json: { transports: { rdma: { num_lanes: 2 } } } })),
    Layer.build,
    Effect.map(Context.get(TransferEngine.TransferEngine))
  )

export const program = Effect.gen(function* () {
  const [a, b] = [yield* engine("a"), yield* engine("b")]
  const src = yield* a.registerSegment(Buffer.from("hello, rdma"))
  const dst = yield* b.registerSegment(Buffer.alloc(11))
  const target = yield* a.openSegment(b.segmentName)
  const batch = yield* a.allocateBatch
  const write = { opcode: "WRITE", source: src.addr, target, targetOffset: dst.addr, length: 11 } as const
  yield* a.submitTransfer(batch, [write], makeNotification("done", "batch 1"))
  yield* a.waitTransfer(batch)
  const note = yield* b.notifications.pipe(Stream.runHead, Effect.flatten)
  return { note: notificationText(note), data: dst.buffer.toString() }
}).pipe(Effect.scoped)
