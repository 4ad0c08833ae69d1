/**
 * The server's direct `Notify` dispatch (the group's handler forked straight from the frame, without
 * `RpcServer.makeNoSerialization`): every outcome the `RpcServer` path had, kept.
 */
import { Rpc } from "@effect/rpc"
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Layer, Scope } from "effect"
import {
  ControlPlane,
  type ControlPlaneHandlers,
  InvalidEntry,
  makeNotification,
  NotificationTooLarge,
  notificationText,
  TransportFailure
} from "../src/index.js"
import { eventually, makeAgent, startServer } from "./helpers.js"

class Seen extends Context.Tag("test/Seen")<Seen, Array<string>>() {}

type Handlers = Extract<Parameters<typeof ControlPlane.toLayer>[0], { readonly Notify: unknown }>

const rest: Omit<Handlers, "Notify"> = {
  Bootstrap: (d) => Effect.succeed(d),
  GetSegmentDesc: () => Effect.fail(new InvalidEntry({ segment: "", message: "none" })),
  Probe: () => Effect.void
}

/** The group's handlers with this `Notify`. */
const withNotify = (Notify: Handlers["Notify"]): Layer.Layer<ControlPlaneHandlers> =>
  ControlPlane.toLayer({ ...rest, Notify }) as Layer.Layer<ControlPlaneHandlers>

describe("Notify straight to its handler", () => {
  it.scopedLive("sync and async handlers, typed errors sync and async, and a throwing handler", () =>
    Effect.gen(function* () {
      const server = yield* startServer({}, () =>
        withNotify((n) => {
          const { name, msg } = notificationText(n)
          switch (name) {
            case "sleep":
              return Effect.sleep(Number(msg))
            case "fail":
              return Effect.fail(new NotificationTooLarge({ size: 1, max: 0 }))
            case "fail-later":
              return Effect.sleep(20).pipe(Effect.zipRight(Effect.fail(new NotificationTooLarge({ size: 2, max: 0 }))))
            case "die-later":
              return Effect.sleep(20).pipe(Effect.zipRight(Effect.die(new Error("died later"))))
            case "throw":
              throw new Error("threw before returning an effect")
            default:
              return Effect.void
          }
        })
      )
      const agent = yield* makeAgent({ notify_timeout_ms: 5000 })
      const at = server.address
      yield* agent.notify(at, makeNotification("ok", "x"))
      yield* agent.notify(at, makeNotification("sleep", "30"))

      const failed = yield* Effect.flip(agent.notify(at, makeNotification("fail", "")))
      expect(failed).toBeInstanceOf(NotificationTooLarge)
      expect(failed).toMatchObject({ size: 1, max: 0 })
      const failedLater = yield* Effect.flip(agent.notify(at, makeNotification("fail-later", "")))
      expect(failedLater).toBeInstanceOf(NotificationTooLarge)
      expect(failedLater).toMatchObject({ size: 2 })

      const died = yield* Effect.flip(agent.notify(at, makeNotification("die-later", "")))
      expect(died).toBeInstanceOf(TransportFailure)
      expect(died).toMatchObject({ reason: "Protocol" })
      expect(died.message).toContain("died later")

      // a handler that throws instead of returning an effect is a defect reply at once, not a timeout
      const t0 = performance.now()
      const threw = yield* Effect.flip(agent.notify(at, makeNotification("throw", "")))
      expect(performance.now() - t0).toBeLessThan(5000) // the reply, before the call's 5 s timeout
      expect(threw).toMatchObject({ _tag: "TransportFailure", reason: "Protocol" })
      expect(threw.message).toContain("threw before returning an effect")

      // many at once, sync and async mixed: each gets its own reply
      const names = Array.from({ length: 500 }, (_, i) => (i % 3 === 0 ? "sleep" : i % 3 === 1 ? "fail" : "ok"))
      const exits = yield* Effect.forEach(
        names,
        (name) => Effect.exit(agent.notify(at, makeNotification(name, name === "sleep" ? "5" : ""))),
        { concurrency: "unbounded" }
      )
      exits.forEach((exit, i) => {
        if (names[i] === "fail") expect(Exit.isFailure(exit)).toBe(true)
        else expect(exit).toStrictEqual(Exit.void)
      })
      expect(yield* agent.connections).toEqual([at])
    })
  )

  it.scopedLive("the handler runs with the services its handlers Layer was built with", () =>
    Effect.gen(function* () {
      const seen: Array<string> = []
      const handlers = ControlPlane.toLayer(
        Effect.gen(function* () {
          yield* Seen
          return {
            ...rest,
            Notify: (n) => Effect.flatMap(Seen, (s) => Effect.sync(() => void s.push(notificationText(n).name)))
          }
        })
      ).pipe(Layer.provide(Layer.succeed(Seen, seen))) as Layer.Layer<ControlPlaneHandlers>
      const server = yield* startServer({}, () => handlers)
      const agent = yield* makeAgent()
      yield* agent.notify(server.address, makeNotification("a", ""))
      yield* agent.notify(server.address, makeNotification("b", ""))
      expect(seen).toEqual(["a", "b"])
    })
  )

  it.scopedLive("disconnecting interrupts the running handler; Rpc.uninterruptible keeps it running", () =>
    Effect.gen(function* () {
      let interrupted = 0
      const finished = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const server = yield* startServer({}, () =>
        withNotify((n) => {
          const name = notificationText(n).name
          if (name === "keep")
            return Rpc.uninterruptible(Effect.sleep(100).pipe(Effect.zipRight(Deferred.succeed(finished, undefined))))
          if (name === "hang")
            return Deferred.succeed(started, undefined).pipe(
              Effect.zipRight(Effect.never),
              Effect.onInterrupt(() => Effect.sync(() => void interrupted++))
            )
          return Effect.void
        })
      )
      const agent = yield* makeAgent()
      const call = yield* Effect.fork(agent.notify(server.address, makeNotification("hang", "")))
      yield* Deferred.await(started)
      yield* agent.disconnect(server.address)
      const error = yield* Effect.flip(call.await.pipe(Effect.flatten))
      expect(error).toMatchObject({ _tag: "TransportFailure", reason: "Closed" })
      yield* eventually(() => interrupted > 0)
      expect(interrupted).toBe(1)

      // an uninterruptible handler outlives the caller's timeout, and the connection still serves afterwards
      const timedOut = yield* Effect.flip(agent.notify(server.address, makeNotification("keep", ""), { timeout: 20 }))
      expect(timedOut).toMatchObject({ reason: "Timeout" })
      yield* Deferred.await(finished)
      yield* agent.notify(server.address, makeNotification("ok", ""))
    })
  )

  it.scopedLive("closing the server interrupts a Notify in flight; the caller sees Closed", () =>
    Effect.gen(function* () {
      let interrupted = 0
      const started = yield* Deferred.make<void>()
      const scope = yield* Scope.make()
      const server = yield* startServer({}, () =>
        withNotify(() =>
          Deferred.succeed(started, undefined).pipe(
            Effect.zipRight(Effect.never),
            Effect.onInterrupt(() => Effect.sync(() => void interrupted++))
          )
        )
      ).pipe(Scope.extend(scope))
      const agent = yield* makeAgent()
      const call = yield* Effect.fork(agent.notify(server.address, makeNotification("hang", "")))
      yield* Deferred.await(started)
      yield* Scope.close(scope, Exit.void)
      expect(interrupted).toBe(1)
      const error = yield* Effect.flip(call.await.pipe(Effect.flatten))
      expect(error).toMatchObject({ _tag: "TransportFailure", reason: "Closed" })
    })
  )
})
