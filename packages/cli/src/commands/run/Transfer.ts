/**
 * The body of `tent transfer` (loaded when the command runs).
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import { EngineConfig } from "@tent/core"
import { makeNotification, RpcAgent, RpcConfig } from "@tent/rpc"
import { Console, Effect, Layer, Option } from "effect"
import { checkPeer, configSource, makeNode } from "../../Node.js"
import type { TransferOptions } from "../../Options.js"
import { CliFailure, failWith } from "../../Render.js"
import { pattern } from "./pattern.js"
import { drained } from "./Send.js"

export const run = (o: TransferOptions) =>
  Effect.scoped(
    Effect.gen(function* () {
      if (o.bytes <= 0) return yield* Effect.fail(new CliFailure("--bytes must be positive"))
      const notification = Option.map(o.notify, (n) => makeNotification(n.name, n.msg))
      yield* checkPeer(o, o.peer)
      const { engine, diagnostics } = yield* makeNode(o)
      const agent = yield* RpcAgent.make.pipe(
        Effect.provide(RpcConfig.layerConfig.pipe(Layer.provide(EngineConfig.layerProvider(configSource(o)))))
      )
      const desc = yield* agent.getSegmentDesc(o.peer)
      const target = desc.buffers[0]
      if (target === undefined) {
        return yield* Effect.fail(
          new CliFailure(`segment ${o.peer} has no registered buffer; check: tent serve --segment-size`)
        )
      }
      if (o.offset < 0 || o.offset + o.bytes > target.length) {
        return yield* Effect.fail(
          new CliFailure(
            `[${o.offset}, +${o.bytes}) does not fit the ${target.length}-byte buffer of ${o.peer}; check: --offset, --bytes, tent serve --segment-size`
          )
        )
      }
      const data = pattern(o.bytes, o.seed)
      const local = yield* engine.registerSegment(data)
      const handle = yield* engine.openSegment(o.peer)
      const t0 = performance.now()
      const batch = yield* engine.allocateBatch
      const request = {
        opcode: "WRITE",
        source: local.addr,
        target: handle,
        targetOffset: target.addr + o.offset,
        length: o.bytes
      } as const
      yield* engine.submitTransfer(batch, [request], Option.getOrUndefined(notification))
      const status = yield* engine.waitTransfer(batch, 120_000)
      if (status.status !== "COMPLETED") {
        return yield* Effect.fail(
          new CliFailure(
            `WRITE of ${o.bytes} bytes to ${o.peer} ended ${status.status} (${status.transferredBytes} bytes moved); check: the peer is running and its port is up`
          )
        )
      }
      const ms = performance.now() - t0
      if (Option.isSome(notification)) yield* drained(diagnostics, o.peer)
      const sha = createHash("sha256").update(data).digest("hex")
      if (o.verify) {
        const back = Buffer.alloc(o.bytes)
        const mine = yield* engine.registerSegment(back)
        const read = yield* engine.allocateBatch
        yield* engine.submitTransfer(read, [{ ...request, opcode: "READ", source: mine.addr }])
        const rs = yield* engine.waitTransfer(read, 120_000)
        if (rs.status !== "COMPLETED" || !back.equals(data)) {
          return yield* Effect.fail(
            new CliFailure(`reading the range back from ${o.peer} did not return the bytes written (${rs.status})`)
          )
        }
      }
      yield* Console.log(
        `wrote ${o.bytes} bytes to ${o.peer} at ${target.addr + o.offset} in ${ms.toFixed(1)} ms (${((o.bytes / ms) * 1e-3).toFixed(1)} MB/s), sha256 ${sha}${o.verify ? ", read back identical" : ""}`
      )
    })
  ).pipe(failWith("transfer", o.peer))
