import * as Net from "node:net"
import { Effect, type Scope } from "effect"
import { ServerError } from "../Errors.js"
import * as Metrics from "../Metrics.js"
import type { ListenerShape } from "../Server.js"
import { formatAddress } from "./address.js"
import type { RejectReason } from "./auth.js"

/** The limits a listener's connections are served with, fixed when it binds. */
export interface Limits {
  /** Largest `Notify` (name + message bytes) accepted. */
  readonly maxNotifyBytes: number
  /** Largest `SendData` / `RecvData` served. */
  readonly maxDataBytes: number
  /** Connections held at once (served or waiting); one more is closed at once and counted. */
  readonly maxConnections: number
  /** Requests of one connection handled at once; beyond it the connection is not read until one is answered. */
  readonly maxInflight: number
  /** Reply bytes a connection may leave unread; beyond it the connection is not read until its peer reads. */
  readonly maxUnreadReplyBytes: number
  /** The shared secret every connection must prove before it is served; undefined: none (TENT's behaviour). */
  readonly secret: Uint8Array | undefined
  /** Whether a connection from this address may be served; undefined: any. */
  readonly allowed: ((address: string | undefined) => boolean) | undefined
}

/** Connections a server refused before serving them, by reason (its share of `tent_rpc_rejected_connections_total`). */
export type Rejections = Record<RejectReason, number>

/** Counts one refused connection on the server's counters and in the metric. */
export const reject = (rejected: Rejections, reason: RejectReason): void => {
  rejected[reason]++
  Metrics.rejectedConnections.child(reason).update(1)
}

/**
 * A bound `node:net` server that accepts connections before anything serves them. Sockets are accepted paused
 * (`pauseOnConnect`): until {@link attach} their bytes wait in the kernel's receive buffer (bounded by TCP flow
 * control, nothing read, nothing lost), then the attached handler takes them over and resumes them. A held socket
 * whose peer left is not noticed until it is read (nothing is read while paused): once attached, its requests are
 * read and answered like any others, the replies going nowhere.
 *
 * The service of `Server.Listener`: only `bind` makes one (its private members make the type nominal), so `serve`
 * is given a listener it can attach to or it does not compile. The methods besides `host`, `port` and `address` are
 * the server's own.
 */
export class BoundListener implements ListenerShape {
  private onSocket: ((socket: Net.Socket) => void) | undefined
  /** Connections accepted while nothing is attached (or while frozen), held paused. */
  private readonly waiting = new Set<Net.Socket>()
  /** Every connection not closed yet, held or served: closing the listener closes them. */
  private readonly open = new Set<Net.Socket>()
  /** While frozen (see {@link freeze}): the served connections it paused. */
  private paused: Set<Net.Socket> | undefined

  /** Connections refused before anything was served, by reason. */
  readonly rejected: Rejections = {
    auth_required: 0,
    auth_failed: 0,
    not_allowed: 0,
    max_connections: 0,
    tent_wire: 0
  }

  constructor(
    readonly host: string,
    readonly port: number,
    readonly address: string,
    readonly limits: Limits,
    private readonly server: Net.Server
  ) {}

  /**
   * A new connection: closed at once (nothing read, counted) when its address is not allowed or the server holds
   * `maxConnections` already; else handed to the handler, or held paused until one is attached (and not frozen).
   */
  readonly accept = (socket: Net.Socket): void => {
    socket.on("error", () => {})
    const refused =
      this.limits.allowed !== undefined && !this.limits.allowed(socket.remoteAddress)
        ? "not_allowed"
        : this.open.size >= this.limits.maxConnections
          ? "max_connections"
          : undefined
    if (refused !== undefined) {
      reject(this.rejected, refused)
      socket.destroy()
      return
    }
    this.open.add(socket)
    socket.once("close", () => this.open.delete(socket))
    if (this.onSocket !== undefined && this.paused === undefined) this.onSocket(socket)
    else this.waiting.add(socket)
  }

  /** Hands the held connections to the handler, if one is attached and the listener is not frozen. */
  private flush(): void {
    const onSocket = this.onSocket
    if (onSocket === undefined || this.paused !== undefined) return
    const held = Array.from(this.waiting)
    this.waiting.clear()
    for (const socket of held) if (!socket.destroyed) onSocket(socket)
  }

  /** Hands every held and future connection to `onSocket`; false when a handler is attached already. */
  attach(onSocket: (socket: Net.Socket) => void): boolean {
    if (this.onSocket !== undefined) return false
    this.onSocket = onSocket
    this.flush()
    return true
  }

  /** Stops handing connections to the handler; later ones are held again until the next {@link attach}. */
  detach(): void {
    this.onSocket = undefined
  }

  /**
   * Freezes (or thaws) the server as a stopped process would look to its peers while its kernel runs on: the kernel
   * still completes TCP handshakes and buffers what arrives, and nothing is read or answered. Frozen, every served
   * connection is paused and new ones are held unread with those waiting for a handler; thawed, the paused ones
   * resume and the held ones go to the handler (or wait for one), their buffered requests read and answered as if
   * nothing had happened. Replies already on their way out still leave. For fault injection (`tent probe`'s
   * application freeze).
   */
  freeze(frozen: boolean): void {
    if (frozen) {
      if (this.paused !== undefined) return
      const paused = new Set<Net.Socket>()
      for (const socket of this.open) {
        if (this.waiting.has(socket) || socket.isPaused()) continue
        socket.pause()
        paused.add(socket)
      }
      this.paused = paused
      return
    }
    const paused = this.paused
    if (paused === undefined) return
    this.paused = undefined
    for (const socket of paused) if (!socket.destroyed) socket.resume()
    this.flush()
  }

  /** Stops listening and closes every connection, held or served. */
  close(): Effect.Effect<void> {
    return Effect.async<void>((resume) => {
      this.server.close(() => resume(Effect.void))
      this.waiting.clear()
      this.paused = undefined
      for (const socket of this.open) socket.destroy()
    })
  }
}

/** Binds `host:port` (port 0: any free one); the listener stops with the scope. */
export const bind = (
  host: string,
  port: number,
  limits: Limits
): Effect.Effect<BoundListener, ServerError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<BoundListener, ServerError>((resume) => {
      let listener: BoundListener | undefined
      const server = Net.createServer({ pauseOnConnect: true }, (socket) => listener?.accept(socket))
      const onError = (err: Error) =>
        resume(Effect.fail(new ServerError({ host, port, message: `cannot listen: ${err.message}`, cause: err })))
      server.once("error", onError)
      server.listen({ host, port }, () => {
        server.off("error", onError)
        server.on("error", () => {})
        const bound = server.address() as Net.AddressInfo
        listener = new BoundListener(
          bound.address,
          bound.port,
          formatAddress(bound.address, bound.port),
          limits,
          server
        )
        resume(Effect.succeed(listener))
      })
    }),
    (listener) => listener.close()
  )
