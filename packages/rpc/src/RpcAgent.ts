import * as Net from "node:net"
import { Context, Deferred, Duration, Effect, Exit, FiberId, Layer } from "effect"
import type { ControlPlaneTag, PayloadOf, ReplyErrorOf, SuccessOf } from "./ControlPlane.js"
import { NotificationTooLarge, TransportFailure, type TransportFailureReason } from "./Errors.js"
import { parseAddress } from "./internal/address.js"
import { type RpcSpec, specByTag } from "./internal/codec.js"
import { FrameReader, Kind } from "./internal/frame.js"
import { FramedSocket } from "./internal/framed.js"
import type { BootstrapDesc, Notification, SegmentDesc } from "./Models.js"
import { RpcConfig, type RpcSettings } from "./RpcConfig.js"
import { maxFrameBytes } from "./Server.js"

/** Per-call options of {@link RpcAgentShape.call}. */
export interface CallOptions {
  /** Overrides the configured timeout of this RPC (the wait for the reply, after the connection is up). */
  readonly timeout?: Duration.DurationInput | undefined
}

/** What a call can fail with: the peer's typed reply error, or a {@link TransportFailure}. Nothing else. */
export type CallError<T extends ControlPlaneTag> = ReplyErrorOf<T> | TransportFailure

/**
 * The only way the engine calls a peer. One connection per peer address, created on first use, replaced on the
 * next call after it fails (no backoff: a peer that restarted is reachable at once), closed with the agent's scope.
 * Every call is bounded: connecting by `rpc/connect_timeout_ms`, the reply by the RPC's own timeout.
 */
export interface RpcAgentShape {
  /** Calls `rpc` on the peer at `address` (`host:port`). */
  readonly call: <T extends ControlPlaneTag>(
    address: string,
    rpc: T,
    payload: PayloadOf<T>,
    options?: CallOptions
  ) => Effect.Effect<SuccessOf<T>, CallError<T>>
  /** `Bootstrap` with `rpc/bootstrap_timeout_ms`. */
  readonly bootstrap: (
    address: string,
    desc: BootstrapDesc,
    options?: CallOptions
  ) => Effect.Effect<BootstrapDesc, CallError<"Bootstrap">>
  /** `Notify` with `rpc/notify_timeout_ms`; larger than `rpc/max_notify_bytes` fails without sending. */
  readonly notify: (
    address: string,
    notification: Notification,
    options?: CallOptions
  ) => Effect.Effect<void, CallError<"Notify">>
  /** `GetSegmentDesc` with `rpc/request_timeout_ms`. */
  readonly getSegmentDesc: (
    address: string,
    options?: CallOptions
  ) => Effect.Effect<SegmentDesc, CallError<"GetSegmentDesc">>
  /** `Probe` with `rpc/request_timeout_ms`. */
  readonly probe: (address: string, options?: CallOptions) => Effect.Effect<void, TransportFailure>
  /** Closes the connection to `address` if there is one; its pending calls fail with reason `Closed`. */
  readonly disconnect: (address: string) => Effect.Effect<void>
  /** Peer addresses with a connection (open or opening). */
  readonly connections: Effect.Effect<ReadonlyArray<string>>
}

/** The control-plane client of this engine. */
export class RpcAgent extends Context.Tag("@tent/rpc/RpcAgent")<RpcAgent, RpcAgentShape>() {}

interface Pending {
  readonly spec: RpcSpec
  readonly timeoutMs: number
  readonly resume: (effect: Effect.Effect<unknown, unknown>) => void
  timer: ReturnType<typeof setTimeout> | undefined
}

const refusedCodes = new Set(["ECONNREFUSED", "ENOTFOUND", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN", "EADDRNOTAVAIL"])

/** One connection to one peer, with its pending calls by wire id. */
class Connection {
  ready: Effect.Effect<Connection, TransportFailure>
  failure: TransportFailure | undefined
  private readonly pending = new Map<number, Pending>()
  private readonly opened = Deferred.unsafeMake<Connection, TransportFailure>(FiberId.none)
  private readonly socket: Net.Socket
  private readonly framed: FramedSocket
  private readonly reader: FrameReader
  private connectTimer: ReturnType<typeof setTimeout> | undefined
  private lastError: NodeJS.ErrnoException | undefined
  private connected = false
  private nextId = 1

  constructor(
    readonly address: string,
    host: string,
    port: number,
    settings: RpcSettings,
    maxFrame: number,
    private readonly onDead: (c: Connection) => void
  ) {
    this.ready = Deferred.await(this.opened)
    this.reader = new FrameReader(maxFrame, this.onFrame)
    this.socket = Net.createConnection({ host, port, noDelay: true })
    this.framed = new FramedSocket(this.socket)
    this.connectTimer = setTimeout(
      () => this.fail("Timeout", `connect to ${address} timed out after ${settings.connectTimeoutMs} ms`),
      settings.connectTimeoutMs
    )
    this.socket.once("connect", () => {
      clearTimeout(this.connectTimer)
      this.connected = true
      this.ready = Effect.succeed(this)
      Deferred.unsafeDone(this.opened, Exit.succeed(this))
    })
    this.socket.on("data", (chunk: Buffer) => {
      if (this.failure !== undefined) return
      const bad = this.reader.push(chunk)
      if (bad !== undefined) {
        this.framed.protocolError(bad)
        this.fail("Protocol", `malformed reply from ${address}: ${bad}`)
      }
    })
    this.socket.on("error", (err: NodeJS.ErrnoException) => {
      this.lastError = err
    })
    this.socket.on("close", () => {
      const code = this.lastError?.code
      const detail = this.lastError ? ` (${this.lastError.code ?? this.lastError.message})` : ""
      if (!this.connected) {
        const reason =
          code === "ETIMEDOUT" ? "Timeout" : code !== undefined && !refusedCodes.has(code) ? "Closed" : "Refused"
        this.fail(reason, `cannot connect to ${address}${detail}`)
      } else {
        this.fail(code === "ETIMEDOUT" ? "Timeout" : "Closed", `connection to ${address} closed${detail}`)
      }
    })
  }

  /** Marks the connection dead: every pending and future call on it fails with this reason. */
  fail(reason: TransportFailureReason, message: string): void {
    if (this.failure !== undefined) return
    const failure = new TransportFailure({ address: this.address, reason, message })
    this.failure = failure
    clearTimeout(this.connectTimer)
    this.onDead(this)
    if (!this.socket.destroyed && reason !== "Protocol") this.socket.destroy()
    this.ready = Effect.fail(failure)
    Deferred.unsafeDone(this.opened, Exit.fail(failure))
    for (const p of this.pending.values()) {
      clearTimeout(p.timer)
      p.resume(Effect.fail(failure))
    }
    this.pending.clear()
  }

  /** Sends one request and waits for its reply, at most `timeoutMs`; interruption abandons it at the peer too. */
  request(spec: RpcSpec, payload: unknown, timeoutMs: number, maxFrame: number): Effect.Effect<unknown, unknown> {
    return Effect.async<unknown, unknown>((resume) => {
      if (this.failure !== undefined) return resume(Effect.fail(this.failure))
      const id = this.nextId
      this.nextId = id >= 0xfffffffe ? 1 : id + 1
      const w = this.framed.writer
      w.begin(Kind.Request, id)
      w.u8(spec.index)
      try {
        spec.payload.encode(w, payload)
      } catch (e) {
        w.abort()
        return resume(Effect.fail(this.protocolFailure(`${spec.tag} payload does not encode: ${String(e)}`)))
      }
      if (w.frameLength() > maxFrame) {
        w.abort()
        return resume(Effect.fail(this.protocolFailure(`${spec.tag} request exceeds the frame limit of ${maxFrame}`)))
      }
      w.end()
      this.framed.flushSoon()
      const p: Pending = { spec, timeoutMs, resume, timer: undefined }
      p.timer = setTimeout(() => this.onTimeout(id), timeoutMs)
      this.pending.set(id, p)
      return Effect.sync(() => this.abandon(id))
    })
  }

  private protocolFailure(message: string): TransportFailure {
    return new TransportFailure({ address: this.address, reason: "Protocol", message })
  }

  private onTimeout(id: number): void {
    const p = this.pending.get(id)
    if (p === undefined) return
    this.pending.delete(id)
    this.sendInterrupt(id)
    p.resume(
      Effect.fail(
        new TransportFailure({
          address: this.address,
          reason: "Timeout",
          message: `${p.spec.tag} to ${this.address}: no reply within ${p.timeoutMs} ms`
        })
      )
    )
  }

  private abandon(id: number): void {
    const p = this.pending.get(id)
    if (p === undefined) return
    clearTimeout(p.timer)
    this.pending.delete(id)
    this.sendInterrupt(id)
  }

  private sendInterrupt(id: number): void {
    if (this.failure !== undefined) return
    this.framed.writer.begin(Kind.Interrupt, id)
    this.framed.writer.end()
    this.framed.flushSoon()
  }

  private readonly onFrame = (buf: Buffer, start: number, end: number): void => {
    const kind = buf[start]
    const id = buf.readUInt32LE(start + 1)
    const body = start + 5
    if (kind === Kind.ProtocolError) {
      this.fail("Protocol", `${this.address} rejected a frame: ${buf.toString("utf8", body, end)}`)
      return
    }
    if (kind === undefined || kind < Kind.Success || kind > Kind.Interrupted)
      throw new Error(`unexpected frame kind ${kind}`)
    const p = this.pending.get(id)
    if (p === undefined) return // a late reply to a call that timed out or was abandoned
    this.pending.delete(id)
    clearTimeout(p.timer)
    switch (kind) {
      case Kind.Success:
      case Kind.Failure: {
        let value: unknown
        try {
          value = (kind === Kind.Success ? p.spec.success : p.spec.error).decode(buf, body, end)
        } catch (e) {
          p.resume(Effect.fail(this.protocolFailure(`${p.spec.tag} reply from ${this.address} does not decode: ${e}`)))
          return
        }
        p.resume(kind === Kind.Success ? Effect.succeed(value) : Effect.fail(value))
        return
      }
      case Kind.Defect:
        p.resume(
          Effect.fail(
            this.protocolFailure(`${p.spec.tag} handler on ${this.address} failed: ${buf.toString("utf8", body, end)}`)
          )
        )
        return
      default:
        p.resume(
          Effect.fail(
            new TransportFailure({
              address: this.address,
              reason: "Closed",
              message: `${this.address} interrupted ${p.spec.tag} (shutting down)`
            })
          )
        )
    }
  }
}

/** Builds an agent; its connections close with the scope. */
export const make: Effect.Effect<RpcAgentShape, never, RpcConfig | import("effect/Scope").Scope> = Effect.gen(
  function* () {
    const settings = yield* RpcConfig
    const maxFrame = maxFrameBytes(settings.maxNotifyBytes)
    const connections = new Map<string, Connection>()
    let closed = false
    const onDead = (c: Connection) => {
      if (connections.get(c.address) === c) connections.delete(c.address)
    }
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        for (const c of Array.from(connections.values()))
          c.fail("Closed", `agent closed its connection to ${c.address}`)
      })
    )

    const connection = (address: string): Effect.Effect<Connection, TransportFailure> =>
      Effect.suspend(() => {
        const existing = connections.get(address)
        if (existing !== undefined) return existing.ready
        if (closed) return Effect.fail(new TransportFailure({ address, reason: "Closed", message: "agent is closed" }))
        const target = parseAddress(address)
        if (target === undefined) {
          return Effect.fail(
            new TransportFailure({ address, reason: "Refused", message: `"${address}" is not a host:port address` })
          )
        }
        const c = new Connection(address, target.host, target.port, settings, maxFrame, onDead)
        connections.set(address, c)
        return c.ready
      })

    const timeouts: Record<ControlPlaneTag, number> = {
      Bootstrap: settings.bootstrapTimeoutMs,
      Notify: settings.notifyTimeoutMs,
      GetSegmentDesc: settings.requestTimeoutMs,
      Probe: settings.requestTimeoutMs
    }

    const call = <T extends ControlPlaneTag>(
      address: string,
      rpc: T,
      payload: PayloadOf<T>,
      options?: CallOptions
    ): Effect.Effect<SuccessOf<T>, CallError<T>> => {
      const spec = specByTag[rpc]
      const timeoutMs = options?.timeout === undefined ? timeouts[rpc] : Duration.toMillis(options.timeout)
      if (rpc === "Notify") {
        const n = payload as Notification
        const size = (n?.name?.length ?? 0) + (n?.msg?.length ?? 0)
        if (size > settings.maxNotifyBytes) {
          return Effect.fail(new NotificationTooLarge({ size, max: settings.maxNotifyBytes }) as CallError<T>)
        }
      }
      return Effect.flatMap(connection(address), (c) => c.request(spec, payload, timeoutMs, maxFrame)) as Effect.Effect<
        SuccessOf<T>,
        CallError<T>
      >
    }

    return {
      call,
      bootstrap: (address, desc, options) => call(address, "Bootstrap", desc, options),
      notify: (address, notification, options) => call(address, "Notify", notification, options),
      getSegmentDesc: (address, options) => call(address, "GetSegmentDesc", undefined, options),
      probe: (address, options) => call(address, "Probe", undefined, options),
      disconnect: (address) =>
        Effect.sync(() => connections.get(address)?.fail("Closed", `disconnected from ${address} on request`)),
      connections: Effect.sync(() => Array.from(connections.keys()))
    }
  }
)

/** The agent as a Layer (settings from {@link RpcConfig}). */
export const layer: Layer.Layer<RpcAgent, never, RpcConfig> = Layer.scoped(RpcAgent, make)
