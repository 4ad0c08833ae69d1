/**
 * The anti-replay window of RFC PR 6 (`internal/ReplayWindow.ts`), property-tested against a reference model: per
 * session a Set of the seqs delivered and the high-water rule (`seq > hwm` accepted; `hwm - 4096 < seq ≤ hwm`
 * accepted once; older dropped as too old). Then the session table's bounds: LRU eviction beyond
 * `notification/dedup_max_sessions`, expiry after `notification/dedup_session_ttl_ms` idle, sessions independent.
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { defaults, ReplayWindow, SessionTable, Verdict, WINDOW_SIZE } from "../src/internal/ReplayWindow.js"

const W = BigInt(WINDOW_SIZE)
const U64_MAX = 2n ** 64n - 1n
const SAFE = BigInt(Number.MAX_SAFE_INTEGER)

/** The reference: what the RFC's rule says, with a Set in place of the bitmap. */
class Model {
  hwm = -1n
  readonly seen = new Set<bigint>()
  admit(seq: bigint): Verdict {
    if (seq > this.hwm) {
      this.hwm = seq
      this.seen.add(seq)
      return Verdict.Accepted
    }
    if (this.hwm - seq >= W) return Verdict.TooOld
    if (this.seen.has(seq)) return Verdict.Duplicate
    this.seen.add(seq)
    return Verdict.Accepted
  }
}

/** Runs `seqs` through a window and the model; every verdict must agree. Returns the window's verdicts. */
const agree = (seqs: ReadonlyArray<bigint>, window = new ReplayWindow(), model = new Model()) => {
  const verdicts = seqs.map((seq) => {
    const got = window.admit(seq)
    expect(got, `seq ${seq} after hwm ${model.hwm}`).toBe(model.admit(seq))
    return got
  })
  expect(window.highWaterMark).toBe(model.hwm)
  return verdicts
}

/** `xs` shuffled by a seeded xorshift (fast-check shrinks the seed). */
const shuffle = <A>(xs: ReadonlyArray<A>, seed: number): Array<A> => {
  const out = [...xs]
  let s = seed | 1
  for (let i = out.length - 1; i > 0; i--) {
    s ^= s << 13
    s ^= s >>> 17
    s ^= s << 5
    const j = (s >>> 0) % (i + 1)
    ;[out[i], out[j]] = [out[j] as A, out[i] as A]
  }
  return out
}

/** A base seq anywhere in u64 leaving `room` above it, biased to the edges (0, 2^53, 2^64 - 1). */
const base = (room: bigint) =>
  fc.oneof(
    fc.bigInt({ min: 0n, max: 10_000n }),
    fc.bigInt({ min: SAFE - 10_000n, max: SAFE + 10_000n }),
    fc.bigInt({ min: U64_MAX - room - 10_000n, max: U64_MAX - room }),
    fc.bigInt({ min: 0n, max: U64_MAX - room })
  )

describe("ReplayWindow", () => {
  it("(a) duplicates within the window: each distinct seq delivered exactly once, as the model says", () => {
    fc.assert(
      fc.property(base(8192n), fc.array(fc.integer({ min: 0, max: 6000 }), { maxLength: 3000 }), (b, offsets) => {
        const seqs = offsets.map((o) => b + BigInt(o))
        const verdicts = agree(seqs)
        const delivered = seqs.filter((_, i) => verdicts[i] === Verdict.Accepted)
        expect(new Set(delivered).size).toBe(delivered.length)
      })
    )
  })

  it("(b) any permutation of ≤ 4096 consecutive seqs, each sent twice, is delivered exactly once each", () => {
    fc.assert(
      fc.property(base(W), fc.integer({ min: 1, max: WINDOW_SIZE }), fc.integer(), (b, n, seed) => {
        const block = Array.from({ length: n }, (_, i) => b + BigInt(i))
        const window = new ReplayWindow()
        const delivered = new Set<bigint>()
        let tooOld = 0
        let twice = 0
        for (const seq of shuffle([...block, ...block], seed)) {
          const v = window.admit(seq)
          if (v === Verdict.TooOld) tooOld++
          else if (v === Verdict.Accepted) {
            if (delivered.has(seq)) twice++
            delivered.add(seq)
          }
        }
        expect({ tooOld, twice, delivered: delivered.size }).toEqual({ tooOld: 0, twice: 0, delivered: n })
      }),
      { numRuns: 50 }
    )
  })

  it("(c) seqs at or below hwm - 4096 are dropped and counted as too old", () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.bigInt({ min: W, max: 100_000n }), base(0n)).filter((hwm) => hwm >= W),
        fc.array(fc.bigInt({ min: W, max: 2n ** 64n }), { maxLength: 20 }),
        (hwm, back) => {
          const table = new SessionTable()
          expect(table.admit(1n, hwm)).toBe(true)
          // Always the window's edge (hwm - 4096) and one below it, then any older.
          const old = [W, W + 1n, ...back].map((k) => hwm - k).filter((s) => s >= 0n)
          for (const seq of old) expect(table.admit(1n, seq)).toBe(false)
          expect(table.counters.tooOld).toBe(old.length)
          expect(table.counters.duplicates).toBe(0)
          // The oldest seq still inside the window is not too old.
          expect(table.admit(1n, hwm - W + 1n)).toBe(true)
        }
      )
    )
  })

  it("(d) jumps of the hwm by 1, 4095, 4096, 4097 and 2^40, then older seqs inside and outside the new window", () => {
    const jumps = [1n, W - 1n, W, W + 1n, 2n ** 40n]
    // Offsets below the new hwm: the window's bottom edge, each side of it, and the old window's seqs.
    const below = [0n, 1n, W - 2n, W - 1n, W, W + 1n]
    fc.assert(
      fc.property(
        base(2n ** 41n),
        fc.array(fc.integer({ min: 0, max: 2 * WINDOW_SIZE }), { maxLength: 200 }),
        fc.constantFrom(...jumps),
        (b, before, jump) => {
          const window = new ReplayWindow()
          const model = new Model()
          const first = b + 2n * W
          agree([first, ...before.map((o) => first - BigInt(o))], window, model)
          const top = first + jump
          const after = [top, ...below.map((k) => top - k), ...before.map((o) => first - BigInt(o))]
          const verdicts = agree([...after, ...after], window, model)
          expect(verdicts[0]).toBe(Verdict.Accepted)
          // Every old seq that the jump moved out of the window is too old, the others still remembered.
          for (const o of before) {
            const seq = first - BigInt(o)
            expect(window.admit(seq)).toBe(top - seq >= W ? Verdict.TooOld : Verdict.Duplicate)
          }
        }
      )
    )
  })

  it("(e) u64 edges: 0 as a first seq, the window ending at 2^64 - 1, crossing 2^53", () => {
    const w0 = new ReplayWindow()
    expect(w0.admit(0n)).toBe(Verdict.Accepted)
    expect(w0.admit(0n)).toBe(Verdict.Duplicate)
    expect(w0.highWaterMark).toBe(0n)

    const top = new ReplayWindow()
    agree([U64_MAX - 5n, U64_MAX, U64_MAX - 5n, U64_MAX - 1n, U64_MAX - W + 1n, U64_MAX - W, 0n, U64_MAX], top)
    expect(top.admit(U64_MAX)).toBe(Verdict.Duplicate)
    expect(top.admit(U64_MAX - W)).toBe(Verdict.TooOld)

    // From 0 straight to the top: a jump of 2^64 - 1 clears everything.
    agree([0n, 5n, U64_MAX, 5n, U64_MAX - 5n, U64_MAX - 5n])

    fc.assert(
      fc.property(
        fc.oneof(fc.constant(SAFE - 2n * W), fc.constant(U64_MAX - 3n * W)),
        fc.array(fc.integer({ min: 0, max: 3 * WINDOW_SIZE }), { maxLength: 500 }),
        (b, offsets) => {
          agree(offsets.map((o) => b + BigInt(o)))
        }
      )
    )
  })

  it("(g) sessions are independent: the same seqs on several sessions are delivered once per session", () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 5000 })), { maxLength: 2000 }),
        fc.bigInt({ min: 0n, max: U64_MAX }),
        (stamps, salt) => {
          const table = new SessionTable()
          const models = new Map<bigint, Model>()
          const session = (i: number) => (salt + BigInt(i) * 0x9e3779b97f4a7c15n) & U64_MAX
          for (const [i, seq] of stamps) {
            const s = session(i)
            const model = models.get(s) ?? new Model()
            models.set(s, model)
            expect(table.admit(s, BigInt(seq))).toBe(model.admit(BigInt(seq)) === Verdict.Accepted)
          }
          const delivered = [...models.values()].reduce((n, m) => n + m.seen.size, 0)
          expect(table.counters.accepted).toBe(delivered)
          expect(table.counters.accepted + table.counters.duplicates + table.counters.tooOld).toBe(stamps.length)
          expect(table.counters.sessions).toBe(models.size)
        }
      )
    )
  })
})

describe("SessionTable bounds", () => {
  it("takes its defaults from the configuration keys", () => {
    expect(defaults).toEqual({ maxSessions: 4096, sessionTtlMs: 600_000 })
    const table = new SessionTable()
    expect(table.maxSessions).toBe(4096)
    expect(table.sessionTtlMs).toBe(600_000)
  })

  // Small tables, and tables past the slot arrays' first growth (32) and the first bitmap chunk, with rehashing.
  for (const [maxMax, sessions, uses, runs] of [
    [6, 10, 300, 100],
    [80, 120, 3000, 15]
  ] as const)
    it(`(f) beyond max sessions (≤ ${maxMax}, ${sessions} sessions) the least recently used is evicted (its late copy passes again), as an LRU model`, () => {
      fc.assert(
        fc.property(
          fc.integer({ min: 1, max: maxMax }),
          fc.array(fc.integer({ min: 0, max: sessions - 1 }), { maxLength: uses }),
          (max, uses) => {
            const table = new SessionTable({ maxSessions: max })
            // The model: sessions in recency order, least recent first; each session's seqs so far.
            let lru: Array<number> = []
            const sent = new Map<number, number>()
            let evictions = 0
            for (const s of uses) {
              const seq = sent.get(s) ?? 0
              const known = lru.includes(s)
              if (!known && lru.length === max) {
                const gone = lru.shift() as number
                sent.delete(gone)
                evictions++
              }
              lru = [...lru.filter((x) => x !== s), s]
              // A known session's copy of its last seq is a duplicate; a new (or evicted) one's seq 0 passes.
              if (known) expect(table.admit(BigInt(s), BigInt(seq - 1))).toBe(false)
              expect(table.admit(BigInt(s), BigInt(seq))).toBe(true)
              sent.set(s, seq + 1)
            }
            expect(table.counters.evictions).toBe(evictions)
            expect(table.counters.sessions).toBe(lru.length)
            for (let s = 0; s < sessions; s++) expect(table.has(BigInt(s))).toBe(lru.includes(s))
          }
        ),
        { numRuns: runs }
      )
    })

  it("(f) inserting max + 1 sessions evicts the least recently used one; its late copy is delivered again", () => {
    const table = new SessionTable({ maxSessions: 3 })
    for (const s of [1n, 2n, 3n]) expect(table.admit(s, 7n)).toBe(true)
    expect(table.admit(1n, 8n)).toBe(true) // 1 is now more recent than 2
    expect(table.admit(4n, 0n)).toBe(true) // evicts 2
    expect(table.counters.evictions).toBe(1)
    expect(table.has(2n)).toBe(false)
    expect(table.admit(1n, 7n)).toBe(false) // still remembered
    expect(table.admit(3n, 7n)).toBe(false)
    expect(table.admit(2n, 7n)).toBe(true) // forgotten: the copy passes (and evicts 4)
    expect(table.counters.evictions).toBe(2)
    expect(table.counters.sessions).toBe(3)
  })

  it("(f) a session idle longer than the TTL is forgotten, on access and when another session is added", () => {
    let now = 0
    const table = new SessionTable({ sessionTtlMs: 1000, clock: () => now })
    expect(table.admit(1n, 5n)).toBe(true)
    expect(table.admit(2n, 5n)).toBe(true)
    now = 1000 // exactly the TTL: still remembered
    expect(table.admit(1n, 5n)).toBe(false)
    now = 2001 // 1 idle 1001 ms, 2 idle 2001 ms
    expect(table.admit(1n, 5n)).toBe(true) // forgotten on access: the copy passes
    expect(table.counters.expired).toBe(2) // and 2, the least recent, swept as 1 was re-added
    expect(table.has(2n)).toBe(false)
    now = 2500
    expect(table.admit(3n, 0n)).toBe(true)
    expect(table.has(1n)).toBe(true)
    expect(table.counters).toMatchObject({ sessions: 2, expired: 2, evictions: 0, accepted: 4, duplicates: 1 })
  })

  it("unstamped notifications always pass and are counted", () => {
    const table = new SessionTable()
    expect(table.admitStamp(undefined)).toBe(true)
    expect(table.admitStamp(undefined)).toBe(true)
    expect(table.admitStamp({ session: 9n, seq: 1n })).toBe(true)
    expect(table.admitStamp({ session: 9n, seq: 1n })).toBe(false)
    expect(table.counters).toMatchObject({ unstamped: 2, accepted: 1, duplicates: 1, sessions: 1 })
  })

  it("rejects a bound that is not positive, naming the key", () => {
    expect(() => new SessionTable({ maxSessions: 0 })).toThrow(/notification\/dedup_max_sessions/)
    expect(() => new SessionTable({ sessionTtlMs: 0 })).toThrow(/notification\/dedup_session_ttl_ms/)
  })
})
