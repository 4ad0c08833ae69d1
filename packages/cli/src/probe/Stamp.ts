/**
 * The probe's stamp: each probe notification carries `(session, seq)` in its message body, so the receiver counts
 * per stamp (a copy is a duplicate, a missing stamp a loss) while the wire format stays the legacy one. The END
 * marker carries the session and how many notifications the initiator attempted.
 *
 * @since 0.1.0
 */
import type { Notification } from "@tent/rpc"

/** Name of a stamped probe notification. */
export const NAME = "tent-probe"
/** Name of the END marker. */
export const END_NAME = "tent-probe-end"
const MAGIC = 0x42525054 // "TPRB" little-endian
const BODY = 32
const utf8 = new TextEncoder()
const nameBytes = utf8.encode(NAME)
const endBytes = utf8.encode(END_NAME)

/** How a notification was sent: bound to a transfer, standalone, or the recovery loop's. */
export type Kind = "transfer" | "standalone" | "recovery"
const kinds: ReadonlyArray<Kind> = ["transfer", "standalone", "recovery"]

/** A stamped notification: `[u32 magic][u32 session][u32 seq][u8 kind]`, zero-padded to 32 bytes. */
export const stamp = (session: number, seq: number, kind: Kind): Notification => {
  const msg = new Uint8Array(BODY)
  const v = new DataView(msg.buffer)
  v.setUint32(0, MAGIC, true)
  v.setUint32(4, session >>> 0, true)
  v.setUint32(8, seq >>> 0, true)
  v.setUint8(12, kinds.indexOf(kind))
  return { name: nameBytes, msg }
}

/** The END marker of `session` after `attempted` notifications. */
export const end = (session: number, attempted: number): Notification => {
  const msg = new Uint8Array(BODY)
  const v = new DataView(msg.buffer)
  v.setUint32(0, MAGIC, true)
  v.setUint32(4, session >>> 0, true)
  v.setUint32(8, attempted >>> 0, true)
  return { name: endBytes, msg }
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i])

/** What a received notification is to the probe. */
export type Decoded =
  | { readonly _tag: "Stamp"; readonly session: number; readonly seq: number; readonly kind: Kind }
  | { readonly _tag: "End"; readonly session: number; readonly attempted: number }
  | { readonly _tag: "Other" }

/**
 * Reads a notification's stamp. A failure notice (`failure` set: its batch ended FAILED, `Series.SubmitHooks`) is not
 * a delivery of its stamp: it is `Other`.
 */
export const decode = (n: Notification): Decoded => {
  if (n.msg.length !== BODY || n.failure !== undefined) return { _tag: "Other" }
  const v = new DataView(n.msg.buffer, n.msg.byteOffset, n.msg.byteLength)
  if (v.getUint32(0, true) !== MAGIC) return { _tag: "Other" }
  const session = v.getUint32(4, true)
  if (sameBytes(n.name, endBytes)) return { _tag: "End", session, attempted: v.getUint32(8, true) }
  if (!sameBytes(n.name, nameBytes)) return { _tag: "Other" }
  return { _tag: "Stamp", session, seq: v.getUint32(8, true), kind: kinds[v.getUint8(12)] ?? "standalone" }
}

/** What a {@link Counter} saw. */
export interface Counts {
  /** Distinct `(session, seq)` stamps received. */
  readonly received: number
  /** Every stamped notification received, copies included. */
  readonly total: number
  /** `total - received`: copies of a stamp already counted. */
  readonly duplicates: number
  /** The END marker arrived. */
  readonly end: boolean
  /** Wall-clock ms of the last stamped receipt (0 = none). */
  readonly lastAt: number
}

/** Counts stamped notifications per `(session, seq)`: copies are duplicates, not extra receipts. */
export class Counter {
  private readonly seen = new Map<number, Set<number>>()
  private received = 0
  private total = 0
  private ended = false
  private lastAt = 0
  /** Every receipt of the recovery kind (its seq, and wall-clock ms), in order. */
  readonly recovery: Array<{ readonly seq: number; readonly at: number }> = []

  /** Counts one notification; returns what it was. */
  add(n: Notification, now: number = Date.now()): Decoded {
    const d = decode(n)
    if (d._tag === "End") this.ended = true
    if (d._tag !== "Stamp") return d
    this.total++
    this.lastAt = now
    let set = this.seen.get(d.session)
    if (set === undefined) {
      set = new Set()
      this.seen.set(d.session, set)
    }
    if (!set.has(d.seq)) {
      set.add(d.seq)
      this.received++
    }
    if (d.kind === "recovery") this.recovery.push({ seq: d.seq, at: now })
    return d
  }

  get counts(): Counts {
    return {
      received: this.received,
      total: this.total,
      duplicates: this.total - this.received,
      end: this.ended,
      lastAt: this.lastAt
    }
  }
}
