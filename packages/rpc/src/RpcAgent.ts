/**
 * The `RpcAgent`, the only client through which the engine calls a peer: one connection per peer address, every call
 * bounded by a timeout, failures told apart (the peer's reply error or a `TransportFailure`), and the `CallGuard` seam.
 *
 * @since 0.1.0
 */
import { Cause, Context, Duration, Effect, Exit, Layer, Option, type Scope } from "effect"
import type { ControlPlaneTag, DataReplyError, PayloadOf, ReplyErrorOf, SuccessOf } from "./ControlPlane.js"
import { DataTooLarge, NotificationTooLarge, SegmentRangeInvalid, TransportFailure } from "./Errors.js"
import { parseAddress } from "./internal/address.js"
import { dataSpecByTag, maxFrameBytes, type RpcSpec, specByTag } from "./internal/codec.js"
import { Connection } from "./internal/connection.js"
import * as Metrics from "./Metrics.js"
import type { BootstrapDesc, Notification, SegmentDesc } from "./Models.js"
import { defaults, RpcConfig } from "./RpcConfig.js"

/**
 * Per-call options of {@link RpcAgentShape.call}.
 *
 * @since 0.1.0
 */
export interface CallOptions {
  /** Overrides the configured timeout of this RPC (the wait for the reply, after the connection is up). */
  readonly timeout?: Duration.DurationInput | undefined
}

/**
 * What a data call can fail with: the peer's typed refusal, `DataTooLarge`, or a {@link TransportFailure}.
 *
 * @since 0.1.0
 */
export type DataCallError = DataReplyError | TransportFailure

/**
 * What a call can fail with: the peer's typed reply error, or a {@link TransportFailure}. Nothing else.
 *
 * @since 0.1.0
 */
export type CallError<T extends ControlPlaneTag> = ReplyErrorOf<T> | TransportFailure

/**
 * The only way the engine calls a peer. One connection per peer address, created on first use, replaced on the
 * next call after it fails (no backoff: a peer that restarted is reachable at once), closed with the agent's scope.
 * Every call is bounded: connecting by `rpc/connect_timeout_ms`, the reply by the RPC's own timeout.
 *
 * @since 0.1.0
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
  /**
   * `SendData` with `rpc/request_timeout_ms`: writes `data` into the peer's registered memory at `addr`. More than
   * `rpc/max_data_bytes` fails with `DataTooLarge` without sending.
   */
  readonly sendData: (
    address: string,
    addr: number,
    data: Uint8Array,
    options?: CallOptions
  ) => Effect.Effect<void, DataCallError>
  /** `RecvData` with `rpc/request_timeout_ms`: `length` bytes of the peer's registered memory at `addr`. */
  readonly recvData: (
    address: string,
    addr: number,
    length: number,
    options?: CallOptions
  ) => Effect.Effect<Uint8Array, DataCallError>
  /** Closes the connection to `address` if there is one; its pending calls fail with reason `Closed`. */
  readonly disconnect: (address: string) => Effect.Effect<void>
  /** Peer addresses with a connection (open or opening). */
  readonly connections: Effect.Effect<ReadonlyArray<string>>
}

/**
 * The control-plane client of this engine.
 *
 * @since 0.1.0
 */
export class RpcAgent extends Context.Tag("@tent/rpc/RpcAgent")<RpcAgent, RpcAgentShape>() {}

/**
 * The name an agent claims when it proves the control plane's shared secret (`RpcSettings.secret`): its engine's
 * segment name, which the peer's handlers see as `Server.PEER_HEADER`. Optional: without it, the agent proves the
 * secret with an empty name.
 *
 * @since 0.3.0
 */
export class AgentName extends Context.Tag("@tent/rpc/RpcAgent/AgentName")<AgentName, string>() {}

/**
 * Builds an agent; its connections close with the scope. With a secret in {@link RpcConfig}, every connection proves
 * it (and has the peer prove it) before its first call, claiming {@link AgentName} if there is one.
 *
 * @since 0.1.0
 */
export const make: Effect.Effect<RpcAgentShape, never, RpcConfig | Scope.Scope> = Effect.gen(function* () {
  const settings = yield* RpcConfig
  const name = Option.getOrElse(yield* Effect.serviceOption(AgentName), () => "")
  const maxDataBytes = settings.maxDataBytes ?? defaults.max_data_bytes
  const maxFrame = maxFrameBytes(settings.maxNotifyBytes, maxDataBytes)
  const connections = new Map<string, Connection>()
  let closed = false
  const onDead = (c: Connection) => {
    if (connections.get(c.address) === c) connections.delete(c.address)
  }
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      closed = true
      for (const c of Array.from(connections.values())) c.fail("Closed", `agent closed its connection to ${c.address}`)
    })
  )

  /** The connection to `address`, opened on first use; a failure when there can be none. */
  const connection = (address: string): Connection | TransportFailure => {
    const existing = connections.get(address)
    if (existing !== undefined) return existing
    // Both refused here, before anything is sent: nothing a guard should learn of the peer.
    if (closed) return refusedHere(new TransportFailure({ address, reason: "Closed", message: "agent is closed" }))
    const target = parseAddress(address)
    if (target === undefined) {
      return refusedHere(
        new TransportFailure({ address, reason: "Refused", message: `"${address}" is not a host:port address` })
      )
    }
    const c = new Connection(address, target.host, target.port, settings, maxFrame, onDead, name)
    connections.set(address, c)
    return c
  }

  /**
   * Sends one request; the connection is looked up each time the effect runs (a rerun after a failure gets a new one).
   * Its time to the reply is observed in `tent_rpc_call_duration_seconds`, a transport failure counted by reason.
   */
  const send = (address: string, spec: RpcSpec, payload: unknown, timeoutMs: number) =>
    Effect.async<unknown, unknown>((resume) => {
      const start = performance.now()
      const done = (result: Effect.Effect<unknown, unknown>) => {
        Metrics.observeCall(spec.tag, address, start, result)
        resume(result)
      }
      const c = connection(address)
      if (c instanceof TransportFailure) return done(Exit.fail(c))
      return c.call(spec, payload, timeoutMs, done)
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
    const timeoutMs = options?.timeout === undefined ? timeouts[rpc] : Duration.toMillis(options.timeout)
    if (rpc === "Notify") {
      const n = payload as Notification
      const size = (n?.name?.length ?? 0) + (n?.msg?.length ?? 0)
      if (size > settings.maxNotifyBytes) {
        return Effect.fail(
          refusedHere(new NotificationTooLarge({ size, max: settings.maxNotifyBytes })) as CallError<T>
        )
      }
    }
    return send(address, specByTag[rpc], payload, timeoutMs) as Effect.Effect<SuccessOf<T>, CallError<T>>
  }

  /** One data call: the size is checked before anything is encoded or a connection is opened. */
  const dataCall = <A>(
    address: string,
    spec: RpcSpec,
    payload: unknown,
    size: number,
    options: CallOptions | undefined
  ): Effect.Effect<A, DataCallError> => {
    const { addr } = payload as { readonly addr: number }
    if (!Number.isSafeInteger(addr) || addr < 0 || !Number.isSafeInteger(size) || size < 0) {
      return Effect.fail(
        refusedHere(
          new SegmentRangeInvalid({ addr, length: size, message: "address and length must be non-negative integers" })
        )
      )
    }
    if (size > maxDataBytes) return Effect.fail(refusedHere(new DataTooLarge({ size, max: maxDataBytes })))
    const timeoutMs = options?.timeout === undefined ? settings.requestTimeoutMs : Duration.toMillis(options.timeout)
    return send(address, spec, payload, timeoutMs) as Effect.Effect<A, DataCallError>
  }

  return {
    call,
    sendData: (address, addr, data, options) =>
      dataCall<void>(address, dataSpecByTag.SendData, { addr, data }, data.length, options),
    recvData: (address, addr, length, options) =>
      dataCall<Uint8Array>(address, dataSpecByTag.RecvData, { addr, length }, length, options),
    bootstrap: (address, desc, options) => call(address, "Bootstrap", desc, options),
    notify: (address, notification, options) => call(address, "Notify", notification, options),
    getSegmentDesc: (address, options) => call(address, "GetSegmentDesc", undefined, options),
    probe: (address, options) => call(address, "Probe", undefined, options),
    disconnect: (address) =>
      Effect.sync(() => connections.get(address)?.fail("Closed", `disconnected from ${address} on request`)),
    connections: Effect.sync(() => Array.from(connections.keys()))
  }
})

/**
 * The agent as a Layer (settings from {@link RpcConfig}).
 *
 * @since 0.1.0
 */
export const layer: Layer.Layer<RpcAgent, never, RpcConfig> = Layer.scoped(RpcAgent, make)

/** Errors the agent made itself, before anything was sent: no answer from the peer, so nothing a guard should record. */
const localRefusals = new WeakSet<object>()
const refusedHere = <E extends object>(e: E): E => {
  localRefusals.add(e)
  return e
}

/**
 * One hook around every control-plane call of an agent ({@link decorate}). RFC PR 4's `PeerHealth` decorates the
 * agent through this: `admit` can refuse a call to a peer it considers down, `record` learns how each call ended.
 *
 * @since 0.1.0
 */
export interface CallGuard {
  /** Runs before the call; a failure fails the call without anything being sent (and without a `record`). */
  readonly admit: (address: string) => Effect.Effect<void, TransportFailure>
  /**
   * Runs after every admitted call that ended: with its {@link TransportFailure}, or `undefined` when the peer
   * answered (a success or a typed reply error). Not run when the caller interrupted the call or it died, nor when the
   * agent refused the call itself before sending (`NotificationTooLarge`, `DataTooLarge` or an invalid range of its
   * own limits, an address that is not `host:port`, a closed agent): the peer said nothing, so nothing is learnt of it.
   */
  readonly record: (address: string, failure: TransportFailure | undefined) => Effect.Effect<void>
}

/**
 * The agent with `guard` around `call`, `bootstrap`, `notify`, `getSegmentDesc`, `probe`, `sendData` and
 * `recvData`; `disconnect` and `connections` are the agent's own. Calls go out through the agent's own `call`, so a
 * decorated call passes the guard once.
 *
 * @since 0.1.0
 */
export const decorate = (agent: RpcAgentShape, guard: CallGuard): RpcAgentShape => {
  const recordExit = (address: string, exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> => {
    if (Exit.isSuccess(exit)) return guard.record(address, undefined)
    const failure = Cause.failureOption(exit.cause)
    if (failure._tag === "None") return Effect.void
    if (typeof failure.value === "object" && failure.value !== null && localRefusals.has(failure.value)) {
      return Effect.void
    }
    return guard.record(address, failure.value instanceof TransportFailure ? failure.value : undefined)
  }
  const guarded = <A, E>(address: string, self: Effect.Effect<A, E>): Effect.Effect<A, E | TransportFailure> =>
    Effect.zipRight(
      guard.admit(address),
      Effect.onExit(self, (exit) => recordExit(address, exit))
    )
  return {
    call: (address, rpc, payload, options) => guarded(address, agent.call(address, rpc, payload, options)),
    bootstrap: (address, desc, options) => guarded(address, agent.bootstrap(address, desc, options)),
    notify: (address, notification, options) => guarded(address, agent.notify(address, notification, options)),
    getSegmentDesc: (address, options) => guarded(address, agent.getSegmentDesc(address, options)),
    probe: (address, options) => guarded(address, agent.probe(address, options)),
    sendData: (address, addr, data, options) => guarded(address, agent.sendData(address, addr, data, options)),
    recvData: (address, addr, length, options) => guarded(address, agent.recvData(address, addr, length, options)),
    disconnect: agent.disconnect,
    connections: agent.connections
  }
}
