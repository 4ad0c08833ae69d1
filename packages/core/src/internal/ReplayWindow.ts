/**
 * The receiver's anti-replay window of RFC PR 6: per sender session, a high-water mark plus a bitmap of the last
 * {@link WINDOW_SIZE} seqs (as in IPsec / DTLS anti-replay), so a `(session, seq)` delivered once is dropped when a
 * copy arrives again, whichever transport carried it. {@link SessionTable} keeps one {@link ReplayWindow} per session,
 * bounded in number and in idle age so a peer forging sessions cannot exhaust memory.
 *
 * Hot path: {@link SessionTable.admit} and {@link ReplayWindow.admit} are plain synchronous code that allocates
 * nothing for a known session whose seqs stay below 2^53 (window math in numbers; a window whose seqs pass 2^53 goes
 * on in BigInt arithmetic, exact to 2^64 - 1 but slower and allocating). Two costs remain outside the window: reading
 * the table's clock (pass `now` to read it once per batch; V8 boxes the default clock's double) and, when consecutive
 * stamps come from different sessions, the Map re-insertion that keeps recency, which lets V8 rehash the Map's table
 * now and then.
 *
 * @since 0.1.0
 */

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

/**
 * One sender session's window: the high-water mark `hwm` (the largest seq accepted) and one bit per seq in
 * `(hwm - 4096, hwm]`, kept circularly (seq `s` is bit `s mod 4096`), so sliding never shifts words.
 *
 * - `seq > hwm`: accepted; the window slides up to `seq`, clearing the bits of the seqs it passes over (a jump of
 *   4096 or more clears them all).
 * - `hwm - 4096 < seq ≤ hwm`: accepted once (bit test-and-set), a duplicate after that.
 * - `seq ≤ hwm - 4096`: too old to tell, dropped.
 *
 * Seqs are u64 (`0 ≤ seq < 2^64`, not checked). A fresh window has seen nothing: its first seq, 0 included, is accepted.
 * The bitmap lives in `bits` at `base` (a {@link SessionTable} packs many windows into one array); a standalone
 * window allocates its own.
 */
export class ReplayWindow {
  /** The high-water mark while it is below 2^53 (-1: nothing seen). */
  private hwm = -1
  /** The high-water mark once a seq reached 2^53 (the window then runs on BigInt arithmetic); else undefined. */
  private hwmBig: bigint | undefined = undefined
  /** When the session last admitted a seq, in its {@link SessionTable}'s clock (ms). */
  lastSeen = 0

  constructor(
    private readonly bits: Uint32Array = new Uint32Array(WINDOW_WORDS),
    private readonly base = 0
  ) {}

  /** The largest seq accepted, -1n if none. */
  get highWaterMark(): bigint {
    return this.hwmBig ?? BigInt(this.hwm)
  }

  /** Decides on `seq` and records it when accepted. */
  admit(seq: bigint): Verdict {
    if (this.hwmBig === undefined) {
      if (seq <= MAX_SAFE_BIG) {
        const s = Number(seq)
        const hwm = this.hwm
        if (s > hwm) {
          this.slide(s - hwm, s & MASK)
          this.hwm = s
          return Verdict.Accepted
        }
        if (hwm - s >= WINDOW_SIZE) return Verdict.TooOld
        return this.testAndSet(s & MASK)
      }
      this.hwmBig = BigInt(this.hwm)
    }
    return this.admitBig(seq)
  }

  /** Forgets every seq: the window of a new session. */
  reset(): void {
    this.hwm = -1
    this.hwmBig = undefined
    this.bits.fill(0, this.base, this.base + WINDOW_WORDS)
  }

  /** {@link admit} once the high-water mark is a BigInt. */
  private admitBig(seq: bigint): Verdict {
    const hwm = this.hwmBig as bigint
    if (seq > hwm) {
      const d = seq - hwm
      this.slide(d >= WINDOW_BIG ? WINDOW_SIZE : Number(d), Number(seq & MASK_BIG))
      this.hwmBig = seq
      return Verdict.Accepted
    }
    if (hwm - seq >= WINDOW_BIG) return Verdict.TooOld
    return this.testAndSet(Number(seq & MASK_BIG))
  }

  /**
   * Moves the high-water mark `d` (≥ 1; any value ≥ 4096 means as far) seqs up, to the seq of bit `to`: clears the
   * bits of the seqs passed over, sets the new one.
   */
  private slide(d: number, to: number): void {
    const bits = this.bits
    const base = this.base
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

  /** Sets bit `p`: accepted if it was clear, a duplicate if it was set. */
  private testAndSet(p: number): Verdict {
    const w = this.base + (p >>> 5)
    const m = 1 << (p & 31)
    const word = this.bits[w] as number
    if ((word & m) !== 0) return Verdict.Duplicate
    this.bits[w] = word | m
    return Verdict.Accepted
  }
}

/** The configuration keys of the session table (RFC PR 6), with their defaults. */
export const keys = {
  "notification/dedup_max_sessions": {
    default: 4096,
    description:
      "RFC PR 6: sender sessions the dedup window remembers; beyond it the least recently used is evicted (its late copies would be delivered again)"
  },
  "notification/dedup_session_ttl_ms": {
    default: 600_000,
    description: "RFC PR 6: a sender session idle this long is forgotten by the dedup window"
  }
} as const

/** {@link keys}' defaults by option name. */
export const defaults = {
  maxSessions: keys["notification/dedup_max_sessions"].default,
  sessionTtlMs: keys["notification/dedup_session_ttl_ms"].default
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
}

/** Windows per shared bitmap array (16 KiB each): a new array only every this many new sessions. */
const WINDOWS_PER_CHUNK = 32

/**
 * The windows of every sender session, by session id, at the engine's one delivery point: {@link admit} says whether
 * a stamped notification is delivered; unstamped ones always are ({@link unstamped}).
 *
 * Bounded so a peer forging sessions cannot exhaust memory: at most `maxSessions` windows
 * (`notification/dedup_max_sessions`, default 4096): a new session beyond it evicts the least recently used one,
 * whose late copies would then be delivered again (counted in `evictions`); a session idle longer than `sessionTtlMs`
 * (`notification/dedup_session_ttl_ms`, default 10 min) is forgotten, checked when it is used again and, for the
 * least recently used ones, whenever a session is added (no timers). Recency is the Map's insertion order: a session
 * is re-inserted when it is used after another. A forgotten session's window is reused for the next new one, and
 * bitmaps are packed {@link WINDOWS_PER_CHUNK} to an array (no `ArrayBuffer` of its own per session), so a new
 * session allocates rarely. Measured about 640-660 B per session in all (the bitmap's 512, the window object, the Map
 * entry and the session's BigInt): `pnpm bench engine`'s `dedup_bytes_per_session`.
 */
export class SessionTable {
  readonly maxSessions: number
  readonly sessionTtlMs: number
  readonly counters = new DedupCounters()
  private readonly clock: () => number
  private readonly windows = new Map<bigint, ReplayWindow>()
  private readonly spare: Array<ReplayWindow> = []
  private chunk = new Uint32Array(0)
  private chunkUsed = WINDOWS_PER_CHUNK
  /** The most recently used window, already last in the Map's order, and its session (-1n: none). */
  private mru: ReplayWindow | undefined = undefined
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
    let w = session === this.mruSession ? this.mru : this.windows.get(session)
    if (w === undefined || now - w.lastSeen > this.sessionTtlMs) {
      w = this.open(session, w, now)
    } else if (w !== this.mru) {
      this.windows.delete(session)
      this.windows.set(session, w)
      this.mru = w
      this.mruSession = session
    }
    w.lastSeen = now
    const verdict = w.admit(seq)
    if (verdict === Verdict.Accepted) {
      this.counters.accepted++
      return true
    }
    if (verdict === Verdict.Duplicate) this.counters.duplicates++
    else this.counters.tooOld++
    return false
  }

  /** An unstamped notification: always delivered, counted. */
  unstamped(): true {
    this.counters.unstamped++
    return true
  }

  /** {@link admit} for a stamp, {@link unstamped} without one. */
  admitStamp(stamp: { readonly session: bigint; readonly seq: bigint } | undefined): boolean {
    return stamp === undefined ? this.unstamped() : this.admit(stamp.session, stamp.seq)
  }

  /** Whether `session` has a window now (an expired one counts until it is next touched). */
  has(session: bigint): boolean {
    return this.windows.has(session)
  }

  /** A window for a session not in the table (or whose window `stale` expired), made most recently used. */
  private open(session: bigint, stale: ReplayWindow | undefined, now: number): ReplayWindow {
    if (stale !== undefined) this.drop(session, stale)
    for (const [s, w] of this.windows) {
      if (now - w.lastSeen <= this.sessionTtlMs) break
      this.drop(s, w)
    }
    while (this.windows.size >= this.maxSessions) {
      const [s, w] = this.windows.entries().next().value as [bigint, ReplayWindow]
      this.windows.delete(s)
      this.spare.push(w)
      this.counters.evictions++
    }
    const w = this.spare.pop() ?? this.fresh()
    w.reset()
    this.windows.set(session, w)
    this.mru = w
    this.mruSession = session
    this.counters.sessions = this.windows.size
    return w
  }

  /** Forgets an expired session; its window goes to the spares. */
  private drop(session: bigint, w: ReplayWindow): void {
    this.windows.delete(session)
    this.spare.push(w)
    this.counters.expired++
  }

  /** A new window, its bitmap in the current shared array (a new array every {@link WINDOWS_PER_CHUNK} windows). */
  private fresh(): ReplayWindow {
    if (this.chunkUsed === WINDOWS_PER_CHUNK) {
      this.chunk = new Uint32Array(WINDOWS_PER_CHUNK * WINDOW_WORDS)
      this.chunkUsed = 0
    }
    return new ReplayWindow(this.chunk, WINDOW_WORDS * this.chunkUsed++)
  }
}
