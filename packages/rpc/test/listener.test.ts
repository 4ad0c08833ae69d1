/**
 * The server in two steps: `Server.layerListener` binds (the address is known at once), `Server.serve` attaches the
 * handlers later. Connections and calls that arrive in between are held, not lost and not refused.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Fiber, Layer, Scope } from "effect"
import { makeNotification, type Notification, notificationText, Server } from "../src/index.js"
import { makeHandlers } from "./fixtures/handlers.js"
import { bootstrapDesc, makeAgent, settle } from "./helpers.js"

describe("Server.layerListener + Server.serve", () => {
  it.scopedLive("the address is known before serve; calls made before serve are answered once it attaches", () =>
    Effect.gen(function* () {
      const listener = Context.get(yield* Layer.build(Server.layerListener()), Server.Listener)
      expect(listener.address).toBe(`127.0.0.1:${listener.port}`)
      expect(listener.port).toBeGreaterThan(0)

      const agent = yield* makeAgent({ notify_timeout_ms: 10_000, bootstrap_timeout_ms: 10_000 })
      // the connection opens (the kernel accepts it) and the requests wait, unread, until serve
      const early = yield* Effect.fork(
        Effect.all([
          agent.notify(listener.address, makeNotification("early", "1")),
          agent.bootstrap(listener.address, bootstrapDesc("me@soft0")),
          agent.notify(listener.address, makeNotification("early", "2"))
        ])
      )
      yield* settle(200)
      expect(early.unsafePoll()).toBeNull()

      // handlers built after the listener, from its address (what the engine's segment name needs)
      const received: Array<Notification> = []
      const served = yield* Server.serve(makeHandlers(() => listener.address, received)).pipe(
        Effect.provideService(Server.Listener, listener)
      )
      expect(served.address).toBe(listener.address)
      const [, reply] = yield* Fiber.join(early)
      expect(reply.local_nic_path).toBe("peer@soft1")
      expect(received.map((n) => notificationText(n).msg)).toEqual(["1", "2"])
      expect((yield* agent.getSegmentDesc(listener.address)).name).toBe(listener.address)
    })
  )

  it.scopedLive(
    "a caller that left before serve still has its request read once served; a second serve fails; serve attaches again after the first one's scope ends",
    () =>
      Effect.gen(function* () {
        const listener = Context.get(yield* Layer.build(Server.layerListener()), Server.Listener)
        const provideListener = Effect.provideService(Server.Listener, listener)
        const quitter = yield* makeAgent({ notify_timeout_ms: 10_000 })
        const gone = yield* Effect.fork(quitter.notify(listener.address, makeNotification("gone", "")))
        yield* settle(100) // connected and written before the caller leaves
        yield* quitter.disconnect(listener.address)
        expect((yield* Fiber.await(gone))._tag).toBe("Failure")

        const received: Array<Notification> = []
        const first = yield* Scope.make()
        yield* Server.serve(makeHandlers(() => listener.address, received)).pipe(provideListener, Scope.extend(first))
        const again = yield* Effect.exit(Server.serve(makeHandlers(() => listener.address)).pipe(provideListener))
        expect(Exit.isFailure(again) && String(again.cause)).toMatch(/served already/)

        const agent = yield* makeAgent({ notify_timeout_ms: 10_000 })
        yield* agent.notify(listener.address, makeNotification("one", ""))
        yield* Scope.close(first, Exit.void)
        // the first serve closed its connections; the next call connects anew and waits for the next serve
        // (seen by the agent when the socket's close is read: bounded, in wall time)
        let open = yield* agent.connections
        for (const deadline = Date.now() + 20_000; open.length > 0 && Date.now() < deadline; ) {
          yield* Effect.sleep("10 millis")
          open = yield* agent.connections
        }
        expect(open).toEqual([])
        const next = yield* Effect.fork(agent.notify(listener.address, makeNotification("two", "")))
        yield* settle(100)
        expect(next.unsafePoll()).toBeNull()
        yield* Server.serve(makeHandlers(() => listener.address, received)).pipe(provideListener)
        yield* Fiber.join(next)
        // "gone" waited in the kernel's buffer (a held socket is not read, so its peer's leaving goes unnoticed): the
        // first serve read and delivered it, its reply going nowhere, as a slow TCP server would
        expect(received.map((n) => notificationText(n).name)).toEqual(["gone", "one", "two"])
      })
  )

  it.scopedLive("Server.make is still listener + serve in one step, with the handlers in context", () =>
    Effect.gen(function* () {
      const received: Array<Notification> = []
      const server = yield* Server.make({ maxNotifyBytes: 1024 }).pipe(Effect.provide(makeHandlers(() => "", received)))
      const agent = yield* makeAgent()
      yield* agent.notify(server.address, makeNotification("n", "m"))
      expect(received).toHaveLength(1)
      expect(server.data).toEqual({ sent: 0, received: 0, rejected: 0 })
    })
  )

  it.scopedLive(
    "a listener closed before it was ever served closes the connections it held: the caller sees Closed",
    () =>
      Effect.gen(function* () {
        const scope = yield* Scope.make()
        const listener = Context.get(yield* Layer.buildWithScope(Server.layerListener(), scope), Server.Listener)
        const agent = yield* makeAgent({ notify_timeout_ms: 10_000 })
        const held = yield* Effect.fork(agent.notify(listener.address, makeNotification("held", "")))
        yield* settle(100) // connected (held by the listener) before it closes
        yield* Scope.close(scope, Exit.void)
        const failure = yield* Effect.flip(Fiber.join(held))
        expect(failure._tag === "TransportFailure" && failure.reason).toBe("Closed")
      })
  )

  it.scopedLive(
    "freeze: served and new connections are read by nobody (calls time out, connects succeed); thaw: what waited is read and answered",
    () =>
      Effect.gen(function* () {
        const listener = Context.get(yield* Layer.build(Server.layerListener()), Server.Listener)
        const received: Array<Notification> = []
        yield* Server.serve(makeHandlers(() => listener.address, received)).pipe(
          Effect.provideService(Server.Listener, listener)
        )
        const served = yield* makeAgent({ notify_timeout_ms: 300 })
        yield* served.notify(listener.address, makeNotification("before", ""))
        listener.freeze(true)
        // an open connection: the request is written, nobody reads it
        const failure = yield* Effect.flip(served.notify(listener.address, makeNotification("frozen-open", "")))
        expect(failure._tag === "TransportFailure" && failure.reason).toBe("Timeout")
        // a new connection: the kernel completes the handshake, nobody reads
        const fresh = yield* makeAgent({ notify_timeout_ms: 5000 })
        const waiting = yield* Effect.fork(fresh.notify(listener.address, makeNotification("frozen-new", "")))
        yield* settle(300)
        expect(waiting.unsafePoll()).toBeNull()
        expect(yield* fresh.connections).toEqual([listener.address])
        expect(received.map((n) => notificationText(n).name)).toEqual(["before"])

        listener.freeze(false)
        yield* Fiber.join(waiting)
        yield* served.notify(listener.address, makeNotification("after", ""))
        // the request that timed out at its caller was still read and delivered on thaw, as a stopped process would
        expect(received.map((n) => notificationText(n).name).sort()).toEqual(
          ["after", "before", "frozen-new", "frozen-open"].sort()
        )
      })
  )
})
