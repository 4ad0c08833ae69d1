/**
 * The stock `@effect/rpc` server and client over TCP (msgpack), kept to measure the control plane's own transport
 * against and for peers that speak it.
 *
 * @since 0.1.0
 */
import type * as Socket from "@effect/platform/Socket"
import * as SocketServer from "@effect/platform/SocketServer"
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import * as NodeSocketServer from "@effect/platform-node/NodeSocketServer"
import * as RpcClient from "@effect/rpc/RpcClient"
import type { RpcClientError } from "@effect/rpc/RpcClientError"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as RpcServer from "@effect/rpc/RpcServer"
import { Effect, Layer, type Scope } from "effect"
import { ControlPlane, type ControlPlaneHandlers } from "./ControlPlane.js"
import { formatAddress } from "./internal/address.js"
import { ServerAddress } from "./Server.js"

/**
 * The stock `@effect/rpc` path over TCP: `RpcServer.layer` + `layerProtocolSocketServer` on `NodeSocketServer`,
 * msgpack. Same group and handlers as {@link import("./Server.js").layer}; kept to measure against (it costs about
 * 3-4× a plain `node:net` round trip here) and for peers that speak it. Its client reports every socket failure as
 * one `RpcClientError`, which is why `RpcAgent` does not use it.
 *
 * @since 0.1.0
 */
export const layerServer = (
  options: {
    readonly host?: string | undefined
    readonly port?: number | undefined
    readonly disableTracing?: boolean | undefined
  } = {}
): Layer.Layer<ServerAddress, SocketServer.SocketServerError, ControlPlaneHandlers> => {
  const socketServer = NodeSocketServer.layer({ host: options.host ?? "127.0.0.1", port: options.port ?? 0 })
  const rpc = RpcServer.layer(ControlPlane, { disableTracing: options.disableTracing ?? false }).pipe(
    Layer.provide(RpcServer.layerProtocolSocketServer),
    Layer.provide(RpcSerialization.layerMsgPack)
  )
  const address = Layer.effect(
    ServerAddress,
    Effect.map(SocketServer.SocketServer, (s) => {
      const a = s.address
      if (a._tag !== "TcpAddress") throw new Error("expected a TCP address")
      return { host: a.hostname, port: a.port, address: formatAddress(a.hostname, a.port) }
    })
  )
  return Layer.merge(rpc, address).pipe(Layer.provide(socketServer))
}

/**
 * A stock `RpcClient` for the group over `NodeSocket` (msgpack) to `host:port`; closes with the scope.
 *
 * @since 0.1.0
 */
export const makeClient = (options: {
  readonly host: string
  readonly port: number
  readonly disableTracing?: boolean | undefined
}): Effect.Effect<RpcClient.FromGroup<typeof ControlPlane, RpcClientError>, Socket.SocketError, Scope.Scope> =>
  Effect.gen(function* () {
    // built in the caller's scope: `Effect.provide(layer)` would close the socket as soon as `make` returned
    const protocol = yield* Layer.build(
      RpcClient.layerProtocolSocket().pipe(
        Layer.provide(NodeSocket.layerNet({ host: options.host, port: options.port })),
        Layer.provide(RpcSerialization.layerMsgPack)
      )
    )
    return yield* RpcClient.make(ControlPlane, { disableTracing: options.disableTracing ?? false }).pipe(
      Effect.provide(protocol)
    )
  })
