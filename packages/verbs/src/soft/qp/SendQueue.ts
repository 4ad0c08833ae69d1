/**
 * The send queue of a SoftVerbs RC QP: a ring of WQEs in typed arrays (absolute indices, slot = index % sqRing, the ring grown on demand up to sqCap), no
 * object per work request. Posting validates a WR and copies it into the ring (inline data into the QP's inline
 * buffer) and assigns its PSNs; the requester (`Requester.ts`) transmits and completes from it.
 */
import { Errno, QpState, SendFlags, WcOpcode, WcStatus, WrOpcode } from "../../Constants.js"
import type { SendWr } from "../../Verbs.js"
import type { SoftQp } from "../SoftQp.js"
import { storeSgl } from "./Sge.js"

/** The completion opcode of a send WR opcode. */
export const wcOpcodeOf = (op: number): number =>
  op === WrOpcode.RDMA_READ
    ? WcOpcode.RDMA_READ
    : op === WrOpcode.RDMA_WRITE || op === WrOpcode.RDMA_WRITE_WITH_IMM
      ? WcOpcode.RDMA_WRITE
      : WcOpcode.SEND

/** Queues one send WR (in ERR it completes WR_FLUSH_ERR at once); an errno, or 0. */
export const postOneSend = (qp: SoftQp, w: SendWr): number => {
  const state = qp.state
  if (state === QpState.RESET || state === QpState.INIT || state === QpState.RTR || qp.destroyed) {
    return Errno.EINVAL
  }
  const op = w.opcode
  if (op > WrOpcode.RDMA_READ) return Errno.EINVAL
  const numSge = w.numSge ?? w.sgList.length
  if (numSge > qp.maxSge || numSge > w.sgList.length) return Errno.EINVAL
  const isInline = (w.sendFlags & SendFlags.INLINE) !== 0
  let len = 0
  for (let k = 0; k < numSge; k++) len += (w.sgList[k] as { length: number }).length
  if (isInline && (len > qp.maxInline || op === WrOpcode.RDMA_READ)) return Errno.EINVAL
  const signaled = qp.sqSigAll || (w.sendFlags & SendFlags.SIGNALED) !== 0
  if (state === QpState.ERR) {
    qp.sendCq.push(w.wrId, WcStatus.WR_FLUSH_ERR, wcOpcodeOf(op), 0, 0, qp.qpNum, 0, 0)
    return 0
  }
  if (qp.tail - qp.head >= qp.sqCap) return Errno.ENOMEM
  if (qp.tail - qp.head >= qp.sqRing) qp.growSq()
  const s = qp.tail % qp.sqRing
  if (isInline) {
    let pos = s * qp.maxInline
    for (let k = 0; k < numSge; k++) {
      const sge = w.sgList[k] as { addr: number; length: number; lkey: number }
      const mr = qp.device.lookupMr(sge.lkey)
      if (mr === undefined || sge.addr < mr.addr || sge.addr + sge.length > mr.addr + mr.length) return Errno.EINVAL
      const from = sge.addr - mr.addr
      mr.buffer.copy(qp.inlineData, pos, from, from + sge.length)
      pos += sge.length
    }
  } else {
    storeSgl(w.sgList, numSge, qp.wqSgeAddr, qp.wqSgeLen, qp.wqSgeLkey, s * qp.maxSge)
  }
  const npkts = len === 0 ? 1 : Math.ceil(len / qp.mtu)
  qp.wqWrId[s] = w.wrId
  qp.wqOpcode[s] = op
  qp.wqSignaled[s] = signaled ? 1 : 0
  qp.wqInline[s] = isInline ? 1 : 0
  qp.wqImm[s] = w.immData ?? 0
  qp.wqRaddr[s] = w.remoteAddr ?? 0
  qp.wqRkey[s] = w.rkey ?? 0
  qp.wqLen[s] = len
  qp.wqNumSge[s] = numSge
  qp.wqFirstPsn[s] = qp.psnNext
  qp.wqNpkts[s] = npkts
  qp.wqReadGot[s] = 0
  if (op === WrOpcode.RDMA_READ) qp.readsOutstanding++
  qp.psnNext += npkts
  qp.tail++
  return 0
}

/** Completes every outstanding send WR with WR_FLUSH_ERR, in order, and empties the send queue. */
export const flushSendQueue = (qp: SoftQp): void => {
  for (let i = qp.head; i < qp.tail; i++) {
    const s = i % qp.sqRing
    qp.sendCq.push(
      qp.wqWrId[s] as number,
      WcStatus.WR_FLUSH_ERR,
      wcOpcodeOf(qp.wqOpcode[s] as number),
      0,
      0,
      qp.qpNum,
      0,
      0
    )
  }
  qp.head = qp.tail
  qp.txIdx = qp.tail
  qp.txPkt = 0
  qp.readsOutstanding = 0
}
