/**
 * The Redis registry's client: one connection (TCP, or TLS through `node:tls`), RESP2 commands answered in order, a
 * reader bounded by `maxValueBytes` (see `resp.ts`). Every call is bounded: a connection is opened when a call finds
 * none (the handshake — `AUTH`, `SELECT`, `PING` — within `connectTimeoutMs`), a command is never resent, and one
 * without a reply within `commandTimeoutMs` closes its connection (a later reply could not be matched to its command).
 * The password is a `Redacted` unwrapped only to write `AUTH`, and scrubbed from any text a server sends back.
 */
import * as Net from "node:net"
import * as Tls from "node:tls"
import { Data, Deferred, Effect, Exit, FiberId, Redacted, type Scope } from "effect"
import { TransportFailure, type TransportFailureReason } from "../../Errors.js"
import { connectFailureReason } from "../connection.js"
import { encodeCommand, type Refusal, type Reply, ReplyReader } from "./resp.js"

/** A bulk reply announced larger than `maxValueBytes`: refused on its length line, its bytes never read. */
export class ValueTooLarge extends Data.TaggedError("ValueTooLarge")<{
  readonly size: number
  readonly max: number
}> {}

/** How to reach and log in to the server. */
export interface ClientOptions {
  /** What errors name as `address` (the address as configured). */
  readonly address: string
  readonly host: string
  readonly port: number
  /** TLS settings; undefined = plain TCP. */
  readonly tls:
    | { readonly servername: string | undefined; readonly ca: ReadonlyArray<string | Buffer> | undefined }
    | undefined
  readonly username: string | undefined
  readonly password: Redacted.Redacted<string> | undefined
  readonly db: number
  readonly connectTimeoutMs: number
  readonly commandTimeoutMs: number
  readonly maxValueBytes: number
}

/** What a command fails with. */
export type CallError = TransportFailure | ValueTooLarge

/** The client of one registry. */
export interface RedisClient {
  /** Runs one command; `op` names it in errors (`GET mooncake/tent/x`). */
  readonly call: (op: string, args: ReadonlyArray<string | Uint8Array>) => Effect.Effect<Reply, CallError>
  /** `text` with the password, if any, replaced (for server text put into an error). */
  readonly scrub: (text: string) => string
}

/** Error codes of a plain TCP connect or connection; anything else while a TLS session is set up is TLS's refusal. */
const socketCodes = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "EADDRNOTAVAIL",
  "ETIMEDOUT",
  "ECONNRESET",
  "EPIPE"
])

const ignore = () => {}

const codeOf = (e: unknown): string | undefined =>
  typeof e === "object" && e !== null && "code" in e && typeof e.code === "string" ? e.code : undefined

const scrubber =
  (password: Redacted.Redacted<string> | undefined) =>
  (text: string): string => {
    const secret = password === undefined ? "" : Redacted.value(password)
    return secret === "" ? text : text.split(secret).join("<redacted>")
  }

/** Server text in an error: scrubbed, and cut to a length a log line can carry. */
const quote = (scrub: (s: string) => string, text: string): string => {
  const s = scrub(text)
  return s.length > 200 ? `${s.slice(0, 200)}…` : s
}

interface Waiter {
  readonly op: string
  /** Undefined once the caller stopped waiting (interrupted): its reply is read and dropped. */
  resume: ((exit: Exit.Exit<Reply, CallError>) => void) | undefined
  timer: ReturnType<typeof setTimeout> | undefined
}

/** One connection: commands written in order, replies matched to them in order. */
class Connection {
  failure: TransportFailure | undefined
  private readonly queue: Array<Waiter> = []
  private readonly reader: ReplyReader
  private lastError: Error | undefined

  constructor(
    readonly socket: Net.Socket,
    private readonly options: ClientOptions,
    private readonly scrub: (s: string) => string
  ) {
    this.reader = new ReplyReader(options.maxValueBytes)
    socket.setNoDelay(true)
    socket.on("data", (chunk: Buffer) => this.onData(chunk))
    socket.on("error", (e) => {
      this.lastError = e
    })
    socket.on("close", () => {
      const why = this.lastError === undefined ? "" : `: ${this.scrub(this.lastError.message)}`
      this.fail("Closed", `connection closed${why}`)
    })
    // closed between its setup and this constructor: its close event has gone by
    if (socket.destroyed) this.fail("Closed", "connection closed as it was set up")
  }

  call(op: string, args: ReadonlyArray<string | Uint8Array>, timeoutMs: number): Effect.Effect<Reply, CallError> {
    return Effect.async<Reply, CallError>((resume) => {
      if (this.failure !== undefined) return resume(Effect.fail(this.failure))
      const waiter: Waiter = { op, resume: (exit) => resume(exit), timer: undefined }
      waiter.timer = setTimeout(() => {
        waiter.timer = undefined
        this.fail("Timeout", `no answer within ${timeoutMs} ms`, waiter)
      }, timeoutMs)
      this.queue.push(waiter)
      this.socket.write(encodeCommand(args))
      return Effect.sync(() => {
        waiter.resume = undefined
        clearTimeout(waiter.timer)
      })
    })
  }

  /** Marks the connection dead and closes it: `first` (the command that broke it) and every other waiter fail. */
  fail(reason: TransportFailureReason, message: string, first?: Waiter, firstError?: CallError): void {
    if (this.failure !== undefined) return
    this.failure = this.error(reason, message, first)
    this.socket.destroy()
    const waiters = this.queue.splice(0)
    for (const w of waiters) {
      clearTimeout(w.timer)
      const error =
        w === first
          ? (firstError ?? this.error(reason, message, w))
          : this.error(reason, `${message} (${w.op} was queued behind it)`, w)
      w.resume?.(Exit.fail(error))
    }
  }

  private error(reason: TransportFailureReason, message: string, w: Waiter | undefined): TransportFailure {
    return new TransportFailure({
      address: this.options.address,
      reason,
      message: `redis ${w?.op ?? "connection"}: ${message}`
    })
  }

  private onData(chunk: Buffer): void {
    const refusal = this.reader.feed(chunk, (reply) => {
      const w = this.queue.shift()
      if (w === undefined) {
        this.fail("Protocol", "a reply to no command")
        return false
      }
      clearTimeout(w.timer)
      w.resume?.(Exit.succeed(reply))
      return true
    })
    if (refusal !== undefined) this.refused(refusal)
  }

  private refused(refusal: Refusal): void {
    const head = this.queue[0]
    if (refusal._tag === "TooLarge") {
      const message = `a reply of ${refusal.size} bytes, over the bound of ${refusal.max} bytes (not read)`
      const tooLarge = head === undefined ? undefined : new ValueTooLarge({ size: refusal.size, max: refusal.max })
      this.fail("Protocol", message, head, tooLarge)
    } else {
      this.fail("Protocol", quote(this.scrub, refusal.message), head)
    }
  }
}

/** Opens the socket (and its TLS session), within `connectTimeoutMs`. */
const openSocket = (o: ClientOptions, scrub: (s: string) => string): Effect.Effect<Net.Socket, TransportFailure> =>
  Effect.async<Net.Socket, TransportFailure>((resume) => {
    const fail = (reason: TransportFailureReason, message: string) => {
      unlisten()
      clearTimeout(timer)
      socket.destroy()
      resume(Effect.fail(new TransportFailure({ address: o.address, reason, message: `redis connect: ${message}` })))
    }
    const timer = setTimeout(() => fail("Timeout", `no connection within ${o.connectTimeoutMs} ms`), o.connectTimeoutMs)
    const socket: Net.Socket =
      o.tls === undefined
        ? Net.connect({ host: o.host, port: o.port })
        : Tls.connect({
            host: o.host,
            port: o.port,
            // SNI and the name the certificate is checked against; an IP address is checked against the IP SANs
            ...(o.tls.servername === undefined ? {} : { servername: o.tls.servername }),
            ...(o.tls.ca === undefined ? {} : { ca: [...o.tls.ca] }),
            minVersion: "TLSv1.2",
            rejectUnauthorized: true
          })
    const ready = o.tls === undefined ? "connect" : "secureConnect"
    const onReady = () => {
      clearTimeout(timer)
      unlisten()
      resume(Effect.succeed(socket))
    }
    const onError = (e: Error) => {
      const code = codeOf(e)
      const text = scrub(e.message)
      if (o.tls !== undefined && (code === undefined || !socketCodes.has(code))) {
        fail(
          "Refused",
          `TLS session with ${o.host}:${o.port} refused: ${text}${code === undefined ? "" : ` (${code})`}`
        )
      } else {
        fail(connectFailureReason(code), `cannot connect to ${o.host}:${o.port}: ${text}`)
      }
    }
    const onClose = () => {
      fail("Closed", `connection to ${o.host}:${o.port} closed while it was being set up`)
    }
    const unlisten = () => {
      socket.off(ready, onReady)
      socket.off("error", onError)
      socket.off("close", onClose)
    }
    // Kept for the socket's life: an error emitted with no listener would be an uncaught exception.
    socket.on("error", ignore)
    socket.once(ready, onReady)
    socket.once("error", onError)
    socket.once("close", onClose)
    return Effect.sync(() => {
      unlisten()
      clearTimeout(timer)
      socket.destroy()
    })
  })

/** Expects `+<want>`; an error reply is the server's refusal. */
const expectSimple = (o: ClientOptions, op: string, want: string, reply: Reply, scrub: (s: string) => string) => {
  if (reply._tag === "Simple" && reply.value === want) return Effect.void
  const refused = reply._tag === "Error"
  const text = refused ? reply.value : `${reply._tag} reply where +${want} was expected`
  return Effect.fail(
    new TransportFailure({
      address: o.address,
      reason: refused ? "Refused" : "Protocol",
      message: `redis ${op}: ${quote(scrub, text)}`
    })
  )
}

/** A connection, logged in and on its database: `AUTH` (when there is a password), `SELECT` (when not 0), `PING`. */
const open = (o: ClientOptions, scrub: (s: string) => string): Effect.Effect<Connection, TransportFailure> =>
  Effect.gen(function* () {
    const socket = yield* openSocket(o, scrub)
    const c = new Connection(socket, o, scrub)
    const handshake = Effect.gen(function* () {
      const t = o.connectTimeoutMs
      if (o.password !== undefined && Redacted.value(o.password) !== "") {
        const secret = Redacted.value(o.password)
        const args = o.username ? ["AUTH", o.username, secret] : ["AUTH", secret]
        yield* expectSimple(o, "AUTH", "OK", yield* c.call("AUTH", args, t), scrub)
      }
      if (o.db !== 0)
        yield* expectSimple(o, `SELECT ${o.db}`, "OK", yield* c.call("SELECT", ["SELECT", `${o.db}`], t), scrub)
      yield* expectSimple(o, "PING", "PONG", yield* c.call("PING", ["PING"], t), scrub)
    })
    yield* handshake.pipe(
      Effect.catchTag("ValueTooLarge", (e) =>
        Effect.fail(
          new TransportFailure({
            address: o.address,
            reason: "Protocol",
            message: `redis connect: a ${e.size}-byte reply`
          })
        )
      ),
      Effect.timeoutFail({
        duration: o.connectTimeoutMs,
        onTimeout: () =>
          new TransportFailure({
            address: o.address,
            reason: "Timeout",
            message: `redis connect: no handshake within ${o.connectTimeoutMs} ms`
          })
      }),
      Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : Effect.sync(() => c.socket.destroy())))
    )
    return c
  })

/**
 * A client in the current scope: connected before it is returned (so a registry that cannot reach its server does
 * not start), `QUIT` and a closed socket when the scope closes.
 */
export const make = (o: ClientOptions): Effect.Effect<RedisClient, TransportFailure, Scope.Scope> =>
  Effect.gen(function* () {
    const scope = yield* Effect.scope
    const scrub = scrubber(o.password)
    let current: Connection | undefined
    let opening: Deferred.Deferred<Connection, TransportFailure> | undefined
    let closed = false

    current = yield* open(o, scrub)
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        const c = current
        if (c === undefined || c.failure !== undefined) return Effect.void
        return c
          .call("QUIT", ["QUIT"], o.commandTimeoutMs)
          .pipe(Effect.ignore, Effect.ensuring(Effect.sync(() => c.socket.destroy())))
      })
    )

    /** The live connection, or a new one (one opening at a time, shared by the calls that wait for it). */
    const connection = Effect.suspend((): Effect.Effect<Connection, TransportFailure> => {
      if (closed) {
        return Effect.fail(
          new TransportFailure({ address: o.address, reason: "Closed", message: "redis: registry closed" })
        )
      }
      if (current !== undefined && current.failure === undefined) return Effect.succeed(current)
      if (opening === undefined) {
        const d = Deferred.unsafeMake<Connection, TransportFailure>(FiberId.none)
        opening = d
        const connect = open(o, scrub).pipe(
          Effect.tap((c) =>
            Effect.sync(() => {
              if (closed) c.socket.destroy()
              else current = c
            })
          ),
          Effect.onExit((exit) =>
            Effect.suspend(() => {
              opening = undefined
              return Deferred.done(d, exit)
            })
          )
        )
        return Effect.zipRight(Effect.forkIn(connect, scope), Deferred.await(d))
      }
      return Deferred.await(opening)
    })

    const callTimeout = o.connectTimeoutMs + o.commandTimeoutMs + 500
    return {
      scrub,
      call: (op, args) =>
        connection.pipe(
          Effect.flatMap((c) => c.call(op, args, o.commandTimeoutMs)),
          // Each step bounds itself; this outer bound only guards against one that never settles.
          Effect.timeoutFail({
            duration: callTimeout,
            onTimeout: () =>
              new TransportFailure({
                address: o.address,
                reason: "Timeout",
                message: `redis ${op}: no answer within ${callTimeout} ms`
              })
          })
        )
    }
  })
