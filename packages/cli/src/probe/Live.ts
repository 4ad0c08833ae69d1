/**
 * What the probe shows while a row runs and what explains each row once it ran: per arm, the notifications the
 * initiator's application sent, those the receiver got (distinct), the copies the receiver's dedup window dropped,
 * the initiator's fallbacks to a later transport and its resends, and the time since the row started — read from
 * the two children (`figures`: their `Diagnostics` counters and the `tent_*` metrics of their registries).
 *
 * On a terminal the live view is one line on stderr, rewritten in place (`\r`, clear line); through a pipe it is
 * plain lines, at most one a second per arm.
 *
 * @since 0.1.0
 */

/** A row's figures. */
export interface Figures {
  /** Notifications the initiator's application sent (calls made: stream, timed sends, the recovery loop). */
  readonly sent: number
  /** Distinct notifications the receiver got. */
  readonly received: number
  /** Copies the receiver's dedup window dropped (RFC PR 6; 0 under legacy). */
  readonly duplicatesDropped: number
  /** Notifications of the initiator that fell back from one transport to the next, by `from→to`. */
  readonly fallbacksVia: Readonly<Record<string, number>>
  /** Pending notifications of the initiator's retired channels resent (RFC PR 7), by the path that took them. */
  readonly resentVia: { readonly nicPair: number; readonly tcp: number; readonly controlPlane: number }
  /** NIC-pair resends that went out, by `local NIC→peer NIC`. */
  readonly resentPairs: Readonly<Record<string, number>>
  /** Pending notifications the resend could not send (no path took them, or unstamped). */
  readonly resendFailed: number
  /** The initiator's `Undelivered` events (delivery receipts; 0 without them), in all and by reason. */
  readonly undelivered: number
  readonly undeliveredBy: Readonly<Record<string, number>>
  /** Notifications the initiator's ledger still held without a receipt (delivery receipts). */
  readonly unreceipted: number
  /** Notifications the initiator's ledger sent over the control plane (delivery receipts: no slot, or no receipt). */
  readonly ledgerSent: number
  /** The initiator's notify channels rebuilt after a failed QP (delivery receipts: the RDMA path came back). */
  readonly rebuilt: number
  /** Seconds since the row's processes started. */
  readonly elapsed: number
}

/** The figures of a row that reported none (its children died first). */
export const noFigures: Figures = {
  sent: 0,
  received: 0,
  duplicatesDropped: 0,
  fallbacksVia: {},
  resentVia: { nicPair: 0, tcp: 0, controlPlane: 0 },
  resentPairs: {},
  resendFailed: 0,
  undelivered: 0,
  undeliveredBy: {},
  unreceipted: 0,
  ledgerSent: 0,
  rebuilt: 0,
  elapsed: 0
}

const sum = (r: Readonly<Record<string, number>>): number => Object.values(r).reduce((a, b) => a + b, 0)

/** Resends in all. */
export const resent = (f: Figures): number => f.resentVia.nicPair + f.resentVia.tcp + f.resentVia.controlPlane

/** Fallbacks in all. */
export const fallbacks = (f: Figures): number => sum(f.fallbacksVia)

/** The figures of a `figures` reply of each child: the initiator's sends, fallbacks, resends; the receiver's receipts. */
export const combine = (initiator: Omit<Figures, "elapsed">, receiver: Omit<Figures, "elapsed">, elapsed: number) => ({
  sent: initiator.sent,
  received: receiver.received,
  duplicatesDropped: receiver.duplicatesDropped,
  fallbacksVia: initiator.fallbacksVia,
  resentVia: initiator.resentVia,
  resentPairs: initiator.resentPairs,
  resendFailed: initiator.resendFailed,
  undelivered: initiator.undelivered,
  undeliveredBy: initiator.undeliveredBy,
  unreceipted: initiator.unreceipted,
  ledgerSent: initiator.ledgerSent,
  rebuilt: initiator.rebuilt,
  elapsed
})

const by = (r: Readonly<Record<string, number>>) =>
  Object.entries(r)
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${n} ${k}`)
    .join(", ")

/** The NIC pairs a resend went over: "mlx0→mlx1" for one, "NIC pairs (200 mlx0→mlx1, 56 mlx1→mlx1)" for more. */
const overPairs = (pairs: Readonly<Record<string, number>>): string => {
  const used = Object.entries(pairs).filter(([, n]) => n > 0)
  if (used.length === 0) return "another NIC pair"
  if (used.length === 1) return (used[0] as [string, number])[0]
  return `NIC pairs (${by(pairs)})`
}

/** The sentence that explains a row's figures: "256 resent (256 over mlx1→mlx1), 0 duplicates dropped, …". */
export const explain = (f: Figures): string => {
  const r = resent(f)
  const paths = [
    f.resentVia.nicPair > 0 ? `${f.resentVia.nicPair} over ${overPairs(f.resentPairs)}` : undefined,
    f.resentVia.tcp > 0 ? `${f.resentVia.tcp} over TCP` : undefined,
    f.resentVia.controlPlane > 0 ? `${f.resentVia.controlPlane} with the control plane's Notify` : undefined
  ].filter((x): x is string => x !== undefined)
  const fb = fallbacks(f)
  return [
    `${r} resent${paths.length > 0 ? ` (${paths.join(", ")})` : ""}`,
    f.resendFailed > 0 ? `${f.resendFailed} not resent` : undefined,
    f.undelivered > 0 ? `${f.undelivered} undelivered (${by(f.undeliveredBy)})` : undefined,
    f.unreceipted > 0 ? `${f.unreceipted} awaiting a receipt` : undefined,
    f.ledgerSent > 0 ? `${f.ledgerSent} sent by the receipts' ledger over the control plane` : undefined,
    f.rebuilt > 0 ? `${f.rebuilt} notify channel${f.rebuilt === 1 ? "" : "s"} rebuilt` : undefined,
    `${f.duplicatesDropped} duplicates dropped`,
    `${fb} fell back${fb > 0 ? ` (${by(f.fallbacksVia)})` : ""}`
  ]
    .filter((x): x is string => x !== undefined)
    .join(", ")
}

/** One live line: the row, its figures, and what the row is doing now. */
export const line = (row: string, f: Figures, phase: string): string =>
  `${row} ${f.elapsed.toFixed(1)} s: sent ${f.sent}, received ${f.received}, duplicates dropped ${f.duplicatesDropped}, fallbacks ${fallbacks(f)}, resent ${resent(f)}${phase === "" ? "" : ` | ${phase}`}`

/** Where the live view writes: stderr, or a stand-in. */
export interface Sink {
  readonly isTTY?: boolean | undefined
  readonly columns?: number | undefined
  write(text: string): unknown
}

/**
 * The live view of one probe run: {@link update} with each row's latest figures and phase. On a terminal the line is
 * rewritten in place; through a pipe a plain line is written at most once a second per arm.
 */
export class View {
  private readonly lastPlain = new Map<string, number>()
  private shown = false
  constructor(
    private readonly sink: Sink,
    private readonly now: () => number = () => performance.now(),
    private readonly plainEveryMs = 1000
  ) {}

  /** Shows `row`'s (`"2 series"`) figures and phase; `arm` keys the pipe's rate. */
  update(arm: string, row: string, f: Figures, phase: string): void {
    const text = line(row, f, phase)
    if (this.sink.isTTY === true) {
      this.sink.write(`\r\u001b[2K${text.slice(0, (this.sink.columns ?? 120) - 1)}`)
      this.shown = true
      return
    }
    const t = this.now()
    const last = this.lastPlain.get(arm)
    if (last !== undefined && t - last < this.plainEveryMs) return
    this.lastPlain.set(arm, t)
    this.sink.write(`${text}\n`)
  }

  /** Clears the terminal's live line (before a row's result is printed); nothing through a pipe. */
  clear(): void {
    if (this.sink.isTTY === true && this.shown) {
      this.sink.write("\r\u001b[2K")
      this.shown = false
    }
  }
}
