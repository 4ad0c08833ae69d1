/**
 * What the transfer path shares between `Transfers` (batches, status, failover, hooks) and the transports that carry
 * slices (`rdma/Workers.ts`, `TcpTransport.ts`): the task record, its slice lengths (TENT `submitTransferTasks`), the
 * one place a slice's outcome is counted, and the interface a transport offers for tasks (TENT's
 * `submitTransferTasks` per transport).
 */
import type { BufferDesc, SegmentDesc } from "@tent/rpc"
import { Effect } from "effect"
import type { RdmaTransferFailed, TransferTimeout } from "../Errors.js"
import * as Metrics from "../Metrics.js"
import type { ImmTrack } from "./rdma/Immediates.js"
import type { TcpDataError } from "./TcpTransport.js"

/** One transfer request (TENT `Request`). */
export interface TransferRequest {
  /** `WRITE`: local → remote; `READ`: remote → local. */
  readonly opcode: "WRITE" | "READ"
  /** Local address inside memory registered with `registerSegment`. */
  readonly source: number
  /** The target segment (handle from `openSegment`, or its name). */
  readonly target: number | string
  /** Remote address inside one of the target segment's buffers. */
  readonly targetOffset: number
  readonly length: number
}

/** Why a task failed: a TCP slice's last error, an RDMA slice's timeout, or no RDMA path left. */
export type TaskError = TcpDataError | TransferTimeout | RdmaTransferFailed

/** The transports a request can be carried by (TENT `TransportType` RDMA 1, TCP 7). */
export type TransportKind = "rdma" | "tcp"

/** A request resolved against its target's descriptor: what a (re)submission needs. */
export interface Plan {
  readonly req: TransferRequest
  readonly desc: SegmentDesc
  readonly buf: BufferDesc
  /** The installed transports the target buffer offers, in TENT's order. */
  readonly candidates: ReadonlyArray<TransportKind>
}

/** One request's progress. */
export interface Task {
  readonly plan: Plan
  slices: number
  done: number
  failed: boolean
  bytes: number
  error?: TaskError | undefined
  /** The candidate transport in use (TENT `xport_priority`). */
  priority: number
  /** Resubmissions so far (TENT `failover_count`). */
  failovers: number
  /** Bumped on resubmission: slices of an earlier attempt no longer count. */
  attempt: number
  /** Its hook's notification to its target rides the data QPs (`transfer_bound` immediate): the sender's track. */
  imm?: ImmTrack | undefined
}

/** A transport that carries slices: `submit` splits a task into slices and returns their launch, or why it cannot. */
export interface SliceTransport {
  /** Prepares every slice of `task` (lengths from {@link sliceLengths}); nothing is posted until the launch runs. */
  readonly submit: (task: Task, lengths: ReadonlyArray<number>) => (() => void) | string
}

/** Most slices one request is split into (TENT: 64). */
export const MAX_SLICES_PER_REQUEST = 64

/** Slice lengths of a request of `length` bytes (TENT `submitTransferTasks`). */
export const sliceLengths = (length: number, blockSize: number): Array<number> => {
  if (length <= 0) return []
  const size = Math.max(blockSize, Math.ceil(length / MAX_SLICES_PER_REQUEST))
  const out: Array<number> = []
  for (let off = 0; off < length; off += size) out.push(Math.min(size, length - off))
  if (out.length > 1 && (out[out.length - 1] as number) < size / 4) {
    const tail = out.pop() as number
    out[out.length - 1] = (out[out.length - 1] as number) + tail
  }
  return out
}

/** A version counter whose waiters wake on the next `notify()`. */
export class Waker {
  private version = 0
  private waiters: Array<() => void> = []

  notify(): void {
    this.version++
    if (this.waiters.length === 0) return
    const ws = this.waiters
    this.waiters = []
    for (const w of ws) w()
  }

  get current(): number {
    return this.version
  }

  /** Returns once the version is past `seen`. */
  wait(seen: number): Effect.Effect<void> {
    return Effect.async<void>((resume) => {
      if (this.version !== seen) return resume(Effect.void)
      const w = () => resume(Effect.void)
      this.waiters.push(w)
      return Effect.sync(() => {
        const i = this.waiters.indexOf(w)
        if (i >= 0) this.waiters.splice(i, 1)
      })
    })
  }
}

/** Counts slice outcomes into their tasks and wakes whoever waits for a task to end. */
export class TaskBoard {
  readonly completed = new Waker()

  /** One slice of `task`'s attempt `attempt` ended; an outcome of an abandoned attempt is ignored. */
  finish(task: Task, attempt: number, length: number, ok: boolean, error?: TaskError): void {
    if (attempt !== task.attempt) return
    if (ok) {
      task.done++
      task.bytes += length
      const via = task.plan.candidates[task.priority]
      if (via !== undefined) Metrics.bytes[task.plan.req.opcode === "READ" ? "read" : "write"][via].update(length)
    } else if (!task.failed) {
      task.failed = true
      task.error = error
    }
    if (task.done === task.slices || task.failed) this.completed.notify()
  }
}
