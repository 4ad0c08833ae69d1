/**
 * Transfers as TENT `main` runs them: requests split into slices (`block_size`, at most 64 per request, a tail under
 * 25 % of a slice merged into the one before) and carried by the transport TENT's rule picks for the target buffer.
 *
 * RDMA: slices are spread round-robin over the local devices and the direct rail to the peer's device of the same
 * index, posted on the endpoints' data QPs (`max_qp_wr` per QP, the least loaded lane) and tracked to completion by
 * the data CQ pollers. The hot path is plain synchronous code: a slice whose rail is available and whose endpoint is
 * READY is posted where it is submitted, a slice waiting for a free lane is posted by the completion that frees one,
 * and a completion counts its slice and clears its rail where it is polled. Only what needs an Effect goes to a
 * fiber: bootstrapping an endpoint (TENT's worker calling `connect()`), rail transitions that log, and failures.
 *
 * A failed completion (flushes included) is TENT's `disableEndpoint`: `RailHealth.recordError(local, remote)`, the
 * endpoint retired from the completion fiber, and the slice retried up to `workers/max_retry_count` on the optimal
 * pair if it is available, else on the next available pair after the last one tried (`selectFallbackDevice`),
 * which is how a paused rail's slices are rerouted. A success is `recordSuccess`. A slice in flight longer than
 * `transports/rdma/max_timeout_ns` (from its post) ends TIMEOUT and fails its task (`TransferTimeout`), and its
 * endpoint is retired, as TENT's software timeout does; a completion that arrives for it later is ignored.
 *
 * TCP: each slice is one `SendData` (WRITE) or `RecvData` (READ) call, run by `transports/tcp/max_concurrent_tasks`
 * worker fibers, retried after a `TransportFailure` up to `transports/tcp/max_retry_count` attempts with a doubling
 * delay from `retry_base_delay_ms` capped at `retry_max_delay_ms` (TENT `doTransferWithRetry`); a typed refusal of
 * the peer fails the slice at once.
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
 * `getTransferStatus` or the progress fiber; a failed batch never notifies; a failed hook is retried on the next
 * poll.
 *
 * @since 0.1.0
 */
import type { RailHealth } from "@tent/health"
import type { BufferDesc, InvalidEntry, Notification, SegmentDesc, TransportFailure } from "@tent/rpc"
import {
  type MemoryRegion,
  type QueuePair,
  SendFlags,
  type SendWr,
  WcStatus,
  type WorkCompletion,
  WrOpcode
} from "@tent/verbs"
import { Effect, Queue, type Scope } from "effect"
import type { EngineSettings } from "./EngineConfig.js"
import { BatchNotFound, InvalidRequest, RdmaTransferFailed, type SegmentNotFound, TransferTimeout } from "./Errors.js"
import { nicPath, type RdmaEndpoint } from "./RdmaEndpoint.js"
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

/** Why a task failed: a TCP slice's last error, an RDMA slice's timeout, or no RDMA path left. */
export type TaskError = TcpDataError | TransferTimeout | RdmaTransferFailed

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

/** The transports a request can be carried by (TENT `TransportType` RDMA 1, TCP 7). */
export type TransportKind = "rdma" | "tcp"

/** Errors of `submitTransfer`. */
export type SubmitError = BatchNotFound | InvalidRequest | SegmentNotFound | InvalidEntry | TransportFailure
/** Errors of `getTransferStatus`. */
export type StatusError = BatchNotFound

/** A request resolved against its target's descriptor: what a (re)submission needs. */
interface Plan {
  readonly req: TransferRequest
  readonly desc: SegmentDesc
  readonly buf: BufferDesc
  /** The installed transports the target buffer offers, in TENT's order. */
  readonly candidates: ReadonlyArray<TransportKind>
}

interface Task {
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
}

/** One slice of a request carried by TCP. */
interface TcpSlice {
  readonly task: Task
  readonly attempt: number
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

/** The peer side of a task's RDMA slices, shared by them. */
interface Peer {
  readonly server: string
  readonly address: string
  readonly remoteNics: ReadonlyArray<string>
  /** `RailHealth` key per remote device: `server/nic`. */
  readonly railKeys: ReadonlyArray<string>
  /** Endpoint-store key per remote device: `server@nic`. */
  readonly epKeys: ReadonlyArray<string>
  readonly rkeys: ReadonlyArray<number>
}

interface Slice {
  readonly id: number
  readonly task: Task
  readonly attempt: number
  readonly opcode: number
  readonly localAddr: number
  readonly remoteAddr: number
  readonly length: number
  /** lkey per local device. */
  readonly lkeys: ReadonlyArray<number>
  readonly peer: Peer
  readonly optimal: readonly [number, number]
  retries: number
  lastFallback: number
  ep: RdmaEndpoint | undefined
  lane: number
  local: number
  remote: number
  /** `performance.now()` at the last post (the software timeout's start). */
  postedAt: number
}

/** What the completion fiber is handed: rail transitions that log, failures, and timeouts. */
type Event =
  | { readonly kind: "success"; readonly slice: Slice; readonly ep: RdmaEndpoint }
  | { readonly kind: "error"; readonly slice: Slice; readonly ep: RdmaEndpoint }
  | { readonly kind: "timeout"; readonly slice: Slice; readonly ep: RdmaEndpoint }

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

/** How often in-flight slices are checked against `max_timeout_ns`: a quarter of it, at most once a second. */
export const timeoutCheckMs = (timeoutMs: number): number => Math.max(1, Math.min(1000, Math.floor(timeoutMs / 4)))

/** A version counter whose waiters wake on the next `notify()`, or after `ms` at the latest. */
class Waker {
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

  wait(seen: number, ms?: number): Effect.Effect<void> {
    return Effect.async<void>((resume) => {
      if (this.version !== seen) return resume(Effect.void)
      let timer: ReturnType<typeof setTimeout> | undefined
      const w = () => {
        if (timer !== undefined) clearTimeout(timer)
        resume(Effect.void)
      }
      const drop = () => {
        const i = this.waiters.indexOf(w)
        if (i >= 0) this.waiters.splice(i, 1)
      }
      this.waiters.push(w)
      if (ms !== undefined) {
        timer = setTimeout(() => {
          drop()
          resume(Effect.void)
        }, ms)
      }
      return Effect.sync(() => {
        if (timer !== undefined) clearTimeout(timer)
        drop()
      })
    })
  }
}

/** The transfer path: batches, posting, completion handling, timeouts, failover, submit hooks. */
export const make = (deps: TransfersDeps) =>
  Effect.gen(function* () {
    const { settings, rdma, rails } = deps
    const batches = new Map<number, Batch>()
    let nextBatch = 1
    let nextSlice = 1
    let rr = 0
    /** Posted slices by work-request id, in post order (the timeout check relies on it). */
    const inflight = new Map<number, Slice>()
    /** Slices waiting for a free lane of their endpoint, posted by that endpoint's completions. */
    const blocked = new Map<RdmaEndpoint, Array<Slice>>()
    const progressLock = yield* Effect.makeSemaphore(1)
    const completed = new Waker()
    const slow = yield* Queue.unbounded<Slice>()
    const events = yield* Queue.unbounded<Event>()
    const devices: ReadonlyArray<RdmaDevice> = rdma?.devices ?? []
    const timeoutMs = settings.maxTimeoutNs / 1e6
    const tcp = deps.tcp

    const finishTask = (task: Task, attempt: number, length: number, ok: boolean, error?: TaskError): void => {
      if (attempt !== task.attempt) return
      if (ok) {
        task.done++
        task.bytes += length
      } else if (!task.failed) {
        task.failed = true
        task.error = error
      }
      if (task.done === task.slices || task.failed) completed.notify()
    }
    const failSlice = (slice: Slice, error: TaskError): void =>
      finishTask(slice.task, slice.attempt, slice.length, false, error)

    // -----------------------------------------------------------------------------------------------------------------
    // RDMA hot path: plain synchronous code
    // -----------------------------------------------------------------------------------------------------------------

    const sge = { addr: 0, length: 0, lkey: 0 }
    const wr: SendWr = { wrId: 0, opcode: WrOpcode.RDMA_WRITE, sendFlags: SendFlags.SIGNALED, sgList: [sge] }

    /** Rail `(l, r)` of the slice without an Effect; `undefined` when its pause just expired (the Effect logs it). */
    const availableNow = (slice: Slice, l: number, r: number): boolean | undefined => {
      const d = devices[l]
      if (d === undefined || !d.enabled) return false
      return rails.unsafe.available(d.name, slice.peer.railKeys[r] as string)
    }

    /** TENT `selectOptimalDevice` then `selectFallbackDevice`; `null`: no path; `undefined`: ask the Effect way. */
    const pathNow = (slice: Slice): readonly [number, number] | null | undefined => {
      const [ol, or] = slice.optimal
      if (slice.retries === 0) {
        const a = availableNow(slice, ol, or)
        if (a !== false) return a === true ? slice.optimal : undefined
      }
      const nics = slice.peer.remoteNics.length
      const n = devices.length * nics
      for (let k = 1; k <= n; k++) {
        const idx = (slice.lastFallback + k + n) % n
        const a = availableNow(slice, Math.floor(idx / nics), idx % nics)
        if (a === undefined) return undefined
        if (a) {
          slice.lastFallback = idx
          return [Math.floor(idx / nics), idx % nics] as const
        }
      }
      return null
    }

    /** Posts on the least loaded lane of `ep`; a slice finding every lane full waits in `blocked`. */
    const postOn = (slice: Slice, l: number, r: number, ep: RdmaEndpoint): void => {
      slice.local = l
      slice.remote = r
      const depth = ep.wrDepth
      let lane = 0
      for (let i = 1; i < depth.length; i++) if ((depth[i] as number) < (depth[lane] as number)) lane = i
      if ((depth[lane] as number) >= settings.endpoint.maxQpWr) {
        const list = blocked.get(ep)
        if (list === undefined) blocked.set(ep, [slice])
        else list.push(slice)
        return
      }
      slice.ep = ep
      slice.lane = lane
      wr.wrId = slice.id
      wr.opcode = slice.opcode as typeof wr.opcode
      wr.remoteAddr = slice.remoteAddr
      wr.rkey = slice.peer.rkeys[r] as number
      sge.addr = slice.localAddr
      sge.length = slice.length
      sge.lkey = slice.lkeys[l] as number
      slice.postedAt = performance.now()
      inflight.set(slice.id, slice)
      const rc = (ep.dataQps[lane] as QueuePair).postSend(wr)
      if (rc !== 0) {
        inflight.delete(slice.id)
        Queue.unsafeOffer(events, { kind: "error", slice, ep })
        return
      }
      depth[lane] = (depth[lane] as number) + 1
    }

    /** Posts the slice now if its rail is available and its endpoint READY; else hands it to a worker fiber. */
    const post = (slice: Slice): void => {
      const path = pathNow(slice)
      if (path === null) {
        failSlice(slice, new RdmaTransferFailed({ message: "No available path" }))
        return
      }
      if (path !== undefined) {
        const [l, r] = path
        const ep = devices[l]?.store.get(slice.peer.epKeys[r] as string)
        if (ep !== undefined && ep.status === "READY") {
          postOn(slice, l, r, ep)
          return
        }
      }
      Queue.unsafeOffer(slow, slice)
    }

    /** TENT: `retry_count++`; at `max_retry_count` the slice fails, else it is submitted again. */
    const retryOrFail = (slice: Slice, why: string): void => {
      slice.retries++
      if (slice.retries >= settings.workers.maxRetryCount) {
        failSlice(
          slice,
          new RdmaTransferFailed({ message: `${why}; gave up after ${slice.retries} attempts (max_retry_count)` })
        )
      } else post(slice)
    }

    /** Posts what waits for a lane of `ep`; if `ep` is no longer READY its waiting slices look for another path. */
    const drainBlocked = (ep: RdmaEndpoint): void => {
      const list = blocked.get(ep)
      if (list === undefined) return
      blocked.delete(ep)
      if (ep.status !== "READY") {
        for (const s of list) Queue.unsafeOffer(slow, s)
        return
      }
      for (let i = 0; i < list.length; i++) {
        const s = list[i] as Slice
        postOn(s, s.local, s.remote, ep)
        if (blocked.has(ep)) {
          // Lanes are full again: the rest keep their order behind the one just put back.
          const again = blocked.get(ep) as Array<Slice>
          for (let k = i + 1; k < list.length; k++) again.push(list[k] as Slice)
          return
        }
      }
    }

    const onCompletion = (ep: RdmaEndpoint, lane: number, wc: WorkCompletion): void => {
      if ((ep.wrDepth[lane] as number) > 0) ep.wrDepth[lane] = (ep.wrDepth[lane] as number) - 1
      const slice = inflight.get(wc.wrId)
      if (slice !== undefined && slice.ep === ep) {
        inflight.delete(wc.wrId)
        if (wc.status === WcStatus.SUCCESS) {
          if (rails.unsafe.recordSuccess(ep.device.name, slice.peer.railKeys[slice.remote] as string) === undefined) {
            Queue.unsafeOffer(events, { kind: "success", slice, ep })
          }
          finishTask(slice.task, slice.attempt, slice.length, true)
        } else {
          Queue.unsafeOffer(events, { kind: "error", slice, ep })
        }
      }
      if (blocked.size > 0) drainBlocked(ep)
    }

    /** The endpoint is being destroyed: its posted slices fail over to another path, its waiting ones too. */
    const cancel = (ep: RdmaEndpoint): void => {
      for (const slice of Array.from(inflight.values())) {
        if (slice.ep !== ep) continue
        inflight.delete(slice.id)
        Queue.unsafeOffer(events, { kind: "error", slice, ep })
      }
      const list = blocked.get(ep)
      blocked.delete(ep)
      if (list !== undefined) for (const s of list) Queue.unsafeOffer(slow, s)
    }
    rdma?.setDataPath(onCompletion, cancel)

    // -----------------------------------------------------------------------------------------------------------------
    // Fibers: endpoint setup, rail transitions and failures, timeouts
    // -----------------------------------------------------------------------------------------------------------------

    /** {@link pathNow}, once the Effect API has cleared (and logged) the slice's rails whose pause expired. */
    const choosePath = (slice: Slice): Effect.Effect<readonly [number, number] | null> =>
      Effect.suspend(() => {
        const path = pathNow(slice)
        if (path !== undefined) return Effect.succeed(path)
        const pairs = devices.filter((d) => d.enabled).flatMap((d) => slice.peer.railKeys.map((k) => [d.name, k]))
        return Effect.zipRight(
          Effect.forEach(pairs, ([local, remote]) => rails.available(local as string, remote as string), {
            discard: true
          }),
          Effect.sync(() => pathNow(slice) ?? null)
        )
      })

    /** TENT's worker when the endpoint is not READY: `getEndpoint` (bootstrap) on the worker, then post. */
    const postSlow = (slice: Slice): Effect.Effect<void> =>
      Effect.gen(function* () {
        if (slice.attempt !== slice.task.attempt || slice.task.failed) return
        const path = yield* choosePath(slice)
        if (path === null) return failSlice(slice, new RdmaTransferFailed({ message: "No available path" }))
        const [l, r] = path
        const got = yield* Effect.either(
          (rdma as RdmaTransport).getEndpoint(
            devices[l] as RdmaDevice,
            { server: slice.peer.server, address: slice.peer.address },
            slice.peer.remoteNics[r] as string
          )
        )
        if (got._tag === "Left") return retryOrFail(slice, `no endpoint: ${got.left.message}`)
        if (got.right.status !== "READY") return retryOrFail(slice, "endpoint not ready")
        postOn(slice, l, r, got.right)
      })
    for (let i = 0; i < settings.workers.numWorkers; i++)
      yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(slow), postSlow)))

    const disable = (ep: RdmaEndpoint, slice: Slice): Effect.Effect<void> =>
      Effect.zipRight(
        rails.recordError(ep.device.name, slice.peer.railKeys[slice.remote] as string),
        ep.status === "READY" || ep.status === "HANDSHAKING" ? (rdma as RdmaTransport).resetConnection(ep) : Effect.void
      )

    // The completion fiber: logged rail transitions and TENT's disableEndpoint on failures.
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.flatMap(Queue.take(events), (e) => {
          switch (e.kind) {
            case "success":
              return rails.recordSuccess(e.ep.device.name, e.slice.peer.railKeys[e.slice.remote] as string)
            case "timeout":
              return disable(e.ep, e.slice)
            case "error":
              return Effect.zipRight(
                disable(e.ep, e.slice),
                Effect.sync(() => {
                  if (e.slice.attempt === e.slice.task.attempt) retryOrFail(e.slice, "work completion failed")
                })
              )
          }
        })
      )
    )

    // TENT's software timeout: a slice in flight longer than max_timeout_ns ends TIMEOUT and its endpoint is retired.
    if (rdma !== undefined) {
      yield* Effect.forkScoped(
        Effect.forever(
          Effect.zipRight(
            Effect.sleep(timeoutCheckMs(timeoutMs)),
            Effect.sync(() => {
              const now = performance.now()
              for (const slice of inflight.values()) {
                if (now - slice.postedAt < timeoutMs) break // post order: the rest are younger
                inflight.delete(slice.id)
                failSlice(
                  slice,
                  new TransferTimeout({
                    timeoutMs,
                    message: `a slice stayed in flight longer than ${timeoutMs} ms (transports/rdma/max_timeout_ns)`
                  })
                )
                if (slice.ep !== undefined) Queue.unsafeOffer(events, { kind: "timeout", slice, ep: slice.ep })
              }
            })
          )
        )
      )
    }

    // -----------------------------------------------------------------------------------------------------------------
    // TCP: slices as SendData / RecvData calls, `max_concurrent_tasks` worker fibers, retries with backoff
    // -----------------------------------------------------------------------------------------------------------------

    const tcpQueue = yield* Queue.unbounded<TcpSlice>()
    const runTcpSlice = (s: TcpSlice): Effect.Effect<void> =>
      Effect.gen(function* () {
        const t = tcp as TcpTransport
        let last: TcpDataError | undefined
        for (let attempt = 0; attempt < settings.tcp.maxRetryCount; attempt++) {
          if (s.task.failed || s.attempt !== s.task.attempt) return // the task failed already, or was resubmitted
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
            finishTask(s.task, s.attempt, s.length, true)
            return
          }
          last = r.left
          if (last._tag !== "TransportFailure") break // the peer refused: retrying cannot help
        }
        finishTask(s.task, s.attempt, s.length, false, last)
      })
    if (tcp !== undefined) {
      for (let i = 0; i < settings.tcp.maxConcurrentTasks; i++)
        yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(tcpQueue), runTcpSlice)))
    }

    // -----------------------------------------------------------------------------------------------------------------
    // Submission
    // -----------------------------------------------------------------------------------------------------------------

    /** The local buffer holding `[addr, addr + length)` and the offset of `addr` in it. */
    const findLocalBuffer = (addr: number, length: number) => {
      for (const r of deps.localRegions()) {
        const base = r.addr ?? r.mrs[0]?.addr
        if (base !== undefined && addr >= base && addr + length <= base + r.buffer.length)
          return { buffer: r.buffer, offset: addr - base }
      }
      return undefined
    }

    /** The lkeys of the registered memory holding `[addr, addr + length)`. */
    const findLocal = (addr: number, length: number) => {
      for (const r of deps.localRegions()) {
        const base = r.mrs[0]?.addr
        if (base !== undefined && addr >= base && addr + length <= base + r.buffer.length)
          return r.mrs.map((m) => m.lkey)
      }
      return undefined
    }

    /** TENT `resolveTransport`'s candidates: the buffer's transports that this engine can use towards `desc`. */
    const candidatesOf = (desc: SegmentDesc, buf: BufferDesc): Array<TransportKind> =>
      bufferTransports(buf).filter((t) =>
        t === "rdma"
          ? rdma !== undefined && devices.length > 0 && desc.devices.length > 0
          : tcp !== undefined && desc.rpc_server_addr !== ""
      )

    /** The task's slices on its current transport, or why it cannot be carried by it. */
    const slicesOf = (task: Task): { rdma: Array<Slice>; tcp: Array<TcpSlice> } | string => {
      const { req, desc, buf } = task.plan
      const via = task.plan.candidates[task.priority]
      const lengths = sliceLengths(req.length, settings.workers.blockSize)
      task.slices = lengths.length
      const out = { rdma: [] as Array<Slice>, tcp: [] as Array<TcpSlice> }
      if (via === undefined) return "All available transports are failed"
      if (via === "tcp") {
        const local = findLocalBuffer(req.source, req.length)
        if (local === undefined) return `source [${req.source}, +${req.length}) is not registered`
        let off = 0
        for (const len of lengths) {
          out.tcp.push({
            task,
            attempt: task.attempt,
            write: req.opcode === "WRITE",
            local: local.buffer,
            localOffset: local.offset + off,
            remoteAddr: req.targetOffset + off,
            length: len,
            address: desc.rpc_server_addr
          })
          off += len
        }
        return out
      }
      const lkeys = findLocal(req.source, req.length)
      if (lkeys === undefined) return `source [${req.source}, +${req.length}) is not registered`
      const remoteNics = desc.devices.map((d) => d.name)
      const peer: Peer = {
        server: desc.name,
        address: desc.rpc_server_addr,
        remoteNics,
        railKeys: remoteNics.map((n) => `${desc.name}/${n}`),
        epKeys: remoteNics.map((n) => nicPath(desc.name, n)),
        rkeys: buf.rkey
      }
      let off = 0
      for (const len of lengths) {
        const l = rr++ % devices.length
        out.rdma.push({
          id: nextSlice++,
          task,
          attempt: task.attempt,
          opcode: req.opcode === "WRITE" ? WrOpcode.RDMA_WRITE : WrOpcode.RDMA_READ,
          localAddr: req.source + off,
          remoteAddr: req.targetOffset + off,
          length: len,
          lkeys,
          peer,
          optimal: [l, l % remoteNics.length],
          retries: 0,
          lastFallback: -1,
          ep: undefined,
          lane: 0,
          local: l,
          remote: l % remoteNics.length,
          postedAt: 0
        })
        off += len
      }
      return out
    }

    const launch = (s: { rdma: Array<Slice>; tcp: Array<TcpSlice> }): void => {
      for (const slice of s.rdma) post(slice)
      for (const slice of s.tcp) Queue.unsafeOffer(tcpQueue, slice)
    }

    /** TENT `resubmitTransferTask`: the next candidate transport for a FAILED task; false if there is none. */
    const failover = (task: Task): boolean => {
      if (task.failovers >= settings.maxFailoverAttempts) return false
      if (task.priority + 1 >= task.plan.candidates.length) return false
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
      launch(s)
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
        if ((rdma === undefined || devices.length === 0) && tcp === undefined) {
          return yield* new InvalidRequest({ message: "no RDMA transport installed for transfers" })
        }
        const start = batch.tasks.length
        const targets = new Set<string>()
        const tasks: Array<Task> = []
        const work: Array<{ rdma: Array<Slice>; tcp: Array<TcpSlice> }> = []
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
          const buf = inside(desc)
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
          const task: Task = {
            plan: { req, desc, buf, candidates },
            slices: 0,
            done: 0,
            failed: false,
            bytes: 0,
            priority: 0,
            failovers: 0,
            attempt: 0
          }
          const s = slicesOf(task)
          if (typeof s === "string") return yield* new InvalidRequest({ message: s })
          tasks.push(task)
          work.push(s)
        }
        for (const t of tasks) batch.tasks.push(t)
        for (const w of work) launch(w)
        if (notification !== undefined) {
          batch.hooks.push({ start, end: batch.tasks.length, notification, targets: Array.from(targets), fired: false })
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

    const progress = (batch: Batch, allowFailover: boolean): Effect.Effect<BatchStatus> =>
      progressLock.withPermits(1)(
        Effect.suspend(() => {
          if (allowFailover) for (const t of batch.tasks) if (t.failed) failover(t)
          const s = statusOf(batch)
          return s.status === "COMPLETED" && batch.hooks.some((h) => !h.fired)
            ? Effect.as(fireHooks(batch), s)
            : Effect.succeed(s)
        })
      )

    const getTransferStatus = (batchId: number): Effect.Effect<BatchStatus, StatusError> =>
      Effect.suspend(() => {
        const batch = batches.get(batchId)
        return batch === undefined
          ? Effect.fail(new BatchNotFound({ batchId }))
          : progress(batch, settings.autoFailoverOnPoll)
      })

    // The progress fiber (TENT's optional ProgressWorker): fires hooks of batches that completed.
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.gen(function* () {
          const seen = completed.current
          for (const batch of batches.values()) {
            if (batch.hooks.some((h) => !h.fired) && statusOf(batch).status === "COMPLETED")
              yield* progress(batch, false)
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
          yield* completed.wait(seen, Math.max(1, Math.min(100, deadline - Date.now())))
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
