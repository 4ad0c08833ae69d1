import { DataTooLarge, SegmentRangeInvalid } from "../Errors.js"
import type { DataStats, SegmentMemory } from "../Server.js"
import { DATA_HEADER, dataHeader, dataSpecByTag, type RpcSpec } from "./codec.js"
import { Kind } from "./frame.js"
import { type FramedSocket, writeFailure } from "./framed.js"

/** The server's side of TENT's data RPCs: plain code run on the connection, answered from the owner's memory. */
export interface DataHandlers {
  /** TENT `onSendData`: the header, then the bytes copied straight from the frame into the registered memory. */
  readonly sendData: (framed: FramedSocket, id: number, buf: Buffer, start: number, end: number) => void
  /** TENT `onRecvData`: the size is checked before anything is allocated; the bytes go out in the reply frame. */
  readonly recvData: (framed: FramedSocket, id: number, buf: Buffer, start: number, end: number) => void
  /**
   * The registered region holding `[addr, addr + length)`, or the typed error to answer with (counted rejected): the
   * same checks for a peer on TENT's wire.
   */
  readonly resolve: (addr: number, length: number) => Region | SegmentRangeInvalid | DataTooLarge
  /** The counters both wires count in. */
  readonly stats: DataStats
}

/** Where a data RPC's bytes are: a registered buffer and the offset of the range in it. */
export type Region = { readonly buffer: Uint8Array; readonly offset: number }

/**
 * `SendData` / `RecvData` against `memory`, at most `maxDataBytes` each, counted in `stats`. A body whose header
 * does not match its length throws (the caller closes that connection with a `ProtocolError`).
 */
export const makeDataHandlers = (
  maxDataBytes: number,
  memory: SegmentMemory | undefined,
  stats: DataStats
): DataHandlers => {
  const refuse = (framed: FramedSocket, id: number, spec: RpcSpec, error: SegmentRangeInvalid | DataTooLarge) => {
    stats.rejected++
    writeFailure(framed, id, spec, error)
  }

  /**
   * The registered region holding `[addr, addr + length)`, checked again here (a lookup that answers a range its
   * buffer does not hold is refused, never written past), or the typed error to reply with.
   */
  const resolveRange = (addr: number, length: number): Region | SegmentRangeInvalid | DataTooLarge => {
    if (addr < 0 || length < 0)
      return new SegmentRangeInvalid({ addr, length, message: "address or length is not a safe u64" })
    if (length > maxDataBytes) return new DataTooLarge({ size: length, max: maxDataBytes })
    if (memory === undefined)
      return new SegmentRangeInvalid({ addr, length, message: "this server has no registered memory" })
    let found: Region | undefined
    try {
      found = memory.lookup(addr, length)
    } catch {
      found = undefined
    }
    if (
      found === undefined ||
      !Number.isSafeInteger(found.offset) ||
      found.offset < 0 ||
      found.offset + length > found.buffer.length
    ) {
      return new SegmentRangeInvalid({
        addr,
        length,
        message: `[${addr}, +${length}) is not inside a registered buffer`
      })
    }
    return found
  }

  return {
    stats,
    resolve: (addr, length) => {
      const found = resolveRange(addr, length)
      if (found instanceof SegmentRangeInvalid || found instanceof DataTooLarge) stats.rejected++
      return found
    },
    sendData: (framed, id, buf, start, end) => {
      const h = dataHeader(buf, start, end)
      if (h === undefined) throw new Error("malformed SendData body")
      if (h.length >= 0 && h.length !== end - start - DATA_HEADER) throw new Error("malformed SendData body")
      const target = resolveRange(h.addr, h.length)
      if (target instanceof SegmentRangeInvalid || target instanceof DataTooLarge) {
        refuse(framed, id, dataSpecByTag.SendData, target)
        return
      }
      buf.copy(target.buffer, target.offset, start + DATA_HEADER, end)
      stats.sent++
      framed.writer.begin(Kind.Success, id)
      framed.writer.end()
      framed.flushSoon()
    },
    recvData: (framed, id, buf, start, end) => {
      const h = dataHeader(buf, start, end)
      if (h === undefined || end - start !== DATA_HEADER) throw new Error("malformed RecvData body")
      const source = resolveRange(h.addr, h.length)
      if (source instanceof SegmentRangeInvalid || source instanceof DataTooLarge) {
        refuse(framed, id, dataSpecByTag.RecvData, source)
        return
      }
      stats.received++
      const w = framed.writer
      w.begin(Kind.Success, id)
      w.bytes(source.buffer.subarray(source.offset, source.offset + h.length))
      w.end()
      framed.flushSoon()
    }
  }
}
