/**
 * `struct ibv_cq` with its completion channel. `pollCq` calls the provider's `ops.poll_cq` into a preallocated
 * `ibv_wc` array and reads each completion's fields at their offsets into the caller's `WorkCompletion` objects. The
 * channel's fd is watched with koffi's libuv poll helper only while someone listens, so an idle CQ holds no handle.
 *
 * @internal
 */
import { Effect } from "effect"
import koffi, { type node } from "koffi"
import type { CompletionQueue, WorkCompletion } from "../Verbs.js"
import { addressOf, readU64, stableBuffer } from "./Codec.js"
import { Off, Size } from "./Layout.js"
import type { Library } from "./Library.js"

/** The decoded `ops` functions a CQ calls. */
export interface CqOps {
  readonly pollCq: (cq: number, n: number, wc: number) => number
  readonly reqNotifyCq: (cq: number, solicitedOnly: number) => number
}

const W = Off.wc

/** Reads one `ibv_wc` at `offset` into `wc`. `imm_data` is big-endian on the wire and in the struct. */
const decodeWc = (view: DataView, offset: number, wc: WorkCompletion): void => {
  wc.wrId = readU64(view, offset + W.wrId)
  wc.status = view.getUint32(offset + W.status, true) as WorkCompletion["status"]
  wc.opcode = view.getUint32(offset + W.opcode, true) as WorkCompletion["opcode"]
  wc.vendorErr = view.getUint32(offset + W.vendorErr, true)
  wc.byteLen = view.getUint32(offset + W.byteLen, true)
  wc.immData = view.getUint32(offset + W.immData, false)
  wc.qpNum = view.getUint32(offset + W.qpNum, true)
  wc.srcQp = view.getUint32(offset + W.srcQp, true)
  wc.wcFlags = view.getUint32(offset + W.wcFlags, true)
  wc.pkeyIndex = view.getUint16(offset + W.pkeyIndex, true)
  wc.slid = view.getUint16(offset + W.slid, true)
  wc.sl = view.getUint8(offset + W.sl)
  wc.dlidPathBits = view.getUint8(offset + W.dlidPathBits)
}

/** At most this many completions are read per `ops.poll_cq` call; a larger `n` is served by the next poll. */
const MAX_BATCH = 256

/** An `ibv_cq` created by {@link IbvDevice.createCq}. */
export class IbvCompletionQueue implements CompletionQueue {
  readonly cqe: number
  /** The `struct ibv_cq *`. */
  readonly address: number
  readonly #lib: Library
  readonly #ops: CqOps
  /** The `struct ibv_comp_channel *`. */
  readonly channel: number
  readonly #fd: number
  readonly #capacity: number
  readonly #wcAddr: number
  readonly #wcView: DataView
  /** One completion taken by `awaitNotify`'s check, handed out by the next `pollCq`. */
  readonly #stashAddr: number
  readonly #stashView: DataView
  #stashed = false
  /** `ibv_get_cq_event`'s two out-pointers. */
  readonly #eventAddr: number
  readonly #eventBuf: Buffer
  readonly #wcBuf: Buffer
  readonly #stashBuf: Buffer
  #listener: (() => void) | null = null
  readonly #waiters = new Set<() => void>()
  #poll: node.PollHandle | undefined
  #polling = false
  #closed = false
  readonly #onReadable = () => this.#drainChannel()

  constructor(lib: Library, ops: CqOps, cq: number, channel: number, fd: number, cqe: number) {
    this.#lib = lib
    this.#ops = ops
    this.address = cq
    this.channel = channel
    this.#fd = fd
    this.cqe = cqe
    this.#capacity = Math.max(1, Math.min(cqe, MAX_BATCH))
    this.#wcBuf = stableBuffer(this.#capacity * Size.wc)
    this.#wcAddr = addressOf(this.#wcBuf)
    this.#wcView = new DataView(this.#wcBuf.buffer)
    this.#stashBuf = stableBuffer(Size.wc)
    this.#stashAddr = addressOf(this.#stashBuf)
    this.#stashView = new DataView(this.#stashBuf.buffer)
    this.#eventBuf = stableBuffer(16)
    this.#eventAddr = addressOf(this.#eventBuf)
  }

  pollCq(n: number, wc: ReadonlyArray<WorkCompletion>): number {
    if (n > wc.length) n = wc.length
    if (n <= 0) return 0
    let k = 0
    if (this.#stashed) {
      decodeWc(this.#stashView, 0, wc[0] as WorkCompletion)
      this.#stashed = false
      k = 1
    }
    const want = Math.min(n - k, this.#capacity)
    if (want === 0) return k
    const got = this.#ops.pollCq(this.address, want, this.#wcAddr)
    if (got < 0) return k > 0 ? k : got
    for (let i = 0; i < got; i++) decodeWc(this.#wcView, i * Size.wc, wc[k + i] as WorkCompletion)
    return k + got
  }

  reqNotifyCq(solicitedOnly?: boolean): number {
    return this.#ops.reqNotifyCq(this.address, solicitedOnly === true ? 1 : 0)
  }

  setNotify(listener: (() => void) | null): void {
    this.#listener = listener
    this.#updatePolling()
  }

  readonly awaitNotify: Effect.Effect<void> = Effect.async<void>((resume) => {
    const wake = () => resume(Effect.void)
    if (this.#closed || this.reqNotifyCq() !== 0 || this.#peek()) {
      wake()
      return
    }
    this.#waiters.add(wake)
    this.#updatePolling()
    return Effect.sync(() => {
      this.#waiters.delete(wake)
      this.#updatePolling()
    })
  })

  /** Stops watching the channel and wakes every waiter; called before the CQ is destroyed. */
  close(): void {
    this.#closed = true
    this.#listener = null
    this.#poll?.close()
    this.#poll = undefined
    this.#polling = false
    for (const wake of this.#waiters) wake()
    this.#waiters.clear()
  }

  /** Whether a completion is queued: polls one into the stash, where the next `pollCq` finds it. */
  #peek(): boolean {
    if (this.#stashed) return true
    this.#stashed = this.#ops.pollCq(this.address, 1, this.#stashAddr) === 1
    return this.#stashed
  }

  #updatePolling(): void {
    const wanted = !this.#closed && (this.#listener !== null || this.#waiters.size > 0)
    if (wanted === this.#polling) return
    this.#polling = wanted
    if (!wanted) {
      this.#poll?.stop()
    } else if (this.#poll === undefined) {
      this.#poll = koffi.node.poll(this.#fd, { readable: true }, this.#onReadable)
    } else {
      this.#poll.start({ readable: true }, this.#onReadable)
    }
  }

  /** Reads and acknowledges every pending channel event; one listener call (and one wake-up) per event. */
  #drainChannel(): void {
    while (!this.#closed && this.#lib.getCqEvent(this.channel, this.#eventAddr, this.#eventAddr + 8) === 0) {
      this.#lib.ackCqEvents(this.address, 1)
      this.#listener?.()
      if (this.#waiters.size > 0) {
        const waiters = [...this.#waiters]
        this.#waiters.clear()
        for (const wake of waiters) wake()
      }
    }
    this.#updatePolling()
  }
}
