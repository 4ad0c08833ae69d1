import * as Net from "node:net"
import { Headers } from "@effect/platform"
import { RpcMessage, RpcServer } from "@effect/rpc"
import { Cause, Config, Context, Effect, Exit, Layer, Runtime } from "effect"
import { ControlPlane, type ControlPlaneHandlers, type ControlPlaneRpcs } from "./ControlPlane.js"
import { NotificationTooLarge, ServerError } from "./Errors.js"
import { formatAddress } from "./internal/address.js"
import { NOTIFY_OVERHEAD, notificationLengths, type RpcSpec, specByTag, specs } from "./internal/codec.js"
import { FrameReader, Kind } from "./internal/frame.js"
import { FramedSocket } from "./internal/framed.js"
import { defaults, RpcConfig } from "./RpcConfig.js"

/** Where a control-plane server listens; with port 0 requested, `port` is the one the kernel chose. */
export interface ServerAddressShape {
  readonly host: string
  readonly port: number
  /** `host:port`: the segment name under the peer registry. */
  readonly address: string
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
}

/** Frame bytes allowed beyond the largest notification: names, and the JSON of the other RPCs. */
const FRAME_SLACK = 1024 * 1024

/** The largest frame a side accepts, given the largest notification. */
export const maxFrameBytes = (maxNotifyBytes: number): number => maxNotifyBytes + NOTIFY_OVERHEAD + FRAME_SLACK

interface Client {
  readonly id: number
  readonly framed: FramedSocket
  readonly reader: FrameReader
  /** Requests handed to the handlers and not answered yet, by wire id. */
  readonly inflight: Map<number, RpcSpec>
}

/**
 * Serves the {@link ControlPlane} group over `node:net` with the lean binary frames of this package: the group's
 * handlers run under `RpcServer.makeNoSerialization` (one fiber per request, typed errors, interruption when the
 * caller gives up), while framing and encoding are plain code. A malformed frame, an unknown RPC or a length prefix
 * above the limit closes that connection only; the server keeps serving the others.
 */
export const make = (
  options: ServerOptions = {}
): Effect.Effect<ServerAddressShape, ServerError, ControlPlaneHandlers | import("effect/Scope").Scope> =>
  Effect.gen(function* () {
    const host = options.host ?? "127.0.0.1"
    const port = options.port ?? 0
    const maxNotifyBytes = options.maxNotifyBytes ?? defaults.max_notify_bytes
    const maxFrame = maxFrameBytes(maxNotifyBytes)
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
      const w = client.framed.writer
      const exit = response.exit
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

    const onFrame = (client: Client, buf: Buffer, start: number, end: number): void => {
      const kind = buf[start]
      const id = buf.readUInt32LE(start + 1)
      const body = start + 5
      switch (kind) {
        case Kind.Request: {
          if (body >= end) throw new Error("request without an RPC index")
          const spec = specs[buf[body] as number]
          if (spec === undefined) throw new Error(`unknown RPC index ${buf[body]}`)
          if (client.inflight.has(id)) throw new Error(`request id ${id} reused while in flight`)
          if (spec === notifySpec) {
            const lengths = notificationLengths(buf, body + 1, end)
            if (lengths === undefined) throw new Error("malformed Notify body")
            const size = lengths.name + lengths.msg
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
          client.inflight.set(id, spec)
          runSync(
            rpc.write(client.id, {
              _tag: "Request",
              id: RpcMessage.RequestId(BigInt(id)),
              tag: spec.tag,
              payload: payload as never,
              headers: Headers.empty
            })
          )
          return
        }
        case Kind.Interrupt: {
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
        inflight: new Map()
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
        runSync(rpc.disconnect(client.id))
      })
    }

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
    return { host: bound.address, port: bound.port, address: formatAddress(bound.address, bound.port) }
  })

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
    const { maxNotifyBytes } = yield* RpcConfig
    return yield* make({ host, port, maxNotifyBytes })
  })
)
