/**
 * `TransferEngine.subscribe`, the engine's fast consumer: a synchronous callback at the delivery point, beside the
 * queues the `notifications` stream and `receiveNotifications` drain. Two engines in this process over real SoftVerbs
 * devices and the real control plane on 127.0.0.1: `tx` sends, `rx` subscribes.
 */
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, type Notification, notificationText } from "@tent/rpc"
import { Context, Effect, Exit, Fiber, Layer, Logger, LogLevel, Option, Scope, Stream } from "effect"
import { Dedup, Diagnostics, Series, TransferEngine } from "../src/index.js"
import * as Delivery from "../src/internal/Delivery.js"
import { check, engineLayer, payload } from "./fixtures/engine.js"
import { engine, rdmaOnly, until } from "./fixtures/policies.js"

const name = (n: Notification) => notificationText(n).name

/** Sends `payload(prefix, i)` for i in [from, to) from `tx` to `rx`. */
const sendAll = (
  tx: TransferEngine.TransferEngineShape,
  rx: TransferEngine.TransferEngineShape,
  prefix: string,
  from: number,
  to: number
) =>
  Effect.gen(function* () {
    for (let i = from; i < to; i++) yield* tx.sendNotification(rx.segmentName, payload(prefix, i))
  })

/** A moment for a notification that should not arrive (a second copy, a call after unsubscribe) to land anyway. */
const settle = Effect.sleep("150 millis")

const clean = (count: number) => ({ count, distinct: count, outOfOrder: 0, corrupt: 0, duplicates: 0 })

describe("TransferEngine.subscribe: the fast consumer", () => {
  it.scopedLive("a subscriber receives each notification once, in order, synchronously at delivery", () =>
    Effect.gen(function* () {
      const rx = yield* engine(rdmaOnly)
      const tx = yield* engine(rdmaOnly)
      const got: Array<Notification> = []
      // What the queue held when the handler ran: the handler drains it each call, so at the call for notification i
      // it holds exactly i - 1 (queued after the previous call returned) and never i itself — the handler runs inside
      // the delivery, between admission and the queue.
      const queuedAtCall: Array<ReadonlyArray<string>> = []
      yield* rx.engine.subscribe((n) => {
        queuedAtCall.push(Effect.runSync(rx.engine.receiveNotifications).map(name))
        got.push(n)
      })
      const total = 300
      yield* sendAll(tx.engine, rx.engine, "s", 0, total)
      expect(yield* until(() => got.length >= total)).toBe(true)
      yield* settle
      expect(check("s", got)).toEqual(clean(total))
      expect(got.length).toBe(total)
      expect(queuedAtCall[0]).toEqual([])
      for (let i = 1; i < total; i++) expect(queuedAtCall[i], `call ${i}`).toEqual([`s${i - 1}`])
      expect(rx.diag.counters.delivery?.handlerErrors).toBe(0)
    })
  )

  it("at the delivery point itself: the handler has run when `deliver` returns, and a refused copy is not handed out", () => {
    const sender = Dedup.makeSeries()
    const delivery = new Delivery.Delivery(Dedup.makeSeries())
    const got: Array<string> = []
    const unsubscribe = delivery.subscribe((n) => got.push(name(n)))
    const stamp = sender.stamp(1) as Dedup.Stamp
    expect(delivery.fromNotify("rpc#1", { ...makeNotification("a", "x"), stamp })).toBe(true)
    expect(got).toEqual(["a"])
    expect(delivery.fromNotify("rpc#1", { ...makeNotification("a", "x"), stamp })).toBe(false)
    expect(got).toEqual(["a"])
    unsubscribe()
    expect(delivery.fromNotify("rpc#1", makeNotification("b", "x"))).toBe(true)
    expect(got).toEqual(["a"])
    expect(delivery.drain(["tcp"]).map(name)).toEqual(["a", "b"])
  })

  it("a consuming subscriber takes what it is handed: nothing is queued while it lasts, every subscriber still gets it", () => {
    const delivery = new Delivery.Delivery(Dedup.legacy)
    const taken: Array<string> = []
    const beside: Array<string> = []
    delivery.subscribe((n) => beside.push(name(n)))
    const stop = delivery.subscribe((n) => taken.push(name(n)), true)
    const seen = delivery.signal.current
    delivery.fromNotify("rpc#1", makeNotification("a", "x"))
    delivery.deliver("rdma", "peer", makeNotification("b", "x"))
    expect(taken).toEqual(["a", "b"])
    expect(beside).toEqual(["a", "b"])
    expect(delivery.drain(["rdma", "tcp"])).toEqual([])
    expect(delivery.signal.current).toBe(seen) // the stream's consumers are not woken for what was not queued
    stop()
    stop() // a second unsubscribe changes nothing
    delivery.fromNotify("rpc#1", makeNotification("c", "x"))
    expect(taken).toEqual(["a", "b"])
    expect(beside).toEqual(["a", "b", "c"])
    expect(delivery.drain(["rdma", "tcp"]).map(name)).toEqual(["c"])
  })

  it.scopedLive("subscribe with consume: every notification once to the handler, none left in the queues", () =>
    Effect.gen(function* () {
      const rx = yield* engine(rdmaOnly)
      const tx = yield* engine(rdmaOnly)
      const got: Array<Notification> = []
      yield* rx.engine.subscribe((n) => got.push(n), { consume: true })
      const streamed = yield* rx.engine.notifications.pipe(
        Stream.take(1),
        Stream.runCollect,
        Effect.timeout("1 second"),
        Effect.option,
        Effect.fork
      )
      const total = 300
      yield* sendAll(tx.engine, rx.engine, "c", 0, total)
      expect(yield* until(() => got.length >= total)).toBe(true)
      yield* settle
      expect(check("c", got)).toEqual(clean(total))
      expect(yield* rx.engine.receiveNotifications).toEqual([])
      expect(yield* Fiber.join(streamed)).toEqual(Option.none()) // the stream saw none of them
    })
  )

  it("a subscriber unsubscribed by another during a pass is not called in that pass", () => {
    const delivery = new Delivery.Delivery(Dedup.legacy)
    const calls: Array<string> = []
    let unsubscribeSecond = () => {}
    delivery.subscribe((n) => {
      calls.push(`first ${name(n)}`)
      unsubscribeSecond()
    })
    unsubscribeSecond = delivery.subscribe((n) => calls.push(`second ${name(n)}`))
    delivery.fromNotify("rpc#1", makeNotification("a", "x"))
    delivery.fromNotify("rpc#1", makeNotification("b", "x"))
    expect(calls).toEqual(["first a", "first b"])
    expect(delivery.subscribers).toBe(1)
  })

  it.scopedLive("two subscribers and the stream each see every notification, in order", () =>
    Effect.gen(function* () {
      const rx = yield* engine(rdmaOnly)
      const tx = yield* engine(rdmaOnly)
      const first: Array<Notification> = []
      const second: Array<Notification> = []
      yield* rx.engine.subscribe((n) => first.push(n))
      yield* rx.engine.subscribe((n) => second.push(n))
      const total = 200
      const streamed = yield* rx.engine.notifications.pipe(
        Stream.take(total),
        Stream.runCollect,
        Effect.timeout("20 seconds"),
        Effect.fork
      )
      yield* sendAll(tx.engine, rx.engine, "b", 0, total)
      const fromStream = Array.from(yield* Fiber.join(streamed))
      expect(yield* until(() => first.length >= total && second.length >= total)).toBe(true)
      yield* settle
      expect(check("b", first)).toEqual(clean(total))
      expect(check("b", second)).toEqual(clean(total))
      expect(check("b", fromStream)).toEqual(clean(total))
      expect([first.length, second.length, fromStream.length]).toEqual([total, total, total])
      expect(yield* rx.engine.receiveNotifications).toEqual([]) // the stream took them from the queue
    })
  )

  it.scopedLive("unsubscribes when its scope closes: no call after, while another subscriber still gets them", () =>
    Effect.gen(function* () {
      const rx = yield* engine(rdmaOnly)
      const tx = yield* engine(rdmaOnly)
      const scoped: Array<Notification> = []
      const always: Array<Notification> = []
      yield* rx.engine.subscribe((n) => always.push(n))
      const scope = yield* Scope.make()
      yield* Scope.extend(
        rx.engine.subscribe((n) => scoped.push(n)),
        scope
      )
      yield* sendAll(tx.engine, rx.engine, "u", 0, 50)
      expect(yield* until(() => scoped.length >= 50)).toBe(true)
      yield* Scope.close(scope, Exit.void)
      yield* sendAll(tx.engine, rx.engine, "u", 50, 100)
      expect(yield* until(() => always.length >= 100)).toBe(true)
      yield* settle
      expect(check("u", scoped)).toEqual(clean(50))
      expect(scoped.length).toBe(50)
      expect(check("u", always)).toEqual(clean(100))
    })
  )

  it.scopedLive("a throwing handler is caught, counted and logged; it and the others get the next notifications", () =>
    Effect.gen(function* () {
      const warnings: Array<{ message: string; cause: string }> = []
      const logger = Logger.make(({ cause, logLevel, message }) => {
        if (logLevel._tag === "Warning") warnings.push({ message: String(message), cause: String(cause) })
      })
      const rx = yield* engine(rdmaOnly).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)))
      const tx = yield* engine(rdmaOnly)
      const thrower: Array<string> = []
      const other: Array<Notification> = []
      yield* rx.engine.subscribe((n) => {
        thrower.push(name(n))
        if (thrower.length % 2 === 1) throw new Error(`handler failed on ${name(n)}`)
      })
      yield* rx.engine.subscribe((n) => other.push(n))
      const total = 20
      yield* sendAll(tx.engine, rx.engine, "t", 0, total)
      expect(yield* until(() => other.length >= total)).toBe(true)
      yield* settle
      expect(thrower).toEqual(Array.from({ length: total }, (_, i) => `t${i}`))
      expect(check("t", other)).toEqual(clean(total))
      expect(rx.diag.counters.delivery?.handlerErrors).toBe(total / 2)
      expect(warnings.length).toBe(total / 2)
      expect(warnings[0]?.message).toContain("subscriber threw")
      expect(warnings[0]?.cause).toContain("handler failed on t0")
      // the poller went on: the queue holds every one of them too
      expect(check("t", yield* rx.engine.receiveNotifications)).toEqual(clean(total))
      expect(rx.diag.counters.rdma?.received).toBe(total)
    }).pipe(Logger.withMinimumLogLevel(LogLevel.Warning))
  )

  it.scopedLive("under Series.all a duplicate the window drops is not handed to the subscriber", () =>
    Effect.gen(function* () {
      const build = Effect.map(Layer.build(engineLayer(rdmaOnly, ["mlx0", "mlx1"], Series.all)), (ctx) => ({
        engine: Context.get(ctx, TransferEngine.TransferEngine),
        diag: Context.get(ctx, Diagnostics.Diagnostics)
      }))
      const rx = yield* build
      const tx = yield* build
      const got: Array<Notification> = []
      yield* rx.engine.subscribe((n) => got.push(n))
      // the first over the notify QP: the bootstrap tells tx that rx speaks notify_proto 1
      yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification("small", "x"))
      expect(yield* until(() => got.length >= 1)).toBe(true)
      // larger than a slot: the control plane's Notify, which carries the stamp it is given; the same stamp twice
      const big = { ...makeNotification("big", new Uint8Array(70_000).fill(7)), stamp: { session: 0x5eedn, seq: 1n } }
      yield* tx.engine.sendNotification(rx.engine.segmentName, big)
      yield* tx.engine.sendNotification(rx.engine.segmentName, big)
      yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification("after", "x"))
      expect(yield* until(() => got.length >= 3)).toBe(true)
      yield* settle
      expect(got.map(name)).toEqual(["small", "big", "after"])
      expect(rx.diag.counters.dedup?.duplicates).toBe(1)
    })
  )

  it.scopedLive(
    "trySendNotification posts at once exactly where sendNotification would without waiting, and says false otherwise",
    () =>
      Effect.gen(function* () {
        const rx = yield* engine(rdmaOnly)
        const tx = yield* engine(rdmaOnly)
        const got: Array<Notification> = []
        yield* rx.engine.subscribe((n) => got.push(n))
        const to = rx.engine.segmentName
        // No endpoint yet: nothing is sent (the full path would bootstrap one).
        expect(tx.engine.trySendNotification(to, makeNotification("early", "x"))).toBe(false)
        yield* tx.engine.sendNotification(to, makeNotification("first", "x"))
        // READY with free slots: posted synchronously, counted as sent.
        const sentBefore = tx.diag.counters.rdma?.sent ?? 0
        for (let i = 0; i < 100; i++) expect(tx.engine.trySendNotification(to, payload("f", i))).toBe(true)
        expect(tx.diag.counters.rdma?.sent).toBe(sentBefore + 100)
        // Larger than a slot, or an unknown segment: false, nothing sent.
        expect(tx.engine.trySendNotification(to, makeNotification("big", new Uint8Array(70_000)))).toBe(false)
        expect(tx.engine.trySendNotification("127.0.0.1:1", makeNotification("nobody", "x"))).toBe(false)
        expect(tx.diag.counters.rdma?.sent).toBe(sentBefore + 100)
        expect(yield* until(() => got.length >= 101)).toBe(true)
        yield* settle
        expect(got.map(name).slice(0, 1)).toEqual(["first"])
        expect(check("f", got.slice(1))).toEqual(clean(100))
        expect(got.length).toBe(101)
      })
  )
})
