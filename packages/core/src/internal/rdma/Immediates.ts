/**
 * Transfer-bound notifications on the data QPs (`transports/rdma/notify/transfer_bound` = `immediate`, past the RFC:
 * its open question 1), both sides.
 *
 * By the InfiniBand ordering rules only a completion on the QP that carried a WRITE tells the receiver the WRITE's
 * data is placed; a SEND on another QP (the notify QP) may be seen first by a NIC that acknowledges before it places.
 * So the sender, once every slice of a hook's transfer to a target is posted, posts a 0-byte `RDMA_WRITE_WITH_IMM`
 * behind them on **every lane it used** (the immediate: a tag, 32 bits), and sends the notification itself on the
 * notify QP as a **held record**: its stamped frame with the tag and the number of lanes. The receiver keeps receives
 * posted on every data QP (`imm_recvs`, advertised as `notify_imm_recvs`), counts the immediates per (peer, tag), and
 * releases the record to its one delivery point once every lane's immediate arrived — whichever of record and
 * immediates comes last. The notification is never ahead of its data, and it does not wait for the sender to see its
 * slices complete (one round trip earlier than TENT's path, which sends on the notify QP after every completion).
 *
 * Fallbacks, so nothing is lost and nothing is doubled: a marker that fails, a lane that was full, a slice re-posted
 * after the markers went, or a task failed over to TCP **spoils** the track: the record is then sent (or resent) as an
 * ordinary notification with the same stamp once the tasks completed, and the receiver, which admits a stamp once,
 * delivers whichever copy comes first. A held record nobody releases is dropped after `HELD_TTL_MS` (counted), as are
 * immediates whose record never came.
 */

import { randomInt } from "node:crypto"
import type { Notification } from "@tent/rpc"
import { type QueuePair, SendFlags, type SendWr, WcStatus, type WorkCompletion, WrOpcode } from "@tent/verbs"
import { HELD_TTL_MS, holds } from "../HeldRecord.js"
import type { Destination, Entry } from "../Ledger.js"
import { MARK_SEND_BASE, repostImmRecv } from "./DataRecvs.js"
import type { RdmaEndpoint } from "./RdmaEndpoint.js"

/** Most (peer, tag) entries the receiver keeps; past it the oldest go (counted as expired). */
export const HELD_CAP = 65_536
/** Most bytes of held records the receiver keeps copies of. */
export const HELD_BYTES_CAP = 64 * 1024 * 1024

// ---------------------------------------------------------------------------------------------------------------------
// Receiver
// ---------------------------------------------------------------------------------------------------------------------

interface Held {
  /** Lanes the record names (0: the record has not come yet). */
  lanes: number
  /** Immediates counted. */
  seen: number
  /** Hands the record to the delivery point (set when the record came). */
  release: (() => void) | undefined
  /** Bytes of the record's copy. */
  bytes: number
  readonly at: number
}

/** The receiver's counters (`tent_notify_imm_*`). */
export interface ImmCounters {
  /** Immediates received on data QPs. */
  marks: number
  /** Held records received. */
  held: number
  /** Records released (every lane's immediate arrived). */
  released: number
  /** Entries dropped unreleased after {@link HELD_TTL_MS} or past {@link HELD_CAP}. */
  expired: number
}

/** The receiver's table: immediates counted and records held, per (peer segment, tag). */
export class TransferMarks {
  readonly counters: ImmCounters = { marks: 0, held: 0, released: 0, expired: 0 }
  private readonly table = new Map<string, Held>()
  /** Bytes of the held copies (at most {@link HELD_BYTES_CAP}: past it the oldest entries go). */
  heldBytes = 0

  constructor(private readonly now: () => number = () => performance.now()) {}

  private entry(segment: string, tag: number): [string, Held] {
    const key = `${segment}\u0000${tag}`
    let h = this.table.get(key)
    if (h === undefined) {
      if (this.table.size >= HELD_CAP) this.evictOldest()
      h = { lanes: 0, seen: 0, release: undefined, bytes: 0, at: this.now() }
      this.table.set(key, h)
    }
    return [key, h]
  }

  private settle(key: string, h: Held): void {
    if (h.release === undefined || h.seen < h.lanes) return
    this.drop(key, h)
    this.counters.released++
    h.release()
  }

  /** One lane's immediate `tag` arrived from `segment` (a data QP's receive completion). */
  mark(segment: string, tag: number): void {
    this.counters.marks++
    const [key, h] = this.entry(segment, tag)
    h.seen++
    this.settle(key, h)
  }

  /** The held record `tag` from `segment`, naming `lanes` lanes (a copy of `bytes`), arrived; `release` delivers it. */
  hold(segment: string, tag: number, lanes: number, bytes: number, release: () => void): void {
    const [key, h] = this.entry(segment, tag)
    if (h.release !== undefined) return // a resent copy of a record already held
    this.counters.held++
    h.lanes = lanes
    h.release = release
    h.bytes = bytes
    this.heldBytes += bytes
    // Over the byte bound: the oldest other held copies go (immediates alone hold no bytes).
    if (this.heldBytes > HELD_BYTES_CAP) {
      for (const [k, x] of this.table) {
        if (this.heldBytes <= HELD_BYTES_CAP) break
        if (x === h || x.bytes === 0) continue
        this.drop(k, x)
        this.counters.expired++
      }
    }
    this.settle(key, h)
  }

  /** Entries (records or immediates) waiting. */
  get size(): number {
    return this.table.size
  }

  /** Drops what waited longer than {@link HELD_TTL_MS}; returns how many. */
  sweep(): number {
    const limit = this.now() - HELD_TTL_MS
    let n = 0
    for (const [key, h] of this.table) {
      if (h.at > limit) break // insertion order: the rest are younger
      this.drop(key, h)
      n++
    }
    this.counters.expired += n
    return n
  }

  private evictOldest(): void {
    const first = this.table.entries().next()
    if (first.done === true) return
    this.drop(first.value[0], first.value[1])
    this.counters.expired++
  }

  private drop(key: string, h: Held): void {
    this.table.delete(key)
    this.heldBytes -= h.bytes
  }
}

/**
 * A data QP's receive completed: an immediate (counted, and the receive posted again) or a flush (the QP is gone).
 * Returns true when it was an immediate.
 */
export const onImmRecv = (marks: TransferMarks, segment: string, qp: QueuePair, wc: WorkCompletion): boolean => {
  if (wc.status !== WcStatus.SUCCESS) return false
  marks.mark(segment, wc.immData >>> 0)
  repostImmRecv(qp, wc.wrId)
  return true
}

// ---------------------------------------------------------------------------------------------------------------------
// Sender
// ---------------------------------------------------------------------------------------------------------------------

/** A lane a tracked transfer's slices were posted on, with a valid remote range for its 0-byte marker. */
export interface ImmLane {
  readonly ep: RdmaEndpoint
  readonly lane: number
  readonly remoteAddr: number
  readonly rkey: number
}

/**
 * The sender's state of one hook's notification to one target on the immediates path:
 * `posting` (slices still to be posted) → `marked` (record and markers posted) → `ok` (every marker completed), or
 * `spoiled` at any point (the ordinary path takes over, see the module doc).
 */
export class ImmTrack {
  state: "posting" | "marked" | "ok" | "spoiled" = "posting"
  /** Slices of the tracked tasks not posted yet. */
  unposted = 0
  /** Markers posted and not completed. */
  markersOut = 0
  readonly lanes: Array<ImmLane> = []
  /** The record as sent held (its own object: the ledger and {@link holds} key it), once sent. */
  record: Notification | undefined = undefined
  /** Every tracked task completed (the sender's classic point): a spoiled record may now go unheld. */
  tasksDone = false

  constructor(
    readonly target: string,
    readonly notification: Notification,
    /** Sends `record` again unheld with its stamp, now (the receipts' resend): the fallback once spoiled and done. */
    private readonly resendUnheld: (target: string, record: Notification) => void
  ) {}

  /**
   * The record went (held): from here the ledger carries it — released by the markers, or resent unheld with its
   * stamp after a spoil. Otherwise the hook sends the notification the ordinary way.
   */
  get served(): boolean {
    return this.record !== undefined
  }

  /** The ordinary path takes over; a record already sent goes again unheld once the tasks completed. */
  spoil(): void {
    if (this.state === "spoiled") return
    this.state = "spoiled"
    this.release()
  }

  /**
   * Every marker completed: the data is at the peer's NIC. If the record itself is lost with its notify QP, the
   * receipts' resend may now carry it unheld (after `receipt_resend_ms`, far longer than any placement).
   */
  ok(): void {
    this.state = "ok"
    const h = this.record === undefined ? undefined : holds.get(this.record)
    if (h !== undefined) h.active = false
  }

  /** The tracked tasks completed (the batch's hooks are due). */
  done(): void {
    this.tasksDone = true
    if (this.state === "spoiled") this.release()
  }

  /**
   * The batch ended FAILED. A track whose markers all completed delivered its data and its notification: it stands.
   * Otherwise the held record's ledger entry becomes the failure notice `failed` with the record's stamp and goes
   * unheld: the receiver admits one stamp once, so it gets the notification (if every lane's marker did arrive) or
   * the failure notice, never both. Returns whether the hook's target is served by this (no other notice is due).
   */
  fail(failed: Notification, swap: (target: string, record: Notification, by: Notification) => boolean): boolean {
    if (this.state === "ok") return true
    if (this.record === undefined) return false
    const h = holds.get(this.record)
    // Not swapped: the ledger ended it already (receipted: released, it stands; or reported Undelivered).
    if (!swap(this.target, this.record, failed)) return true
    if (h !== undefined) h.active = false
    this.state = "spoiled"
    this.resendUnheld(this.target, this.record)
    return true
  }

  private release(): void {
    if (!this.tasksDone || this.record === undefined) return
    const h = holds.get(this.record)
    if (h === undefined || !h.active) return
    h.active = false
    this.resendUnheld(this.target, this.record)
  }
}

/** The sender's counters. */
export interface MarkerCounters {
  records: number
  markers: number
  markerErrors: number
  spoiled: number
}

/**
 * The sender's markers: tracks the lanes a tracked transfer's slices were posted on, and once all are posted sends
 * the held record and one 0-byte `RDMA_WRITE_WITH_IMM` per lane. Plain synchronous code on the slice path.
 */
export class Markers {
  private readonly wr: SendWr = {
    wrId: 0,
    opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
    sendFlags: SendFlags.SIGNALED,
    sgList: [],
    numSge: 0,
    remoteAddr: 0,
    rkey: 0,
    immData: 0
  }
  private readonly out = new Map<
    number,
    { readonly track: ImmTrack; readonly ep: RdmaEndpoint; readonly lane: number }
  >()
  private next = 1
  /** Tags start anywhere: a restarted sender's tags do not meet the ones its predecessor left at a receiver. */
  private tag = randomInt(0x1_0000_0000)
  /** Tracks whose markers wait for room on a lane (at most half the peer's receives in flight per lane). */
  private waiting: Array<ImmTrack> = []
  /** Markers in flight per endpoint and lane: at most half the receives the peer keeps posted. */
  private readonly perLane = new WeakMap<RdmaEndpoint, Array<number>>()
  /** Records and markers posted, markers failed, tracks spoiled. */
  readonly counters: ImmCounters & MarkerCounters

  /** `counters`: the receiver's, extended (one object in `Diagnostics`). */
  constructor(counters: ImmCounters) {
    this.counters = Object.assign(counters, { markers: 0, markerErrors: 0, spoiled: 0, records: 0 })
  }

  /**
   * A tracked slice was posted on `ep`'s lane `lane` (`first`: its first post). A re-post after the markers went
   * spoils the track (its new lane has no marker behind it); the last first post sends record and markers.
   */
  posted(t: ImmTrack, first: boolean, ep: RdmaEndpoint, lane: number, remoteAddr: number, rkey: number): void {
    if (t.state === "spoiled") return
    if (!first) {
      if (t.state !== "posting") return void this.spoil(t)
    } else t.unposted--
    let known = false
    for (const l of t.lanes) if (l.ep === ep && l.lane === lane) known = true
    if (!known) t.lanes.push({ ep, lane, remoteAddr, rkey })
    if (t.unposted === 0 && t.state === "posting") this.send(t)
  }

  /** Markers in flight on `ep`'s lanes (created on first use). */
  private lanesOf(ep: RdmaEndpoint): Array<number> {
    let a = this.perLane.get(ep)
    if (a === undefined) {
      a = ep.dataQps.map(() => 0)
      this.perLane.set(ep, a)
    }
    return a
  }

  /** Spoils `t` (counted once): the ordinary path takes over. */
  spoil(t: ImmTrack): void {
    if (t.state !== "spoiled") this.counters.spoiled++
    t.spoil()
  }

  /** The held record on the first lane's notify QP, then a marker on every lane; any obstacle spoils the track. */
  private send(t: ImmTrack): void {
    const lanes = t.lanes
    const first = lanes[0]?.ep
    if (first === undefined || !first.connected) return void this.spoil(t)
    // Every lane: READY, a free work request, and room in the peer's receives (half of them, so the peer reposting
    // late never RNR-NAKs a marker and stalls the lane's data behind it).
    for (const l of lanes) {
      const ep = l.ep
      if (ep.status !== "READY" || ep.peerImmRecvs === 0 || (ep.wrDepth[l.lane] as number) >= ep.laneDepth) {
        return void this.spoil(t)
      }
      // At the bound: wait for a marker of that lane to complete (the ordinary path could overtake the data).
      if ((this.lanesOf(ep)[l.lane] as number) >= Math.max(1, ep.peerImmRecvs >> 1)) {
        if (!this.waiting.includes(t)) this.waiting.push(t)
        return
      }
    }
    this.tag = (this.tag + 1) >>> 0
    const tag = this.tag
    const record: Notification = { ...t.notification }
    const hold = { tag, lanes: lanes.length, active: true }
    holds.set(record, hold)
    if (first.notify.postNotification(record, undefined, hold) !== 0) {
      holds.delete(record)
      return void this.spoil(t)
    }
    this.counters.records++
    t.record = record
    t.state = "marked"
    const wr = this.wr
    wr.immData = tag
    for (const l of lanes) {
      const id = this.next
      this.next = this.next >= 0xffff_ffff ? 1 : this.next + 1
      wr.wrId = MARK_SEND_BASE + id
      wr.remoteAddr = l.remoteAddr
      wr.rkey = l.rkey
      if ((l.ep.dataQps[l.lane] as QueuePair).postSend(wr) !== 0) {
        this.counters.markerErrors++
        this.spoil(t)
        continue
      }
      l.ep.wrDepth[l.lane] = (l.ep.wrDepth[l.lane] as number) + 1
      const inFlight = this.lanesOf(l.ep)
      inFlight[l.lane] = (inFlight[l.lane] as number) + 1
      this.out.set(id, { track: t, ep: l.ep, lane: l.lane })
      t.markersOut++
      this.counters.markers++
    }
  }

  /** A marker's completion (its lane's depth already given back by the caller). */
  completed(wc: WorkCompletion): void {
    const id = wc.wrId - MARK_SEND_BASE
    const m = this.out.get(id)
    if (m === undefined) return
    this.out.delete(id)
    this.landed(m.ep, m.lane)
    const t = m.track
    t.markersOut--
    if (wc.status !== WcStatus.SUCCESS) {
      this.counters.markerErrors++
      this.spoil(t)
    } else if (t.markersOut === 0 && t.state === "marked") t.ok()
  }

  /** `ep` is being destroyed: its markers' completions will not be seen; their tracks spoil. */
  cancel(ep: RdmaEndpoint): void {
    for (const [id, m] of this.out) {
      if (m.ep !== ep) continue
      this.out.delete(id)
      this.landed(m.ep, m.lane)
      this.spoil(m.track)
    }
  }

  private landed(ep: RdmaEndpoint, lane: number): void {
    const a = this.perLane.get(ep)
    if (a !== undefined && (a[lane] as number) > 0) a[lane] = (a[lane] as number) - 1
    if (this.waiting.length === 0) return
    const w = this.waiting
    this.waiting = []
    for (const t of w) if (t.state === "posting") this.send(t)
  }
}

/** Makes the ledger entry of `record` due to be sent now (its fallback); false if there is none left. */
export const makeDue = (d: Destination, record: Notification): boolean => {
  for (let i = d.head; i < d.entries.length; i++) {
    const e = d.entries[i] as Entry
    if (e.n !== record) continue
    if (e.done) return false
    e.sentAt = -1
    return true
  }
  return false
}

/** Makes the ledger entry of `record` (not receipted yet) carry `by` instead; false if there is none. */
export const swapEntry = (d: Destination, record: Notification, by: Notification): boolean => {
  for (let i = d.head; i < d.entries.length; i++) {
    const e = d.entries[i] as Entry
    if (e.n !== record) continue
    if (e.done) return false
    ;(e as { n: Notification }).n = by
    return true
  }
  return false
}
