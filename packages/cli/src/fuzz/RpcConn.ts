/**
 * One fuzzing connection to the control-plane port, as plain Node code (an `Effect` per input would cost more than
 * the input). A connection starts with the input that finds it closed: its first bytes choose the wire as the
 * server's sniff does (`Wire.classify`), and the harness reads the replies in that wire. After each input the
 * connection ends on a frame boundary (then a `Probe` with a fresh id follows, and its reply says that the server has
 * read everything before it), mid-frame (then the connection is half-closed: the server reads a truncated frame and
 * closes) or at a refused length or header (then the server closes it). The replies are counted as they come:
 * typed failures, refusals (`ProtocolError`), defects and coro_rpc handler errors.
 */
import * as Net from "node:net"
import type { CoroRpc } from "@tent/rpc"
import type { Range } from "./Regions.js"
import * as Wire from "./Wire.js"

/** What came back over every connection of a target. */
export interface ReplyCounters {
  success: number
  failure: number
  defect: number
  interrupted: number
  protocolError: number
  tentOk: number
  tentRefused: number
  tentHandlerErrors: number
  /** Inputs after which the server closed the connection (refused, malformed, or a truncated frame at its end). */
  closed: number
  /** `SendData` headers a mutation aimed at the canary or the client's region, aimed at the target instead. */
  reaimed: number
  /** Inputs whose sync `Probe` got no reply within the bound while the connection stayed open. */
  stalled: number
  connections: number
}

/** Fresh counters. */
export const replyCounters = (): ReplyCounters => ({
  success: 0,
  failure: 0,
  defect: 0,
  interrupted: 0,
  protocolError: 0,
  tentOk: 0,
  tentRefused: 0,
  tentHandlerErrors: 0,
  closed: 0,
  reaimed: 0,
  stalled: 0,
  connections: 0
})

/** What the connections share: the server, its limits, the counters, where accepted writes may land. */
export interface Shared {
  readonly port: number
  readonly maxFrame: number
  readonly tentLimits: CoroRpc.FrameLimits
  readonly counters: ReplyCounters
  /** The registered regions (a write may land only inside one). */
  readonly registered: ReadonlyArray<Range>
  /** The region the fuzz writes, and those it must not (the canary, the client's). */
  readonly target: Range
  readonly protected: ReadonlyArray<Range>
  /** Ranges the inputs asked `SendData` to write (whether or not the server accepted them). */
  readonly asked: Array<Range>
  /** Texts of defects and handler errors (a few), for the report. */
  readonly samples: Array<string>
  /** How long an input may go without an answer or a close. */
  readonly stallMs: number
}

const SYNC_BASE = 0xa5a50000
const sendDataIndex = Wire.rpcIndex.SendData as number

const safe = (v: bigint): number => (v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : -1)

/**
 * The writes an input asks for: its `SendData` frames (both wires) whose header the server would take — the length
 * that of the data, the whole range inside one registered region — as the server parses them. Anything else the
 * server must refuse, so a byte it changed would be a byte nothing asked for. A write a mutation happened to aim into
 * the canary or the client's region is aimed at the target instead (in the input's bytes, before they are sent): the
 * canary must not change at all, and the client's bytes must be its own.
 */
const screen = (shared: Shared, wire: "lean" | "tent", bytes: Buffer): void => {
  const ask = (addr: number, length: number, reaim: (addr: number) => void): void => {
    if (addr < 0 || length < 0) return
    // only a write a correct server takes (wholly inside the region): one across its edge must be refused, and stays
    if (shared.protected.some((r) => addr >= r.start && addr + length <= r.end)) {
      shared.counters.reaimed++
      reaim(shared.target.start)
      addr = shared.target.start
    }
    if (shared.registered.some((r) => addr >= r.start && addr + length <= r.end))
      shared.asked.push({ start: addr, end: addr + length })
  }
  if (wire === "lean") {
    for (const f of Wire.scanLean(bytes, shared.maxFrame).frames) {
      const body = f.start + 5
      if (f.kind !== Wire.Kind.Request || f.end - body < 17 || bytes[body] !== sendDataIndex) continue
      const length = safe(bytes.readBigUInt64LE(body + 9))
      if (length === f.end - body - 17)
        ask(safe(bytes.readBigUInt64LE(body + 1)), length, (a) => bytes.writeBigUInt64LE(BigInt(a), body + 1))
    }
    return
  }
  for (const f of Wire.scanTent(bytes, shared.tentLimits).frames) {
    if (f.funcId !== 3 || f.attachment.length < 16) continue
    const length = safe(f.attachment.readBigUInt64LE(8))
    if (length <= f.attachment.length - 16)
      ask(safe(f.attachment.readBigUInt64LE(0)), length, (a) => f.attachment.writeBigUInt64LE(BigInt(a), 0))
  }
}

/** A connection; `open` resolves once its preamble was answered (or fails: the caller retries). */
export class RpcConn {
  private socket: Net.Socket | undefined
  private leanReader: Wire.LeanReader
  private tentReader: Wire.TentReader
  private syncId = SYNC_BASE
  private waitingFor = -1
  private settle: ((outcome: "synced" | "closed" | "stalled") => void) | undefined
  private timer: ReturnType<typeof setTimeout> | undefined
  closed = true
  wire: "lean" | "tent" | undefined

  constructor(private readonly shared: Shared) {
    this.leanReader = this.newLeanReader()
    this.tentReader = this.newTentReader()
  }

  private newLeanReader(): Wire.LeanReader {
    const shared = this.shared
    const c = shared.counters
    return new Wire.LeanReader((kind, id, body) => {
      if (kind === Wire.Kind.Success) c.success++
      else if (kind === Wire.Kind.Failure) c.failure++
      else if (kind === Wire.Kind.Interrupted) c.interrupted++
      else if (kind === Wire.Kind.ProtocolError) c.protocolError++
      else if (kind === Wire.Kind.Defect) {
        c.defect++
        if (shared.samples.length < 20) shared.samples.push(`Defect: ${body.toString("utf8", 0, 300)}`)
      }
      if (id === this.waitingFor) this.finish("synced")
    })
  }

  private newTentReader(): Wire.TentReader {
    const shared = this.shared
    const c = shared.counters
    return new Wire.TentReader((seq, errCode, body) => {
      if (errCode === 0) c.tentOk++
      else if (errCode === 10) {
        c.tentHandlerErrors++
        if (shared.samples.length < 20)
          shared.samples.push(`coro_rpc rpc_throw_exception: ${body.toString("latin1", 0, 300)}`)
      } else c.tentRefused++
      if (seq === this.waitingFor) this.finish("synced")
    })
  }

  private finish(outcome: "synced" | "closed" | "stalled"): void {
    this.waitingFor = -1
    clearTimeout(this.timer)
    const settle = this.settle
    this.settle = undefined
    settle?.(outcome)
  }

  private connect(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.leanReader = this.newLeanReader()
      this.tentReader = this.newTentReader()
      const socket = Net.connect({ host: "127.0.0.1", port: this.shared.port })
      socket.setNoDelay(true)
      this.socket = socket
      this.closed = false
      this.shared.counters.connections++
      socket.once("connect", () => resolve())
      socket.on("error", (e) => reject(e))
      socket.on("data", (chunk: Buffer) => {
        if (this.socket !== socket) return
        const ok = this.wire === "tent" ? this.tentReader.push(chunk) : this.leanReader.push(chunk)
        if (!ok) socket.destroy()
      })
      socket.on("close", () => {
        if (this.socket !== socket) return
        this.closed = true
        this.finish("closed")
      })
    })
  }

  /** Waits for the sync reply, the close, or the stall bound. */
  private await(): Promise<"synced" | "closed" | "stalled"> {
    return new Promise((resolve) => {
      if (this.closed) {
        resolve("closed")
        return
      }
      this.settle = resolve
      this.timer = setTimeout(() => this.finish("stalled"), this.shared.stallMs)
    })
  }

  private syncFrame(): Buffer {
    this.syncId = this.syncId + 1 >= 0xffffffff ? SYNC_BASE : this.syncId + 1
    this.waitingFor = this.syncId
    return this.wire === "tent" ? Wire.tentRequest(this.syncId, 6) : Wire.request("Probe", this.syncId)
  }

  /** Opens a connection whose first bytes are `bytes` (the sniff decides its wire) and plays the input. */
  async fresh(bytes: Buffer): Promise<"synced" | "closed" | "stalled"> {
    this.close()
    const head = Wire.classify(bytes.subarray(0, 12))
    this.wire = head ?? "lean"
    await this.connect()
    if (head === undefined) {
      // too few bytes to choose a wire: the server waits for more; the half-close ends it
      screen(this.shared, "lean", bytes)
      return this.play(bytes, "partial")
    }
    return this.input(bytes)
  }

  /** Sends one input on the open connection and waits until the server has read it (or closed). */
  input(bytes: Buffer): Promise<"synced" | "closed" | "stalled"> {
    const wire = this.wire ?? "lean"
    screen(this.shared, wire, bytes)
    const ending =
      wire === "lean"
        ? Wire.scanLean(bytes, this.shared.maxFrame).ending
        : Wire.scanTent(bytes, this.shared.tentLimits).ending
    return this.play(bytes, ending)
  }

  private async play(bytes: Buffer, ending: Wire.Ending): Promise<"synced" | "closed" | "stalled"> {
    const socket = this.socket
    if (socket === undefined || this.closed) return "closed"
    const outcome = this.await()
    if (ending === "boundary") socket.write(Buffer.concat([bytes, this.syncFrame()]))
    else if (ending === "partial") socket.end(bytes)
    else socket.write(bytes)
    const result = await outcome
    if (result === "closed") this.shared.counters.closed++
    if (result === "stalled") {
      this.shared.counters.stalled++
      this.close()
    }
    return result
  }

  /** Closes the connection (the next input opens another). */
  close(): void {
    this.finish("closed")
    this.socket?.destroy()
    this.socket = undefined
    this.closed = true
  }
}
