/**
 * The notify poller, one per RDMA transport (TENT `processNotifyCompletions`): polls every device's notify CQ 16
 * completions a pass (the rest on the next turn of the event loop), maps each completion to its endpoint through the
 * transport's QP-number table, decodes RECVs and hands them to the engine's delivery point, reposts the receive, and
 * counts what it drops (`unknownQp`, `malformed`, `duplicates`, `flushed`, `notifyErrors`). Bad input is counted, never
 * thrown. A device whose notify QPs receive from a shared queue (`SharedRecv.ts`) gets every slot back, whatever the
 * completion's status or endpoint.
 *
 * It runs from the CQs' completion channel, a pass at once when the channel fires (SoftVerbs fires it once the datagram
 * that brought the completion is handled), instead of TENT's thread with its 10 µs `usleep` loop: a notification
 * reaches the consumer in the turn it arrived, without a fiber wake-up, and a reply posted by the consumer leaves
 * before the event loop reads the socket again. A pass takes 16 completions a CQ and leaves the rest to a pass on the
 * next turn of the event loop (`setImmediate`), so other work of the process can still land between them, as TENT's
 * other threads can. This is the hot path: plain synchronous code per completion, one reused decode object.
 */
import { type CompletionQueue, WcOpcode, WcStatus, WorkCompletion } from "@tent/verbs"
import * as CtrlFrame from "../../CtrlFrame.js"
import { DecodedFrame, type DedupShape } from "../../Dedup.js"
import * as Metrics from "../../Metrics.js"
import type { QpRetirementShape } from "../../QpRetirement.js"
import type { Delivery } from "../Delivery.js"
import { takeHeld } from "../HeldRecord.js"
import type { Ledger } from "../Ledger.js"
import { SEND_WR_BASE } from "../NotifyChannel.js"
import type { SharedRecv } from "../SharedRecv.js"
import type { TransferMarks } from "./Immediates.js"
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
  /** Notify sends that completed successfully (the peer's NIC acknowledged them). */
  sendsCompleted: number
  /** Passes that found a CQ with more than 16 completions and left the rest for the next turn. */
  deferredPasses: number
  /**
   * Times the poller ran (each a pass over the CQs, woken by a completion or scheduled): completions handled over runs
   * says how well completions batch (one a run: each woke the poller alone).
   */
  runs: number
  /**
   * Sends posted and not completed when their channel was retired or disabled: lost unless the `Resend` seam sends
   * them again (at most: a send the peer acknowledged whose completion was still unpolled is counted too).
   */
  closedInFlight: number
  /** Endpoints retired and bootstrapped again because their notify channel was disabled (the RDMA path came back). */
  rebuilt: number
  /** Notifications without a receipt sent again first on a rebuilt channel (what the old one may have lost). */
  rebuiltResent: number
}

/** A fresh set of counters. */
export const makeCounters = (): NotifyCounters => ({
  received: 0,
  unknownQp: 0,
  malformed: 0,
  duplicates: 0,
  flushed: 0,
  notifyErrors: 0,
  sent: 0,
  sendsCompleted: 0,
  deferredPasses: 0,
  runs: 0,
  closedInFlight: 0,
  rebuilt: 0,
  rebuiltResent: 0
})

/** The running poller. */
export interface NotifyPoller {
  /** Schedules a pass on the next turn of the event loop. */
  readonly run: () => void
  /** Stops (or resumes) polling between passes, to hold completions unpolled (fault injection). */
  readonly pause: (paused: boolean) => void
  /** Stops for good (the transport's scope closes). */
  readonly stop: () => void
}

/** Starts polling `cqs`; completions go to the endpoints of `table`, notifications to `delivery`. */
export const start = (options: {
  readonly cqs: ReadonlyArray<CompletionQueue>
  /** Per CQ, its device's shared receive ring (`notify/shared_recv`), if its notify QPs receive from one. */
  readonly shared?: ReadonlyArray<SharedRecv | undefined>
  readonly table: ReadonlyMap<number, RdmaEndpoint>
  readonly delivery: Delivery
  readonly dedup: DedupShape
  readonly retirement: QpRetirementShape
  readonly counters: NotifyCounters
  /** The engine's receipts: `CTRL_ACK`s received go to its ledger; admitted `NeedsAck` frames are acknowledged. */
  readonly receipts?: Ledger | undefined
  /** Held records wait here for their lanes' immediates (transfer-bound notifications on the data QPs). */
  readonly marks?: TransferMarks | undefined
}): NotifyPoller => {
  const { cqs, table, delivery, dedup, retirement, counters } = options
  const sharedOf = cqs.map((_, i) => options.shared?.[i])
  const receipts = options.receipts?.enabled === true ? options.receipts : undefined
  // An engine at `notify_proto` 3 takes the failure flag; any other rejects it as the C++ decoder does.
  const known = receipts?.failureNotices === true ? CtrlFrame.KNOWN_FLAGS_FAILURE : CtrlFrame.KNOWN_FLAGS
  const wc = WorkCompletion.array(NOTIFY_POLL_BATCH)
  const frame = new DecodedFrame()
  const ack = new CtrlFrame.AckFields()
  const marks = options.marks
  const held = { tag: 0, lanes: 0 }

  /** The clock of the current pass, read at its first stamped frame (-1: not yet). */
  let passNow = -1
  /** Drains so far: one ends when the CQs are re-armed (a lazy receive ring's demand is counted per drain). */
  let drain = 0

  /** The CQ being polled: its device's shared ring, if any (a slot of it goes back to it whatever the endpoint). */
  let shared: SharedRecv | undefined

  const handleRecv = (ep: RdmaEndpoint, index: number, received: number): void => {
    let byteLen = received
    const notify = ep.notify
    const ring = shared?.ring
    const buf =
      ring !== undefined
        ? ring.bufs[index]
        : index >= 0 && index < notify.recvCapacity
          ? notify.recvBuffer(index)
          : undefined
    if (buf === undefined || byteLen > notify.slotBytes) {
      counters.malformed++
      Metrics.rejectedSlot.update(1)
      if (buf !== undefined) shared?.repost(index)
      return
    }
    if (byteLen === 0) {
      repost(ep, index)
      return
    }
    let offset = ring !== undefined ? (ring.offsets[index] as number) : notify.recvOffset(index)
    // A receipt from the peer (header-only `CTRL_ACK`): to the ledger, not to the delivery point. Followed by more
    // bytes, it was carried with a notification (`notify_ack_carry`): the notification's frame follows it.
    if (
      receipts !== undefined &&
      byteLen >= CtrlFrame.HEADER_BYTES &&
      CtrlFrame.decodeAckInto(buf, offset, CtrlFrame.HEADER_BYTES, ack)
    ) {
      receipts.onAck(ep.segment, ack.session, ack.epoch, ack.ackSeq)
      if (byteLen === CtrlFrame.HEADER_BYTES) {
        repost(ep, index)
        return
      }
      offset += CtrlFrame.HEADER_BYTES
      byteLen -= CtrlFrame.HEADER_BYTES
    }
    // A held record (transfer-bound, from a peer this side offered immediates): a copy waits for its lanes' markers.
    const heldLen = marks !== undefined && ep.immRecvs > 0 ? takeHeld(buf, offset, byteLen, held) : -1
    if (heldLen >= 0 && marks !== undefined) holdRecord(ep, buf, offset, heldLen)
    else admit(ep, buf, offset, byteLen, -1)
    repost(ep, index)
  }

  /**
   * A held record: checked, its stamp kept from the ack table's jumps, and a copy held until its lanes' immediates are
   * in; then admitted by the ack table alone (it may have waited past the replay window).
   */
  const holdRecord = (ep: RdmaEndpoint, buf: Buffer, offset: number, len: number): void => {
    if (!decodeChecked(buf, offset, len) || marks === undefined) return
    const stamp = receipts !== undefined && frame.stamped ? { session: frame.session, seq: frame.seq } : undefined
    if (stamp !== undefined) receipts?.holding(stamp.session, stamp.seq, true)
    const copy = Buffer.from(buf.subarray(offset, offset + len))
    marks.hold(ep.segment, held.tag, held.lanes, len, () => {
      if (stamp !== undefined) receipts?.holding(stamp.session, stamp.seq, false)
      admit(ep, copy, 0, len, performance.now(), true)
    })
  }

  /** Decodes one frame into `frame`; false (counted) when it is malformed. */
  const decodeChecked = (buf: Buffer, offset: number, byteLen: number): boolean => {
    frame.needsAck = false
    frame.failureStart = -1
    const rc = dedup.decode(buf, offset, byteLen, frame, known)
    if (rc === 0) return true
    counters.malformed++
    Metrics.rejected(rc).update(1)
    return false
  }

  /** Decodes one frame and hands it to the delivery point (`now` -1: the pass's clock, read once per pass). */
  const admit = (ep: RdmaEndpoint, buf: Buffer, offset: number, byteLen: number, now: number, held = false): void => {
    if (!decodeChecked(buf, offset, byteLen)) return
    // A stamped frame is admitted with the clock read once per pass (see `Dedup.admit`).
    if (frame.stamped && now < 0 && passNow < 0) passNow = performance.now()
    const at = now < 0 ? passNow : now
    // The delivery point tells the channel of any receipt owed (before the subscribers run).
    const acks = receipts === undefined ? undefined : ep.notify
    if (delivery.fromFrame("rdma", ep.peerNicPath, buf, frame, frame.stamped ? at : undefined, held, acks)) {
      counters.received++
      Metrics.received.rdma.update(1, ep.segment)
    } else if (!delivery.lastRefused) counters.duplicates++
  }

  // A retiring endpoint (RFC PR 1: still published) gets no receive reposted into its ERR QP. A lazy ring may grow
  // here (`NotifyChannel.repost`).
  const repost = (ep: RdmaEndpoint, index: number): void => {
    if (shared !== undefined) shared.repost(index)
    else if (ep.status === "READY") ep.notify.repost(index, drain)
  }

  const handle = (w: WorkCompletion): void => {
    const ep = table.get(w.qpNum)
    const isSend = w.wrId >= SEND_WR_BASE
    // A shared slot whose receive failed (flushed), of a QP no longer in the table, or taken by anything but a SEND
    // (a peer's WRITE with immediate) goes back to its queue now: no endpoint's fate may keep a slot of the device's.
    const sharedBack =
      !isSend &&
      shared !== undefined &&
      (w.status !== WcStatus.SUCCESS || ep === undefined || w.opcode !== WcOpcode.RECV)
    if (sharedBack) shared?.repost(w.wrId)
    if (w.status !== WcStatus.SUCCESS) {
      const notReady =
        ep === undefined || ep.status !== "READY" || (retirement.onNotifyError === "disable" && !ep.notify.connected)
      if (w.status === WcStatus.WR_FLUSH_ERR && notReady) counters.flushed++
      else {
        counters.notifyErrors++
        Metrics.notifyQpError.update(1)
        // Disabled before the unit is counted out: the pending table handed to the resend still holds this send.
        if (retirement.onNotifyError === "disable" && ep !== undefined) ep.disableNotify()
      }
      // RFC PR 1: every completion is counted out, so `finishDestroy` can wait for the notify QP.
      if (ep !== undefined && retirement.destroyWaitsForNotifyQp) {
        if (isSend) ep.notify.onSendComplete()
        else ep.notify.onRecvDone()
      }
      return
    }
    if (ep === undefined) {
      counters.unknownQp++
      Metrics.unknownQp.update(1)
      return
    }
    if (isSend) {
      counters.sendsCompleted++
      ep.notify.onSendComplete()
    } else if (w.opcode === WcOpcode.RECV) {
      ep.notify.onRecvDone()
      handleRecv(ep, w.wrId, w.byteLen)
    }
  }

  /** One pass: at most 16 completions from each CQ (TENT's `ibv_poll_cq(cq, 16, wc)`); true if a CQ had more. */
  const pass = (): boolean => {
    passNow = -1
    let full = false
    for (let c = 0; c < cqs.length; c++) {
      const cq = cqs[c] as CompletionQueue
      shared = sharedOf[c]
      const n = cq.pollCq(NOTIFY_POLL_BATCH, wc)
      for (let i = 0; i < n; i++) handle(wc[i] as WorkCompletion)
      if (n === NOTIFY_POLL_BATCH) full = true
    }
    return full
  }

  // A pass takes 16 completions a CQ and, if a CQ had more, leaves them for the pass of the next turn (TENT's notify
  // worker polls in a loop of its own), so whatever else runs on this loop (a data completion retiring an endpoint, a
  // control-plane handler, a timer) can run between two passes, as TENT's other threads can. Once every CQ is below
  // 16, they are re-armed and polled once more (a completion between the last poll and the arm is not missed).
  let paused = false
  let scheduled = false
  let stopped = false
  const run = (): void => {
    scheduled = false
    if (paused || stopped) return
    counters.runs++
    if (pass()) {
      counters.deferredPasses++
      schedule()
      return
    }
    for (const cq of cqs) cq.reqNotifyCq()
    drain++
    passNow = -1
    let again = false
    for (let c = 0; c < cqs.length; c++) {
      const cq = cqs[c] as CompletionQueue
      shared = sharedOf[c]
      const n = cq.pollCq(NOTIFY_POLL_BATCH, wc)
      for (let i = 0; i < n; i++) handle(wc[i] as WorkCompletion)
      if (n > 0) again = true
    }
    if (again) schedule()
  }
  const schedule = (): void => {
    if (scheduled || paused || stopped) return
    scheduled = true
    setImmediate(run)
  }
  // The completion channel runs a pass at once: SoftVerbs calls it once the datagram that brought the completion is
  // handled (Ibverbs, when the channel's fd is readable), so a notification reaches its consumer in the same turn,
  // and a reply the consumer posts there leaves before the event loop reads the socket again. A pass already
  // scheduled (the rest of a CQ beyond 16) keeps its turn. A pass is never entered from inside another: neither
  // provider calls a channel listener while one runs (SoftVerbs queues a CQ that completes meanwhile and calls it once
  // the running listener has returned; Ibverbs reads the channel fd from the event loop): no `inRun` guard is needed.
  const now = (): void => {
    if (scheduled || paused || stopped) return
    run()
  }
  for (const cq of cqs) cq.setNotify(now)
  schedule()
  return {
    run: schedule,
    pause: (p) => {
      paused = p
      if (!p) schedule()
    },
    stop: () => {
      stopped = true
      for (const cq of cqs) cq.setNotify(null)
    }
  }
}
