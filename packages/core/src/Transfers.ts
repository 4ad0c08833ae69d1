/**
 * Transfers over RDMA as TENT `main` runs them: requests split into slices (`block_size`, at most 64 per request, a
 * tail under 25 % of a slice merged into the one before), spread round-robin over the local devices and the direct
 * rail to the peer's device of the same index, posted by worker fibers on the endpoints' data QPs (`max_qp_wr` per
 * QP), and tracked to completion by the data CQ pollers.
 *
 * A failed completion (flushes included) is TENT's `disableEndpoint`: `RailHealth.recordError(local, remote)`, the
 * endpoint retired from the completion fiber, and the slice retried up to `workers/max_retry_count` on the optimal
 * pair if it is available, else on the next available pair after the last one tried (`selectFallbackDevice`),
 * which is how a paused rail's slices are rerouted. A success is `recordSuccess`.
 *
 * Transfer-bound notifications are TENT's submit hooks: recorded with the batch, fired once every task of the batch
 * completed, to each distinct target, under the engine-wide progress lock (TENT `progress_mutex_`), from
 * `getTransferStatus` or the progress fiber; a failed batch never notifies; a failed hook is retried on the next
 * poll.
 *
 * Transport per request, TENT's `getTransportType`: the first transport in the target buffer's `transports` list
 * (its registration order, RDMA before TCP; a descriptor without the list offers both) that this engine has
 * installed. So TCP carries a request when this engine has no RDMA (`transports/rdma/enable: false`, or no device)
 * or the target buffer was not registered with RDMA. Over TCP a request is split into the same slices; each is one
 * `SendData` (WRITE) or `RecvData` (READ) call, run by `transports/tcp/max_concurrent_tasks` worker fibers, retried
 * after a `TransportFailure` up to `transports/tcp/max_retry_count` attempts with a doubling delay from
 * `retry_base_delay_ms` capped at `retry_max_delay_ms` (TENT `doTransferWithRetry`); a typed refusal of the peer
 * fails the slice at once. A failed slice fails its task and the batch (`BatchStatus.error` says why); the submit
 * hooks work the same for both transports.
 *
 * @since 0.1.0
 */
import type { RailHealth } from "@tent/health"
import type { BufferDesc, InvalidEntry, Notification, SegmentDesc, TransportFailure } from "@tent/rpc"
import { type MemoryRegion, SendFlags, type SendWr, WcStatus, type WorkCompletion, WrOpcode } from "@tent/verbs"
import { Effect, Queue, type Scope } from "effect"
import type { EngineSettings } from "./EngineConfig.js"
import { BatchNotFound, InvalidRequest, type SegmentNotFound } from "./Errors.js"
import { Signal } from "./internal/Inbox.js"
import type { RdmaEndpoint } from "./RdmaEndpoint.js"
import type { RdmaDevice, RdmaTransport } from "./RdmaTransport.js"
import type { TcpDataError, TcpTransport } from "./TcpTransport.js"

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

/** A batch's state (TENT `TransferStatusEnum`, the subset the engine reports). */
export interface BatchStatus {
  readonly status: "PENDING" | "COMPLETED" | "FAILED"
  readonly tasks: number
  readonly completedTasks: number
  readonly failedTasks: number
  readonly transferredBytes: number
  /** Why the batch FAILED, when a transport said so (a TCP slice's last error); absent otherwise. */
  readonly error?: TcpDataError | undefined
}

/** The transports a request can be carried by (TENT `TransportType` RDMA 1, TCP 7). */
export type TransportKind = "rdma" | "tcp"

/** Errors of `submitTransfer`. */
export type SubmitError = BatchNotFound | InvalidRequest | SegmentNotFound | InvalidEntry | TransportFailure
/** Errors of `getTransferStatus`. */
export type StatusError = BatchNotFound

interface Task {
  slices: number
  done: number
  failed: boolean
  bytes: number
  error?: TcpDataError | undefined
}

/** One slice of a request carried by TCP. */
interface TcpSlice {
  readonly task: Task
  readonly write: boolean
  /** The local bytes: written from (WRITE) or read into (READ). */
  readonly local: Buffer
  readonly localOffset: number
  readonly remoteAddr: number
  readonly length: number
  readonly address: string
}

interface Hook {
  readonly start: number
  readonly end: number
  readonly notification: Notification
  readonly targets: ReadonlyArray<string>
  fired: boolean
}

interface Batch {
  readonly tasks: Array<Task>
  readonly hooks: Array<Hook>
}

interface Slice {
  readonly id: number
  readonly task: Task
  readonly opcode: number
  readonly localAddr: number
  readonly remoteAddr: number
  readonly length: number
  /** lkey per local device, rkey per remote device. */
  readonly lkeys: ReadonlyArray<number>
  readonly rkeys: ReadonlyArray<number>
  readonly server: string
  readonly address: string
  readonly remoteNics: ReadonlyArray<string>
  readonly optimal: readonly [number, number]
  retries: number
  lastFallback: number
  ep: RdmaEndpoint | undefined
  lane: number
  local: number
  remote: number
}

/** What the transfer path needs from the engine. */
export interface TransfersDeps {
  readonly settings: EngineSettings
  readonly rdma: RdmaTransport | undefined
  readonly rails: RailHealth.RailHealthShape
  readonly segmentOf: (segment: number | string) => Effect.Effect<string, SegmentNotFound>
  readonly resolve: (name: string) => Effect.Effect<SegmentDesc, InvalidEntry | TransportFailure>
  /** Drops the cached descriptor and fetches it again (TENT: `NeedsRefreshCache` when a buffer is not found). */
  readonly refresh: (name: string) => Effect.Effect<SegmentDesc, InvalidEntry | TransportFailure>
  readonly localRegions: () => ReadonlyArray<{
    readonly buffer: Buffer
    readonly mrs: ReadonlyArray<MemoryRegion>
    /** The region's address (its first MR's, or the engine's own when no device registered it). */
    readonly addr?: number | undefined
  }>
  /** The TCP transport, if installed: requests TENT's rule routes to it move with `SendData` / `RecvData`. */
  readonly tcp?: TcpTransport | undefined
  readonly sendNotification: (segment: string, n: Notification) => Effect.Effect<void, unknown>
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

/** The transports a target buffer offers, in TENT's order; a descriptor without the list offers both. */
export const bufferTransports = (b: BufferDesc): ReadonlyArray<TransportKind> =>
  (b.transports ?? ["rdma", "tcp"]).filter((t): t is TransportKind => t === "rdma" || t === "tcp")

/** TCP retry delay before attempt `attempt` (1-based retries): base doubling, capped (TENT `doTransferWithRetry`). */
export const tcpRetryDelay = (attempt: number, baseMs: number, maxMs: number): number =>
  Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1))

/** The transfer path: batches, workers, completion handling, submit hooks. */
export const make = (deps: TransfersDeps) =>
  Effect.gen(function* () {
    const { settings, rdma, rails } = deps
    const batches = new Map<number, Batch>()
    let nextBatch = 1
    let nextSlice = 1
    let rr = 0
    const inflight = new Map<number, Slice>()
    const progressLock = yield* Effect.makeSemaphore(1)
    const laneFree = new Signal()
    const completed = new Signal()
    const workers = yield* Effect.forEach(Array.from({ length: settings.workers.numWorkers }), () =>
      Queue.unbounded<Slice>()
    )
    const events = yield* Queue.unbounded<{ readonly ok: boolean; readonly slice: Slice; readonly ep: RdmaEndpoint }>()
    const devices: ReadonlyArray<RdmaDevice> = rdma?.devices ?? []
    const railKey = (s: Slice, r: number) => `${s.server}/${s.remoteNics[r]}`

    const finishTask = (task: Task, length: number, ok: boolean): void => {
      if (ok) {
        task.done++
        task.bytes += length
      } else {
        task.failed = true
      }
      if (task.done === task.slices || task.failed) completed.notify()
    }
    const finishSlice = (slice: Slice, ok: boolean): void => finishTask(slice.task, slice.length, ok)

    // TCP: slices as SendData / RecvData calls, `max_concurrent_tasks` worker fibers, retries with backoff.
    const tcp = deps.tcp
    const tcpQueue = yield* Queue.unbounded<TcpSlice>()
    const runTcpSlice = (s: TcpSlice): Effect.Effect<void> =>
      Effect.gen(function* () {
        const t = tcp as TcpTransport
        let last: TcpDataError | undefined
        for (let attempt = 0; attempt < settings.tcp.maxRetryCount; attempt++) {
          if (s.task.failed) return // another slice of the task failed already
          if (attempt > 0)
            yield* Effect.sleep(tcpRetryDelay(attempt, settings.tcp.retryBaseDelayMs, settings.tcp.retryMaxDelayMs))
          const r = s.write
            ? yield* Effect.either(
                t.writeData(s.address, s.remoteAddr, s.local.subarray(s.localOffset, s.localOffset + s.length))
              )
            : yield* Effect.either(
                Effect.map(t.readData(s.address, s.remoteAddr, s.length), (bytes) => {
                  if (bytes.length !== s.length) return false
                  s.local.set(bytes, s.localOffset)
                  return true
                })
              )
          if (r._tag === "Right") {
            if (r.right === false) {
              last = undefined
              break
            }
            finishTask(s.task, s.length, true)
            return
          }
          last = r.left
          if (last._tag !== "TransportFailure") break // the peer refused: retrying cannot help
        }
        if (s.task.error === undefined) s.task.error = last
        finishTask(s.task, s.length, false)
      })
    if (tcp !== undefined) {
      for (let i = 0; i < settings.tcp.maxConcurrentTasks; i++)
        yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(tcpQueue), runTcpSlice)))
    }

    // Hot path: a data completion (plain code; the rail bookkeeping goes to the completion fiber).
    const sge = { addr: 0, length: 0, lkey: 0 }
    const wr: SendWr = { wrId: 0, opcode: WrOpcode.RDMA_WRITE, sendFlags: SendFlags.SIGNALED, sgList: [sge] }
    const onCompletion = (ep: RdmaEndpoint, lane: number, wc: WorkCompletion): void => {
      const slice = inflight.get(wc.wrId)
      if (slice === undefined) return
      inflight.delete(wc.wrId)
      if ((ep.wrDepth[lane] as number) > 0) ep.wrDepth[lane] = (ep.wrDepth[lane] as number) - 1
      laneFree.notify()
      const ok = wc.status === WcStatus.SUCCESS
      if (ok) finishSlice(slice, true)
      Queue.unsafeOffer(events, { ok, slice, ep })
    }
    const cancel = (ep: RdmaEndpoint): void => {
      for (const slice of Array.from(inflight.values())) {
        if (slice.ep !== ep) continue
        inflight.delete(slice.id)
        Queue.unsafeOffer(events, { ok: false, slice, ep })
      }
    }
    rdma?.setDataPath(onCompletion, cancel)

    const enqueue = (slice: Slice) => {
      const q = workers[rr++ % workers.length]
      if (q !== undefined) Queue.unsafeOffer(q, slice)
    }

    const retryOrFail = (slice: Slice): Effect.Effect<void> =>
      Effect.sync(() => {
        slice.retries++
        if (slice.retries >= settings.workers.maxRetryCount) finishSlice(slice, false)
        else enqueue(slice)
      })

    // The completion fiber: rail bookkeeping and TENT's disableEndpoint on failures.
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.flatMap(Queue.take(events), ({ ep, ok, slice }) => {
          const local = ep.device.name
          const remote = railKey(slice, slice.remote)
          if (ok) return rails.recordSuccess(local, remote)
          return Effect.all([
            rails.recordError(local, remote),
            ep.status === "READY" || ep.status === "HANDSHAKING"
              ? (rdma as RdmaTransport).resetConnection(ep)
              : Effect.void,
            retryOrFail(slice)
          ])
        })
      )
    )

    const available = (slice: Slice, l: number, r: number) =>
      devices[l]?.enabled === true
        ? rails.available(devices[l]?.name as string, railKey(slice, r))
        : Effect.succeed(false)

    /** TENT `selectOptimalDevice` then `selectFallbackDevice`. */
    const choosePath = (slice: Slice): Effect.Effect<readonly [number, number] | undefined> =>
      Effect.gen(function* () {
        const [ol, or] = slice.optimal
        if (slice.retries === 0 && (yield* available(slice, ol, or))) return slice.optimal
        const n = devices.length * slice.remoteNics.length
        for (let k = 1; k <= n; k++) {
          const idx = (slice.lastFallback + k + n) % n
          const l = Math.floor(idx / slice.remoteNics.length)
          const r = idx % slice.remoteNics.length
          if (yield* available(slice, l, r)) {
            slice.lastFallback = idx
            return [l, r] as const
          }
        }
        return undefined
      })

    const postSlice = (slice: Slice): Effect.Effect<void> =>
      Effect.gen(function* () {
        const path = yield* choosePath(slice)
        if (path === undefined) {
          // TENT: DeviceNotFound("No available path"): the slice fails.
          finishSlice(slice, false)
          return
        }
        const [l, r] = path
        const device = devices[l] as RdmaDevice
        const got = yield* Effect.either(
          (rdma as RdmaTransport).getEndpoint(
            device,
            { server: slice.server, address: slice.address },
            slice.remoteNics[r] as string
          )
        )
        if (got._tag === "Left") {
          yield* retryOrFail(slice)
          return
        }
        const ep = got.right
        for (;;) {
          if (ep.status !== "READY") return yield* retryOrFail(slice)
          let lane = 0
          for (let i = 1; i < ep.wrDepth.length; i++)
            if ((ep.wrDepth[i] as number) < (ep.wrDepth[lane] as number)) lane = i
          if ((ep.wrDepth[lane] as number) < settings.endpoint.maxQpWr) {
            slice.ep = ep
            slice.lane = lane
            slice.local = l
            slice.remote = r
            wr.wrId = slice.id
            wr.opcode = slice.opcode as typeof wr.opcode
            wr.remoteAddr = slice.remoteAddr
            wr.rkey = slice.rkeys[r] as number
            sge.addr = slice.localAddr
            sge.length = slice.length
            sge.lkey = slice.lkeys[l] as number
            inflight.set(slice.id, slice)
            const rc = (ep.dataQps[lane] as import("@tent/verbs").QueuePair).postSend(wr)
            if (rc !== 0) {
              inflight.delete(slice.id)
              yield* rails.recordError(device.name, railKey(slice, r))
              yield* (rdma as RdmaTransport).resetConnection(ep)
              return yield* retryOrFail(slice)
            }
            ep.wrDepth[lane] = (ep.wrDepth[lane] as number) + 1
            return
          }
          yield* laneFree.wait(laneFree.current)
        }
      })

    for (const q of workers) yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(q), postSlice)))

    /** The local buffer holding `[addr, addr + length)` and the offset of `addr` in it. */
    const findLocalBuffer = (addr: number, length: number) => {
      for (const r of deps.localRegions()) {
        const base = r.addr ?? r.mrs[0]?.addr
        if (base !== undefined && addr >= base && addr + length <= base + r.buffer.length)
          return { buffer: r.buffer, offset: addr - base }
      }
      return undefined
    }

    /** TENT `getTransportType`: the first of the buffer's transports this engine has installed. */
    const chooseTransport = (desc: SegmentDesc, buf: BufferDesc): TransportKind | undefined => {
      for (const t of bufferTransports(buf)) {
        if (t === "rdma" && rdma !== undefined && devices.length > 0 && desc.devices.length > 0) return "rdma"
        if (t === "tcp" && tcp !== undefined && desc.rpc_server_addr !== "") return "tcp"
      }
      return undefined
    }

    const findLocal = (addr: number, length: number) => {
      for (const r of deps.localRegions()) {
        const base = r.mrs[0]?.addr
        if (base !== undefined && addr >= base && addr + length <= base + r.buffer.length)
          return r.mrs.map((m) => m.lkey)
      }
      return undefined
    }

    const submitTransfer = (
      batchId: number,
      requests: ReadonlyArray<TransferRequest>,
      notification?: Notification
    ): Effect.Effect<void, SubmitError> =>
      Effect.gen(function* () {
        const batch = batches.get(batchId)
        if (batch === undefined) return yield* new BatchNotFound({ batchId })
        if ((rdma === undefined || devices.length === 0) && tcp === undefined) {
          return yield* new InvalidRequest({ message: "no RDMA transport installed for transfers" })
        }
        const start = batch.tasks.length
        const targets = new Set<string>()
        const slices: Array<Slice> = []
        const tcpSlices: Array<TcpSlice> = []
        const tasks: Array<Task> = []
        for (const req of requests) {
          const name = yield* deps.segmentOf(req.target)
          const inside = (d: SegmentDesc) =>
            d.buffers.find((b) => req.targetOffset >= b.addr && req.targetOffset + req.length <= b.addr + b.length)
          let desc = yield* deps.resolve(name)
          if (inside(desc) === undefined) desc = yield* deps.refresh(name)
          targets.add(name)
          if (!Number.isInteger(req.length) || req.length <= 0) {
            return yield* new InvalidRequest({ message: `length must be a positive integer, got ${req.length}` })
          }
          const found = inside(desc)
          if (found === undefined) {
            return yield* new InvalidRequest({
              message: `target [${req.targetOffset}, +${req.length}) is not in a buffer of segment ${name}`
            })
          }
          const via = chooseTransport(desc, found)
          if (via === undefined) {
            return yield* new InvalidRequest({
              message: `no installed transport reaches [${req.targetOffset}, +${req.length}) of segment ${name}`
            })
          }
          if (via === "tcp") {
            const local = findLocalBuffer(req.source, req.length)
            if (local === undefined) {
              return yield* new InvalidRequest({ message: `source [${req.source}, +${req.length}) is not registered` })
            }
            const task: Task = { slices: 0, done: 0, failed: false, bytes: 0 }
            tasks.push(task)
            let off = 0
            for (const len of sliceLengths(req.length, settings.workers.blockSize)) {
              tcpSlices.push({
                task,
                write: req.opcode === "WRITE",
                local: local.buffer,
                localOffset: local.offset + off,
                remoteAddr: req.targetOffset + off,
                length: len,
                address: desc.rpc_server_addr
              })
              task.slices++
              off += len
            }
            continue
          }
          const lkeys = findLocal(req.source, req.length)
          if (lkeys === undefined) {
            return yield* new InvalidRequest({ message: `source [${req.source}, +${req.length}) is not registered` })
          }
          const buf = desc.buffers.find(
            (b) => req.targetOffset >= b.addr && req.targetOffset + req.length <= b.addr + b.length
          )
          if (buf === undefined || desc.devices.length === 0) {
            return yield* new InvalidRequest({
              message: `target [${req.targetOffset}, +${req.length}) is not in a buffer of segment ${name}`
            })
          }
          const remoteNics = desc.devices.map((d) => d.name)
          const task: Task = { slices: 0, done: 0, failed: false, bytes: 0 }
          tasks.push(task)
          let off = 0
          for (const len of sliceLengths(req.length, settings.workers.blockSize)) {
            const l = rr % devices.length
            slices.push({
              id: nextSlice++,
              task,
              opcode: req.opcode === "WRITE" ? WrOpcode.RDMA_WRITE : WrOpcode.RDMA_READ,
              localAddr: req.source + off,
              remoteAddr: req.targetOffset + off,
              length: len,
              lkeys,
              rkeys: buf.rkey,
              server: desc.name,
              address: desc.rpc_server_addr,
              remoteNics,
              optimal: [l, l % remoteNics.length],
              retries: 0,
              lastFallback: -1,
              ep: undefined,
              lane: 0,
              local: l,
              remote: l % remoteNics.length
            })
            rr++
            task.slices++
            off += len
          }
        }
        for (const t of tasks) batch.tasks.push(t)
        for (const s of slices) enqueue(s)
        for (const s of tcpSlices) Queue.unsafeOffer(tcpQueue, s)
        if (notification !== undefined) {
          batch.hooks.push({ start, end: batch.tasks.length, notification, targets: Array.from(targets), fired: false })
        }
      })

    const statusOf = (batch: Batch): BatchStatus => {
      let completedTasks = 0
      let failedTasks = 0
      let bytes = 0
      let error: TcpDataError | undefined
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

    /** TENT `maybeFireSubmitHooks`, caller holds the progress lock. */
    const fireHooks = (batch: Batch): Effect.Effect<void> =>
      Effect.forEach(
        batch.hooks.filter((h) => !h.fired),
        (hook) =>
          Effect.gen(function* () {
            for (const target of hook.targets) {
              const r = yield* Effect.either(deps.sendNotification(target, hook.notification))
              if (r._tag === "Left") return
            }
            hook.fired = true
          }),
        { discard: true }
      )

    const progress = (batch: Batch): Effect.Effect<BatchStatus> =>
      progressLock.withPermits(1)(
        Effect.suspend(() => {
          const s = statusOf(batch)
          return s.status === "COMPLETED" && batch.hooks.some((h) => !h.fired)
            ? Effect.as(fireHooks(batch), s)
            : Effect.succeed(s)
        })
      )

    const getTransferStatus = (batchId: number): Effect.Effect<BatchStatus, StatusError> =>
      Effect.suspend(() => {
        const batch = batches.get(batchId)
        return batch === undefined ? Effect.fail(new BatchNotFound({ batchId })) : progress(batch)
      })

    // The progress fiber (TENT's optional ProgressWorker): fires hooks of batches that completed.
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.gen(function* () {
          const seen = completed.current
          for (const batch of batches.values()) {
            if (batch.hooks.some((h) => !h.fired) && statusOf(batch).status === "COMPLETED") yield* progress(batch)
          }
          yield* completed.wait(seen)
        })
      )
    )

    const waitTransfer = (batchId: number, timeoutMs = 60_000): Effect.Effect<BatchStatus, StatusError> =>
      Effect.gen(function* () {
        const deadline = Date.now() + timeoutMs
        for (;;) {
          const seen = completed.current
          const s = yield* getTransferStatus(batchId)
          if (s.status !== "PENDING" || Date.now() >= deadline) return s
          yield* Effect.raceFirst(completed.wait(seen), Effect.sleep(Math.max(1, Math.min(100, deadline - Date.now()))))
        }
      })

    return {
      allocateBatch: Effect.sync(() => {
        const id = nextBatch++
        batches.set(id, { tasks: [], hooks: [] })
        return id
      }),
      submitTransfer,
      getTransferStatus,
      waitTransfer,
      freeBatch: (batchId: number) => Effect.sync(() => void batches.delete(batchId))
    }
  }) satisfies Effect.Effect<unknown, unknown, Scope.Scope>
