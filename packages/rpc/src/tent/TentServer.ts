/**
 * A coro_rpc listener that answers as a TENT node's `CoroRpcAgent` does (`src/rpc/rpc.cpp:98-178`): one registered
 * function, `process(int func_id)`, dispatching the int to the caller's handlers with the request attachment and
 * sending back their reply as the response attachment.
 *
 * Behaviour copied from TENT and ylt: an unknown func id gets an empty success (`rpc.cpp:153-154`); a handler that
 * fails gets `err_code` 10 `rpc_throw_exception` with its message (ylt `router.hpp:254-261`); a request for another
 * `function_id` gets 11 "the rpc function not registered" (`router.hpp:263-266`); an argument that is not an int gets
 * 4 "invalid rpc function arguments" (`rpc_execute.hpp:204-208`). Handlers of one connection run one at a time, in
 * order, as TENT's inline handlers do. A malformed frame (bad magic, version, serialize type, or a length over the
 * caps) is counted and its connection closed (`coro_connection.hpp:232-240, 280-290`); nothing a peer sends can
 * crash the server.
 *
 * @since 0.2.0
 */
import * as Net from "node:net"
import { Cause, Data, Effect, Either, Exit, Runtime, type Scope } from "effect"
import { destroyAll } from "../internal/sockets.js"
import * as CoroRpc from "./CoroRpc.js"

/**
 * Handles one func id: the request attachment in, the response attachment out (nothing = empty). A failure or defect
 * is answered with `rpc_throw_exception` carrying its message.
 *
 * @since 0.2.0
 */
export type TentHandler = (request: Buffer) => Effect.Effect<Uint8Array | undefined, unknown>

/**
 * The listener could not start.
 *
 * @since 0.2.0
 */
export class TentServerError extends Data.TaggedError("TentServerError")<{ readonly message: string }> {}

/**
 * Options: the handlers by TENT func id; where to listen (127.0.0.1, a free port by default).
 *
 * @since 0.2.0
 */
export interface TentServerOptions {
  readonly handlers: ReadonlyMap<number, TentHandler>
  readonly host?: string
  readonly port?: number
  readonly limits?: CoroRpc.FrameLimits
  /** Default {@link CoroRpc.PROCESS_FUNCTION_ID}. */
  readonly functionId?: number
}

/**
 * Counters since start.
 *
 * @since 0.2.0
 */
export interface TentServerStats {
  readonly connections: number
  readonly requests: number
  /** Connections closed for a malformed frame. */
  readonly malformed: number
  /** Requests for another coro_rpc `function_id`. */
  readonly unknownFunction: number
  /** Requests whose func id had no handler (answered empty). */
  readonly unknownFuncId: number
  readonly handlerFailures: number
}

/**
 * A running listener; it stops (and closes its connections) when its scope closes.
 *
 * @since 0.2.0
 */
export interface TentServer {
  readonly host: string
  readonly port: number
  readonly stats: () => TentServerStats
}

const messageOf = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.failureOption(cause)
  const e: unknown = failure._tag === "Some" ? failure.value : Cause.squash(cause)
  if (e instanceof Error) return e.message
  if (typeof e === "string") return e
  if (typeof e === "object" && e !== null && "message" in e && typeof e.message === "string") return e.message
  return String(e)
}

/**
 * What answers coro_rpc connections accepted elsewhere (the control plane's own listener hands it the connections
 * that speak TENT's wire): `onSocket` takes over a socket (and resumes it), `closeAll` closes every one it took.
 *
 * @since 0.2.0
 */
export interface TentConnectionHandler {
  readonly onSocket: (socket: Net.Socket) => void
  readonly closeAll: Effect.Effect<void>
  readonly stats: () => TentServerStats
}

/**
 * Options of {@link makeConnectionHandler}: the handlers by TENT func id, the decoder's caps, the function id served.
 *
 * @since 0.2.0
 */
export type TentConnectionOptions = Pick<TentServerOptions, "handlers" | "limits" | "functionId">

/**
 * Serves TENT's wire on sockets handed to it; the handlers run on the scope's runtime.
 *
 * @since 0.2.0
 */
export const makeConnectionHandler = (
  options: TentConnectionOptions
): Effect.Effect<TentConnectionHandler, never, Scope.Scope> =>
  Effect.gen(function* () {
    const runtime = yield* Effect.runtime<never>()
    const limits = options.limits ?? CoroRpc.defaultLimits
    const functionId = options.functionId ?? CoroRpc.PROCESS_FUNCTION_ID
    const stats = {
      connections: 0,
      requests: 0,
      malformed: 0,
      unknownFunction: 0,
      unknownFuncId: 0,
      handlerFailures: 0
    }
    const sockets = new Set<Net.Socket>()

    const runFork = Runtime.runFork(runtime)
    const replyTo = (seqNum: number, exit: Exit.Exit<Uint8Array | undefined, unknown>): Buffer => {
      if (Exit.isSuccess(exit)) {
        return CoroRpc.encodeResponse({ seqNum, ...(exit.value === undefined ? {} : { attachment: exit.value }) })
      }
      stats.handlerFailures++
      return CoroRpc.encodeResponse({
        seqNum,
        error: { code: CoroRpc.Errc.rpc_throw_exception, message: messageOf(exit.cause) }
      })
    }

    /** The reply to `frame`: at once when its handler completes without waiting, else when it does. */
    const answer = (frame: CoroRpc.RequestFrame): Buffer | Promise<Buffer> => {
      const seqNum = frame.header.seqNum
      if (frame.header.functionId !== functionId) {
        stats.unknownFunction++
        return CoroRpc.encodeResponse({
          seqNum,
          error: { code: CoroRpc.Errc.function_not_registered, message: "the rpc function not registered" }
        })
      }
      const arg = CoroRpc.decodeIntArg(frame.body)
      if (Either.isLeft(arg)) {
        return CoroRpc.encodeResponse({
          seqNum,
          error: { code: CoroRpc.Errc.invalid_rpc_arguments, message: "invalid rpc function arguments" }
        })
      }
      const handler = options.handlers.get(arg.right)
      if (handler === undefined) {
        stats.unknownFuncId++
        return CoroRpc.encodeResponse({ seqNum })
      }
      let effect: Effect.Effect<Uint8Array | undefined, unknown>
      try {
        effect = handler(frame.attachment)
      } catch (e) {
        return replyTo(seqNum, Exit.die(e))
      }
      // `Effect.void`, `Effect.succeed(..)`: complete already, answered without a fiber
      if (Exit.isExit(effect)) return replyTo(seqNum, effect as Exit.Exit<Uint8Array | undefined, unknown>)
      const fiber = runFork(effect)
      const done = fiber.unsafePoll()
      if (done !== null) return replyTo(seqNum, done)
      return new Promise((resolve) => fiber.addObserver((exit) => resolve(replyTo(seqNum, exit))))
    }

    const onSocket = (socket: Net.Socket) => {
      stats.connections++
      sockets.add(socket)
      socket.setNoDelay(true)
      const decoder = new CoroRpc.FrameDecoder("request", limits)
      // replies leave in request order; `queue` is the last reply still waiting for its handler (undefined: none)
      let queue: Promise<void> | undefined
      const write = (reply: Buffer) => {
        if (!socket.destroyed) socket.write(reply)
      }
      const fail = () => {
        socket.destroy()
      }
      socket.on("error", () => socket.destroy())
      socket.on("close", () => sockets.delete(socket))
      socket.on("data", (chunk: Buffer) => {
        const r = decoder.push(chunk)
        if (Either.isLeft(r)) {
          stats.malformed++
          socket.destroy()
          return
        }
        for (const frame of r.right) {
          stats.requests++
          let next: Promise<void>
          if (queue === undefined) {
            let reply: Buffer | Promise<Buffer>
            try {
              reply = answer(frame)
            } catch {
              fail()
              return
            }
            if (!(reply instanceof Promise)) {
              write(reply)
              continue
            }
            next = reply.then(write, fail)
          } else {
            next = queue.then(() => answer(frame)).then(write, fail)
          }
          queue = next
          void next.then(() => {
            if (queue === next) queue = undefined
          })
        }
      })
      socket.resume()
    }

    const closeAll = Effect.suspend(() => destroyAll(sockets))
    yield* Effect.addFinalizer(() => closeAll)
    return { onSocket, closeAll, stats: () => ({ ...stats }) }
  })

/**
 * Starts a listener.
 *
 * @since 0.2.0
 */
export const make = (options: TentServerOptions): Effect.Effect<TentServer, TentServerError, Scope.Scope> =>
  Effect.gen(function* () {
    const host = options.host ?? "127.0.0.1"
    const connections = yield* makeConnectionHandler(options)
    const server = yield* Effect.acquireRelease(
      Effect.async<Net.Server, TentServerError>((resume) => {
        const s = Net.createServer(connections.onSocket)
        s.once("error", (e) => resume(Effect.fail(new TentServerError({ message: `listen ${host}: ${e.message}` }))))
        s.listen(options.port ?? 0, host, () => {
          s.on("error", () => undefined)
          resume(Effect.succeed(s))
        })
      }),
      (s) =>
        Effect.zipRight(
          connections.closeAll,
          Effect.async<void>((resume) => {
            s.close(() => resume(Effect.void))
          })
        )
    )
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : (options.port ?? 0)
    return { host, port, stats: connections.stats }
  })
