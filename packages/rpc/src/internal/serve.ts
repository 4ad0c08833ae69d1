import type * as Net from "node:net"
import * as Headers from "@effect/platform/Headers"
import * as Rpc from "@effect/rpc/Rpc"
import * as RpcMessage from "@effect/rpc/RpcMessage"
import * as RpcSchema from "@effect/rpc/RpcSchema"
import * as RpcServer from "@effect/rpc/RpcServer"
import { Cause, Context, Effect, Exit, type Fiber, FiberId, Runtime, type Scope } from "effect"
import { ControlPlane, type ControlPlaneHandlers, type ControlPlaneRpcs } from "../ControlPlane.js"
import { NotificationTooLarge } from "../Errors.js"
import {
  allSpecs,
  dataSpecByTag,
  maxFrameBytes,
  notificationAt,
  notifyRanges,
  type RpcSpec,
  specByTag
} from "./codec.js"
import type { DataHandlers } from "./data.js"
import { FrameReader, Kind } from "./frame.js"
import { FramedSocket, writeBody, writeFailure } from "./framed.js"
import type { Limits } from "./listener.js"
import { destroyAll } from "./sockets.js"

interface Client {
  readonly id: number
  readonly framed: FramedSocket
  readonly reader: FrameReader
  /** Requests handed to `RpcServer.makeNoSerialization` and not answered yet, by wire id. */
  readonly inflight: Map<number, RpcSpec>
  /** `Notify` handler fibers started directly (see {@link makeConnectionHandler}) and not finished yet, by wire id. */
  readonly fibers: Map<number, Fiber.RuntimeFiber<unknown, unknown>>
}

/** How `Notify` reaches its handler without the per-request glue of `RpcServer.makeNoSerialization`. */
interface DirectHandler {
  readonly handler: (
    payload: unknown,
    options: { readonly clientId: number; readonly headers: Headers.Headers }
  ) => unknown
  readonly runFork: (effect: Effect.Effect<unknown, unknown>) => Fiber.RuntimeFiber<unknown, unknown>
}

/** What a served connection needs besides the handlers in context. */
export interface ServeConfig extends Limits {
  readonly data: DataHandlers
}

/** A connection handler and how to close what it serves. */
export interface ConnectionHandler {
  /** Takes over a socket the listener accepted (paused, its errors swallowed): reads its frames and answers them. */
  readonly onSocket: (socket: Net.Socket) => void
  /** Closes every connection it serves; completes once all have closed. */
  readonly closeAll: Effect.Effect<void>
}

/**
 * Serves the {@link ControlPlane} handlers in context over accepted sockets. `Bootstrap`, `GetSegmentDesc` and
 * `Probe` run under `RpcServer.makeNoSerialization`. `Notify`, the hot path, goes straight to the group's own handler:
 * one fiber per request forked from a runtime built once, or no fiber when the handler's effect is already an `Exit`.
 * A malformed frame, an unknown RPC or a length prefix above the limit closes that connection only. When the scope
 * ends, the handler fibers still running are interrupted and awaited.
 */
export const makeConnectionHandler = (
  config: ServeConfig
): Effect.Effect<ConnectionHandler, never, ControlPlaneHandlers | Scope.Scope> =>
  Effect.gen(function* () {
    const { data, maxNotifyBytes } = config
    const maxFrame = maxFrameBytes(maxNotifyBytes, config.maxDataBytes)
    const clients = new Map<number, Client>()
    let nextClientId = 1

    const deliver = (response: RpcMessage.FromServer<ControlPlaneRpcs>): void => {
      if (response._tag !== "Exit") return
      const client = clients.get(response.clientId)
      if (client === undefined) return
      const id = Number(response.requestId)
      const spec = client.inflight.get(id)
      if (spec === undefined) return
      client.inflight.delete(id)
      writeExit(client, id, spec, response.exit)
    }

    const rpc = yield* RpcServer.makeNoSerialization(ControlPlane, {
      onFromServer: (response) => Effect.sync(() => deliver(response)),
      disableTracing: true,
      disableClientAcks: true,
      disableFatalDefects: true
    })
    const runtime = yield* Effect.runtime<never>()
    const runSync = Runtime.runSync(runtime)
    const notifySpec = specByTag.Notify
    const direct = directHandler(runtime, "Notify")

    /**
     * Runs `Notify` on its handler in a fiber of its own; the reply goes out when the fiber exits. A handler that
     * returns an effect that is already an `Exit` (`Effect.void`, `Effect.succeed`) is answered without a fiber.
     */
    const dispatch = (client: Client, id: number, handler: DirectHandler, payload: unknown): void => {
      let fiber: Fiber.RuntimeFiber<unknown, unknown>
      try {
        const result = handler.handler(payload, { clientId: client.id, headers: Headers.empty }) as object
        const wrapped = Rpc.isWrapper(result)
        let effect = (wrapped ? result.value : result) as Effect.Effect<unknown, unknown>
        if (Exit.isExit(effect)) {
          // `Effect.void`, `Effect.succeed(..)`: already complete, so a fiber would only exit with it at once
          writeExit(client, id, notifySpec, effect)
          return
        }
        if (wrapped && result.uninterruptible) effect = Effect.uninterruptible(effect)
        fiber = handler.runFork(effect)
      } catch (e) {
        writeExit(client, id, notifySpec, Exit.die(e))
        return
      }
      const exit = fiber.unsafePoll()
      if (exit !== null) {
        writeExit(client, id, notifySpec, exit)
        return
      }
      client.fibers.set(id, fiber)
      fiber.addObserver((exit) => {
        if (client.fibers.get(id) !== fiber) return // abandoned by the caller, or the connection closed
        client.fibers.delete(id)
        writeExit(client, id, notifySpec, exit)
      })
    }

    /** A `Notify` request: the body checked (a stamp trailer allowed), its size, then its handler. */
    const onNotify = (client: Client, id: number, buf: Buffer, start: number, end: number): void => {
      const ranges = notifyRanges(buf, start, end)
      const size = ranges.nameEnd - ranges.nameStart + (ranges.msgEnd - ranges.msgStart)
      if (size > maxNotifyBytes) {
        writeFailure(client.framed, id, notifySpec, new NotificationTooLarge({ size, max: maxNotifyBytes }))
        return
      }
      const payload = notificationAt(buf, ranges)
      if (direct !== undefined) dispatch(client, id, direct, payload)
      else toRpcServer(client, id, notifySpec, payload)
    }

    const toRpcServer = (client: Client, id: number, spec: RpcSpec, payload: unknown): void => {
      client.inflight.set(id, spec)
      runSync(
        rpc.write(client.id, {
          _tag: "Request",
          id: RpcMessage.RequestId(BigInt(id)),
          tag: spec.tag as ControlPlaneRpcs["_tag"],
          payload: payload as never,
          headers: Headers.empty
        })
      )
    }

    const onFrame = (client: Client, buf: Buffer, start: number, end: number): void => {
      const kind = buf[start]
      const id = buf.readUInt32LE(start + 1)
      const body = start + 5
      switch (kind) {
        case Kind.Request: {
          if (body >= end) throw new Error("request without an RPC index")
          const spec = allSpecs[buf[body] as number]
          if (spec === undefined) throw new Error(`unknown RPC index ${buf[body]}`)
          if (client.inflight.has(id) || client.fibers.has(id))
            throw new Error(`request id ${id} reused while in flight`)
          if (spec === notifySpec) onNotify(client, id, buf, body + 1, end)
          else if (spec === dataSpecByTag.SendData) data.sendData(client.framed, id, buf, body + 1, end)
          else if (spec === dataSpecByTag.RecvData) data.recvData(client.framed, id, buf, body + 1, end)
          else toRpcServer(client, id, spec, spec.payload.decode(buf, body + 1, end))
          return
        }
        case Kind.Interrupt: {
          const fiber = client.fibers.get(id)
          if (fiber !== undefined) {
            client.fibers.delete(id)
            fiber.unsafeInterruptAsFork(FiberId.none)
            return
          }
          if (!client.inflight.has(id)) return
          client.inflight.delete(id)
          runSync(
            rpc.write(client.id, { _tag: "Interrupt", requestId: RpcMessage.RequestId(BigInt(id)), interruptors: [] })
          )
          return
        }
        case Kind.ProtocolError: {
          client.framed.socket.destroy()
          return
        }
        default:
          throw new Error(`unexpected frame kind ${kind}`)
      }
    }

    const onSocket = (socket: Net.Socket): void => {
      socket.setNoDelay(true)
      const client: Client = {
        id: nextClientId++,
        framed: new FramedSocket(socket),
        reader: new FrameReader(maxFrame, (buf, start, end) => onFrame(client, buf, start, end)),
        inflight: new Map(),
        fibers: new Map()
      }
      clients.set(client.id, client)
      socket.on("data", (chunk: Buffer) => {
        if (socket.destroyed || socket.writableEnded) return
        const bad = client.reader.push(chunk)
        if (bad !== undefined) {
          socket.pause()
          client.framed.protocolError(bad)
        }
      })
      socket.on("close", () => {
        clients.delete(client.id)
        client.inflight.clear()
        interruptAll(client)
        runSync(rpc.disconnect(client.id))
      })
      socket.resume()
    }

    /** Interrupts the client's direct handler fibers (their replies are not sent). */
    const interruptAll = (client: Client): Array<Fiber.RuntimeFiber<unknown, unknown>> => {
      const fibers = Array.from(client.fibers.values())
      client.fibers.clear()
      for (const fiber of fibers) fiber.unsafeInterruptAsFork(FiberId.none)
      return fibers
    }
    // on shutdown (after the connections closed): the handler fibers still running end before the scope does
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        const fibers = Array.from(clients.values()).flatMap(interruptAll)
        return Effect.forEach(fibers, (f) => f.await, { discard: true })
      })
    )

    const closeAll = Effect.suspend(() => destroyAll(Array.from(clients.values(), (c) => c.framed.socket)))
    return { onSocket, closeAll }
  })

/** Writes the reply frame of request `id` from its handler's exit. */
const writeExit = (client: Client, id: number, spec: RpcSpec, exit: Exit.Exit<unknown, unknown>): void => {
  const w = client.framed.writer
  if (Exit.isSuccess(exit)) {
    writeBody(w, id, spec, true, exit.value)
  } else {
    const failure = Cause.failureOption(exit.cause)
    if (failure._tag === "Some") {
      writeBody(w, id, spec, false, failure.value)
    } else if (Cause.isInterruptedOnly(exit.cause)) {
      w.begin(Kind.Interrupted, id)
    } else {
      w.begin(Kind.Defect, id)
      const squashed = Cause.squash(exit.cause)
      w.utf8((squashed instanceof Error ? `${squashed.name}: ${squashed.message}` : String(squashed)).slice(0, 4096))
    }
  }
  w.end()
  client.framed.flushSoon()
}

/**
 * The group's handler of `tag` with a runtime to fork it from (the handler's context merged with the server's, once),
 * or undefined when that RPC needs what only `RpcServer` does: middleware or a streamed reply.
 */
const directHandler = (runtime: Runtime.Runtime<never>, tag: "Notify"): DirectHandler | undefined => {
  const rpc = ControlPlane.requests.get(tag) as unknown as Rpc.AnyWithProps
  if (rpc.middlewares.size > 0 || RpcSchema.isStreamSchema(rpc.successSchema)) return undefined
  const entry = runtime.context.unsafeMap.get(rpc.key) as Rpc.Handler<typeof tag> | undefined
  if (entry === undefined) return undefined
  const forked = Runtime.make({
    context: Context.merge(entry.context, runtime.context),
    fiberRefs: runtime.fiberRefs,
    runtimeFlags: runtime.runtimeFlags
  })
  const runFork = Runtime.runFork(forked)
  return { handler: entry.handler, runFork: (effect) => runFork(effect) }
}
