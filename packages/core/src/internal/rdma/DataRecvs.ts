/**
 * The data QPs' side of transfer-bound notifications (`Immediates.ts`): the work-request id ranges that tell an
 * immediate's receive and a marker from a slice, and the 0-byte receives an endpoint keeps posted on its data QPs.
 */
import type { QueuePair, RecvWr } from "@tent/verbs"

/** Work-request ids of the receives kept posted on data QPs: `IMM_RECV_BASE + lane`. */
export const IMM_RECV_BASE = 0x2_0000_0000
/** Work-request ids of the markers (`RDMA_WRITE_WITH_IMM`): `MARK_SEND_BASE + marker`. */
export const MARK_SEND_BASE = 0x3_0000_0000
/** Is `wrId` one of the data QPs' immediate receives? */
export const isImmRecv = (wrId: number): boolean => wrId >= IMM_RECV_BASE && wrId < MARK_SEND_BASE

/** Is `wrId` a marker's? */
export const isMarker = (wrId: number): boolean => wrId >= MARK_SEND_BASE

const recvWr: RecvWr = { wrId: 0, sgList: [], numSge: 0 }

/** Posts one 0-byte receive again (after its immediate completed); 0 or the errno. */
export const repostImmRecv = (qp: QueuePair, wrId: number): number => {
  recvWr.wrId = wrId
  return qp.postRecv(recvWr)
}

/** Posts `n` 0-byte receives on a data QP (lane `lane`); the errno of the first that failed, else 0. */
export const postImmRecvs = (qp: QueuePair, lane: number, n: number): number => {
  recvWr.wrId = IMM_RECV_BASE + lane
  for (let i = 0; i < n; i++) {
    const rc = qp.postRecv(recvWr)
    if (rc !== 0) return rc
  }
  return 0
}
