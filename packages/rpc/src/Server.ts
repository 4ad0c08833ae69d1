import * as Net from "node:net"
import { Headers } from "@effect/platform"
import { Rpc, RpcMessage, RpcSchema, RpcServer } from "@effect/rpc"
import { Cause, Config, Context, Effect, Exit, type Fiber, FiberId, Layer, Runtime } from "effect"
import { ControlPlane, type ControlPlaneHandlers, type ControlPlaneRpcs } from "./ControlPlane.js"
import { DataTooLarge, NotificationTooLarge, SegmentRangeInvalid, ServerError } from "./Errors.js"
import { formatAddress } from "./internal/address.js"
import {
  allSpecs,
  DATA_HEADER,
  dataHeader,
  dataSpecByTag,
  NOTIFY_OVERHEAD,
  notifyNameLength,
  type RpcSpec,
  specByTag
} from "./internal/codec.js"
import { FrameReader, Kind } from "./internal/frame.js"
import { FramedSocket } from "./internal/framed.js"
import { defaults, RpcConfig } from "./RpcConfig.js"

/** Where a control-plane server listens; with port 0 requested, `port` is the one the kernel chose. */
export interface ServerAddressShape {
  readonly host: string
  readonly port: number
  /** `host:port`: the segment name under the peer registry. */
  readonly address: string
  /** What `SendData` / `RecvData` did on this server (absent on servers from other builds). */
  readonly data?: DataStats | undefined
}

/**
 * Where `SendData` / `RecvData` land: the owner's registered memory. `lookup(addr, length)` returns the buffer that
 * holds all of `[addr, addr + length)` and the offset of `addr` in it, or undefined when no registered region holds
 * the whole range. Called synchronously on the server's connection handler: keep it plain code.
 */
export interface SegmentMemory {
  readonly lookup: (
    addr: number,
    length: number
  ) => { readonly buffer: Uint8Array; readonly offset: number } | undefined
}

/** Counters of the data RPCs on one server. */
export interface DataStats {
  /** `SendData` calls that wrote their bytes. */
  sent: number
  /** `RecvData` calls that were answered with bytes. */
  received: number
  /** Calls refused with a typed error: out of range, unregistered, too large, no memory. */
  rejected: number
}

/** The bound address of the control-plane server of this process. */
export class ServerAddress extends Context.Tag("@tent/rpc/ServerAddress")<ServerAddress, ServerAddressShape>() {}

/** Options of {@link layer}. */
export interface ServerOptions {
  /** Interface to bind; default `127.0.0.1`. */
  readonly host?: string | undefined
  /** Port to bind; default 0 (any free port, read it from {@link ServerAddress}). */
  readonly port?: number | undefined
  /** Largest `Notify` (name + message bytes) accepted; larger ones get `NotificationTooLarge`. Default 16 MiB. */
  readonly maxNotifyBytes?: number | undefined
  /** Largest `SendData` / `RecvData` served; larger ones get `DataTooLarge`. Default 16 MiB. */
  readonly maxDataBytes?: number | undefined
  /** The memory `SendData` writes and `RecvData` reads; without it both are refused with `SegmentRangeInvalid`. */
  readonly memory?: SegmentMemory | undefined
}

/** Frame bytes allowed beyond the largest notification: names, and the JSON of the other RPCs. */
const FRAME_SLACK = 1024 * 1024

/** The largest frame a side accepts, given the largest notification. */
export const maxFrameBytes = (maxNotifyBytes: number): number => maxNotifyBytes + NOTIFY_OVERHEAD + FRAME_SLACK

interface Client {
  readonly id: number
  readonly framed: FramedSocket
  readonly reader: FrameReader
  /** Requests handed to `RpcServer.makeNoSerialization` and not answered yet, by wire id. */
  readonly inflight: Map<number, RpcSpec>
  /** `Notify` handler fibers started directly (see {@link make}) that have not finished yet, by wire id. */
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

/**
 * Serves the {@link ControlPlane} group over `node:net` with the lean binary frames of this package; framing and
 * encoding are plain code. `Bootstrap`, `GetSegmentDesc` and `Probe` run under `RpcServer.makeNoSerialization` (one
 * fiber per request, typed errors, interruption when the caller gives up). `Notify`, the hot path, goes straight to
 * the group's own `Notify` handler: one fiber per request forked from a runtime built once (the handler's context
 * merged with the server's), started at once, its reply written as soon as it exits — no `runSync` hand-over, no
 * per-request context merge or `FiberRefs` copy, no second fiber. Same outcomes as the `RpcServer` path: success,
 * the typed error, a defect as `Defect`, interruption by an `Interrupt` frame or the connection closing.
 * A malformed frame, an unknown RPC or a length prefix above the limit closes that connection only; the server keeps
 * serving the others.
 */
export const make = (
  options: ServerOptions = {}
): Effect.Effect<ServerAddressShape, ServerError, ControlPlaneHandlers | import("effect/Scope").Scope> =>
  Effect.gen(function* () {
    const host = options.host ?? "127.0.0.1"
    const port = options.port ?? 0
    const maxNotifyBytes = options.maxNotifyBytes ?? defaults.max_notify_bytes
    const maxDataBytes = options.maxDataBytes ?? defaults.max_data_bytes
    const maxFrame = maxFrameBytes(Math.max(maxNotifyBytes, maxDataBytes + DATA_HEADER))
    const memory = options.memory
    const dataStats: DataStats = { sent: 0, received: 0, rejected: 0 }
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

    /** Writes the reply frame of request `id` from its handler's exit. */
    const writeExit = (client: Client, id: number, spec: RpcSpec, exit: Exit.Exit<unknown, unknown>): void => {
      const w = client.framed.writer
      if (Exit.isSuccess(exit)) {
        w.begin(Kind.Success, id)
        try {
          spec.success.encode(w, exit.value)
        } catch (e) {
          w.abort()
          w.begin(Kind.Defect, id)
          w.utf8(`${spec.tag} reply does not encode: ${String(e)}`)
        }
      } else {
        const failure = Cause.failureOption(exit.cause)
        if (failure._tag === "Some") {
          w.begin(Kind.Failure, id)
          try {
            spec.error.encode(w, failure.value)
          } catch (e) {
            w.abort()
            w.begin(Kind.Defect, id)
            w.utf8(`${spec.tag} error does not encode: ${String(e)}`)
          }
        } else if (Cause.isInterruptedOnly(exit.cause)) {
          w.begin(Kind.Interrupted, id)
        } else {
          w.begin(Kind.Defect, id)
          const squashed = Cause.squash(exit.cause)
          w.utf8(
            (squashed instanceof Error ? `${squashed.name}: ${squashed.message}` : String(squashed)).slice(0, 4096)
          )
        }
      }
      w.end()
      client.framed.flushSoon()
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

    const sendDataSpec = dataSpecByTag.SendData
    const recvDataSpec = dataSpecByTag.RecvData

    const refuse = (client: Client, id: number, spec: RpcSpec, error: SegmentRangeInvalid | DataTooLarge): void => {
      dataStats.rejected++
      const w = client.framed.writer
      w.begin(Kind.Failure, id)
      spec.error.encode(w, error)
      w.end()
      client.framed.flushSoon()
    }

    /**
     * The registered region holding `[addr, addr + length)`, checked again here (a lookup that answers a range its
     * buffer does not hold is refused, never written past), or the typed error to reply with.
     */
    const resolveRange = (
      addr: number,
      length: number
    ): { readonly buffer: Uint8Array; readonly offset: number } | SegmentRangeInvalid | DataTooLarge => {
      if (addr < 0 || length < 0)
        return new SegmentRangeInvalid({ addr, length, message: "address or length is not a safe u64" })
      if (length > maxDataBytes) return new DataTooLarge({ size: length, max: maxDataBytes })
      if (memory === undefined)
        return new SegmentRangeInvalid({ addr, length, message: "this server has no registered memory" })
      let found: { readonly buffer: Uint8Array; readonly offset: number } | undefined
      try {
        found = memory.lookup(addr, length)
      } catch {
        found = undefined
      }
      if (
        found === undefined ||
        !Number.isSafeInteger(found.offset) ||
        found.offset < 0 ||
        found.offset + length > found.buffer.length
      ) {
        return new SegmentRangeInvalid({
          addr,
          length,
          message: `[${addr}, +${length}) is not inside a registered buffer`
        })
      }
      return found
    }

    /** TENT `onSendData`: the header, then the bytes copied straight from the frame into the registered memory. */
    const onSendData = (client: Client, id: number, buf: Buffer, start: number, end: number): void => {
      const h = dataHeader(buf, start, end)
      if (h === undefined) throw new Error("malformed SendData body")
      if (h.length >= 0 && h.length !== end - start - DATA_HEADER) throw new Error("malformed SendData body")
      const target = resolveRange(h.addr, h.length)
      if (target instanceof SegmentRangeInvalid || target instanceof DataTooLarge) {
        refuse(client, id, sendDataSpec, target)
        return
      }
      buf.copy(target.buffer, target.offset, start + DATA_HEADER, end)
      dataStats.sent++
      const w = client.framed.writer
      w.begin(Kind.Success, id)
      w.end()
      client.framed.flushSoon()
    }

    /** TENT `onRecvData`: the size is checked before anything is allocated; the bytes go out in the reply frame. */
    const onRecvData = (client: Client, id: number, buf: Buffer, start: number, end: number): void => {
      const h = dataHeader(buf, start, end)
      if (h === undefined || end - start !== DATA_HEADER) throw new Error("malformed RecvData body")
      const source = resolveRange(h.addr, h.length)
      if (source instanceof SegmentRangeInvalid || source instanceof DataTooLarge) {
        refuse(client, id, recvDataSpec, source)
        return
      }
      dataStats.received++
      const w = client.framed.writer
      w.begin(Kind.Success, id)
      w.bytes(source.buffer.subarray(source.offset, source.offset + h.length))
      w.end()
      client.framed.flushSoon()
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
          if (spec === sendDataSpec) {
            onSendData(client, id, buf, body + 1, end)
            return
          }
          if (spec === recvDataSpec) {
            onRecvData(client, id, buf, body + 1, end)
            return
          }
          if (spec === notifySpec) {
            if (notifyNameLength(buf, body + 1, end) < 0) throw new Error("malformed Notify body")
            const size = end - body - 1 - NOTIFY_OVERHEAD
            if (size > maxNotifyBytes) {
              const w = client.framed.writer
              w.begin(Kind.Failure, id)
              spec.error.encode(w, new NotificationTooLarge({ size, max: maxNotifyBytes }))
              w.end()
              client.framed.flushSoon()
              return
            }
          }
          const payload = spec.payload.decode(buf, body + 1, end)
          if (spec === notifySpec && direct !== undefined) {
            dispatch(client, id, direct, payload)
            return
          }
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

    const onConnection = (socket: Net.Socket): void => {
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
      socket.on("error", () => {})
      socket.on("close", () => {
        clients.delete(client.id)
        client.inflight.clear()
        interruptAll(client)
        runSync(rpc.disconnect(client.id))
      })
    }

    /** Interrupts the client's direct handler fibers (their replies are not sent). */
    const interruptAll = (client: Client): Array<Fiber.RuntimeFiber<unknown, unknown>> => {
      const fibers = Array.from(client.fibers.values())
      client.fibers.clear()
      for (const fiber of fibers) fiber.unsafeInterruptAsFork(FiberId.none)
      return fibers
    }
    // on shutdown (after the listener closed): the handler fibers still running end before the scope does
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        const fibers = Array.from(clients.values()).flatMap(interruptAll)
        return Effect.forEach(fibers, (f) => f.await, { discard: true })
      })
    )

    const server = Net.createServer(onConnection)
    yield* Effect.acquireRelease(
      Effect.async<void, ServerError>((resume) => {
        const onError = (err: Error) =>
          resume(Effect.fail(new ServerError({ host, port, message: `cannot listen: ${err.message}`, cause: err })))
        server.once("error", onError)
        server.listen({ host, port }, () => {
          server.off("error", onError)
          server.on("error", () => {})
          resume(Effect.void)
        })
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
          for (const client of clients.values()) client.framed.socket.destroy()
        })
    )
    const bound = server.address() as Net.AddressInfo
    return {
      host: bound.address,
      port: bound.port,
      address: formatAddress(bound.address, bound.port),
      data: dataStats
    }
  })

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

/** The control-plane server as a Layer: needs the group's handlers (`ControlPlane.toLayer({...})`). */
export const layer = (options: ServerOptions = {}): Layer.Layer<ServerAddress, ServerError, ControlPlaneHandlers> =>
  Layer.scoped(ServerAddress, make(options))

/**
 * The server with its address from config (TENT's top-level `rpc_server_hostname`, default `127.0.0.1`, and
 * `rpc_server_port`, default 0) and its notification limit from {@link RpcConfig}.
 */
export const layerConfig: Layer.Layer<
  ServerAddress,
  ServerError | import("effect/ConfigError").ConfigError,
  ControlPlaneHandlers | RpcConfig
> = Layer.scoped(
  ServerAddress,
  Effect.gen(function* () {
    const host = yield* Config.string("rpc_server_hostname").pipe(Config.withDefault("127.0.0.1"))
    const port = yield* Config.integer("rpc_server_port").pipe(
      Config.validate({
        message: "must be a port number (0 = any free port)",
        validation: (n) => n >= 0 && n <= 65535
      }),
      Config.withDefault(0)
    )
    const { maxDataBytes, maxNotifyBytes } = yield* RpcConfig
    return yield* make({ host, port, maxNotifyBytes, maxDataBytes })
  })
)
