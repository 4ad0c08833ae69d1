/**
 * TENT's own wire on the control plane's port: a Mooncake TENT node calls `CoroRpcAgent::process(func_id)` over
 * yalantinglibs coro_rpc (see `src/tent/`), this project's peers speak the lean framing of `frame.ts`. The first
 * bytes of a connection tell which ({@link classify}); a TENT connection is answered by the handlers of
 * {@link makeTentHandlers}, which call the same `ControlPlane` handlers and the same registered memory as the lean
 * wire, with TENT's bodies and TENT's answers.
 */
import type * as Net from "node:net"
import * as Rpc from "@effect/rpc/Rpc"
import { Context, Effect, Either, Exit, type Runtime } from "effect"
import { ControlPlane, type ControlPlaneHandlers } from "../ControlPlane.js"
import { DataTooLarge, SegmentRangeInvalid } from "../Errors.js"
import { makeNotification, type SegmentDesc } from "../Models.js"
import * as Bodies from "../tent/Bodies.js"
import * as CoroRpc from "../tent/CoroRpc.js"
import type { TentHandler } from "../tent/TentServer.js"
import type { DataHandlers } from "./data.js"
import * as TentSegment from "./tentSegment.js"

/** Bytes that decide: a coro_rpc request header up to its `function_id` (`[magic 21, version 0, 0, 0, seq, id]`). */
const SNIFF_BYTES = 12

/**
 * Which wire a connection speaks, from its first bytes: `"tent"` for a coro_rpc request to TENT's one function (magic
 * 21, version 0, struct_pack, a request, and `function_id` that of `CoroRpcAgent::process`), `"lean"` for anything
 * else, undefined while too few bytes have come to tell. A lean frame's first four bytes are its length: one that
 * begins `15 00 00 00` (21 bytes) has its id's high byte and RPC index where TENT's `function_id` is, never
 * `0d 66 74 ff`.
 */
export const classify = (head: Buffer): "tent" | "lean" | undefined => {
  if (head.length === 0) return undefined
  if (head[0] !== CoroRpc.MAGIC) return "lean"
  const upto = Math.min(head.length, 4)
  for (let i = 1; i < upto; i++) if (head[i] !== 0) return "lean"
  if (head.length < SNIFF_BYTES) return undefined
  return head.readUInt32LE(8) === CoroRpc.PROCESS_FUNCTION_ID ? "tent" : "lean"
}

/**
 * Reads a paused, just-accepted socket until {@link classify} decides, puts the bytes back (`unshift`), pauses it
 * and hands it to `route` (whose handler resumes it). Nothing is lost: the bytes read to decide are the first ones
 * the chosen handler reads.
 */
export const sniff = (socket: Net.Socket, route: (wire: "tent" | "lean") => void): void => {
  let head: Buffer | undefined
  const onData = (chunk: Buffer): void => {
    head = head === undefined ? chunk : Buffer.concat([head, chunk])
    const wire = classify(head)
    if (wire === undefined) return
    socket.off("data", onData)
    socket.pause()
    socket.unshift(head)
    route(wire)
  }
  socket.on("data", onData)
  socket.resume()
}

/** The group's handler of `tag` as a function of its payload, run with the handler's own context. */
const groupHandler = (
  runtime: Runtime.Runtime<never>,
  tag: "Notify" | "GetSegmentDesc"
): ((payload: unknown) => Effect.Effect<unknown, unknown>) => {
  const rpc = ControlPlane.requests.get(tag) as unknown as Rpc.AnyWithProps
  const entry = runtime.context.unsafeMap.get(rpc.key) as Rpc.Handler<typeof tag> | undefined
  if (entry === undefined) return () => Effect.dieMessage(`no ${tag} handler`)
  const context = Context.merge(entry.context, runtime.context)
  return (payload) => {
    const result = entry.handler(payload as never, { clientId: 0, headers: {} as never }) as object
    const effect = (Rpc.isWrapper(result) ? result.value : result) as Effect.Effect<unknown, unknown>
    // complete already (`Effect.void`, a failure): no context to provide, no fiber to run it in
    return Exit.isExit(effect) ? effect : Effect.provide(effect, context)
  }
}

/** What TENT answers a `BootstrapRdma` with when it cannot bootstrap, and why this engine cannot on this wire. */
export const BOOTSTRAP_REFUSAL =
  "NOT_SUPPORTED: tent does not bootstrap RDMA endpoints over TENT's wire; use the TCP transport (SendData, RecvData, Notify)"

const text = (s: string): Buffer => Buffer.from(s, "utf8")

/** A `u64` of a TENT header as a number, or -1 when it is not a safe integer. */
const safe = (n: bigint): number => (n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : -1)

/** Counters of TENT's wire on one server. */
export interface TentWireStats {
  /** `Notify` calls handed to the engine. */
  notified: number
  /**
   * `Notify` calls whose body TENT would not parse, larger than `rpc/max_notify_bytes`, or the engine refused
   * (answered empty, as TENT answers a body it cannot take).
   */
  notifyDropped: number
}

/**
 * The handlers of TENT's func ids on this server, as TENT's `ControlService` answers them
 * (`control_plane.cpp:339-482`): `GetSegmentDesc` the segment's descriptor JSON; `BootstrapRdma` a `BootstrapDesc`
 * whose `reply_msg` refuses ({@link BOOTSTRAP_REFUSAL}); `SendData` empty or the error text; `RecvData` the bytes or
 * the error text; `Notify` empty always (TENT swallows a bad body); `Probe` empty. Other ids are answered empty by
 * the server (TENT's rule for an id without a handler).
 */
export const makeTentHandlers = (
  runtime: Runtime.Runtime<ControlPlaneHandlers>,
  data: DataHandlers,
  maxNotifyBytes: number,
  stats: TentWireStats
): ReadonlyMap<number, TentHandler> => {
  const notify = groupHandler(runtime as Runtime.Runtime<never>, "Notify")
  const getSegmentDesc = groupHandler(runtime as Runtime.Runtime<never>, "GetSegmentDesc")
  const handlers = new Map<number, TentHandler>()

  handlers.set(CoroRpc.TentFuncId.GetSegmentDesc, () =>
    Effect.map(getSegmentDesc(undefined), (desc) =>
      text(TentSegment.encode(desc as SegmentDesc, TentSegment.localMachineId()))
    )
  )
  handlers.set(CoroRpc.TentFuncId.BootstrapRdma, () =>
    Effect.sync(() => {
      const reply = Bodies.encodeBootstrapDesc({ ...Bodies.emptyBootstrapDesc, reply_msg: BOOTSTRAP_REFUSAL })
      return Either.getOrThrow(reply)
    })
  )
  handlers.set(CoroRpc.TentFuncId.SendData, (request) =>
    Effect.sync(() => {
      const decoded = Bodies.decodeXferData(request, true)
      if (Either.isLeft(decoded)) return text(`SendData failed: ${decoded.left.message}`)
      const { desc, data: bytes } = decoded.right
      const region = data.resolve(safe(desc.peerMemAddr), safe(desc.length))
      if (region instanceof SegmentRangeInvalid || region instanceof DataTooLarge)
        return text(`SendData failed: ${region.message}`)
      region.buffer.set(bytes, region.offset)
      data.stats.sent++
      return undefined
    })
  )
  handlers.set(CoroRpc.TentFuncId.RecvData, (request) =>
    Effect.sync(() => {
      const decoded = Bodies.decodeXferData(request, false)
      if (Either.isLeft(decoded)) return text(`RecvData failed: ${decoded.left.message}`)
      const { desc } = decoded.right
      const length = safe(desc.length)
      const region = data.resolve(safe(desc.peerMemAddr), length)
      if (region instanceof SegmentRangeInvalid || region instanceof DataTooLarge)
        return text(`RecvData failed: ${region.message}`)
      data.stats.received++
      return Buffer.from(region.buffer.subarray(region.offset, region.offset + length))
    })
  )
  handlers.set(CoroRpc.TentFuncId.Notify, (request) => {
    const decoded = Bodies.decodeNotify(request)
    if (Either.isLeft(decoded)) {
      stats.notifyDropped++
      return Effect.succeed(undefined)
    }
    const n = makeNotification(decoded.right.name, decoded.right.msg)
    // the lean wire's limit (`NotificationTooLarge` there); TENT's wire has no error to say it with
    if (n.name.length + n.msg.length > maxNotifyBytes) {
      stats.notifyDropped++
      return Effect.succeed(undefined)
    }
    const delivered = notify(n)
    if (Exit.isExit(delivered)) {
      if (Exit.isSuccess(delivered)) stats.notified++
      else stats.notifyDropped++
      return Exit.void as Exit.Exit<undefined>
    }
    return delivered.pipe(
      Effect.matchCause({
        onFailure: () => {
          stats.notifyDropped++
          return undefined
        },
        onSuccess: () => {
          stats.notified++
          return undefined
        }
      })
    )
  })
  handlers.set(CoroRpc.TentFuncId.Probe, () => Effect.succeed(undefined))
  return handlers
}
