/**
 * The bootstrap acceptor against hostile peers, over the real control plane to a real engine (SoftVerbs, this
 * process):
 *
 * - identity: on an authenticated connection (`x-tent-peer`) a `Bootstrap` with another segment's NIC path is refused
 *   `IDENTITY`, touching no endpoint: the victim's READY endpoint stays READY, its traffic flows. Negative control:
 *   the same `Bootstrap` on an unauthenticated control plane (no header: not checked, as TENT) retires the victim's
 *   endpoint.
 * - bounds: 10^4 `Bootstrap`s from distinct fake segments grow rss + registered memory by less than 256 MiB, the
 *   excess refused `RESOURCE_EXHAUSTED` and counted, while a real peer's transfers and notifications see no error; one
 *   segment gets at most `max_endpoints_per_peer`. Negative control: with the bounds lifted every fake endpoint holds
 *   TENT's 32 MiB of notify slots (a smaller N, extrapolated).
 */
import * as V8 from "node:v8"
import * as Vm from "node:vm"
import { describe, expect, it } from "@effect/vitest"
import { BootstrapRejected, makeNotification, notificationText } from "@tent/rpc"
import { Effect, Either, Metric, Ref } from "effect"
import { agent, fakeDesc, gidOf, guarded, registeredBytes, withSecret } from "./fixtures/hostile.js"
import { receive } from "./fixtures/policies.js"

const MiB = 1024 * 1024
const FLOOD = 10_000
const BOUND = 256 * MiB

/** A full GC when V8 lets this process have one. */
const gc = ((): (() => void) => {
  try {
    V8.setFlagsFromString("--expose-gc")
    return Vm.runInNewContext("gc") as () => void
  } catch {
    return () => {}
  }
})()

/** The registry's `tent_bootstrap_refused_total{reason}`. */
const refusedMetric = (reason: string): number => {
  for (const pair of Metric.unsafeSnapshot()) {
    const key = pair.metricKey
    if (key.name === "tent_bootstrap_refused_total" && key.tags.some((t) => t.value === reason)) {
      return Number((pair.metricState as { readonly count?: number }).count ?? 0)
    }
  }
  return 0
}

/** An endpoint's identity and state, without its moment-to-moment count of work in flight. */
const settled = (eps: ReadonlyArray<{ readonly pending: number }>) => eps.map(({ pending: _, ...rest }) => rest)

type Engine = Effect.Effect.Success<ReturnType<typeof guarded>>

/** A real peer's traffic to `to`: a 64 KiB WRITE with a notification, again and again until `stop`; errors counted. */
const traffic = (peer: Engine, to: Engine, stop: Ref.Ref<boolean>) =>
  Effect.gen(function* () {
    const dst = yield* to.engine.registerSegment(Buffer.alloc(64 * 1024))
    const src = yield* peer.engine.registerSegment(Buffer.alloc(64 * 1024, 0x5a))
    const target = yield* peer.engine.openSegment(to.engine.segmentName)
    let rounds = 0
    let errors = 0
    do {
      const batch = yield* peer.engine.allocateBatch
      const write = { opcode: "WRITE", source: src.addr, target, targetOffset: dst.addr, length: 64 * 1024 } as const
      const status = yield* peer.engine
        .submitTransfer(batch, [write], makeNotification(`w${rounds}`, "done"))
        .pipe(Effect.zipRight(peer.engine.waitTransfer(batch, 20_000)), Effect.either)
      if (Either.isLeft(status) || status.right.status !== "COMPLETED") errors++
      yield* peer.engine.freeBatch(batch)
      rounds++
    } while (!(yield* Ref.get(stop)))
    const got = yield* receive(to.engine, rounds)
    const names = new Set(got.map((n) => notificationText(n).name))
    return { rounds, errors, notified: names.size, written: dst.buffer.every((b) => b === 0x5a) }
  })

describe("the bootstrap acceptor's guards", { timeout: 120_000 }, () => {
  for (const authenticated of [true, false]) {
    it.scopedLive(
      authenticated
        ? "identity: a Bootstrap with the victim's NIC path from a peer authenticated as another is refused; the victim's endpoint stays READY and its traffic flows"
        : "negative control, no authentication (no header: not checked, as TENT): the same Bootstrap retires the victim's endpoint",
      () =>
        Effect.gen(function* () {
          const json = (o: object) => (authenticated ? withSecret(o) : o)
          const c = yield* guarded(json({}))
          const victim = yield* guarded(json({}))
          const cName = c.engine.segmentName
          yield* victim.engine.sendNotification(cName, makeNotification("hello", "m"))
          expect((yield* receive(c.engine, 1)).length).toBe(1)
          const before = (yield* c.diag.endpoints).filter((e) => e.peerNicPath.startsWith(victim.engine.segmentName))
          expect(before.map((e) => e.status)).toEqual(["READY"])
          const victimPath = before[0]?.peerNicPath as string
          const refusedBefore = refusedMetric("identity")

          const attacker = yield* agent("attacker.example:1", authenticated ? undefined : null)
          const result = yield* Effect.either(
            attacker.bootstrap(cName, fakeDesc(victimPath, `${cName}@mlx0`, gidOf(c.rdma)))
          )

          const after = (yield* c.diag.endpoints).filter((e) => e.peerNicPath === victimPath)
          if (!authenticated) {
            expect(after.map((e) => e.status)).not.toEqual(["READY"])
            return
          }
          expect(Either.isLeft(result) && result.left instanceof BootstrapRejected).toBe(true)
          expect(Either.isLeft(result) ? result.left.message : "").toMatch(/^IDENTITY: /)
          // `pending` counts work in flight at the moment of reading (the hello's receipt may still be out): not identity
          expect(settled(after)).toEqual(settled(before))
          expect(c.rdma.guard.counters.identity).toBe(1)
          expect(refusedMetric("identity") - refusedBefore).toBe(1)
          // the victim's traffic flows on its endpoint
          const stop = yield* Ref.make(true)
          const t = yield* traffic(victim, c, stop)
          expect(t).toEqual({ rounds: 1, errors: 0, notified: 1, written: true })
          for (let i = 0; i < 20; i++) yield* victim.engine.sendNotification(cName, makeNotification(`v${i}`, "m"))
          expect((yield* receive(c.engine, 20)).length).toBe(20)
          expect(settled((yield* c.diag.endpoints).filter((e) => e.peerNicPath === victimPath))).toEqual(settled(after))
        })
    )
  }

  it.scopedLive(
    `bounds: ${FLOOD} Bootstraps from distinct fake segments grow rss + registered memory < 256 MiB, the excess refused and counted; a real peer sees 0 errors`,
    () =>
      Effect.gen(function* () {
        const budget = 128 * MiB
        const c = yield* guarded({ transports: { rdma: { max_accepted_bytes: budget } } })
        const peer = yield* guarded({})
        // The real peer is connected first (its endpoint is one of those C accepted).
        const warm = yield* Ref.make(true)
        expect((yield* traffic(peer, c, warm)).errors).toBe(0)
        const cName = c.engine.segmentName
        const attacker = yield* agent("attacker.example:1", null)
        const refusedBefore = refusedMetric("accepted_bytes")
        gc()
        const rss0 = process.memoryUsage().rss
        const reg0 = registeredBytes(c.rdma)
        const t0 = Date.now()

        const stop = yield* Ref.make(false)
        const outcomes = { accepted: 0, exhausted: 0, other: 0 }
        const flood = Effect.forEach(
          Array.from({ length: FLOOD }, (_, i) => i),
          (i) =>
            Effect.map(
              Effect.either(
                attacker.bootstrap(cName, fakeDesc(`fake-${i}.example:1@nic0`, `${cName}@mlx0`, gidOf(c.rdma)))
              ),
              (r) => {
                if (Either.isRight(r)) outcomes.accepted++
                else if (r.left instanceof BootstrapRejected && r.left.message.startsWith("RESOURCE_EXHAUSTED:")) {
                  outcomes.exhausted++
                } else outcomes.other++
              }
            ),
          { concurrency: 32, discard: true }
        ).pipe(Effect.ensuring(Ref.set(stop, true)))
        const [, real] = yield* Effect.all([flood, traffic(peer, c, stop)], { concurrency: 2 })
        const ms = Date.now() - t0

        gc()
        const rss = process.memoryUsage().rss - rss0
        const registered = registeredBytes(c.rdma) - reg0
        console.log(
          `${FLOOD} Bootstraps in ${ms} ms: ${outcomes.accepted} accepted, ${outcomes.exhausted} RESOURCE_EXHAUSTED; ` +
            `rss +${(rss / MiB).toFixed(1)} MiB, registered +${(registered / MiB).toFixed(1)} MiB; the real peer: ` +
            `${real.rounds} transfers, ${real.errors} errors, ${real.notified} notifications`
        )
        expect(rss + registered).toBeLessThan(BOUND)
        expect(outcomes.other).toBe(0)
        expect(outcomes.accepted + outcomes.exhausted).toBe(FLOOD)
        expect(c.rdma.guard.held.bytes).toBeLessThanOrEqual(budget)
        expect(c.rdma.guard.counters.acceptedBytes).toBe(outcomes.exhausted)
        expect(refusedMetric("accepted_bytes") - refusedBefore).toBe(outcomes.exhausted)
        expect(real).toMatchObject({ errors: 0, written: true })
        expect(real.notified).toBe(real.rounds)
      })
  )

  it.scopedLive(
    "bounds: one segment gets at most max_endpoints_per_peer; none evicted, a live one bootstraps again",
    () =>
      Effect.gen(function* () {
        const c = yield* guarded({ transports: { rdma: { max_endpoints_per_peer: 4 } } })
        const cName = c.engine.segmentName
        const attacker = yield* agent("greedy.example:1", null)
        const descs = Array.from({ length: 10 }, (_, i) =>
          fakeDesc(`greedy.example:1@nic${i}`, `${cName}@mlx0`, gidOf(c.rdma))
        )
        const results = yield* Effect.forEach(descs, (d) => Effect.either(attacker.bootstrap(cName, d)))
        expect(results.map((r) => r._tag)).toEqual([...Array(4).fill("Right"), ...Array(6).fill("Left")])
        for (const r of results.slice(4))
          expect(Either.isLeft(r) ? r.left.message : "").toMatch(/^RESOURCE_EXHAUSTED: /)
        expect(c.rdma.guard.counters.peerEndpoints).toBe(6)
        const live = (yield* c.diag.endpoints).filter((e) => e.peerNicPath.startsWith("greedy."))
        expect(live.map((e) => e.status)).toEqual(Array(4).fill("READY"))
        // A Bootstrap for an endpoint that is live already makes nothing new: not refused.
        expect(Either.isRight(yield* Effect.either(attacker.bootstrap(cName, descs[0] as (typeof descs)[0])))).toBe(
          true
        )
        // Another segment still gets its own.
        const other = yield* agent("other.example:1", null)
        expect(
          Either.isRight(
            yield* Effect.either(
              other.bootstrap(cName, fakeDesc("other.example:1@nic0", `${cName}@mlx0`, gidOf(c.rdma)))
            )
          )
        ).toBe(true)
      })
  )

  it.scopedLive(
    "negative control, bounds lifted: every fake segment's endpoint holds TENT's 32 MiB of notify slots (past 256 MiB at 12)",
    () =>
      Effect.gen(function* () {
        const n = 12
        const c = yield* guarded({
          transports: {
            rdma: {
              max_accepted_bytes: 2 ** 50,
              max_endpoints_per_peer: 1_000_000,
              notify: { lazy_slots: false, shared_recv: false }
            }
          }
        })
        const cName = c.engine.segmentName
        const attacker = yield* agent("attacker.example:1", null)
        gc()
        const rss0 = process.memoryUsage().rss
        const reg0 = registeredBytes(c.rdma)
        const results = yield* Effect.forEach(
          Array.from({ length: n }, (_, i) => i),
          (i) =>
            Effect.either(
              attacker.bootstrap(cName, fakeDesc(`fake-${i}.example:1@nic0`, `${cName}@mlx0`, gidOf(c.rdma)))
            ),
          { concurrency: 4 }
        )
        gc()
        const rss = process.memoryUsage().rss - rss0
        const registered = registeredBytes(c.rdma) - reg0
        const per = (rss + registered) / n
        console.log(
          `bounds lifted: ${n} Bootstraps: rss +${(rss / MiB).toFixed(1)} MiB, registered +${(registered / MiB).toFixed(1)} MiB ` +
            `(${(per / MiB).toFixed(1)} MiB each: ${FLOOD} would be ${((per * FLOOD) / 1024 ** 3).toFixed(0)} GiB)`
        )
        expect(results.every(Either.isRight)).toBe(true)
        expect(rss + registered).toBeGreaterThan(BOUND)
      })
  )
})
