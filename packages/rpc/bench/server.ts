/**
 * The far side of the RPC bench, in its own process: a plain `node:net` echo of length-prefixed frames (the floor),
 * the lean control-plane server and the stock @effect/rpc one, all with a `Notify` handler that does nothing.
 * Prints `{"floor":port,"lean":port,"auth":port,"stock":port}` once all listen (`auth`: the lean server with a shared
 * secret, {@link BENCH_SECRET}).
 */
import type * as Net from "node:net"
import { echoServer } from "@tent/verbs/bench/frames"
import { Context, Effect, Layer } from "effect"
import { ControlPlane, InvalidEntry, Server, Stock } from "../src/index.js"
import { BENCH_SECRET } from "./secret.js"

const handlers = ControlPlane.toLayer({
  Bootstrap: (d) => Effect.succeed(d),
  // `Effect.void` is already complete: the lean server answers it without a fiber. A notification named `fiber`
  // gets an effect that is not, so its handler runs in a fiber of its own (what a handler doing work in Effect costs).
  Notify: (n) =>
    n.name.length === 5 && Buffer.from(n.name).toString() === "fiber" ? Effect.sync(() => {}) : Effect.void,
  GetSegmentDesc: () => Effect.fail(new InvalidEntry({ segment: "", message: "bench" })),
  Probe: () => Effect.void
})

/** Echoes every `[u32 len][bytes]` frame back as it came. */
const floorServer = echoServer()

const main = Effect.gen(function* () {
  const floor = yield* Effect.async<number>((resume) => {
    floorServer.listen({ host: "127.0.0.1", port: 0 }, () =>
      resume(Effect.succeed((floorServer.address() as Net.AddressInfo).port))
    )
  })
  // built in this scope, so they serve until the process ends
  const lean = Context.get(yield* Layer.build(Layer.provide(Server.layer(), handlers)), Server.ServerAddress)
  // the same server with the control plane's shared secret: every connection proves it before it is served
  const auth = Context.get(
    yield* Layer.build(Layer.provide(Server.layer({ secret: BENCH_SECRET }), handlers)),
    Server.ServerAddress
  )
  const stock = Context.get(
    yield* Layer.build(Layer.provide(Stock.layerServer({ disableTracing: true }), handlers)),
    Server.ServerAddress
  )
  process.stdout.write(`${JSON.stringify({ floor, lean: lean.port, auth: auth.port, stock: stock.port })}\n`)
  return yield* Effect.never
})

process.on("SIGTERM", () => process.exit(0))
Effect.runPromise(Effect.scoped(main)).catch((e) => {
  process.stderr.write(`bench server failed: ${String(e)}\n`)
  process.exit(1)
})
