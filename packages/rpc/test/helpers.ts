import { Effect, Layer, type Scope } from "effect"
import {
  type BootstrapDesc,
  type ControlPlaneHandlers,
  type Notification,
  RpcAgent,
  RpcConfig,
  Server
} from "../src/index.js"
import { makeHandlers } from "./fixtures/handlers.js"

/** An agent with the given raw config values, closed with the scope. */
export const makeAgent = (
  values: Parameters<typeof RpcConfig.layer>[0] = {}
): Effect.Effect<RpcAgent.RpcAgentShape, never, Scope.Scope> =>
  RpcAgent.make.pipe(Effect.provide(RpcConfig.layer(values)))

/** The lean server in this process with the test handlers; `received` collects delivered notifications. */
export const startServer = (
  options: Server.ServerOptions = {},
  handlers?: (address: () => string) => Layer.Layer<ControlPlaneHandlers>
): Effect.Effect<Server.ServerAddressShape & { readonly received: Array<Notification> }, unknown, Scope.Scope> =>
  Effect.gen(function* () {
    let address = ""
    const received: Array<Notification> = []
    const layer = handlers ? handlers(() => address) : makeHandlers(() => address, received)
    const bound = yield* Layer.build(Server.layer(options).pipe(Layer.provide(layer)))
    const shape = bound.unsafeMap.get(Server.ServerAddress.key) as Server.ServerAddressShape
    address = shape.address
    return { ...shape, received }
  })

/** Milliseconds an effect took, with its result. */
export const timed = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<[A, number], E, R> =>
  Effect.gen(function* () {
    const t0 = performance.now()
    const a = yield* self
    return [a, performance.now() - t0] as [A, number]
  })

/** A `Bootstrap` descriptor from `local` (the test handlers reject `"reject"` and swap the two paths otherwise). */
export const bootstrapDesc = (local: string): BootstrapDesc => ({
  local_nic_path: local,
  peer_nic_path: "peer@soft1",
  qp_num: [11, 12],
  local_lid: 0,
  local_gid: "fe:80::1",
  reply_msg: "",
  notify_qp_num: 13,
  notify_proto: 1
})

/**
 * Runs `self` beside a plain timer of `ms` armed at the same moment: its result, the milliseconds it took, and how
 * much later than that timer it ended (0 if it ended first). A loaded machine delays both alike, so `late` measures
 * what `self`'s own deadline added to a timer's, not how slow the machine was.
 */
export const besideTimer = <A, E, R>(
  ms: number,
  self: Effect.Effect<A, E, R>
): Effect.Effect<{ readonly value: A; readonly took: number; readonly late: number }, E, R> =>
  Effect.gen(function* () {
    let fired: number | undefined
    const t0 = performance.now()
    const timer = setTimeout(() => {
      fired = performance.now()
    }, ms)
    const value = yield* Effect.ensuring(
      self,
      Effect.sync(() => clearTimeout(timer))
    )
    const end = performance.now()
    return { value, took: end - t0, late: fired === undefined ? 0 : end - fired }
  })

/** Polls `cond` every 10 ms for at most `ms` of wall time (real clock only); its last value. */
export const eventually = (cond: () => boolean, ms = 20_000): Effect.Effect<boolean> =>
  Effect.gen(function* () {
    const deadline = Date.now() + ms
    while (!cond() && Date.now() < deadline) yield* Effect.sleep("10 millis")
    return cond()
  })

/**
 * Sleeps `ms`, then lets the event loop turn `turns` more times: after a stall of this process its timers fire before
 * the I/O that waited meanwhile is read, so a sleep alone does not give a socket the chance to act.
 */
export const settle = (ms: number, turns = 10): Effect.Effect<void> =>
  Effect.gen(function* () {
    yield* Effect.sleep(ms)
    for (let i = 0; i < turns; i++) yield* Effect.promise(() => new Promise<void>((r) => setImmediate(r)))
  })
