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
