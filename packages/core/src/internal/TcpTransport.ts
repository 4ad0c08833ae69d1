/**
 * `TcpTransport`, as TENT `main`'s: notifications carried by the control plane's `Notify` RPC, the control-plane
 * notify callback that queues incoming `Notify`s at the engine's delivery point (TENT `install()`; whether it is
 * installed is the `NotificationRouting` seam's call), and transfers. A failure notice (`Notification.failure`) goes
 * and comes as any notification: the `Notify` body carries it in a trailer of its own (see `@tent/rpc`'s `Models`).
 *
 * `sendNotification` runs the `Notify` call against the cached segment descriptor: under the legacy
 * `DescriptorPolicy` a failed call drops the descriptor, refetches it (from the same peer, under the peer registry)
 * and calls again — TENT's `NeedsRefreshCache` on `RpcServiceError`.
 *
 * Transfers: each slice is one `SendData` (WRITE) or `RecvData` (READ) call (TENT function ids 3 and 4: a 16-byte
 * `{addr, len}` header plus the data, each call bounded by `rpc/request_timeout_ms`), run by
 * `transports/tcp/max_concurrent_tasks` worker fibers, retried after a `TransportFailure` up to
 * `transports/tcp/max_retry_count` attempts with a doubling delay from `retry_base_delay_ms` capped at
 * `retry_max_delay_ms` (TENT `doTransferWithRetry`); a typed refusal of the peer fails the slice at once. The peer
 * checks the range against the memory it registered.
 */
import type {
  DataTooLarge,
  InvalidEntry,
  Notification,
  NotificationRefused,
  NotificationTooLarge,
  SegmentRangeInvalid
} from "@tent/rpc"
import { DescriptorCache, NeedsRefreshCache, type TransportFailure } from "@tent/rpc"
import { Context, Effect, Layer, Queue, type Scope } from "effect"
import { EngineConfig } from "../EngineConfig.js"
import * as Metrics from "../Metrics.js"
import { EngineDelivery } from "./Delivery.js"
import { LocalSegment } from "./LocalSegment.js"
import { EngineAgent } from "./Services.js"
import type { SliceTransport, Task, TaskBoard } from "./Tasks.js"

/** Errors of `sendNotification` over TCP. */
export type TcpNotifyError = TransportFailure | InvalidEntry | NotificationTooLarge | NotificationRefused

/** Errors of one TCP data call: the peer's typed refusal, or the call did not get a reply. */
export type TcpDataError = SegmentRangeInvalid | DataTooLarge | TransportFailure

/** Notifications sent and received by this transport; data calls that succeeded and failed. */
export interface TcpCounters {
  sent: number
  received: number
  dataOk: number
  dataFailed: number
}

/** The TCP transport. */
export interface TcpTransportShape {
  readonly kind: "tcp"
  /** TENT `TcpTransport::sendNotification`: `Notify` to the segment's RPC address. */
  readonly sendNotification: (segment: string, n: Notification) => Effect.Effect<void, TcpNotifyError>
  /** The control-plane notify callback this transport installs: `from` is the caller's address. */
  readonly onNotify: (n: Notification, from: string) => void
  /** Starts the slice workers (in the scope); slice outcomes are counted on `board`. */
  readonly slices: (board: TaskBoard) => Effect.Effect<SliceTransport, never, Scope.Scope>
  readonly counters: TcpCounters
}

/** The TCP transport service (`undefined`: not installed). */
export class TcpTransport extends Context.Tag("@tent/core/internal/TcpTransport")<
  TcpTransport,
  TcpTransportShape | undefined
>() {}

/** TCP retry delay before attempt `attempt` (1-based retries): base doubling, capped (TENT `doTransferWithRetry`). */
export const tcpRetryDelay = (attempt: number, baseMs: number, maxMs: number): number =>
  Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1))

/**
 * Runs `call` against the RPC address in the cached descriptor of `segment` (a descriptor without one is stale);
 * what a failed call does to the descriptor is the `DescriptorPolicy` seam's (legacy: refetch and call again).
 */
export const atPeer = <A, E>(
  cache: DescriptorCache.DescriptorCacheShape,
  segment: string,
  call: (address: string) => Effect.Effect<A, E>
): Effect.Effect<A, Exclude<E, NeedsRefreshCache> | InvalidEntry | TransportFailure> =>
  cache.withSegment(
    segment,
    (desc): Effect.Effect<A, E | NeedsRefreshCache> =>
      desc.rpc_server_addr === ""
        ? Effect.fail(new NeedsRefreshCache({ segment, message: "segment has no RPC address" }))
        : call(desc.rpc_server_addr)
  ) as Effect.Effect<A, Exclude<E, NeedsRefreshCache> | InvalidEntry | TransportFailure>

/** `Notify` against the cached descriptor of `segment` (the legacy `DescriptorPolicy` refetches on failure). */
export const notifyVia = (
  agent: Context.Tag.Service<EngineAgent>,
  cache: DescriptorCache.DescriptorCacheShape,
  segment: string,
  n: Notification
): Effect.Effect<void, TcpNotifyError> => atPeer(cache, segment, (address) => agent.notify(address, n))

/** {@link notifyVia} as the control plane's own sender (the last of a route, the resend's last path): counted `rpc`. */
export const notifyRpc = (
  agent: Context.Tag.Service<EngineAgent>,
  cache: DescriptorCache.DescriptorCacheShape,
  segment: string,
  n: Notification
): Effect.Effect<void, TcpNotifyError> =>
  Effect.tap(notifyVia(agent, cache, segment, n), () => Metrics.sent.rpc.update(1, segment))

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

/** Builds the TCP transport (`undefined` when `transports/tcp/enable` is off). */
export const make = Effect.gen(function* () {
  const settings = yield* EngineConfig
  if (!settings.tcpEnable) return undefined
  const agent = yield* EngineAgent
  const cache = yield* DescriptorCache.DescriptorCache
  const delivery = yield* EngineDelivery
  const regions = yield* LocalSegment
  const counters: TcpCounters = { sent: 0, received: 0, dataOk: 0, dataFailed: 0 }

  const count = <A>(self: Effect.Effect<A, TcpDataError>): Effect.Effect<A, TcpDataError> =>
    Effect.tapBoth(self, {
      onFailure: () => Effect.sync(() => void counters.dataFailed++),
      onSuccess: () => Effect.sync(() => void counters.dataOk++)
    })

  const slices = (board: TaskBoard): Effect.Effect<SliceTransport, never, Scope.Scope> =>
    Effect.gen(function* () {
      const queue = yield* Queue.unbounded<TcpSlice>()
      const { maxRetryCount, retryBaseDelayMs, retryMaxDelayMs } = settings.tcp
      const run = (s: TcpSlice): Effect.Effect<void> =>
        Effect.gen(function* () {
          let last: TcpDataError | undefined
          for (let attempt = 0; attempt < maxRetryCount; attempt++) {
            if (s.task.failed || s.attempt !== s.task.attempt) return // the task failed already, or was resubmitted
            if (attempt > 0) {
              Metrics.sliceRetry.update(1)
              yield* Effect.sleep(tcpRetryDelay(attempt, retryBaseDelayMs, retryMaxDelayMs))
            }
            const r = s.write
              ? yield* Effect.either(
                  count(
                    agent.sendData(s.address, s.remoteAddr, s.local.subarray(s.localOffset, s.localOffset + s.length))
                  )
                )
              : yield* Effect.either(
                  Effect.map(count(agent.recvData(s.address, s.remoteAddr, s.length)), (bytes) => {
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
              board.finish(s.task, s.attempt, s.length, true)
              return
            }
            last = r.left
            if (last._tag !== "TransportFailure") break // the peer refused: retrying cannot help
          }
          board.finish(s.task, s.attempt, s.length, false, last)
        })
      for (let i = 0; i < settings.tcp.maxConcurrentTasks; i++)
        yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(queue), run)))

      const submit = (task: Task, lengths: ReadonlyArray<number>): (() => void) | string => {
        const { req, desc } = task.plan
        const local = regions.find(req.source, req.length)
        if (local === undefined) return `source [${req.source}, +${req.length}) is not registered`
        const out: Array<TcpSlice> = []
        let off = 0
        for (const len of lengths) {
          out.push({
            task,
            attempt: task.attempt,
            write: req.opcode === "WRITE",
            local: local.region.buffer,
            localOffset: local.offset + off,
            remoteAddr: req.targetOffset + off,
            length: len,
            address: desc.rpc_server_addr
          })
          off += len
        }
        return () => {
          for (const s of out) Queue.unsafeOffer(queue, s)
        }
      }
      return { submit }
    })

  return {
    kind: "tcp",
    counters,
    slices,
    sendNotification: (segment, n) =>
      Effect.tap(notifyVia(agent, cache, segment, n), () => {
        counters.sent++
        Metrics.sent.tcp.update(1, segment)
      }),
    onNotify: (n, from) => {
      counters.received++
      if (delivery.fromNotify(from, n)) Metrics.received.tcp.update(1)
    }
  } satisfies TcpTransportShape
})

/** The TCP transport as a Layer. */
export const layer = Layer.effect(TcpTransport, make)
