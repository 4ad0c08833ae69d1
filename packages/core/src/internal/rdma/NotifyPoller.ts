/**
 * The notify poller, one per RDMA transport (TENT `processNotifyCompletions`): polls every device's notify CQ 16
 * completions a pass, maps each completion to its endpoint through the transport's QP-number table, decodes RECVs
 * and hands them to the engine's delivery point, reposts the receive, and counts what it drops (`unknownQp`,
 * `malformed`, `duplicates`, `flushed`, `notifyErrors`). Bad input is counted, never thrown.
 *
 * It runs as the CQs' completion-channel listener (synchronously, where the completion is announced) instead of
 * TENT's thread with its 10 µs `usleep` loop, so a notification reaches the consumer without a fiber wake-up. This
 * is the hot path: plain synchronous code per completion, one reused decode object.
 */
import { type CompletionQueue, WcOpcode, WcStatus, WorkCompletion } from "@tent/verbs"
import { DecodedFrame, type DedupShape } from "../../Dedup.js"
import type { QpRetirementShape } from "../../QpRetirement.js"
import type { Delivery } from "../Delivery.js"
import { NOTIFY_SLOT_BYTES, NOTIFY_SLOTS } from "../NotifyChannel.js"
import type { RdmaEndpoint } from "./RdmaEndpoint.js"

/** Completions the notify poller takes from one CQ per pass (TENT: 16). */
export const NOTIFY_POLL_BATCH = 16

/** What the notify poller counted. */
export interface NotifyCounters {
  /** Notifications decoded and delivered. */
  received: number
  /** Successful completions whose QP number was not in the table (dropped: TENT "unknown QP"). */
  unknownQp: number
  /** Payloads that did not decode (dropped, receive reposted). */
  malformed: number
  /** Notifications the delivery point refused as duplicates. */
  duplicates: number
  /** Flushed completions of endpoints no longer READY (dropped silently, as TENT). */
  flushed: number
  /** Other failed completions (TENT logs "Notification completion failed"). */
  notifyErrors: number
  /** Notifications posted. */
  sent: number
}

/** A fresh set of counters. */
export const makeCounters = (): NotifyCounters => ({
  received: 0,
  unknownQp: 0,
  malformed: 0,
  duplicates: 0,
  flushed: 0,
  notifyErrors: 0,
  sent: 0
})

/** The running poller. */
export interface NotifyPoller {
  /** Runs the passes now, until every CQ is empty (the completion-channel listener). */
  readonly run: () => void
  /** Stops (or resumes) polling between passes, to hold completions unpolled (fault injection). */
  readonly pause: (paused: boolean) => void
}

/** Starts polling `cqs`; completions go to the endpoints of `table`, notifications to `delivery`. */
export const start = (options: {
  readonly cqs: ReadonlyArray<CompletionQueue>
  readonly table: ReadonlyMap<number, RdmaEndpoint>
  readonly delivery: Delivery
  readonly dedup: DedupShape
  readonly retirement: QpRetirementShape
  readonly counters: NotifyCounters
}): NotifyPoller => {
  const { cqs, table, delivery, dedup, retirement, counters } = options
  const wc = WorkCompletion.array(NOTIFY_POLL_BATCH)
  const frame = new DecodedFrame()

  const handleRecv = (ep: RdmaEndpoint, index: number, byteLen: number): void => {
    const buf = ep.notify.receiveBuffer
    if (buf === undefined || index < 0 || index >= NOTIFY_SLOTS || byteLen > NOTIFY_SLOT_BYTES) {
      counters.malformed++
      return
    }
    if (byteLen === 0) {
      ep.notify.postRecv(index)
      return
    }
    const rc = dedup.decode(buf, index * NOTIFY_SLOT_BYTES, byteLen, frame)
    if (rc !== 0) counters.malformed++
    else if (delivery.fromFrame("rdma", ep.peerNicPath, buf, frame)) counters.received++
    else counters.duplicates++
    ep.notify.postRecv(index)
  }

  const handle = (w: WorkCompletion): void => {
    const ep = table.get(w.qpNum)
    if (w.status !== WcStatus.SUCCESS) {
      if (w.status === WcStatus.WR_FLUSH_ERR && (ep === undefined || ep.status !== "READY")) counters.flushed++
      else {
        counters.notifyErrors++
        if (retirement.onNotifyError === "disable" && ep !== undefined) {
          ep.disableNotify()
        }
      }
      return
    }
    if (ep === undefined) {
      counters.unknownQp++
      return
    }
    if (w.opcode === WcOpcode.RECV) handleRecv(ep, w.wrId, w.byteLen)
    else if (w.opcode === WcOpcode.SEND) ep.notify.onSendComplete()
  }

  const pass = (): number => {
    let total = 0
    for (const cq of cqs) {
      const n = cq.pollCq(NOTIFY_POLL_BATCH, wc)
      for (let i = 0; i < n; i++) handle(wc[i] as WorkCompletion)
      if (n > 0) total += n
    }
    return total
  }

  // A run polls every notify CQ 16 completions a pass until all are empty, re-arms them and polls once more (a
  // completion between the last pass and the arm is not missed). While paused the listener leaves the CQs unpolled
  // and unarmed; resuming runs the passes at once, from the resuming fiber.
  let paused = false
  let running = false
  const run = (): void => {
    if (paused || running) return
    running = true
    try {
      for (;;) {
        if (pass() > 0) {
          if (paused) return
          continue
        }
        for (const cq of cqs) cq.reqNotifyCq()
        if (pass() === 0 || paused) return
      }
    } finally {
      running = false
    }
  }
  for (const cq of cqs) cq.setNotify(run)
  run()
  return {
    run,
    pause: (p) => {
      paused = p
      if (!p) run()
    }
  }
}
