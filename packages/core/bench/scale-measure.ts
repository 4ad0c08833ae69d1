/**
 * The measurements of `pnpm bench engine --scale` (`bench/scale.ts`) over a set of peers: the untimed warm-up, the
 * timed ping-pong (one-way latency), the round of back-to-back sends (msgs/s), the check of the peers' counts, and
 * both figures of one set at once ({@link measureSet}, the frozen phases' measurement).
 */
import type { Notification } from "@tent/rpc"
import { median, quantile } from "@tent/verbs/bench"
import { Cause, Deferred, Duration, Effect, Exit, Runtime } from "effect"
import type { TransferEngine } from "../src/index.js"
import type { Child } from "../test/fixtures/child.js"
import { type Peer, type PeerReady, peerCounts } from "./scale-peers.js"

/** How long one phase (a ping-pong, a round of sends, a peer check) may take before the suite fails. */
export const PHASE_TIMEOUT = Duration.seconds(120)

/** The ping: a 4-byte name and a 56-byte message (68 bytes in TENT's encoding), as the engine suite's. */
export const ping: Notification = { name: new TextEncoder().encode("ping"), msg: new Uint8Array(56) }

/** The sizes of a run's measurements. */
export interface Sizes {
  readonly rounds: number
  readonly warmup: number
  readonly jit: number
  readonly count: number
  readonly timedRounds: number
  /** Frozen sets per face of the "k of N frozen" phases, each followed by an all-healthy one. */
  readonly frozenRounds: number
  /**
   * Timed send rounds of each set of the frozen phases; the set's msgs/s is the median of theirs (one round lasts
   * 0.1–0.5 s, and a peer process's major GC or its 165 engines' timers can stall one).
   */
  readonly setRounds: number
}

/**
 * `rounds` untimed ping-pongs through `sendNotification` (the full path where it is needed: the first send to a peer
 * fetches its descriptor), ping i to peer i % n, each awaited before the next.
 */
export const warmUp = (engine: TransferEngine.TransferEngineShape, segments: ReadonlyArray<string>, rounds: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      let waiting: Deferred.Deferred<void> | undefined
      yield* engine.subscribe(() => {
        if (waiting !== undefined) Deferred.unsafeDone(waiting, Exit.void)
      })
      for (let i = 0; i < rounds; i++) {
        waiting = yield* Deferred.make<void>()
        yield* engine.sendNotification(segments[i % segments.length] as string, ping)
        yield* Deferred.await(waiting).pipe(
          Effect.timeoutFail({
            duration: PHASE_TIMEOUT,
            onTimeout: () => new Error(`scale warm-up: no echo from peer ${i % segments.length}`)
          })
        )
      }
      yield* engine.receiveNotifications
    })
  )

/**
 * One notification to every peer, `concurrency` at a time (the first send to a peer fetches its descriptor, and its
 * echo the initiator's), then waits (bounded) until as many echoes were queued here: the slow first touch of every
 * endpoint, done in parallel before the sequential {@link warmUp}.
 */
export const touchAll = (
  engine: TransferEngine.TransferEngineShape,
  segments: ReadonlyArray<string>,
  concurrency = 8
) =>
  Effect.gen(function* () {
    yield* engine.receiveNotifications
    yield* Effect.forEach(segments, (s) => engine.sendNotification(s, ping), { concurrency, discard: true })
    let got = 0
    while (got < segments.length) {
      got += (yield* engine.receiveNotifications).length
      if (got < segments.length) yield* Effect.sleep("5 millis")
    }
  }).pipe(
    Effect.timeoutFail({
      duration: PHASE_TIMEOUT,
      onTimeout: () => new Error(`scale first touch of ${segments.length} peers: not every echo came back`)
    })
  )

/**
 * `total` timed ping-pongs, ping i to peer i % n, one in flight: this engine's `subscribe` handler records the RTT and
 * sends the next ping with `trySendNotification`, the engine's fast path, or (when that posts nothing) the full
 * `sendNotification` in a fiber. The RTTs in ms.
 */
export const pingPong = (engine: TransferEngine.TransferEngineShape, segments: ReadonlyArray<string>, total: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const rtts = new Float64Array(total)
      const n = segments.length
      const done = yield* Deferred.make<void, unknown>()
      const runFork = Runtime.runFork(yield* Effect.runtime<never>())
      const onExit = (exit: Exit.Exit<unknown, unknown>) => {
        if (Exit.isFailure(exit)) Deferred.unsafeDone(done, Exit.fail(Cause.squash(exit.cause)))
      }
      // the fast path where it posts at once, else the full one in a fiber of its own
      const send = (segment: string) => {
        if (!engine.trySendNotification(segment, ping))
          runFork(engine.sendNotification(segment, ping)).addObserver(onExit)
      }
      let got = 0
      let t0 = 0
      yield* engine.subscribe(() => {
        if (got >= total) return
        rtts[got++] = performance.now() - t0
        if (got >= total) {
          Deferred.unsafeDone(done, Exit.void)
          return
        }
        t0 = performance.now()
        send(segments[got % n] as string)
      })
      t0 = performance.now()
      yield* engine.sendNotification(segments[0] as string, ping)
      yield* Deferred.await(done).pipe(
        Effect.timeoutFail({
          duration: PHASE_TIMEOUT,
          onTimeout: () => new Error(`scale ping-pong over ${n} peers: ${got} of ${total} echoes`)
        })
      )
      const queued = (yield* engine.receiveNotifications).length
      if (queued !== total) {
        return yield* Effect.fail(new Error(`scale ping-pong: ${queued} notifications queued, ${total} expected`))
      }
      return rtts
    })
  )

/** The notify counters a round reads (`Diagnostics.counters.rdma`). */
export type RoundCounters = {
  readonly sent: number
  readonly sendsCompleted: number
  readonly closedInFlight: number
  readonly notifyErrors: number
}

/**
 * One round of `count` notifications back to back, notification i to peer i % n: each `sendNotification` returns once
 * posted (the per-endpoint window paces) or carried another way (the fallbacks), timed until every send this side
 * posted on a notify QP completed or was closed (its channel retired: the resend carries it), looked at every
 * millisecond. The round's ms; a round that does not end says where its sends are.
 */
export const sendRound = (
  engine: TransferEngine.TransferEngineShape,
  rdma: RoundCounters,
  segments: ReadonlyArray<string>,
  count: number
) => {
  const n = segments.length
  const at = { sent: 0, done: 0, closed: 0, errors: 0 }
  return Effect.gen(function* () {
    at.sent = rdma.sent
    at.done = rdma.sendsCompleted
    at.closed = rdma.closedInFlight
    at.errors = rdma.notifyErrors
    const t0 = performance.now()
    for (let i = 0; i < count; i++) yield* engine.sendNotification(segments[i % n] as string, ping)
    const ended = () => rdma.sendsCompleted - at.done + rdma.closedInFlight - at.closed
    while (ended() < rdma.sent - at.sent) yield* Effect.sleep("1 millis")
    return performance.now() - t0
  }).pipe(
    Effect.timeoutFail({
      duration: PHASE_TIMEOUT,
      onTimeout: () =>
        new Error(
          `scale sends over ${n} peers: a round timed out: ${count} sent, ${rdma.sent - at.sent} posted on notify QPs, ` +
            `${rdma.sendsCompleted - at.done} completed, ${rdma.closedInFlight - at.closed} closed in flight, ` +
            `${rdma.notifyErrors - at.errors} notify errors`
        )
    })
  )
}

/** Waits (bounded) until every peer's count grew by what `want` says; fails with the shortfall otherwise. */
export const expectCounts = (
  peers: ReadonlyArray<Peer>,
  children: ReadonlyArray<Child<PeerReady>>,
  before: ReadonlyArray<number>,
  want: ReadonlyArray<number>,
  what: string
) =>
  Effect.gen(function* () {
    let got: ReadonlyArray<number> = []
    for (let attempt = 0; attempt < 500; attempt++) {
      got = (yield* peerCounts(peers, children)).map((c, i) => c - (before[i] as number))
      if (got.every((g, i) => g >= (want[i] as number))) break
      yield* Effect.sleep("20 millis")
    }
    const wrong = got.flatMap((g, i) => (g === want[i] ? [] : [`peer ${i}: ${g} of ${want[i]}`]))
    if (wrong.length > 0) {
      return yield* Effect.fail(new Error(`scale ${what}: the peers' counts differ: ${wrong.slice(0, 8).join(", ")}`))
    }
  })

/** Peer i's share of `rounds` rounds of `count` notifications, notification j going to peer j % n. */
export const share = (peers: number, n: number, count: number, rounds: number): ReadonlyArray<number> =>
  Array.from({ length: peers }, (_, i) => (i >= n ? 0 : rounds * (Math.floor(count / n) + (i < count % n ? 1 : 0))))

/** One-way µs (median RTT / 2), its p90, and msgs/s of one set of peers. */
export interface SetFigures {
  readonly oneWayUs: number
  readonly p90Us: number
  readonly msgsPerS: number
}

/**
 * Both figures over `peers` (whose processes are `children`, every one echoing to this engine): warm-up ping-pongs,
 * the timed ping-pong, then (echo off) an untimed round of sends and the timed ones, each peer's count checked.
 */
export const measureSet = (
  engine: TransferEngine.TransferEngineShape,
  rdma: RoundCounters,
  peers: ReadonlyArray<Peer>,
  children: ReadonlyArray<Child<PeerReady>>,
  sizes: Sizes,
  setEcho: (target: string | undefined) => Effect.Effect<void, Error>
) =>
  Effect.gen(function* () {
    const segments = peers.map((p) => p.segment)
    yield* setEcho(engine.segmentName)
    yield* pingPong(engine, segments, sizes.warmup)
    const rtts = yield* pingPong(engine, segments, sizes.rounds)
    yield* setEcho(undefined)
    const base = yield* peerCounts(peers, children)
    yield* sendRound(engine, rdma, segments, sizes.count)
    const rates: Array<number> = []
    for (let r = 0; r < sizes.setRounds; r++)
      rates.push(sizes.count / ((yield* sendRound(engine, rdma, segments, sizes.count)) / 1000))
    yield* expectCounts(
      peers,
      children,
      base,
      share(peers.length, peers.length, sizes.count, 1 + sizes.setRounds),
      `sends over ${peers.length} peers`
    )
    return {
      oneWayUs: (quantile(rtts, 0.5) / 2) * 1000,
      p90Us: (quantile(rtts, 0.9) / 2) * 1000,
      msgsPerS: median(rates)
    } satisfies SetFigures
  })
