/**
 * Transfers as TENT `main` runs them (`transfer_engine_impl.cpp`): batches of tasks, one task per request, split into
 * slices (`block_size`, at most 64 per request, a tail under 25 % of a slice merged into the one before) and carried
 * by the transport TENT's rule picks for the target buffer, through that transport's `submit` (`rdma/Workers.ts`,
 * `TcpTransport.ts`).
 *
 * Transport per request, TENT's `resolveTransport`: the candidates are the target buffer's `transports` list (its
 * registration order, RDMA before TCP; a descriptor without the list offers both) filtered to those this engine has
 * installed, and a task uses candidate number `priority` (0 at submit). Cross-transport failover, TENT's
 * `resubmitTransferTask`: when `getTransferStatus` sees a FAILED task and `enable_auto_failover_on_poll` is on, the
 * task is resubmitted whole on the next candidate (e.g. RDMA → TCP), at most `max_failover_attempts` times, and is
 * PENDING again; slices of the attempt it abandoned no longer count. Without a next candidate it stays FAILED.
 *
 * Transfer-bound notifications are TENT's submit hooks: recorded with the batch, fired once every task of the batch
 * completed, to each distinct target, under the engine-wide progress lock (TENT `progress_mutex_`), from
 * `getTransferStatus` or the progress fiber; a failed hook is retried on the next poll. What a retry re-sends, and
 * whether a batch that ends FAILED notifies, is the `SubmitHooks` seam's: TENT's (legacy) re-sends the whole hook and
 * sends nothing for a FAILED batch; `Series.SubmitHooks` remembers the targets served and sends failure notices.
 */

import type { RailHealth } from "@tent/health"
import type { BufferDesc, InvalidEntry, Notification, SegmentDesc, TransportFailure } from "@tent/rpc"
import { DescriptorCache } from "@tent/rpc"
import { Effect, type Scope } from "effect"
import { EngineConfig } from "../EngineConfig.js"
import { BatchNotFound, InvalidRequest, type SegmentNotFound } from "../Errors.js"
import type { PeerHealthPolicy } from "../PeerHealth.js"
import { reasonOf, SubmitHooks } from "../SubmitHooks.js"
import * as Hooks from "./Hooks.js"
import { EngineReceipts } from "./Ledger.js"
import type { LocalSegment } from "./LocalSegment.js"
import { ImmTrack, makeDue, swapEntry } from "./rdma/Immediates.js"
import { RdmaTransport } from "./rdma/RdmaTransport.js"
import * as Workers from "./rdma/Workers.js"
import {
  type SliceTransport,
  sliceLengths,
  type Task,
  TaskBoard,
  type TaskError,
  type TransferRequest,
  type TransportKind,
  Waker
} from "./Tasks.js"
import { TcpTransport } from "./TcpTransport.js"

export type { TaskError, TransferRequest, TransportKind } from "./Tasks.js"

/** A batch's state (TENT `TransferStatusEnum`, the subset the engine reports). */
export interface BatchStatus {
  readonly status: "PENDING" | "COMPLETED" | "FAILED"
  readonly tasks: number
  readonly completedTasks: number
  readonly failedTasks: number
  readonly transferredBytes: number
  /** Why the batch FAILED (the first failed task's error); absent otherwise. */
  readonly error?: TaskError | undefined
}

/** Errors of `submitTransfer`. */
export type SubmitError = BatchNotFound | InvalidRequest | SegmentNotFound | InvalidEntry | TransportFailure
/** Errors of `getTransferStatus`. */
export type StatusError = BatchNotFound

interface Batch {
  readonly tasks: Array<Task>
  readonly hooks: Array<Hooks.Hook>
  /** The `waitTransfer`s parked on this batch, woken once the batch has settled or one of its tasks failed. */
  waiters: Array<() => void>
  /** Freed with hooks unfired (`SubmitHooks`): no poll fails it over any more; its hooks fire once it has ended. */
  freed: boolean
}

/** A task and the batch it belongs to (so that the end of a task can wake whoever waits for that batch). */
interface BatchTask extends Task {
  readonly batch: Batch
}

/** Every task of the batch has ended (its slices done, or failed). */
const settled = (batch: Batch): boolean => {
  for (const t of batch.tasks) if (!t.failed && t.done !== t.slices) return false
  return true
}

/**
 * The engine's task board: as {@link TaskBoard}, and the end of a task wakes its batch's waiter only when the batch
 * has settled or the task failed (a failed task may be failed over on the next poll), and the progress fiber only
 * when a batch with unfired hooks settled: one wake-up per batch, not one per task.
 */
class BatchBoard extends TaskBoard {
  readonly hooksDue = new Waker()

  override finish(task: Task, attempt: number, length: number, ok: boolean, error?: TaskError): void {
    super.finish(task, attempt, length, ok, error)
    if (attempt !== task.attempt || (!task.failed && task.done !== task.slices)) return
    const batch = (task as BatchTask).batch
    const ended = settled(batch)
    if (batch.waiters.length > 0 && (ended || task.failed)) {
      const waiters = batch.waiters
      batch.waiters = []
      for (const w of waiters) w()
    }
    if (ended && batch.hooks.length > 0) this.hooksDue.notify()
  }
}

/** What the transfer path needs from the engine facade. */
export interface TransfersDeps {
  readonly segmentOf: (segment: number | string) => Effect.Effect<string, SegmentNotFound>
  readonly sendNotification: (segment: string, n: Notification) => Effect.Effect<void, unknown>
}

/** The transports a target buffer offers, in TENT's order; a descriptor without the list offers both. */
export const bufferTransports = (b: BufferDesc): ReadonlyArray<TransportKind> =>
  (b.transports ?? ["rdma", "tcp"]).filter((t): t is TransportKind => t === "rdma" || t === "tcp")

/** The buffer of `desc` that holds the request's target range, if any. */
const bufferHolding = (desc: SegmentDesc, req: TransferRequest): BufferDesc | undefined => {
  for (const b of desc.buffers)
    if (req.targetOffset >= b.addr && req.targetOffset + req.length <= b.addr + b.length) return b
  return undefined
}

/** The transfer operations of the engine facade. */
export interface TransfersShape {
  readonly allocateBatch: Effect.Effect<number>
  readonly submitTransfer: (
    batchId: number,
    requests: ReadonlyArray<TransferRequest>,
    notification?: Notification
  ) => Effect.Effect<void, SubmitError>
  readonly getTransferStatus: (batchId: number) => Effect.Effect<BatchStatus, StatusError>
  readonly waitTransfer: (batchId: number, timeoutMs?: number) => Effect.Effect<BatchStatus, StatusError>
  readonly freeBatch: (batchId: number) => Effect.Effect<void>
  /**
   * Whether `segment` is sent failure notices: this engine offers them and the peer advertised `notify_proto` 3 (in
   * a bootstrap with one of its NICs, or in the descriptor the last transfer to it used).
   */
  readonly failureCapable: (segment: string) => boolean
}

/** The transfer path: batches, submission, status, failover on poll, submit hooks. */
export const make = (
  deps: TransfersDeps
): Effect.Effect<
  TransfersShape,
  never,
  | Scope.Scope
  | EngineConfig
  | DescriptorCache.DescriptorCache
  | RdmaTransport
  | TcpTransport
  | RailHealth.RailHealth
  | LocalSegment
  | PeerHealthPolicy
  | EngineReceipts
  | SubmitHooks
> =>
  Effect.gen(function* () {
    const settings = yield* EngineConfig
    const cache = yield* DescriptorCache.DescriptorCache
    const rdma = yield* RdmaTransport
    const tcp = yield* TcpTransport
    const receipts = yield* EngineReceipts
    const policy = yield* SubmitHooks
    const board = new BatchBoard()
    const carriers: Record<TransportKind, SliceTransport | undefined> = {
      rdma: rdma === undefined || rdma.devices.length === 0 ? undefined : yield* Workers.make(rdma, board),
      tcp: tcp === undefined ? undefined : yield* tcp.slices(board)
    }
    const batches = new Map<number, Batch>()
    /** Batches freed with hooks unfired (`SubmitHooks`), until those fire. */
    const draining = new Set<Batch>()
    let nextBatch = 1
    const progressLock = yield* Effect.makeSemaphore(1)

    /**
     * The `notify_proto` each target's descriptor advertised when a transfer to it was last submitted (a peer that
     * takes failure notices writes it there); with what its bootstrap said, it decides whether it is sent one.
     */
    const levels = new Map<string, number>()
    const failureCapable = (segment: string): boolean =>
      Hooks.failureCapable(receipts.failureNotices, Math.max(levels.get(segment) ?? 0, rdma?.peerProto(segment) ?? 0))

    /**
     * `transports/rdma/notify/transfer_bound` immediate: hooks' notifications ride the data QPs where they can; only
     * with hooks that remember the targets served (TENT's whole-hook firing would send a served one again).
     */
    const immediates = settings.notify.transferBound === "immediate" && receipts.enabled && policy.rememberTargets
    /** A spoiled track's record goes again unheld, with its stamp, now: the receipts' worker sends it. */
    const resendUnheld = (segment: string, record: Notification): void => {
      const d = receipts.destinations.get(segment)
      if (d !== undefined && makeDue(d, record)) receipts.kick(d)
    }
    const spoil = (t: ImmTrack | undefined): void => {
      if (t !== undefined) rdma?.markers.spoil(t)
    }
    /** A held record's ledger entry becomes `by` (a failure notice), if the peer takes one and it is not receipted. */
    const swapRecord = (target: string, record: Notification, by: Notification): boolean => {
      const d = receipts.destinations.get(target)
      return d !== undefined && failureCapable(target) && swapEntry(d, record, by)
    }

    /**
     * TENT `resolveTransport`'s candidates: the buffer's transports that this engine can use towards `desc`. Worked
     * out once per buffer of a descriptor (a new descriptor brings new buffer objects), not per request.
     */
    const candidates = new WeakMap<BufferDesc, ReadonlyArray<TransportKind>>()
    const candidatesOf = (desc: SegmentDesc, buf: BufferDesc): ReadonlyArray<TransportKind> => {
      let c = candidates.get(buf)
      if (c === undefined) {
        c = bufferTransports(buf).filter((t) =>
          t === "rdma"
            ? carriers.rdma !== undefined && desc.devices.length > 0
            : carriers.tcp !== undefined && desc.rpc_server_addr !== ""
        )
        candidates.set(buf, c)
      }
      return c
    }

    /** The task's slices on its current transport (TENT `submitTransferTasks`), or why it cannot be carried by it. */
    const slicesOf = (task: Task): (() => void) | string => {
      const lengths = sliceLengths(task.plan.req.length, settings.workers.blockSize)
      task.slices = lengths.length
      const via = task.plan.candidates[task.priority]
      const transport = via === undefined ? undefined : carriers[via]
      if (transport === undefined) return "All available transports are failed"
      return transport.submit(task, lengths)
    }

    /** TENT `resubmitTransferTask`: the next candidate transport for a FAILED task; false if there is none. */
    const failover = (task: Task): boolean => {
      if (task.failovers >= settings.maxFailoverAttempts) return false
      if (task.priority + 1 >= task.plan.candidates.length) return false
      // Its slices leave the data QPs the markers follow: the hook's notification takes the ordinary path.
      spoil(task.imm)
      task.imm = undefined
      task.failovers++
      task.priority++
      task.attempt++
      task.done = 0
      task.bytes = 0
      task.failed = false
      const previous = task.error
      task.error = undefined
      const s = slicesOf(task)
      if (typeof s === "string") {
        task.failed = true
        task.error = previous
        return false
      }
      s()
      return true
    }

    const submitTransfer = (
      batchId: number,
      requests: ReadonlyArray<TransferRequest>,
      notification?: Notification
    ): Effect.Effect<void, SubmitError> =>
      Effect.gen(function* () {
        const batch = batches.get(batchId)
        if (batch === undefined) return yield* new BatchNotFound({ batchId })
        if (carriers.rdma === undefined && carriers.tcp === undefined) {
          return yield* new InvalidRequest({ message: "no RDMA transport installed for transfers" })
        }
        const start = batch.tasks.length
        const targets = new Set<string>()
        // Transfer-bound notifications on the data QPs: a track per target whose every task goes over RDMA to a peer
        // that takes immediates (learned at its bootstrap; the first transfer to a new peer takes the notify QP).
        const imm =
          notification !== undefined && immediates && rdma !== undefined ? new Map<string, ImmTrack>() : undefined
        const off = new Set<string>()
        const tasks: Array<Task> = []
        const work: Array<() => void> = []
        // The target and its descriptor as the previous request of this call resolved them: a batch to one segment
        // looks its descriptor up once.
        let lastTarget: number | string | undefined
        let name = ""
        let desc: SegmentDesc | undefined
        for (const req of requests) {
          if (desc === undefined || req.target !== lastTarget) {
            name = yield* deps.segmentOf(req.target)
            desc = yield* cache.get(name)
            lastTarget = req.target
          }
          let buf = bufferHolding(desc, req)
          if (buf === undefined) {
            desc = yield* Effect.zipRight(cache.invalidate(name), cache.get(name))
            buf = bufferHolding(desc, req)
          }
          if (!targets.has(name)) {
            targets.add(name)
            if (receipts.failureNotices) levels.set(name, desc.notify_proto ?? 0)
          }
          if (!Number.isInteger(req.length) || req.length <= 0) {
            return yield* new InvalidRequest({ message: `length must be a positive integer, got ${req.length}` })
          }
          if (buf === undefined) {
            return yield* new InvalidRequest({
              message: `target [${req.targetOffset}, +${req.length}) is not in a buffer of segment ${name}`
            })
          }
          const candidates = candidatesOf(desc, buf)
          if (candidates.length === 0) {
            return yield* new InvalidRequest({
              message: `no installed transport reaches [${req.targetOffset}, +${req.length}) of segment ${name}`
            })
          }
          const task: BatchTask = {
            batch,
            plan: { req, desc, buf, candidates },
            slices: 0,
            done: 0,
            failed: false,
            bytes: 0,
            priority: 0,
            failovers: 0,
            attempt: 0
          }
          if (imm !== undefined && !off.has(name)) {
            let t = imm.get(name)
            // WRITEs only: a marker behind a READ may reach the target before the READ's responses left it.
            const ride = candidates[0] === "rdma" && req.opcode === "WRITE"
            if (!ride || (t === undefined && (rdma?.peerImm(name) ?? 0) === 0)) {
              off.add(name)
              spoil(t)
            } else {
              if (t === undefined) {
                t = new ImmTrack(name, notification as Notification, resendUnheld)
                imm.set(name, t)
              }
              task.imm = t
            }
          }
          const s = slicesOf(task)
          if (typeof s === "string") return yield* new InvalidRequest({ message: s })
          tasks.push(task)
          work.push(s)
        }
        for (const t of tasks) batch.tasks.push(t)
        for (const w of work) w()
        if (notification !== undefined) {
          batch.hooks.push(Hooks.make(start, batch.tasks.length, notification, Array.from(targets), imm))
          // Its tasks may have ended already (a slice that failed as it was posted): the progress fiber looks.
          if (settled(batch)) board.hooksDue.notify()
        }
      })

    // -----------------------------------------------------------------------------------------------------------------
    // Status, failover on poll, submit hooks
    // -----------------------------------------------------------------------------------------------------------------

    const statusOf = (batch: Batch): BatchStatus => {
      let completedTasks = 0
      let failedTasks = 0
      let bytes = 0
      let error: TaskError | undefined
      for (const t of batch.tasks) {
        if (t.failed && error === undefined) error = t.error
        if (t.failed) failedTasks++
        else if (t.done === t.slices) completedTasks++
        bytes += t.bytes
      }
      const status =
        failedTasks > 0
          ? "FAILED"
          : completedTasks === batch.tasks.length && batch.tasks.length > 0
            ? "COMPLETED"
            : "PENDING"
      const s: BatchStatus = { status, tasks: batch.tasks.length, completedTasks, failedTasks, transferredBytes: bytes }
      return error === undefined ? s : { ...s, error }
    }

    /** A failed task of `batch` that a poll would still resubmit on its next transport (TENT's failover on poll). */
    const failoverLeft = (batch: Batch): boolean => {
      if (batch.freed || !settings.autoFailoverOnPoll) return false
      for (const t of batch.tasks) {
        if (t.failed && t.failovers < settings.maxFailoverAttempts && t.priority + 1 < t.plan.candidates.length) {
          return true
        }
      }
      return false
    }

    /**
     * Whether `batch` (status `s`) has ended FAILED for good and its hooks owe failure notices: every task ended, one
     * failed with no failover left.
     */
    const endedFailed = (batch: Batch, s: BatchStatus): boolean =>
      policy.failureNotices && s.status === "FAILED" && settled(batch) && !failoverLeft(batch)

    /** Whether `batch`'s unfired hooks are due: it COMPLETED, or ended FAILED (failure notices). */
    const hooksDue = (batch: Batch, s: BatchStatus): boolean =>
      Hooks.pending(batch.hooks) && (s.status === "COMPLETED" || endedFailed(batch, s))

    const progress = (batch: Batch, allowFailover: boolean): Effect.Effect<BatchStatus> =>
      progressLock.withPermits(1)(
        Effect.suspend(() => {
          if (allowFailover && !batch.freed) for (const t of batch.tasks) if (t.failed) failover(t)
          const s = statusOf(batch)
          if (!hooksDue(batch, s)) return Effect.succeed(s)
          const reason = s.status === "COMPLETED" ? undefined : reasonOf(s.error)
          Hooks.settleImmediates(batch.hooks, reason, swapRecord)
          return Effect.as(Hooks.fire(batch.hooks, reason, policy, deps.sendNotification, failureCapable), s)
        })
      )

    const getTransferStatus = (batchId: number): Effect.Effect<BatchStatus, StatusError> =>
      Effect.suspend(() => {
        const batch = batches.get(batchId)
        return batch === undefined
          ? Effect.fail(new BatchNotFound({ batchId }))
          : progress(batch, settings.autoFailoverOnPoll)
      })

    // The progress fiber (TENT's optional ProgressWorker): fires hooks of batches that completed (or, with failure
    // notices, ended FAILED). It wakes when a batch with hooks settles; a hook that failed to fire is tried again then,
    // or by the next poll of its batch. A freed batch's hooks get one firing once it has ended; what fails then is
    // dropped with the batch.
    const wake = board.hooksDue
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.gen(function* () {
          const seen = wake.current
          for (const batch of batches.values()) {
            if (hooksDue(batch, statusOf(batch))) yield* progress(batch, false)
          }
          for (const batch of draining) {
            const s = statusOf(batch)
            if (hooksDue(batch, s)) yield* progress(batch, false)
            if (!Hooks.pending(batch.hooks) || settled(batch)) draining.delete(batch)
          }
          yield* wake.wait(seen)
        })
      )
    )

    // TENT `waitTransferCompletion`: the status once every task of the batch has ended, or after a task failed (the
    // poll may fail it over), until the batch ends; at the deadline, the status as it is then. The wait parks on the
    // batch (`Batch.waiters`) with one timer for what is left of the deadline (wall-clock time): no fiber is forked,
    // and a task that merely completes does not wake it (before, each wait raced two forked fibers, one sleeping
    // on the Effect clock, and woke on the end of every task of the engine).
    const waitTransfer = (batchId: number, timeoutMs = 60_000): Effect.Effect<BatchStatus, StatusError> =>
      Effect.suspend(() => {
        const batch = batches.get(batchId)
        if (batch === undefined) return Effect.fail(new BatchNotFound({ batchId }))
        const deadline = performance.now() + timeoutMs
        const park = Effect.async<void>((resume) => {
          if (settled(batch)) return resume(Effect.void)
          // Woken by the batch (which drops its waiters as it wakes them) or by the deadline; an interrupted wait
          // leaves neither behind.
          const unpark = () => {
            clearTimeout(timer)
            const i = batch.waiters.indexOf(wake)
            if (i >= 0) batch.waiters.splice(i, 1)
          }
          const wake = () => {
            unpark()
            resume(Effect.void)
          }
          const timer = setTimeout(wake, Math.max(0, deadline - performance.now()))
          batch.waiters.push(wake)
          return Effect.sync(unpark)
        })
        // A batch freed while waited for is not found, as `getTransferStatus` would say.
        const poll: Effect.Effect<BatchStatus, StatusError> = Effect.suspend(() =>
          batches.get(batchId) !== batch
            ? Effect.fail(new BatchNotFound({ batchId }))
            : Effect.flatMap(progress(batch, settings.autoFailoverOnPoll), (s) =>
                s.status !== "PENDING" || performance.now() >= deadline
                  ? Effect.succeed(s)
                  : Effect.zipRight(park, poll)
              )
        )
        return poll
      })

    // TENT frees a batch at once. With `SubmitHooks`, a batch freed before its hooks fired (a FAILED batch whose
    // other tasks are still in flight, say) is kept for the progress fiber until they have.
    const freeBatch = (batchId: number): Effect.Effect<void> =>
      Effect.sync(() => {
        const batch = batches.get(batchId)
        batches.delete(batchId)
        if (batch === undefined || !(policy.rememberTargets || policy.failureNotices)) return
        if (!Hooks.pending(batch.hooks)) return
        batch.freed = true
        draining.add(batch)
        wake.notify()
      })

    return {
      allocateBatch: Effect.sync(() => {
        const id = nextBatch++
        batches.set(id, { tasks: [], hooks: [], waiters: [], freed: false })
        return id
      }),
      submitTransfer,
      getTransferStatus,
      waitTransfer,
      freeBatch,
      failureCapable
    }
  })
