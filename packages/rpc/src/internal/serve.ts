import type * as Net from "node:net"
import * as Headers from "@effect/platform/Headers"
import * as Rpc from "@effect/rpc/Rpc"
import * as RpcMessage from "@effect/rpc/RpcMessage"
import * as RpcSchema from "@effect/rpc/RpcSchema"
import * as RpcServer from "@effect/rpc/RpcServer"
import { Cause, Context, Effect, Exit, type Fiber, FiberId, Runtime, type Scope } from "effect"
import { ControlPlane, type ControlPlaneHandlers, type ControlPlaneRpcs } from "../ControlPlane.js"
import { NotificationTooLarge } from "../Errors.js"
import * as Auth from "./auth.js"
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
import { type Limits, type Rejections, reject } from "./listener.js"
import { destroyAll } from "./sockets.js"

interface Client {
  readonly id: number
  readonly framed: FramedSocket
  reader: FrameReader
  /** `open` once served (at once without a secret); else the handshake's step. */
  auth: "hello" | "proof" | "open"
  /** Between `Hello` and `Proof`: the proof expected and the name claimed. */
  claim: Auth.Pending | undefined
  /** What every handler of this connection is given: the proven name (`x-tent-peer`), or nothing. */
  headers: Headers.Headers
  /** Reads on after a stop of the reader (backpressure), when the connection's budgets allow it. */
  readonly wake: () => void
  /** The socket was paused for backpressure (not by a freeze of the listener). */
  stopped: boolean
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
  /** The listener's counters of refused connections. */
  readonly rejected: Rejections
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
        const result = handler.handler(payload, { clientId: client.id, headers: client.headers }) as object
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
          headers: client.headers
        })
      )
    }

    /** Refuses the connection before anything is served: counted, and thrown to close it with a `ProtocolError`. */
    const refuse = (reason: Auth.RejectReason, text: string): never => {
      reject(config.rejected, reason)
      throw new Error(text)
    }

    /** A frame of a connection still proving itself: `Hello`, then `Proof`; anything else closes it, counted. */
    const onAuthFrame = (client: Client, kind: number | undefined, buf: Buffer, body: number, end: number): void => {
      const secret = config.secret as Uint8Array
      if (client.auth === "hello") {
        if (kind !== Auth.AuthKind.Hello) {
          refuse(
            "auth_required",
            "authentication required: this server serves only peers holding its shared secret (set TENT_RPC_SECRET " +
              "or rpc/auth_secret_file to the same secret on the caller)"
          )
        }
        const answer = Auth.answerHello(secret, buf, body, end)
        if (typeof answer === "string") refuse("auth_failed", `authentication failed: ${answer}`)
        const { challenge, pending } = answer as Exclude<typeof answer, string>
        client.claim = pending
        client.auth = "proof"
        const w = client.framed.writer
        w.begin(Auth.AuthKind.Challenge, 0)
        w.bytes(challenge)
        w.end()
        client.framed.flushSoon()
        return
      }
      const claim = client.claim as Auth.Pending
      if (kind !== Auth.AuthKind.Proof || !Auth.sameProof(claim.expect, buf, body, end)) {
        client.claim = undefined
        refuse("auth_failed", "authentication failed: the caller does not hold this server's shared secret")
      }
      client.auth = "open"
      client.claim = undefined
      // every authenticated connection carries the name it proved, empty included (an empty name names no segment)
      client.headers = Headers.fromInput({ [Auth.PEER_HEADER]: claim.name })
    }

    const onFrame = (client: Client, buf: Buffer, start: number, end: number): void => {
      const kind = buf[start]
      if (client.auth !== "open") {
        onAuthFrame(client, kind, buf, start + 5, end)
        return
      }
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
        case Auth.AuthKind.Hello:
          throw new Error(
            config.secret === undefined
              ? "this server has no shared secret (TENT_RPC_SECRET / rpc/auth_secret_file): set the same one on both sides, or none"
              : "a second Hello on an authenticated connection"
          )
        default:
          throw new Error(`unexpected frame kind ${kind}`)
      }
    }

    /** Whether the connection is over one of its budgets: requests in hand, or reply bytes its peer has not read. */
    const blocked = (client: Client): boolean =>
      client.inflight.size + client.fibers.size >= config.maxInflight ||
      client.framed.writer.length + client.framed.socket.writableLength > config.maxUnreadReplyBytes

    /** After the reader took bytes (or read on): a malformed stream closes; a stop pauses the socket. */
    const afterRead = (client: Client, bad: string | undefined): void => {
      const socket = client.framed.socket
      if (bad !== undefined) {
        socket.pause()
        client.framed.protocolError(bad)
      } else if (client.reader.held) {
        client.stopped = true
        socket.pause()
      } else if (client.stopped) {
        client.stopped = false
        socket.resume()
      }
    }

    const onSocket = (socket: Net.Socket): void => {
      socket.setNoDelay(true)
      const client: Client = {
        id: nextClientId++,
        framed: new FramedSocket(socket),
        reader: undefined as unknown as FrameReader,
        auth: config.secret === undefined ? "open" : "hello",
        claim: undefined,
        headers: Headers.empty,
        stopped: false,
        wake: () => {
          if (!client.reader.held || socket.destroyed || socket.writableEnded || blocked(client)) return
          afterRead(client, client.reader.resume())
        },
        inflight: new Map(),
        fibers: new Map()
      }
      client.reader = new FrameReader(
        maxFrame,
        (buf, start, end) => onFrame(client, buf, start, end),
        () => blocked(client)
      )
      clients.set(client.id, client)
      if (client.auth !== "open") {
        const timer = setTimeout(() => {
          if (client.auth === "open" || socket.destroyed) return
          reject(config.rejected, "auth_required")
          socket.destroy()
        }, Auth.AUTH_TIMEOUT_MS)
        timer.unref()
        socket.once("close", () => clearTimeout(timer))
      }
      socket.on("data", (chunk: Buffer) => {
        if (socket.destroyed || socket.writableEnded) return
        afterRead(client, client.reader.push(chunk))
      })
      socket.on("drain", client.wake)
      socket.on("close", () => {
        // a caller that left after the challenge: it could not check the server's proof (another secret)
        if (client.auth === "proof" && client.claim !== undefined) reject(config.rejected, "auth_failed")
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
  // a reader stopped for requests in hand reads on once this reply leaves room (after the current read, if any)
  if (client.reader.held) queueMicrotask(client.wake)
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
