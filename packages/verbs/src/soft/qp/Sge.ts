/**
 * Copies between a packet's payload and a QP's scatter/gather lists, through the MRs their lkeys name (rdma_rxe's
 * `copy_data`). Every SGE is checked against its MR's protection domain and bounds as it is used.
 */
import { AccessFlags } from "../../Constants.js"
import type { Sge } from "../../Verbs.js"
import { HDR } from "../Packet.js"
import type { SoftQp } from "../SoftQp.js"

/** Stores the first `n` SGEs of a posted WR into one of the QP's SGE rings at `base`. */
export const storeSgl = (
  sgList: ReadonlyArray<Sge>,
  n: number,
  addrs: Float64Array,
  lens: Uint32Array,
  lkeys: Uint32Array,
  base: number
): void => {
  for (let k = 0; k < n; k++) {
    const sge = sgList[k] as { addr: number; length: number; lkey: number }
    addrs[base + k] = sge.addr
    lens[base + k] = sge.length
    lkeys[base + k] = sge.lkey
  }
}

/** Copies `plen` bytes at message offset `off` of send WQE `s` into `dst` after the header. */
export const gather = (qp: SoftQp, s: number, off: number, plen: number, dst: Buffer): boolean => {
  if (qp.wqInline[s] === 1) {
    const from = s * qp.maxInline + off
    qp.inlineData.copy(dst, HDR, from, from + plen)
    return true
  }
  const base = s * qp.maxSge
  const n = qp.wqNumSge[s] as number
  let pos = off
  let remaining = plen
  let at = HDR
  for (let k = 0; k < n && remaining > 0; k++) {
    const sl = qp.wqSgeLen[base + k] as number
    if (pos >= sl) {
      pos -= sl
      continue
    }
    const addr = qp.wqSgeAddr[base + k] as number
    const mr = qp.device.lookupMr(qp.wqSgeLkey[base + k] as number)
    if (mr === undefined || mr.pdId !== qp.pdId || addr < mr.addr || addr + sl > mr.addr + mr.length) return false
    const take = Math.min(sl - pos, remaining)
    const from = addr - mr.addr + pos
    mr.buffer.copy(dst, at, from, from + take)
    at += take
    remaining -= take
    pos = 0
  }
  return remaining === 0
}

/**
 * Scatters `plen` payload bytes of `msg` to message offset `off` of the `n` SGEs at `base` of one of the QP's SGE
 * rings (a RECV's, or a READ's local buffers); each MR needs LOCAL_WRITE.
 */
export const scatter = (
  qp: SoftQp,
  addrs: Float64Array,
  lens: Uint32Array,
  lkeys: Uint32Array,
  base: number,
  n: number,
  off: number,
  msg: Buffer,
  plen: number
): boolean => {
  let pos = off
  let remaining = plen
  let at = HDR
  for (let k = 0; k < n && remaining > 0; k++) {
    const sl = lens[base + k] as number
    if (pos >= sl) {
      pos -= sl
      continue
    }
    const addr = addrs[base + k] as number
    const mr = qp.device.lookupMr(lkeys[base + k] as number)
    if (
      mr === undefined ||
      mr.pdId !== qp.pdId ||
      (mr.access & AccessFlags.LOCAL_WRITE) === 0 ||
      addr < mr.addr ||
      addr + sl > mr.addr + mr.length
    ) {
      return false
    }
    const take = Math.min(sl - pos, remaining)
    msg.copy(mr.buffer, addr - mr.addr + pos, at, at + take)
    at += take
    remaining -= take
    pos = 0
  }
  return remaining === 0
}
