/**
 * Delayed data placement (the device's `placementDelayMs`): a responder that acknowledges an RDMA WRITE before its
 * payload is in memory, as a real NIC may. Its ACK says the NIC has the data; the PCIe posted writes that put it in
 * host memory land later. What IB still guarantees is order within one QP: the completion a later request of the QP
 * produces (a SEND's RECV, a WRITE_WITH_IMM's RECV_RDMA_WITH_IMM) is written after the data of every earlier request of
 * that QP, and a READ returns memory as those earlier WRITEs left it. Across QPs nothing is ordered: a SEND on another QP
 * may complete while a WRITE that was ACKed before it is still on its way to memory, which is the hazard this models.
 *
 * Each QP keeps one FIFO of pending work: WRITE payloads (each due `placementDelayMs` after it was accepted) and the
 * receive completions that came after them, held until every payload before them has landed. One lazy timer per QP
 * lands what is due. Landing earlier than due is always allowed (a delay is an upper bound on the lag, not a promise
 * of it), and whatever needs memory settled does so at once: a READ request first lands its QP's queue; so do ERR
 * (the held completions are pushed before the flush completions), RESET and destroy (the payloads land, the held
 * completions go with the QP's other unpolled ones), and deregistering an MR (every QP of the device: a NIC finishes
 * its writes to a region before the region is gone). A SEND's payload is scattered into its RECV at once; only its
 * completion waits, since the RECV buffer is not the application's to read before that completion.
 *
 * The datagram a payload arrived in is kept, not copied: Node gives every datagram its own memory. With
 * `placementDelayMs` 0 (the default) nothing here runs: payloads are copied as they arrive, completions pushed at once.
 */
import { HDR } from "../Packet.js"
import type { SoftQp } from "../SoftQp.js"

/** One entry of a QP's placement queue: a WRITE payload to copy (`target` set), or a receive completion held. */
export interface Pending {
  /** `performance.now()` when a payload is due; 0 for a held completion (it goes when it reaches the head). */
  due: number
  target: Buffer | undefined
  at: number
  msg: Buffer
  plen: number
  wrId: number
  status: number
  opcode: number
  byteLen: number
  imm: number
  srcQp: number
  flags: number
}

const NO_PAYLOAD = Buffer.alloc(0)
/** A payload due within this many ms of now lands on this timer tick (Node's timers keep millisecond time). */
const SLACK_MS = 1

/** Queues the payload `msg[HDR, HDR + plen)` for `target[at..]`, due `placementDelayMs` from now. */
export const deferPlacement = (qp: SoftQp, target: Buffer, at: number, msg: Buffer, plen: number): void => {
  qp.device.counters.placementsDelayed++
  const due = performance.now() + qp.placementDelayMs
  qp.placements.push({
    due,
    target,
    at,
    msg,
    plen,
    wrId: 0,
    status: 0,
    opcode: 0,
    byteLen: 0,
    imm: 0,
    srcQp: 0,
    flags: 0
  })
  if (qp.placementsPending++ === 0) arm(qp, qp.placementDelayMs)
}

/**
 * Pushes a receive completion of `qp` to its receive CQ, or holds it behind the QP's pending payloads (every receive
 * completion of the responder goes through here, so they stay in order among themselves too).
 */
export const completeRecv = (
  qp: SoftQp,
  wrId: number,
  status: number,
  opcode: number,
  byteLen: number,
  imm: number,
  srcQp: number,
  flags: number
): void => {
  // Small enough for V8 to inline into the responder: with nothing pending (always, at delay 0) it is the push alone.
  if (qp.placementsPending === 0) qp.recvCq.push(wrId, status, opcode, byteLen, imm, qp.qpNum, srcQp, flags)
  else hold(qp, wrId, status, opcode, byteLen, imm, srcQp, flags)
}

const hold = (
  qp: SoftQp,
  wrId: number,
  status: number,
  opcode: number,
  byteLen: number,
  imm: number,
  srcQp: number,
  flags: number
): void => {
  qp.placements.push({
    due: 0,
    target: undefined,
    at: 0,
    msg: NO_PAYLOAD,
    plen: 0,
    wrId,
    status,
    opcode,
    byteLen,
    imm,
    srcQp,
    flags
  })
  qp.placementsPending++
}

/**
 * Lands every pending payload of `qp` now, in order; the held completions are pushed (`keepCompletions`) or dropped
 * (RESET and destroy, which remove the QP's unpolled completions anyway).
 */
export const landAll = (qp: SoftQp, keepCompletions: boolean): void => {
  if (qp.placementsPending === 0) return
  land(qp, Number.POSITIVE_INFINITY, keepCompletions)
}

/** The placement timer fired: land what is due, re-arm for the rest. */
export const onPlacementTimer = (qp: SoftQp): void => {
  qp.placementTimer = undefined
  qp.device.run(() => {
    const now = performance.now()
    land(qp, now + SLACK_MS, true)
    const next = qp.placements[qp.placementHead]
    if (next !== undefined) arm(qp, next.due - now)
  })
}

const land = (qp: SoftQp, until: number, keepCompletions: boolean): void => {
  const queue = qp.placements
  let i = qp.placementHead
  for (; i < queue.length; i++) {
    const p = queue[i] as Pending
    if (p.target !== undefined) {
      if (p.due > until) break
      p.msg.copy(p.target, p.at, HDR, HDR + p.plen)
    } else if (keepCompletions) {
      qp.recvCq.push(p.wrId, p.status, p.opcode, p.byteLen, p.imm, qp.qpNum, p.srcQp, p.flags)
    }
    queue[i] = undefined // the datagram may be collected now
  }
  qp.placementsPending -= i - qp.placementHead
  if (qp.placementsPending === 0) {
    queue.length = 0
    qp.placementHead = 0
    if (qp.placementTimer !== undefined) clearTimeout(qp.placementTimer)
    qp.placementTimer = undefined
  } else {
    qp.placementHead = i
  }
}

const arm = (qp: SoftQp, ms: number): void => {
  if (qp.placementTimer !== undefined) return
  qp.placementTimer = setTimeout(qp.onPlacementTimer, Math.max(1, Math.ceil(ms)))
  qp.placementTimer.unref()
}
