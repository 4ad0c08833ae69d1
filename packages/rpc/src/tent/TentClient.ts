/**
 * A minimal client of a TENT node's control plane: one TCP connection speaking coro_rpc ({@link CoroRpc}), calling
 * `CoroRpcAgent::process(func_id)` with a request attachment and returning the response attachment, as TENT's
 * `CoroRpcAgent::callCoroutine` does (`src/rpc/rpc.cpp:190-235`). Unlike TENT, every wait is bounded: connecting and
 * each call have a timeout (TENT inherits ylt's 30 s defaults, `coro_rpc_client.hpp:258-263`).
 *
 * Calls may be pipelined; responses are matched by `seq_num`. A response for a call that already timed out is
 * dropped (ylt's client closes the connection instead, `coro_rpc_client.hpp:1560-1566`). An error response fails
 * only its call; the connection stays usable (ylt's client closes it after any error response,
 * `coro_rpc_client.hpp:1709-1716`, and TENT drops that client from its pool, `rpc.cpp:220-226`).
 *
 * @since 0.2.0
 */
import * as Net from "node:net"
import { Data, Duration, Effect, Either, type Scope } from "effect"
import * as Bodies from "./Bodies.js"
import * as CoroRpc from "./CoroRpc.js"

/**
 * A failed call. `reason`: `Refused` (could not connect), `Closed` (the connection ended), `Timeout` (connect or
 * call deadline passed), `Protocol` (the peer sent bytes that are not coro_rpc, or not the expected body), `Remote`
 * (the peer answered with a coro_rpc error; `errCode` and the message it sent).
 *
 * @since 0.2.0
 */
export class TentRpcError extends Data.TaggedError("TentRpcError")<{
  readonly reason: "Refused" | "Closed" | "Timeout" | "Protocol" | "Remote"
  readonly message: string
  readonly errCode?: number
}> {}

/**
 * Where and how to connect.
 *
 * @since 0.2.0
 */
export interface TentClientOptions {
  readonly host: string
  readonly port: number
  /** Default 5 seconds. */
  readonly connectTimeout?: Duration.DurationInput
  /** Per call; default 10 seconds. */
  readonly requestTimeout?: Duration.DurationInput
  /** Caps on what the peer may send back; default {@link CoroRpc.defaultLimits}. */
  readonly limits?: CoroRpc.FrameLimits
  /** Default {@link CoroRpc.PROCESS_FUNCTION_ID}. */
  readonly functionId?: number
}

/**
 * A connected client. Closing its scope closes the connection and fails the calls in flight with `Closed`.
 *
 * @since 0.2.0
 */
export interface TentClient {
  /** Calls `process(funcId)` with `request` as the attachment; succeeds with the response attachment. */
  readonly call: (funcId: number, request?: Uint8Array) => Effect.Effect<Buffer, TentRpcError>
  /** `Notify` (func id 5) with TENT's JSON body `{"msg","name"}`. */
  readonly notify: (name: string, msg: string) => Effect.Effect<void, TentRpcError | Bodies.TentBodyError>
  /** `GetSegmentDesc` (func id 1), decoded; an empty reply (no local segment) fails with `Protocol`. */
  readonly getSegmentDesc: () => Effect.Effect<Bodies.SegmentDesc, TentRpcError | Bodies.TentBodyError>
  /** `BootstrapRdma` (func id 2). */
  readonly bootstrap: (
    desc: Bodies.BootstrapDesc
  ) => Effect.Effect<Bodies.BootstrapDesc, TentRpcError | Bodies.TentBodyError>
  /** `Probe` (func id 6): empty request, empty response. */
  readonly probe: () => Effect.Effect<void, TentRpcError>
  /** Whether the connection has ended. */
  readonly closed: () => boolean
}

type Pending = (r: Either.Either<CoroRpc.ResponseFrame, TentRpcError>) => void

const connect = (host: string, port: number, timeout: Duration.Duration) =>
  Effect.async<Net.Socket, TentRpcError>((resume) => {
    const socket = Net.connect({ host, port })
    socket.setNoDelay(true)
    const onError = (e: Error) => {
      socket.destroy()
      resume(Effect.fail(new TentRpcError({ reason: "Refused", message: `connect ${host}:${port}: ${e.message}` })))
    }
    socket.once("error", onError)
    socket.once("connect", () => {
      socket.off("error", onError)
      resume(Effect.succeed(socket))
    })
    return Effect.sync(() => socket.destroy())
  }).pipe(
    Effect.timeoutFail({
      duration: timeout,
      onTimeout: () =>
        new TentRpcError({
          reason: "Timeout",
          message: `connect ${host}:${port}: no answer in ${Duration.format(timeout)}`
        })
    })
  )

/**
 * Connects to a TENT control plane at `host:port`; the connection lives as long as the scope.
 *
 * @since 0.2.0
 */
export const make = (options: TentClientOptions): Effect.Effect<TentClient, TentRpcError, Scope.Scope> =>
  Effect.gen(function* () {
    const connectTimeout = Duration.decode(options.connectTimeout ?? "5 seconds")
    const requestTimeout = Duration.decode(options.requestTimeout ?? "10 seconds")
    const functionId = options.functionId ?? CoroRpc.PROCESS_FUNCTION_ID
    const socket = yield* Effect.acquireRelease(connect(options.host, options.port, connectTimeout), (s) =>
      Effect.sync(() => s.destroy())
    )
    const pending = new Map<number, Pending>()
    const decoder = new CoroRpc.FrameDecoder("response", options.limits ?? CoroRpc.defaultLimits)
    let ended: TentRpcError | undefined
    let nextSeq = 1

    const end = (e: TentRpcError) => {
      if (ended === undefined) ended = e
      socket.destroy()
      for (const resolve of pending.values()) resolve(Either.left(ended))
      pending.clear()
    }
    socket.on("data", (chunk: Buffer) => {
      const r = decoder.push(chunk)
      if (Either.isLeft(r)) return end(new TentRpcError({ reason: "Protocol", message: r.left.message }))
      for (const f of r.right) {
        const resolve = pending.get(f.header.seqNum)
        if (resolve === undefined) continue
        pending.delete(f.header.seqNum)
        resolve(Either.right(f))
      }
    })
    socket.on("error", (e) => end(new TentRpcError({ reason: "Closed", message: e.message })))
    socket.on("close", () => end(new TentRpcError({ reason: "Closed", message: "connection closed" })))
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => end(new TentRpcError({ reason: "Closed", message: "client closed" })))
    )

    const timeoutMs = Duration.toMillis(requestTimeout)
    // A plain timer per call, cleared by the response: an Effect timeout would race two fibers on every call.
    const send = (funcId: number, request: Uint8Array | undefined) =>
      Effect.async<CoroRpc.ResponseFrame, TentRpcError>((resume) => {
        if (ended !== undefined) return resume(Effect.fail(ended))
        const seq = nextSeq
        nextSeq = (nextSeq + 1) >>> 0
        const timer = setTimeout(() => {
          if (!pending.delete(seq)) return
          resume(
            Effect.fail(
              new TentRpcError({
                reason: "Timeout",
                message: `func_id ${funcId}: no response in ${Duration.format(requestTimeout)}`
              })
            )
          )
        }, timeoutMs)
        pending.set(seq, (r) => {
          clearTimeout(timer)
          resume(Either.isLeft(r) ? Effect.fail(r.left) : Effect.succeed(r.right))
        })
        socket.write(
          CoroRpc.encodeRequest({
            seqNum: seq,
            funcId,
            functionId,
            ...(request === undefined ? {} : { attachment: request })
          })
        )
        return Effect.sync(() => {
          clearTimeout(timer)
          pending.delete(seq)
        })
      })

    const call = (funcId: number, request?: Uint8Array) =>
      Effect.flatMap(send(funcId, request), (f) => {
        if (f.header.errCode !== 0) {
          const e = CoroRpc.decodeErrorBody(f.header.errCode, f.body)
          return Effect.fail(
            Either.isLeft(e)
              ? new TentRpcError({ reason: "Protocol", message: e.left.message, errCode: f.header.errCode })
              : new TentRpcError({ reason: "Remote", message: e.right.message, errCode: e.right.code })
          )
        }
        const v = CoroRpc.decodeVoidResult(f.body)
        return Either.isLeft(v)
          ? Effect.fail(new TentRpcError({ reason: "Protocol", message: v.left.message }))
          : Effect.succeed(f.attachment)
      })

    const client: TentClient = {
      call,
      notify: (name, msg) =>
        Effect.flatMap(Bodies.encodeNotify({ name, msg }), (body) =>
          Effect.asVoid(call(CoroRpc.TentFuncId.Notify, body))
        ),
      getSegmentDesc: () =>
        Effect.flatMap(
          call(CoroRpc.TentFuncId.GetSegmentDesc),
          (reply): Effect.Effect<Bodies.SegmentDesc, TentRpcError | Bodies.TentBodyError> =>
            reply.length === 0
              ? Effect.fail(new TentRpcError({ reason: "Protocol", message: "empty GetSegmentDesc reply" }))
              : Bodies.decodeSegmentDesc(reply)
        ),
      bootstrap: (desc) =>
        Effect.flatMap(Bodies.encodeBootstrapDesc(desc), (body) =>
          Effect.flatMap(call(CoroRpc.TentFuncId.BootstrapRdma, body), Bodies.decodeBootstrapDesc)
        ),
      probe: () => Effect.asVoid(call(CoroRpc.TentFuncId.Probe)),
      closed: () => ended !== undefined
    }
    return client
  })
