/**
 * The control-plane TCP server: a listener bound first (its address is the engine's segment name), served later with
 * the `ControlPlane` handlers and the data RPCs, which it answers from its owner's registered memory.
 *
 * @since 0.1.0
 */
import type * as Net from "node:net"
import * as Os from "node:os"
import { Config, type ConfigError, Context, Effect, Layer, Redacted, type Scope } from "effect"
import type { ControlPlaneHandlers } from "./ControlPlane.js"
import { ServerError } from "./Errors.js"
import { discoverHost } from "./internal/address.js"
import * as Auth from "./internal/auth.js"
import { allowList, type RejectReason } from "./internal/auth.js"
import { makeDataHandlers } from "./internal/data.js"
import { type BoundListener, bind, reject } from "./internal/listener.js"
import { makeConnectionHandler } from "./internal/serve.js"
import { makeTentHandlers, sniff, type TentWireStats } from "./internal/tentWire.js"
import { defaults, RpcConfig } from "./RpcConfig.js"
import * as Bodies from "./tent/Bodies.js"
import * as CoroRpc from "./tent/CoroRpc.js"
import * as TentServer from "./tent/TentServer.js"

/**
 * A bound control-plane socket, not necessarily served yet: its address (the engine's segment name) is known from
 * the start, so what needs it can be built before the handlers {@link serve} attaches.
 *
 * @since 0.1.0
 */
export interface ListenerShape {
  readonly host: string
  /** The bound port (the kernel's choice when 0 was asked for). */
  readonly port: number
  /** `host:port`. */
  readonly address: string
}

/**
 * Where a control-plane server listens (`address`: the segment name under the peer registry), and what it served.
 *
 * @since 0.1.0
 */
export interface ServerAddressShape extends ListenerShape {
  /** What `SendData` / `RecvData` did on this server, on either wire (absent on servers from other builds). */
  readonly data?: DataStats | undefined
  /** What peers speaking TENT's own wire (coro_rpc) did on this server (absent on servers from other builds). */
  readonly tent?: TentWireCounters | undefined
  /** Connections closed before anything was served, by reason (absent on servers from other builds). */
  readonly rejected?: Readonly<Record<RejectReason, number>> | undefined
}

/**
 * The header every handler of an authenticated connection receives (`(payload, { headers })`): the peer's segment
 * name as it proved it in the handshake. Absent on a connection that did not authenticate (no secret set).
 *
 * @since 0.3.0
 */
export const PEER_HEADER: typeof Auth.PEER_HEADER = Auth.PEER_HEADER

/**
 * Counters of the connections that spoke TENT's own wire (yalantinglibs coro_rpc, as a Mooncake TENT node calls).
 *
 * @since 0.2.0
 */
export type TentWireCounters = TentWireStats

/**
 * Where `SendData` / `RecvData` land: the owner's registered memory. `lookup(addr, length)` returns the buffer that
 * holds all of `[addr, addr + length)` and the offset of `addr` in it, or undefined when no registered region holds
 * the whole range. Called synchronously on the server's connection handler: keep it plain code.
 *
 * @since 0.1.0
 */
export interface SegmentMemory {
  readonly lookup: (
    addr: number,
    length: number
  ) => { readonly buffer: Uint8Array; readonly offset: number } | undefined
}

/**
 * Counters of the data RPCs on one server.
 *
 * @since 0.1.0
 */
export interface DataStats {
  /** `SendData` calls that wrote their bytes. */
  sent: number
  /** `RecvData` calls that were answered with bytes. */
  received: number
  /** Calls refused with a typed error: out of range, unregistered, too large, no memory. */
  rejected: number
}

/**
 * The bound address of the control-plane server of this process.
 *
 * @since 0.1.0
 */
export class ServerAddress extends Context.Tag("@tent/rpc/ServerAddress")<ServerAddress, ServerAddressShape>() {}

/**
 * Options of {@link layerListener}: where to bind, and the limits its connections are read with.
 *
 * @since 0.1.0
 */
export interface ListenerOptions {
  /**
   * Interface to bind; default `127.0.0.1`. `""`: this host's address as TENT finds it (the first IPv4 address of an
   * interface other than `lo`, else IPv6), bound alone — TENT binds every interface and advertises that address; with
   * no authentication on this port yet, the default stays loopback and `""` opens one interface, not all.
   */
  readonly host?: string | undefined
  /** Port to bind; default 0 (any free port, read it from {@link Listener} or {@link ServerAddress}). */
  readonly port?: number | undefined
  /** Largest `Notify` (name + message bytes) accepted; larger ones get `NotificationTooLarge`. Default 16 MiB. */
  readonly maxNotifyBytes?: number | undefined
  /** Largest `SendData` / `RecvData` served; larger ones get `DataTooLarge`. Default 16 MiB. */
  readonly maxDataBytes?: number | undefined
  /**
   * The shared secret each connection must prove (a challenge–response, the secret never sent) before any request is
   * served; at least 16 bytes. Absent: no authentication, as TENT (and TENT's own wire is answered).
   */
  readonly secret?: Redacted.Redacted<string> | string | undefined
  /** Addresses or CIDRs a connection may come from; others are closed unread and counted. Absent or empty: any. */
  readonly allowCidrs?: ReadonlyArray<string> | undefined
  /** Connections held at once; more are closed and counted. Default 1024. */
  readonly maxConnections?: number | undefined
  /** Requests of one connection handled at once; beyond it the connection is read no more until one is answered. */
  readonly maxInflight?: number | undefined
  /** Reply bytes a connection may leave unread before it is read no more. Default 16 MiB. */
  readonly maxUnreadReplyBytes?: number | undefined
}

/**
 * Options of {@link serve}.
 *
 * @since 0.1.0
 */
export interface ServeOptions {
  /** The memory `SendData` writes and `RecvData` reads; without it both are refused with `SegmentRangeInvalid`. */
  readonly memory?: SegmentMemory | undefined
}

/**
 * Options of {@link make} and {@link layer}: a listener's and what {@link serve} takes.
 *
 * @since 0.1.0
 */
export interface ServerOptions extends ListenerOptions, ServeOptions {}

/**
 * The control-plane listener of this process (see {@link layerListener}): a {@link ListenerShape} that only
 * {@link makeListener} makes, so {@link serve} can always attach to it.
 *
 * @since 0.1.0
 */
export class Listener extends Context.Tag("@tent/rpc/Listener")<Listener, BoundListener>() {}

/**
 * Binds the control-plane socket and accepts connections; closes it, and every connection, with the scope.
 * Connections that arrive before {@link serve} are accepted paused: their requests wait in the kernel's receive
 * buffer (bounded by TCP flow control) and are answered once handlers are attached, none lost, none refused.
 *
 * @since 0.1.0
 */
export const makeListener = (options: ListenerOptions = {}): Effect.Effect<BoundListener, ServerError, Scope.Scope> => {
  const host = options.host === "" ? discoverHost(Os.networkInterfaces()) : (options.host ?? "127.0.0.1")
  if (host === undefined) {
    return Effect.fail(
      new ServerError({
        host: "",
        port: options.port ?? 0,
        message:
          'rpc_server_hostname is "" (find this host\'s address) and no interface but lo has one: set rpc_server_hostname to the address peers reach'
      })
    )
  }
  const port = options.port ?? 0
  let allowed: ((address: string | undefined) => boolean) | undefined
  try {
    allowed = allowList(options.allowCidrs ?? [])
  } catch (e) {
    return Effect.fail(new ServerError({ host, port, message: `rpc/allow_cidrs: ${(e as Error).message}` }))
  }
  const secret =
    typeof options.secret === "string" ? options.secret : Redacted.value(options.secret ?? Redacted.make(""))
  if (secret !== "" && Buffer.byteLength(secret) < Auth.MIN_SECRET_BYTES) {
    return Effect.fail(
      new ServerError({
        host,
        port,
        message: `the control plane's secret must be at least ${Auth.MIN_SECRET_BYTES} bytes`
      })
    )
  }
  return bind(host, port, {
    maxNotifyBytes: options.maxNotifyBytes ?? defaults.max_notify_bytes,
    maxDataBytes: options.maxDataBytes ?? defaults.max_data_bytes,
    maxConnections: options.maxConnections ?? defaults.max_connections,
    maxInflight: options.maxInflight ?? defaults.max_inflight,
    maxUnreadReplyBytes: options.maxUnreadReplyBytes ?? defaults.max_unread_reply_bytes,
    secret: secret === "" ? undefined : Buffer.from(secret, "utf8"),
    allowed
  })
}

/**
 * The listener as a Layer.
 *
 * @since 0.1.0
 */
export const layerListener = (options: ListenerOptions = {}): Layer.Layer<Listener, ServerError> =>
  Layer.scoped(Listener, makeListener(options))

/**
 * Serves `listener` with the {@link ControlPlane} handlers in context until the scope ends, then closes the
 * connections it served (the listener itself stays bound; a later serve may attach again).
 */
const serveListener = (
  listener: BoundListener,
  options: ServeOptions
): Effect.Effect<ServerAddressShape, ServerError, ControlPlaneHandlers | Scope.Scope> =>
  Effect.gen(function* () {
    const stats: DataStats = { sent: 0, received: 0, rejected: 0 }
    const data = makeDataHandlers(listener.limits.maxDataBytes, options.memory, stats)
    const connections = yield* makeConnectionHandler({ ...listener.limits, data, rejected: listener.rejected })
    const tentStats: TentWireCounters = { notified: 0, notifyDropped: 0 }
    const tent = yield* TentServer.makeConnectionHandler({
      handlers: makeTentHandlers(
        yield* Effect.runtime<ControlPlaneHandlers>(),
        data,
        listener.limits.maxNotifyBytes,
        tentStats
      ),
      // a `Notify` body is JSON: a control character escaped as `\u00xx` takes six bytes
      limits: {
        maxBody: CoroRpc.defaultLimits.maxBody,
        maxAttachment: Math.max(
          listener.limits.maxDataBytes + Bodies.XFER_DATA_DESC_BYTES,
          listener.limits.maxNotifyBytes * 6 + 64
        )
      }
    })
    // the first bytes of a connection tell its wire: this project's frames or TENT's coro_rpc
    // (TENT's wire has no authentication: with a secret set, it is refused)
    const onSocket = (socket: Net.Socket): void =>
      sniff(socket, (wire) => {
        if (wire === "lean") connections.onSocket(socket)
        else if (listener.limits.secret === undefined) tent.onSocket(socket)
        else {
          reject(listener.rejected, "tent_wire")
          socket.destroy()
        }
      })
    const attached = yield* Effect.acquireRelease(
      Effect.sync(() => listener.attach(onSocket)),
      (attached) =>
        attached
          ? Effect.zipRight(
              Effect.sync(() => listener.detach()),
              Effect.zipRight(connections.closeAll, tent.closeAll)
            )
          : Effect.void
    )
    if (!attached) {
      const { host, port, address } = listener
      return yield* Effect.fail(new ServerError({ host, port, message: `${address} is served already` }))
    }
    return {
      host: listener.host,
      port: listener.port,
      address: listener.address,
      data: stats,
      tent: tentStats,
      rejected: listener.rejected
    }
  })

/**
 * Attaches the {@link ControlPlane} handlers (a Layer, built in this scope, or a built context) and the segment
 * `memory` to the bound {@link Listener}: from now on its connections, including those that arrived before, are
 * answered. Until the scope ends, when the connections it served are closed and the handler fibers still running
 * are interrupted. Fails with `ServerError` if the listener is already served.
 *
 * Framing and encoding are plain code. `Bootstrap`, `GetSegmentDesc` and `Probe` run under
 * `RpcServer.makeNoSerialization` (one fiber per request, typed errors, interruption when the caller gives up).
 * `Notify`, the hot path, goes straight to the group's own handler: one fiber per request forked from a runtime built
 * once, or none when the handler's effect is already complete. A malformed frame, an unknown RPC or a length prefix
 * above the limit closes that connection only.
 *
 * @since 0.1.0
 */
export const serve = <E = never, R = never>(
  handlers: Layer.Layer<ControlPlaneHandlers, E, R> | Context.Context<ControlPlaneHandlers>,
  options: ServeOptions = {}
): Effect.Effect<ServerAddressShape, ServerError | E, Listener | R | Scope.Scope> =>
  Effect.gen(function* () {
    const listener = yield* Listener
    const context = Layer.isLayer(handlers)
      ? yield* Layer.build(handlers as Layer.Layer<ControlPlaneHandlers, E, R>)
      : (handlers as Context.Context<ControlPlaneHandlers>)
    return yield* Effect.provide(serveListener(listener, options), context)
  })

/**
 * Binds and serves in one step ({@link makeListener}, then {@link serve} with the handlers in context): the server
 * of the control plane, closed with the scope.
 *
 * @since 0.1.0
 */
export const make = (
  options: ServerOptions = {}
): Effect.Effect<ServerAddressShape, ServerError, ControlPlaneHandlers | Scope.Scope> =>
  Effect.flatMap(makeListener(options), (listener) => serveListener(listener, options))

/**
 * The control-plane server as a Layer: needs the group's handlers (`ControlPlane.toLayer({...})`).
 *
 * @since 0.1.0
 */
export const layer = (options: ServerOptions = {}): Layer.Layer<ServerAddress, ServerError, ControlPlaneHandlers> =>
  Layer.scoped(ServerAddress, make(options))

/**
 * The listener options {@link RpcConfig} gives: the limits, the secret and the allow-list.
 *
 * @since 0.3.0
 */
export const listenerLimits = (rpc: RpcConfig["Type"]): ListenerOptions => ({
  maxNotifyBytes: rpc.maxNotifyBytes,
  maxDataBytes: rpc.maxDataBytes,
  maxConnections: rpc.maxConnections,
  maxInflight: rpc.maxInflight,
  maxUnreadReplyBytes: rpc.maxUnreadReplyBytes,
  secret: rpc.secret,
  allowCidrs: rpc.allowCidrs
})

/** The listener's options from config: `rpc_server_hostname`, `rpc_server_port` and the {@link RpcConfig} limits. */
const optionsFromConfig: Effect.Effect<ListenerOptions, ConfigError.ConfigError, RpcConfig> = Effect.gen(function* () {
  const host = yield* Config.string("rpc_server_hostname").pipe(Config.withDefault("127.0.0.1"))
  const port = yield* Config.integer("rpc_server_port").pipe(
    Config.validate({
      message: "must be a port number (0 = any free port)",
      validation: (n) => n >= 0 && n <= 65535
    }),
    Config.withDefault(0)
  )
  const rpc = yield* RpcConfig
  return { host, port, ...listenerLimits(rpc) }
})

/**
 * The server with its address from config (TENT's top-level `rpc_server_hostname`, default `127.0.0.1`, and
 * `rpc_server_port`, default 0) and its notification limit from {@link RpcConfig}.
 *
 * @since 0.1.0
 */
export const layerConfig: Layer.Layer<
  ServerAddress,
  ServerError | ConfigError.ConfigError,
  ControlPlaneHandlers | RpcConfig
> = Layer.scoped(ServerAddress, Effect.flatMap(optionsFromConfig, make))
