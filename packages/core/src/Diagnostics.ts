/**
 * `Diagnostics`: what tools and fault-injection harnesses (`tent probe`, the two-process tests) read and do inside a
 * running engine, kept off the `TransferEngine` facade: the notify path's counters, the endpoints, and the faults the
 * RFC's scenarios inject from inside the process — holding the notify poller between passes, retiring endpoints from
 * a foreign fiber, disabling a notify channel. Provided by `TransferEngine.layer` beside the engine.
 *
 * @since 0.1.0
 */
import type { PeerHealth as HealthRecord } from "@tent/health"
import { Server } from "@tent/rpc"
import { Context, Effect, Layer } from "effect"
import { Dedup } from "./Dedup.js"
import { type DeliveryCounters, EngineDelivery } from "./internal/Delivery.js"
import { EngineReceipts, type ReceiptCounters } from "./internal/Ledger.js"
import type { DedupCounters } from "./internal/ReplayWindow.js"
import type { ImmCounters, MarkerCounters } from "./internal/rdma/Immediates.js"
import { RdmaTransport } from "./internal/rdma/RdmaTransport.js"
import { TcpTransport } from "./internal/TcpTransport.js"
import * as Metrics from "./Metrics.js"
import { PeerHealthPolicy } from "./PeerHealth.js"
import { Resend, type ResendCounters } from "./Resend.js"

/**
 * One endpoint, as tools show it.
 *
 * @since 0.1.0
 */
export interface EndpointInfo {
  readonly localNic: string
  readonly peerNicPath: string
  readonly status: string
  readonly notifyQpNum: number
  readonly dataQpNums: ReadonlyArray<number>
  /** Notify sends posted and not completed. */
  readonly pending: number
  readonly connected: boolean
  /**
   * Notify slots allocated, send and receive (`transports/rdma/notify/*`; lazy rings grow from few), and the times a
   * lazy ring could not grow (its allocation failed).
   */
  readonly notifySlots: { readonly send: number; readonly recv: number; readonly growFailures: number }
  /** Bytes of notify slot memory allocated and registered (what a NIC pins for this endpoint's notify QP). */
  readonly notifyBytes: number
}

type PeerHealthMetrics = HealthRecord.PeerHealthMetrics

/**
 * What the notify paths counted (RDMA: the notify poller's; TCP: the transport's).
 *
 * @since 0.1.0
 */
export interface Counters {
  readonly rdma?:
    | {
        readonly received: number
        readonly unknownQp: number
        readonly malformed: number
        readonly duplicates: number
        readonly flushed: number
        readonly notifyErrors: number
        readonly sent: number
        readonly sendsCompleted: number
        readonly deferredPasses: number
        /** Notify poller runs (completions over runs: how well they batch). */
        readonly runs: number
        readonly closedInFlight: number
        readonly rebuilt: number
        readonly rebuiltResent: number
      }
    | undefined
  readonly tcp?:
    | { readonly sent: number; readonly received: number; readonly dataOk: number; readonly dataFailed: number }
    | undefined
  /** The `PeerHealth` seam's counters (RFC PR 4: marks, fast failures, probes, …); undefined under legacy. */
  readonly peerHealth?: PeerHealthMetrics | undefined
  /** The dedup window's counters (RFC PR 6: accepted, duplicates, too old, sessions, …); undefined under legacy. */
  readonly dedup?: DedupCounters | undefined
  /** What the resend did (RFC PR 7: channels, entries by path, failed, not resendable, pairs); undefined under legacy. */
  readonly resend?: ResendCounters | undefined
  /** The delivery point's: `handlerErrors`, the calls of a `TransferEngine.subscribe` handler that threw. */
  readonly delivery?: Readonly<DeliveryCounters> | undefined
  /** The delivery receipts' (accepted, receipted, undelivered by reason, acks, refusals); undefined when off. */
  readonly receipts?: Readonly<ReceiptCounters> | undefined
  /**
   * Transfer-bound notifications on the data QPs (`transports/rdma/notify/transfer_bound` immediate), both sides:
   * sent — `records` held, `markers` posted, `markerErrors`, tracks `spoiled` (the ordinary path took over);
   * received — immediates (`marks`), `held` records, `released`, `expired` unreleased. Since 0.3.0.
   */
  readonly immediates?: Readonly<ImmCounters & MarkerCounters> | undefined
}

/**
 * Inspection and in-process fault injection.
 *
 * @since 0.1.0
 */
export interface DiagnosticsShape {
  /** Whether the RDMA and TCP transports are installed. */
  readonly installed: { readonly rdma: boolean; readonly tcp: boolean }
  /** Live counters (the same objects the paths increment). */
  readonly counters: Counters
  /** The RDMA devices and whether each one's port is up. */
  readonly devices: Effect.Effect<ReadonlyArray<{ readonly name: string; readonly enabled: boolean }>>
  /** Every RDMA endpoint. */
  readonly endpoints: Effect.Effect<ReadonlyArray<EndpointInfo>>
  /** Stops (or resumes) the notify poller between passes, to hold completions unpolled. */
  readonly pauseNotifyPoller: (paused: boolean) => Effect.Effect<void>
  /** Stops (or resumes) the data CQ pollers between passes: data completions and immediates wait in the CQs. Since 0.3.0. */
  readonly pauseDataPollers: (paused: boolean) => Effect.Effect<void>
  /**
   * Freezes (or thaws) the application as `SIGSTOP` would on a host whose NIC is hardware (or the kernel's rxe): the
   * engine stops polling its CQs (notify and data) and its control-plane server stops reading its sockets, while the
   * SoftVerbs devices in this process keep running — they ACK SENDs into the receives already posted, then answer
   * RNR NAK; WRITEs and READs into registered memory still complete — and the kernel still completes TCP handshakes.
   * Thawed, the CQs are polled and the buffered requests read and answered. (A real `SIGSTOP` of a SoftVerbs process
   * freezes its NIC too: a host freeze, a different fault.)
   */
  readonly freezeApplication: (frozen: boolean) => Effect.Effect<void>
  /** Retires the endpoint from `localNic` to `peerNicPath` from the calling fiber (TENT `resetConnection`). */
  readonly retire: (localNic: string, peerNicPath: string) => Effect.Effect<boolean>
  /** Disables the notify channels towards `segment` as TENT's `notify_connected_ = false` does; returns how many. */
  readonly disableNotify: (segment: string) => Effect.Effect<number>
}

/**
 * The engine's diagnostics.
 *
 * @since 0.1.0
 */
export class Diagnostics extends Context.Tag("@tent/core/Diagnostics")<Diagnostics, DiagnosticsShape>() {}

/**
 * Diagnostics over the engine's transports.
 *
 * @since 0.1.0
 */
export const make = Effect.gen(function* () {
  const rdma = yield* RdmaTransport
  const tcp = yield* TcpTransport
  const health = yield* PeerHealthPolicy
  const listener = yield* Server.Listener
  const dedup = yield* Dedup
  const resend = yield* Resend
  const delivery = yield* EngineDelivery
  const receipts = yield* EngineReceipts
  const all = () => (rdma?.devices ?? []).flatMap((d) => Array.from(d.store.active.values(), (ep) => ({ d, ep })))
  return {
    installed: { rdma: rdma !== undefined, tcp: tcp !== undefined },
    counters: {
      rdma: rdma?.counters,
      tcp: tcp?.counters,
      peerHealth: health.metrics,
      dedup: dedup.counters,
      resend: resend.counters,
      delivery: delivery.counters,
      receipts: receipts.enabled ? receipts.counters : undefined,
      immediates: rdma === undefined ? undefined : rdma.markers.counters
    },
    devices: Effect.sync(() => (rdma?.devices ?? []).map((d) => ({ name: d.name, enabled: d.enabled }))),
    endpoints: Effect.sync(() =>
      all().map(({ d, ep }) => ({
        localNic: d.name,
        peerNicPath: ep.peerNicPath,
        status: ep.status,
        notifyQpNum: ep.notifyQpNum,
        dataQpNums: ep.dataQps.map((q) => q.qpNum),
        pending: ep.pending,
        connected: ep.connected,
        notifySlots: {
          send: ep.notify.sendCapacity,
          recv: ep.notify.recvCapacity,
          growFailures: ep.notify.growFailures
        },
        notifyBytes: ep.notify.registeredBytes
      }))
    ),
    pauseNotifyPoller: (paused) => Effect.sync(() => rdma?.poller.pause(paused)),
    pauseDataPollers: (paused) => Effect.sync(() => rdma?.pauseDataPollers(paused)),
    freezeApplication: (frozen) =>
      Effect.sync(() => {
        listener.freeze(frozen)
        rdma?.poller.pause(frozen)
        rdma?.pauseDataPollers(frozen)
      }),
    retire: (localNic, peerNicPath) =>
      Effect.suspend(() => {
        const ep = rdma?.devices.find((d) => d.name === localNic)?.store.active.get(peerNicPath)
        return rdma === undefined || ep === undefined
          ? Effect.succeed(false)
          : Effect.as(rdma.resetConnection(ep), true)
      }),
    disableNotify: (segment) =>
      Effect.sync(() => {
        let n = 0
        for (const { ep } of all()) {
          if (ep.segment !== segment) continue
          if (ep.notify.connected) Metrics.notifyQpDisable.update(1)
          ep.notify.connected = false
          n++
        }
        return n
      })
  } satisfies DiagnosticsShape
})

/**
 * Diagnostics as a Layer over the engine's transports.
 *
 * @since 0.1.0
 */
export const layer = Layer.effect(Diagnostics, make)
