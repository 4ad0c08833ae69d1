/**
 * The soak's accounting, per arm and per fault window, from what the processes wrote down: the sender's calls (each
 * seq, when its call started and ended, whether it returned ok), the `Undelivered` its engine reported, and every
 * receiver incarnation's log of what it admitted (`seq at rdma`: wall-clock ms, and how many notifications had come
 * over RDMA before it). Delivered, duplicates and silent come from the receivers' logs, never from the sender's
 * belief: a seq is **silent** when its call returned ok and no receiver logged it and no `Undelivered` named it.
 *
 * A call belongs to the fault window in which it started (a fault's start to its end plus `graceMs`), otherwise to
 * the quiet time between faults.
 *
 * @since 0.2.0
 */

/**
 * One call of the sender: a standalone notification, or a transfer whose notification goes when its batch completes.
 *
 * @since 0.2.0
 */
export interface Call {
  readonly seq: number
  readonly kind: "standalone" | "transfer"
  /** Wall-clock ms. */
  readonly start: number
  /** Wall-clock ms; -1 = the call had not returned when the sender was asked. */
  readonly end: number
  readonly ok: boolean
  readonly error: string
}

/**
 * One line of a receiver's log.
 *
 * @since 0.2.0
 */
export interface Admitted {
  readonly seq: number
  readonly at: number
  /** Notifications received over RDMA before this one (its process's counter when it was admitted). */
  readonly rdma: number
}

/**
 * An `Undelivered` the sender's engine reported.
 *
 * @since 0.2.0
 */
export interface Reported {
  readonly seq: number
  readonly reason: string
  readonly at: number
}

/**
 * A fault as it happened: wall-clock start and end.
 *
 * @since 0.2.0
 */
export interface Window {
  readonly label: string
  readonly start: number
  readonly end: number
}

/**
 * The figures of a set of calls.
 *
 * @since 0.2.0
 */
export interface Figures {
  readonly calls: number
  readonly ok: number
  readonly failed: number
  /** Calls that had not returned by the end. */
  readonly unfinished: number
  /** Distinct seqs of these calls that a receiver logged. */
  readonly delivered: number
  /** Extra copies the receivers logged of these calls' seqs. */
  readonly duplicates: number
  readonly undelivered: number
  /** Ok, neither logged by a receiver nor reported `Undelivered`. */
  readonly silent: number
  /** Failed (or unfinished), yet logged by a receiver. */
  readonly deliveredAfterFailure: number
  readonly longestCallMs: number
  readonly callsOver1s: number
  /** The same of the standalone calls alone (`sendNotification`; a transfer-bound call also waits for its data). */
  readonly longestNotifyMs: number
  readonly notifyCallsOver1s: number
}

/**
 * A fault window's figures, and the time from the fault's end to the first notification over RDMA again.
 *
 * @since 0.2.0
 */
export interface WindowFigures extends Figures {
  readonly fault: string
  readonly startS: number
  readonly lastedS: number
  /** Seconds from the fault's end to the first notification a receiver got over RDMA (-1: none). */
  readonly rdmaBackS: number
}

/**
 * An arm's accounting.
 *
 * @since 0.2.0
 */
export interface Accounts {
  readonly total: Figures
  readonly quiet: Figures
  readonly windows: ReadonlyArray<WindowFigures>
  /** Undelivered by reason. */
  readonly undeliveredBy: Readonly<Record<string, number>>
  /** What each receiver incarnation logged (distinct seqs). */
  readonly incarnations: ReadonlyArray<number>
}

/**
 * Parses a receiver's log (`seq at rdma` lines; a torn last line is left out).
 *
 * @since 0.2.0
 */
export const parseLog = (text: string): ReadonlyArray<Admitted> => {
  const out: Array<Admitted> = []
  for (const l of text.split("\n")) {
    const [seq, at, rdma] = l.split(" ").map(Number)
    if (seq === undefined || at === undefined || rdma === undefined) continue
    if (Number.isInteger(seq) && Number.isFinite(at) && Number.isFinite(rdma)) out.push({ seq, at, rdma })
  }
  return out
}

const figures = (
  calls: ReadonlyArray<Call>,
  logged: ReadonlyMap<number, number>,
  reported: ReadonlyMap<number, Reported>
): Figures => {
  let ok = 0
  let failed = 0
  let unfinished = 0
  let delivered = 0
  let duplicates = 0
  let undelivered = 0
  let silent = 0
  let deliveredAfterFailure = 0
  let longest = 0
  let over = 0
  let longestNotify = 0
  let overNotify = 0
  for (const c of calls) {
    const n = logged.get(c.seq) ?? 0
    if (n > 0) delivered++
    if (n > 1) duplicates += n - 1
    if (reported.has(c.seq)) undelivered++
    if (c.end < 0) unfinished++
    else if (c.ok) ok++
    else failed++
    if (c.ok && n === 0 && !reported.has(c.seq)) silent++
    if (!c.ok && n > 0) deliveredAfterFailure++
    if (c.end >= 0) {
      const ms = c.end - c.start
      if (ms > longest) longest = ms
      if (ms > 1000) over++
      if (c.kind === "standalone") {
        if (ms > longestNotify) longestNotify = ms
        if (ms > 1000) overNotify++
      }
    }
  }
  return {
    calls: calls.length,
    ok,
    failed,
    unfinished,
    delivered,
    duplicates,
    undelivered,
    silent,
    deliveredAfterFailure,
    longestCallMs: Math.round(longest),
    callsOver1s: over,
    longestNotifyMs: Math.round(longestNotify),
    notifyCallsOver1s: overNotify
  }
}

/**
 * The first admission at or after `t` that came over RDMA: one after which its process's RDMA counter moved (the
 * counter is read before the notification it comes with is counted).
 */
const firstRdmaAfter = (logs: ReadonlyArray<ReadonlyArray<Admitted>>, t: number): number | undefined => {
  let first: number | undefined
  for (const log of logs) {
    for (let i = 0; i + 1 < log.length; i++) {
      const x = log[i] as Admitted
      if (x.at < t || (first !== undefined && x.at >= first)) continue
      if ((log[i + 1] as Admitted).rdma > x.rdma) {
        first = x.at
        break
      }
    }
  }
  return first
}

/**
 * Accounts for one arm. `logs`: one per receiver incarnation.
 *
 * @since 0.2.0
 */
export const account = (
  calls: ReadonlyArray<Call>,
  logs: ReadonlyArray<ReadonlyArray<Admitted>>,
  undelivered: ReadonlyArray<Reported>,
  windows: ReadonlyArray<Window>,
  origin: number,
  graceMs = 1000
): Accounts => {
  const logged = new Map<number, number>()
  for (const log of logs) for (const x of log) logged.set(x.seq, (logged.get(x.seq) ?? 0) + 1)
  const reported = new Map<number, Reported>()
  const undeliveredBy: Record<string, number> = {}
  for (const u of undelivered) {
    if (reported.has(u.seq)) continue
    reported.set(u.seq, u)
    undeliveredBy[u.reason] = (undeliveredBy[u.reason] ?? 0) + 1
  }
  const byWindow: Array<Array<Call>> = windows.map(() => [])
  const quiet: Array<Call> = []
  for (const c of calls) {
    const w = windows.findIndex((x) => c.start >= x.start && c.start < x.end + graceMs)
    if (w === -1) quiet.push(c)
    else byWindow[w]?.push(c)
  }
  const s = (ms: number) => Math.round(ms) / 1000
  return {
    total: figures(calls, logged, reported),
    quiet: figures(quiet, logged, reported),
    windows: windows.map((w, i) => {
      const back = firstRdmaAfter(logs, w.end)
      return {
        fault: w.label,
        startS: s(w.start - origin),
        lastedS: s(w.end - w.start),
        rdmaBackS: back === undefined ? -1 : s(back - w.end),
        ...figures(byWindow[i] ?? [], logged, reported)
      }
    }),
    undeliveredBy,
    incarnations: logs.map((l) => new Set(l.map((x) => x.seq)).size)
  }
}
