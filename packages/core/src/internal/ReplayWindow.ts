/**
 * The receiver's anti-replay window of RFC PR 6: per sender session, a high-water mark plus a bitmap of the last
 * {@link WINDOW_SIZE} seqs (as in IPsec / DTLS anti-replay), so a `(session, seq)` delivered once is dropped when a
 * copy arrives again, whichever transport carried it. {@link SessionTable} keeps one window per session, bounded in
 * number and in idle age so a peer forging sessions cannot exhaust memory.
 *
 * Hot path: {@link SessionTable.admit} and {@link ReplayWindow.admit} are plain synchronous code that allocates
 * nothing for a known session whose seqs stay below 2^53 (window math in numbers; a window whose seqs pass 2^53 goes
 * on in BigInt arithmetic, exact to 2^64 - 1 but slower and allocating). The table keeps its sessions in typed arrays
 * by slot: when consecutive stamps come from different sessions, a use is a hash lookup on the session's two u32
 * halves and an O(1) move in the recency list. One cost remains outside the window: reading the table's clock (pass
 * `now` to read it once per batch; V8 boxes the default clock's double).
 *
 * @since 0.1.0
 */
import { engineKeys } from "../EngineConfig.js"
import * as Metrics from "../Metrics.js"
import { foreignSession } from "./GuardMetrics.js"

/** Seqs a window remembers below and including its high-water mark (4096 bits, 512 bytes). */
export const WINDOW_SIZE = 4096

/** 32-bit words of one window's bitmap. */
export const WINDOW_WORDS = WINDOW_SIZE / 32

const MASK = WINDOW_SIZE - 1
const MASK_BIG = BigInt(MASK)
const WINDOW_BIG = BigInt(WINDOW_SIZE)
const MAX_SAFE_BIG = BigInt(Number.MAX_SAFE_INTEGER)

/** What {@link ReplayWindow.admit} decided: deliver, or drop as a copy seen before, or drop as older than the window. */
export const Verdict = { Accepted: 0, Duplicate: 1, TooOld: 2 } as const
/** A {@link Verdict}. */
export type Verdict = (typeof Verdict)[keyof typeof Verdict]

/** `hwms[i]` of a window whose seqs reached 2^53: its high-water mark is then the BigInt kept for `i` in `bigs`. */
const BIG = Number.POSITIVE_INFINITY

/**
 * Decides on `seq` for window `i` and records it when accepted. The window is its high-water mark `hwms[i]` (the
 * largest seq accepted; -1: nothing seen; {@link BIG}: the BigInt `bigs.get(i)`) and one bit per seq in
 * `(hwm - 4096, hwm]` at `bits[base, base + WINDOW_WORDS)`, kept circularly (seq `s` is bit `s mod 4096`), so
 * sliding never shifts words.
 *
 * - `seq > hwm`: accepted; the window slides up to `seq`, clearing the bits of the seqs it passes over (a jump of
 *   4096 or more clears them all).
 * - `hwm - 4096 < seq ≤ hwm`: accepted once (bit test-and-set), a duplicate after that.
 * - `seq ≤ hwm - 4096`: too old to tell, dropped.
 *
 * Seqs are u64 (`0 ≤ seq < 2^64`, not checked). A fresh window has seen nothing: its first seq, 0 included, is
 * accepted. Below 2^53 the math is in numbers and allocates nothing; a window whose seqs pass 2^53 goes on in BigInt
 * arithmetic, exact to 2^64 - 1 but slower and allocating.
 */
const admitAt = (
  bits: Uint32Array,
  base: number,
  hwms: Float64Array,
  bigs: Map<number, bigint>,
  i: number,
  seq: bigint
): Verdict => {
  const hwm = hwms[i] as number
  if (hwm !== BIG) {
    if (seq <= MAX_SAFE_BIG) {
      const s = Number(seq)
      if (s > hwm) {
        slide(bits, base, s - hwm, s & MASK)
        hwms[i] = s
        return Verdict.Accepted
      }
      if (hwm - s >= WINDOW_SIZE) return Verdict.TooOld
      return testAndSet(bits, base, s & MASK)
    }
    bigs.set(i, BigInt(hwm))
    hwms[i] = BIG
  }
  const big = bigs.get(i) as bigint
  if (seq > big) {
    const d = seq - big
    slide(bits, base, d >= WINDOW_BIG ? WINDOW_SIZE : Number(d), Number(seq & MASK_BIG))
    bigs.set(i, seq)
    return Verdict.Accepted
  }
  if (big - seq >= WINDOW_BIG) return Verdict.TooOld
  return testAndSet(bits, base, Number(seq & MASK_BIG))
}

/** Makes window `i` (as in {@link admitAt}) forget every seq: the window of a new session. */
const resetAt = (bits: Uint32Array, base: number, hwms: Float64Array, bigs: Map<number, bigint>, i: number): void => {
  if (hwms[i] === BIG) bigs.delete(i)
  hwms[i] = -1
  bits.fill(0, base, base + WINDOW_WORDS)
}

/**
 * Moves a window's high-water mark `d` (≥ 1; any value ≥ 4096 means as far) seqs up, to the seq of bit `to`: clears
 * the bits of the seqs passed over, sets the new one.
 */
const slide = (bits: Uint32Array, base: number, d: number, to: number): void => {
  if (d >= WINDOW_SIZE) {
    bits.fill(0, base, base + WINDOW_WORDS)
  } else {
    let p = (to - d + 1) & MASK
    let n = d
    while (n > 0) {
      const bit = p & 31
      if (bit === 0 && n >= 32) {
        bits[base + (p >>> 5)] = 0
        n -= 32
        p = (p + 32) & MASK
      } else {
        const k = Math.min(32 - bit, n)
        bits[base + (p >>> 5)] &= ~(((1 << k) - 1) << bit)
        n -= k
        p = (p + k) & MASK
      }
    }
  }
  bits[base + (to >>> 5)] |= 1 << (to & 31)
}

/** Sets bit `p` of a window's bitmap: accepted if it was clear, a duplicate if it was set. */
const testAndSet = (bits: Uint32Array, base: number, p: number): Verdict => {
  const w = base + (p >>> 5)
  const m = 1 << (p & 31)
  const word = bits[w] as number
  if ((word & m) !== 0) return Verdict.Duplicate
  bits[w] = word | m
  return Verdict.Accepted
}

/**
 * One sender session's window on its own (a {@link SessionTable} keeps its windows in shared arrays instead, with
 * the same rules): see {@link admitAt} for what it accepts.
 */
export class ReplayWindow {
  private readonly bits = new Uint32Array(WINDOW_WORDS)
  private readonly hwms = new Float64Array([-1])
  private readonly bigs = new Map<number, bigint>()

  /** The largest seq accepted, -1n if none. */
  get highWaterMark(): bigint {
    const hwm = this.hwms[0] as number
    return hwm === BIG ? (this.bigs.get(0) as bigint) : BigInt(hwm)
  }

  /** Decides on `seq` and records it when accepted. */
  admit(seq: bigint): Verdict {
    return admitAt(this.bits, 0, this.hwms, this.bigs, 0, seq)
  }

  /** Forgets every seq: the window of a new session. */
  reset(): void {
    resetAt(this.bits, 0, this.hwms, this.bigs, 0)
  }
}
/** The session table's bounds by default: `notification/dedup_*` as `EngineConfig` declares them. */
export const defaults = {
  maxSessions: engineKeys["notification/dedup_max_sessions"].default as number,
  sessionTtlMs: engineKeys["notification/dedup_session_ttl_ms"].default as number
} as const

/** How a {@link SessionTable} is bounded, and the clock its idle ages are read from (ms; default `performance.now`). */
export interface SessionTableOptions {
  readonly maxSessions?: number
  readonly sessionTtlMs?: number
  readonly clock?: () => number
}

/** What a {@link SessionTable} did, as plain numbers (read them; the table writes them). */
export class DedupCounters {
  /** Stamped notifications delivered. */
  accepted = 0
  /** Stamped notifications dropped as a copy already delivered. */
  duplicates = 0
  /** Stamped notifications dropped as older than their session's window. */
  tooOld = 0
  /** Sessions in the table now. */
  sessions = 0
  /** Sessions dropped to stay within `notification/dedup_max_sessions` (least recently used first). */
  evictions = 0
  /** Sessions forgotten after `notification/dedup_session_ttl_ms` idle. */
  expired = 0
  /** Notifications without a stamp, all delivered. */
  unstamped = 0
  /** Stamped notifications refused: their session is bound to another sender segment ({@link SessionTable.claim}). */
  foreign = 0
}

/** Windows per bitmap array (16 KiB each): a new array only every this many new sessions. */
const WINDOWS_PER_CHUNK = 32

/** The end of a slot list (recency order, free slots, a hash bucket's chain). */
const NONE = -1

/** Splits a u64 session into two u32 halves without allocating: write it to `SPLIT[0]`, read `HALVES[0]`, `[1]`. */
const SPLIT = new BigUint64Array(1)
const HALVES = new Uint32Array(SPLIT.buffer)

/**
 * The windows of every sender session, by session id, at the engine's one delivery point: {@link admit} says whether
 * a stamped notification is delivered; unstamped ones always are ({@link unstamped}).
 *
 * Bounded so a peer forging sessions cannot exhaust memory: at most `maxSessions` windows
 * (`notification/dedup_max_sessions`, default 4096): a new session beyond it evicts the least recently used one,
 * whose late copies would then be delivered again (counted in `evictions`); a session idle longer than `sessionTtlMs`
 * (`notification/dedup_session_ttl_ms`, default 10 min) is forgotten, checked when it is used again and, for the
 * least recently used ones, whenever a session is added (no timers).
 *
 * Layout: each session has a slot number, and everything about it is in typed arrays at that slot: its id as two
 * u32 halves, its high-water mark (a double; a BigInt aside only past 2^53), when it was last used, its links in the
 * recency list (a doubly linked list of slot numbers, least recent first, so a use moves it in O(1)) and in its hash
 * bucket's chain (a hash table of slot numbers, seeded per table). Bitmaps are packed {@link WINDOWS_PER_CHUNK} to an
 * array. The per-slot arrays grow by doubling up to `maxSessions`; a forgotten session's slot is reused for the next
 * new one. No object, Map entry or BigInt is kept per session: measured about 560 B each in all, the bitmap's 512
 * and the slot state (`pnpm bench engine`'s `dedup_bytes_per_session`). Session ids are u64 (taken mod 2^64, not
 * checked).
 */
export class SessionTable {
  readonly maxSessions: number
  readonly sessionTtlMs: number
  readonly counters = new DedupCounters()
  private readonly clock: () => number
  /** Slots the per-slot arrays hold, and slots ever handed out (those past it are fresh). */
  private capacity = 0
  private used = 0
  /** The session of each slot, as its low and high u32. */
  private keyLo = new Uint32Array(0)
  private keyHi = new Uint32Array(0)
  /** Each window's high-water mark, as {@link admitAt} reads it, and the BigInt ones past 2^53 by slot. */
  private hwms = new Float64Array(0)
  private readonly bigs = new Map<number, bigint>()
  /** When each session last admitted a seq, in the table's clock (ms). */
  private lastSeen = new Float64Array(0)
  /** The sender segment each session is bound to ("": none yet; see {@link claim}). */
  private owners: Array<string> = []
  /** The slot and the sender of the last claim that succeeded (the next one from them needs no compare). */
  private claimed = NONE
  private claimer = ""
  /** Recency list links; `next` also links the free slots. */
  private prev = new Int32Array(0)
  private next = new Int32Array(0)
  /** The next slot in the same hash bucket. */
  private chain = new Int32Array(0)
  /** The first slot of each hash bucket (a power of two of them, at least `capacity`). */
  private buckets = new Int32Array([NONE])
  private readonly seed = (Math.random() * 0x1_0000_0000) >>> 0
  /** The bitmaps, slot `i`'s at word `(i % 32) * WINDOW_WORDS` of `chunks[i / 32]`. */
  private readonly chunks: Array<Uint32Array> = []
  /** The least and most recently used slots, the first free slot, the sessions in the table. */
  private head = NONE
  private tail = NONE
  private free = NONE
  private size = 0
  /** The most recently used slot (already the list's tail) and its session (-1n: none). */
  private mru = NONE
  private mruSession = -1n

  constructor(options: SessionTableOptions = {}) {
    this.maxSessions = options.maxSessions ?? defaults.maxSessions
    this.sessionTtlMs = options.sessionTtlMs ?? defaults.sessionTtlMs
    this.clock = options.clock ?? (() => performance.now())
    if (!Number.isInteger(this.maxSessions) || this.maxSessions < 1) {
      throw new RangeError(`notification/dedup_max_sessions must be a positive integer, got ${this.maxSessions}`)
    }
    if (!(this.sessionTtlMs > 0)) {
      throw new RangeError(`notification/dedup_session_ttl_ms must be positive, got ${this.sessionTtlMs}`)
    }
  }

  /**
   * Whether the notification stamped `(session, seq)` is delivered (true) or dropped (false), and records it. `now`
   * is the table's clock, read here unless given: a caller delivering a batch can read it once for the batch (a clock
   * read costs more than the rest of the call on some hosts).
   */
  admit(session: bigint, seq: bigint, now: number = this.clock()): boolean {
    const slot = this.touch(session, now)
    const bits = this.chunks[slot >>> 5] as Uint32Array
    const verdict = admitAt(bits, (slot & (WINDOWS_PER_CHUNK - 1)) * WINDOW_WORDS, this.hwms, this.bigs, slot, seq)
    if (verdict === Verdict.Accepted) {
      this.counters.accepted++
      return true
    }
    if (verdict === Verdict.Duplicate) {
      this.counters.duplicates++
      Metrics.duplicate.update(1)
    } else {
      this.counters.tooOld++
      Metrics.tooOld.update(1)
    }
    return false
  }

  /**
   * Whether the sender segment `sender.slice(0, end)` (a NIC path's part before its last `@`, or a segment name) may
   * use `session`, binding it on first use: a session is one engine's (random, new each start), so a stamp with a
   * session bound to another segment is forged or misrouted: refused (false, counted) before it moves the window. The
   * binding lives as long as the session's window (idle past the TTL, evicted: the next sender binds it again).
   * Marks the session used, as {@link admit} does; allocates nothing but the binding.
   */
  claim(session: bigint, sender: string, end: number, now: number = this.clock()): boolean {
    const slot = this.touch(session, now)
    if (slot === this.claimed && sender === this.claimer) return true
    const owner = this.owners[slot] as string
    if (end > 0 && (owner === "" || (owner.length === end && sender.startsWith(owner)))) {
      if (owner === "") this.owners[slot] = end === sender.length ? sender : sender.slice(0, end)
      this.claimed = slot
      this.claimer = sender
      return true
    }
    this.counters.foreign++
    foreignSession.update(1)
    return false
  }

  /** The sender segment `session` is bound to ("": none), if it has a window. */
  ownerOf(session: bigint): string | undefined {
    return this.has(session) ? this.owners[this.find(session)] : undefined
  }

  /** The slot of `session`, opened if it has none (or its window expired), made most recently used at `now`. */
  private touch(session: bigint, now: number): number {
    let slot = session === this.mruSession ? this.mru : this.find(session)
    if (slot === NONE || now - (this.lastSeen[slot] as number) > this.sessionTtlMs) {
      slot = this.open(session, slot, now)
    } else if (slot !== this.mru) {
      this.unlink(slot)
      this.append(slot)
      this.mru = slot
      this.mruSession = session
    }
    this.lastSeen[slot] = now
    return slot
  }

  /** An unstamped notification: always delivered, counted. */
  unstamped(): true {
    this.counters.unstamped++
    return true
  }

  /** {@link admit} for a stamp, {@link unstamped} without one (`Dedup.makeSeries`'s admission). */
  admitStamp(stamp: { readonly session: bigint; readonly seq: bigint } | undefined, now?: number): boolean {
    return stamp === undefined ? this.unstamped() : this.admit(stamp.session, stamp.seq, now)
  }

  /** Whether `session` has a window now (an expired one counts until it is next touched). */
  has(session: bigint): boolean {
    return this.find(session) !== NONE
  }

  /** The slot of `session`, or {@link NONE}. */
  private find(session: bigint): number {
    SPLIT[0] = session
    const lo = HALVES[0] as number
    const hi = HALVES[1] as number
    for (let i = this.buckets[this.bucket(lo, hi)] as number; i !== NONE; i = this.chain[i] as number) {
      if (this.keyLo[i] === lo && this.keyHi[i] === hi) return i
    }
    return NONE
  }

  /** The hash bucket of the session `(lo, hi)`. */
  private bucket(lo: number, hi: number): number {
    let h = Math.imul(lo ^ this.seed, 0x9e3779b1) ^ hi
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b)
    return (h ^ (h >>> 13)) & (this.buckets.length - 1)
  }

  /** A window for a session not in the table (or whose window at `stale` expired), made most recently used. */
  private open(session: bigint, stale: number, now: number): number {
    if (stale !== NONE) {
      this.remove(stale)
      this.counters.expired++
      Metrics.sessionExpired.update(1)
    }
    while (this.head !== NONE && now - (this.lastSeen[this.head] as number) > this.sessionTtlMs) {
      this.remove(this.head)
      this.counters.expired++
      Metrics.sessionExpired.update(1)
    }
    while (this.size >= this.maxSessions) {
      this.remove(this.head)
      this.counters.evictions++
      Metrics.sessionEvicted.update(1)
    }
    const slot = this.alloc()
    SPLIT[0] = session
    this.keyLo[slot] = HALVES[0] as number
    this.keyHi[slot] = HALVES[1] as number
    this.owners[slot] = ""
    if (slot === this.claimed) this.claimed = NONE
    this.link(slot)
    this.append(slot)
    this.size++
    resetAt(
      this.chunks[slot >>> 5] as Uint32Array,
      (slot & (WINDOWS_PER_CHUNK - 1)) * WINDOW_WORDS,
      this.hwms,
      this.bigs,
      slot
    )
    this.mru = slot
    this.mruSession = session
    this.counters.sessions = this.size
    return slot
  }

  /** Forgets the session at `slot`; the slot goes to the free list. */
  private remove(slot: number): void {
    const b = this.bucket(this.keyLo[slot] as number, this.keyHi[slot] as number)
    let i = this.buckets[b] as number
    if (i === slot) this.buckets[b] = this.chain[slot] as number
    else {
      while (this.chain[i] !== slot) i = this.chain[i] as number
      this.chain[i] = this.chain[slot] as number
    }
    this.unlink(slot)
    if (this.hwms[slot] === BIG) this.bigs.delete(slot)
    this.next[slot] = this.free
    this.free = slot
    this.size--
  }

  /** Puts `slot` in its session's hash bucket. */
  private link(slot: number): void {
    const b = this.bucket(this.keyLo[slot] as number, this.keyHi[slot] as number)
    this.chain[slot] = this.buckets[b] as number
    this.buckets[b] = slot
  }

  /** Takes `slot` out of the recency list. */
  private unlink(slot: number): void {
    const p = this.prev[slot] as number
    const n = this.next[slot] as number
    if (p === NONE) this.head = n
    else this.next[p] = n
    if (n === NONE) this.tail = p
    else this.prev[n] = p
  }

  /** Puts `slot` last (most recent) in the recency list. */
  private append(slot: number): void {
    this.prev[slot] = this.tail
    this.next[slot] = NONE
    if (this.tail === NONE) this.head = slot
    else this.next[this.tail] = slot
    this.tail = slot
  }

  /** A free slot, else a fresh one (growing the arrays, and a new bitmap array every {@link WINDOWS_PER_CHUNK}). */
  private alloc(): number {
    if (this.free !== NONE) {
      const slot = this.free
      this.free = this.next[slot] as number
      return slot
    }
    const slot = this.used++
    if (slot === this.capacity) this.grow()
    if ((slot & (WINDOWS_PER_CHUNK - 1)) === 0) {
      this.chunks.push(new Uint32Array(Math.min(WINDOWS_PER_CHUNK, this.maxSessions - slot) * WINDOW_WORDS))
    }
    return slot
  }

  /** Doubles the per-slot arrays (at most to `maxSessions` slots) and rehashes when the bucket count grows. */
  private grow(): void {
    const n = Math.min(Math.max(2 * this.capacity, WINDOWS_PER_CHUNK), this.maxSessions)
    const u32 = (a: Uint32Array) => {
      const b = new Uint32Array(n)
      b.set(a)
      return b
    }
    const i32 = (a: Int32Array) => {
      const b = new Int32Array(n)
      b.set(a)
      return b
    }
    const f64 = (a: Float64Array) => {
      const b = new Float64Array(n)
      b.set(a)
      return b
    }
    this.keyLo = u32(this.keyLo)
    this.keyHi = u32(this.keyHi)
    this.hwms = f64(this.hwms)
    this.lastSeen = f64(this.lastSeen)
    for (let i = this.owners.length; i < n; i++) this.owners.push("")
    this.prev = i32(this.prev)
    this.next = i32(this.next)
    this.chain = i32(this.chain)
    this.capacity = n
    if (this.buckets.length < n) {
      let count = this.buckets.length
      while (count < n) count *= 2
      this.buckets = new Int32Array(count).fill(NONE)
      for (let i = this.head; i !== NONE; i = this.next[i] as number) this.link(i)
    }
  }
}
