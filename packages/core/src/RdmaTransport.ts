/**
 * `RdmaTransport`, as TENT `main`'s: the opened devices (each with a protection domain, a notify CQ and data CQs),
 * an endpoint store per device, the transport-wide QP-number table of notify QPs, the notify poller, the bootstrap
 * acceptor, and `sendNotification` over the first enabled local device to the peer's NIC 0.
 *
 * The notify poller is one per transport: it polls every notify CQ 16 completions a pass, maps each completion to its
 * endpoint through the QP-number table, decodes RECVs into the inbox and reposts the receive, and counts what it
 * drops (`unknownQp`, `malformed`, `flushed`, `notifyErrors`). It runs as the CQs' completion-channel listener
 * (synchronously, where the completion is announced) instead of TENT's thread with its 10 µs `usleep` loop, so a
 * notification reaches the inbox without a fiber wake-up. Bad input is counted, never thrown.
 *
 * @since 0.1.0
 */
import type { BootstrapDesc, DescriptorCache, Notification, RpcAgent, TransportFailure } from "@tent/rpc"
import { BootstrapRejected, NeedsRefreshCache, NotificationTooLarge } from "@tent/rpc"
import {
  type CompletionQueue,
  DeviceNotFound,
  EventType,
  type Mtu,
  type ProtectionDomain,
  type QueuePair,
  RdmaError,
  type VerbsShape,
  WcOpcode,
  WcStatus,
  WorkCompletion
} from "@tent/verbs"
import { Duration, Effect, type Scope, Stream } from "effect"
import type { DedupShape } from "./Dedup.js"
import { EndpointStore } from "./EndpointStore.js"
import type { EngineSettings } from "./EngineConfig.js"
import { EndpointUnavailable } from "./Errors.js"
import { Inbox, type Signal } from "./internal/Inbox.js"
import { DecodedRanges } from "./NotifyFrame.js"
import type { NotifyQpParamsShape } from "./NotifyQpParams.js"
import type { PeerHealthPolicyShape } from "./PeerHealth.js"
import type { QpRetirementShape } from "./QpRetirement.js"
import {
  type EndpointDevice,
  type EndpointHost,
  gidText,
  NOTIFY_SLOT_BYTES,
  NOTIFY_SLOTS,
  nicPath,
  parseNicPath,
  RdmaEndpoint
} from "./RdmaEndpoint.js"
import type { ResendShape } from "./Resend.js"

/** Completions the notify poller takes from one CQ per pass (TENT: 16). */
export const NOTIFY_POLL_BATCH = 16
/** How often retired endpoints are reclaimed (TENT's monitor thread: ≥ 1 s). */
export const RECLAIM_INTERVAL = Duration.seconds(1)

/** What the notify poller counted. */
export interface NotifyCounters {
  /** Notifications decoded and queued. */
  received: number
  /** Successful completions whose QP number was not in the table (dropped: TENT "unknown QP"). */
  unknownQp: number
  /** Payloads that did not decode (dropped, receive reposted). */
  malformed: number
  /** Frames the dedup policy dropped as duplicates. */
  duplicates: number
  /** Flushed completions of endpoints no longer READY (dropped silently, as TENT). */
  flushed: number
  /** Other failed completions (TENT logs "Notification completion failed"). */
  notifyErrors: number
  /** Notifications posted. */
  sent: number
}

/** One opened device. */
export interface RdmaDevice extends EndpointDevice {
  readonly index: number
  /** Its endpoints (TENT: a `SIEVEEndpointStore` of `endpoint_store_cap` per RDMA context). */
  readonly store: EndpointStore
  /** Port up (cleared by `PORT_ERR`, set by `PORT_ACTIVE`, as TENT pauses and resumes a context). */
  enabled: boolean
}

/** A completion on a data QP, handed to the data path. */
export type DataCompletionSink = (ep: RdmaEndpoint, lane: number, wc: WorkCompletion) => void

/** What the transport needs. */
export interface RdmaTransportDeps {
  readonly verbs: VerbsShape
  readonly settings: EngineSettings
  readonly agent: RpcAgent.RpcAgentShape
  readonly cache: DescriptorCache.DescriptorCacheShape
  readonly localServer: string
  readonly signal: Signal
  readonly retirement: QpRetirementShape
  readonly notifyParams: NotifyQpParamsShape
  readonly peerHealth: PeerHealthPolicyShape
  readonly dedup: DedupShape
  readonly resend: ResendShape
}

/** The peer a notification or slice goes to, resolved from its descriptor. */
export interface PeerTarget {
  readonly server: string
  readonly address: string
}

/** Errors of `sendNotification` on this transport. */
export type RdmaNotifyError =
  | DeviceNotFound
  | RdmaError
  | TransportFailure
  | BootstrapRejected
  | import("@tent/rpc").InvalidEntry
  | NotificationTooLarge
  | EndpointUnavailable

/** Test and inspection hooks. */
export interface EndpointInfo {
  readonly localNic: string
  readonly peerNicPath: string
  readonly status: string
  readonly notifyQpNum: number
  readonly dataQpNums: ReadonlyArray<number>
  readonly pending: number
  readonly connected: boolean
}

/** The RDMA transport. */
export interface RdmaTransport {
  readonly kind: "rdma"
  readonly devices: ReadonlyArray<RdmaDevice>
  readonly inbox: Inbox
  readonly counters: NotifyCounters
  /** TENT `RdmaTransport::sendNotification`: first enabled device → the peer's NIC 0. */
  readonly sendNotification: (segment: string, n: Notification) => Effect.Effect<void, RdmaNotifyError>
  /** The control-plane `Bootstrap` handler (TENT `onSetupRdmaConnections`). */
  readonly onBootstrap: (desc: BootstrapDesc) => Effect.Effect<BootstrapDesc, BootstrapRejected>
  /** The endpoint from `device` to the peer's `peerNic`, bootstrapped if needed (TENT `getEndpoint`). */
  readonly getEndpoint: (
    device: RdmaDevice,
    target: PeerTarget,
    peerNic: string
  ) => Effect.Effect<RdmaEndpoint, RdmaError | TransportFailure | BootstrapRejected | EndpointUnavailable>
  /** TENT `resetConnection`: retire and hand to the store's reclaim. From any fiber. */
  readonly resetConnection: (ep: RdmaEndpoint) => Effect.Effect<void>
  /** Installs the data path's completion handler and its slice canceller. */
  readonly setDataPath: (sink: DataCompletionSink, cancel: (ep: RdmaEndpoint) => void) => void
  /** Endpoints, for tests and tools. */
  readonly endpoints: Effect.Effect<ReadonlyArray<EndpointInfo>>
  /** Test hook: stop (or resume) the notify poller between passes, to hold completions unpolled. */
  readonly pauseNotifyPoller: (paused: boolean) => Effect.Effect<void>
  /** Test hook: retire the endpoint from `localNic` to `peerNicPath` from the calling fiber. */
  readonly retire: (localNic: string, peerNicPath: string) => Effect.Effect<boolean>
}

const mtuOf = (m: number): Mtu => m as Mtu

/** Opens the devices and starts the pollers; `undefined` when there is no device to use. */
export const make = (deps: RdmaTransportDeps): Effect.Effect<RdmaTransport | undefined, RdmaError, Scope.Scope> =>
  Effect.gen(function* () {
    const { settings } = deps
    const list = yield* Effect.orElseSucceed(deps.verbs.getDeviceList, () => [])
    const names = list
      .map((d) => d.name)
      .filter((n) => settings.whitelist.length === 0 || settings.whitelist.includes(n))
      .filter((n) => !settings.blacklist.includes(n))
    if (names.length === 0) return undefined

    const counters: NotifyCounters = {
      received: 0,
      unknownQp: 0,
      malformed: 0,
      duplicates: 0,
      flushed: 0,
      notifyErrors: 0,
      sent: 0
    }
    const inbox = new Inbox(deps.signal)
    /** TENT `notify_qp_to_endpoint_`: one table per transport, keyed by QP number only. */
    const notifyTable = new Map<number, RdmaEndpoint>()
    const dataTable = new Map<QueuePair, { ep: RdmaEndpoint; lane: number }>()
    /** Data QPs by device index, then QP number (QP numbers are per device). */
    const dataByNum: Array<Map<number, { ep: RdmaEndpoint; lane: number }>> = names.map(() => new Map())
    let sink: DataCompletionSink = () => {}
    let cancel: (ep: RdmaEndpoint) => void = () => {}
    const clock = yield* Effect.clock

    const host: EndpointHost = {
      localServer: deps.localServer,
      params: settings.endpoint,
      numLanes: settings.numLanes,
      retirement: deps.retirement,
      notifyParams: deps.notifyParams,
      peerHealth: deps.peerHealth,
      dedup: deps.dedup,
      resend: deps.resend,
      publishNotifyQp: (qpNum, ep) => void notifyTable.set(qpNum, ep),
      unpublishNotifyQp: (qpNum, ep) => {
        if (notifyTable.get(qpNum) === ep) notifyTable.delete(qpNum)
      },
      registerDataQp: (qp, ep, lane) => {
        dataTable.set(qp, { ep, lane })
        dataByNum[(ep.device as RdmaDevice).index]?.set(qp.qpNum, { ep, lane })
      },
      unregisterDataQp: (qp) => {
        const e = dataTable.get(qp)
        dataTable.delete(qp)
        if (e !== undefined) dataByNum[(e.ep.device as RdmaDevice).index]?.delete(qp.qpNum)
      },
      cancelSlices: (ep) => cancel(ep),
      clock
    }

    const devices: Array<RdmaDevice> = []
    for (const name of names) {
      const ctx = yield* deps.verbs
        .openDevice(name)
        .pipe(
          Effect.catchTag("DeviceNotFound", (e) =>
            Effect.fail(new RdmaError({ op: "ibv_open_device", errno: 19, message: e.message }))
          )
        )
      const pd: ProtectionDomain = yield* ctx.allocPd
      const port = yield* ctx.queryPort(settings.device.port)
      const sgidIndex = settings.device.gidIndex === -1 ? 0 : settings.device.gidIndex
      const gid = yield* ctx.queryGid(settings.device.port, sgidIndex)
      const notifyCq = yield* ctx.createCq(settings.device.maxCqe)
      const dataCqs: Array<CompletionQueue> = []
      for (let i = 0; i < settings.device.numCqList; i++) dataCqs.push(yield* ctx.createCq(settings.device.maxCqe))
      const device: RdmaDevice = {
        name,
        index: devices.length,
        pd,
        notifyCq,
        dataCqs,
        gid,
        gidText: gidText(gid),
        sgidIndex,
        activeMtu: mtuOf(port.activeMtu),
        store: new EndpointStore(settings.endpoint.endpointStoreCap),
        enabled: port.state === 4
      }
      devices.push(device)
      // TENT's monitor thread: PORT_ERR / DEVICE_FATAL pause the context, PORT_ACTIVE resumes it.
      yield* Stream.runForEach(ctx.asyncEvents, (event) =>
        Effect.sync(() => {
          if (event.eventType === EventType.PORT_ERR || event.eventType === EventType.DEVICE_FATAL) {
            device.enabled = false
          } else if (event.eventType === EventType.PORT_ACTIVE) {
            device.enabled = true
          }
        })
      ).pipe(Effect.forkScoped)
    }
    yield* Effect.addFinalizer(() =>
      Effect.forEach(devices, (d) => d.store.clear, { discard: true }).pipe(
        Effect.zipRight(
          Effect.sync(() => {
            for (const d of devices) {
              d.notifyCq.setNotify(null)
              for (const cq of d.dataCqs) cq.setNotify(null)
            }
          })
        )
      )
    )

    // -----------------------------------------------------------------------------------------------------------------
    // Notify poller (hot path: plain code per completion)
    // -----------------------------------------------------------------------------------------------------------------

    const wc = WorkCompletion.array(NOTIFY_POLL_BATCH)
    const ranges = new DecodedRanges()

    const handleRecv = (ep: RdmaEndpoint, index: number, byteLen: number): void => {
      const buf = ep.receiveBuffer
      if (buf === undefined || index < 0 || index >= NOTIFY_SLOTS || byteLen > NOTIFY_SLOT_BYTES) {
        counters.malformed++
        return
      }
      if (byteLen === 0) {
        ep.postRecv(index)
        return
      }
      const offset = index * NOTIFY_SLOT_BYTES
      const rc = deps.dedup.decode(buf, offset, byteLen, ranges, ep.peerNicPath)
      if (rc === 0) {
        counters.received++
        inbox.push({
          name: new Uint8Array(buf.subarray(ranges.nameStart, ranges.nameEnd)),
          msg: new Uint8Array(buf.subarray(ranges.msgStart, ranges.msgEnd))
        })
      } else if (rc < 0) {
        counters.duplicates++
      } else {
        counters.malformed++
      }
      ep.postRecv(index)
    }

    const handleNotify = (w: WorkCompletion): void => {
      const ep = notifyTable.get(w.qpNum)
      if (w.status !== WcStatus.SUCCESS) {
        if (w.status === WcStatus.WR_FLUSH_ERR && (ep === undefined || ep.status !== "READY")) counters.flushed++
        else counters.notifyErrors++
        return
      }
      if (ep === undefined) {
        counters.unknownQp++
        return
      }
      if (w.opcode === WcOpcode.RECV) handleRecv(ep, w.wrId, w.byteLen)
      else if (w.opcode === WcOpcode.SEND) ep.onSendComplete()
    }

    const notifyPass = (): number => {
      let total = 0
      for (const d of devices) {
        const n = d.notifyCq.pollCq(NOTIFY_POLL_BATCH, wc)
        for (let i = 0; i < n; i++) handleNotify(wc[i] as WorkCompletion)
        if (n > 0) total += n
      }
      return total
    }

    // The completion channel's listener is the poller: SoftVerbs (and the ibverbs channel) call it synchronously once
    // armed, so completions are handled where they are announced, without waking a fiber. A run polls every notify CQ
    // 16 completions a pass until all are empty, re-arms them and polls once more (a completion between the last
    // pass and the arm is not missed). While paused (test hook) the listener leaves the CQs unpolled and unarmed;
    // resuming runs the passes at once, from the resuming fiber.
    let paused = false
    let running = false
    const notifyRun = (): void => {
      if (paused || running) return
      running = true
      try {
        for (;;) {
          if (notifyPass() > 0) {
            if (paused) return
            continue
          }
          for (const d of devices) d.notifyCq.reqNotifyCq()
          if (notifyPass() === 0 || paused) return
        }
      } finally {
        running = false
      }
    }
    for (const d of devices) d.notifyCq.setNotify(notifyRun)
    notifyRun()

    // -----------------------------------------------------------------------------------------------------------------
    // Data CQ pollers: one per device, completions handed to the data path; like the notify poller, it is the CQs'
    // completion-channel listener, so a completion reaches the data path without a fiber wake-up.
    // -----------------------------------------------------------------------------------------------------------------

    for (const d of devices) {
      const dwc = WorkCompletion.array(64)
      const table = dataByNum[d.index] as Map<number, { ep: RdmaEndpoint; lane: number }>
      const pass = (): number => {
        let total = 0
        for (const cq of d.dataCqs) {
          const n = cq.pollCq(64, dwc)
          for (let i = 0; i < n; i++) {
            const w = dwc[i] as WorkCompletion
            const e = table.get(w.qpNum)
            if (e !== undefined) sink(e.ep, e.lane, w)
          }
          if (n > 0) total += n
        }
        return total
      }
      let inRun = false
      const dataRun = (): void => {
        if (inRun) return
        inRun = true
        try {
          for (;;) {
            if (pass() > 0) continue
            for (const cq of d.dataCqs) cq.reqNotifyCq()
            if (pass() === 0) return
          }
        } finally {
          inRun = false
        }
      }
      for (const cq of d.dataCqs) cq.setNotify(dataRun)
      dataRun()
    }

    // Reclaim retired endpoints (TENT's monitor thread, every ≥ 1 s).
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.zipRight(
          Effect.sleep(RECLAIM_INTERVAL),
          Effect.forEach(devices, (d) => d.store.reclaim, { discard: true })
        )
      )
    )

    // -----------------------------------------------------------------------------------------------------------------
    // Endpoints
    // -----------------------------------------------------------------------------------------------------------------

    const construct = (ep: RdmaEndpoint) => ep.lock.withPermits(1)(ep.construct)

    const callPeer = <A, E>(address: string, call: Effect.Effect<A, E>): Effect.Effect<A, E | TransportFailure> =>
      Effect.zipRight(
        deps.peerHealth.admit(address),
        call.pipe(
          Effect.tapBoth({
            onFailure: (e) =>
              (e as { _tag?: string })._tag === "TransportFailure"
                ? deps.peerHealth.record(address, e as TransportFailure)
                : Effect.void,
            onSuccess: () => deps.peerHealth.record(address, undefined)
          })
        )
      )

    const getEndpoint: RdmaTransport["getEndpoint"] = (device, target, peerNic) =>
      Effect.gen(function* () {
        const key = nicPath(target.server, peerNic)
        const ep = device.store.getOrInsert(key, () => new RdmaEndpoint(host, device, key, target.server))
        yield* construct(ep)
        yield* ep.connect((desc) => callPeer(target.address, deps.agent.bootstrap(target.address, desc)))
        return ep
      })

    const resetConnection = (ep: RdmaEndpoint): Effect.Effect<void> =>
      Effect.zipRight(
        ep.retire,
        Effect.sync(() => (ep.device as RdmaDevice).store.remove(ep))
      )

    const onBootstrap = (desc: BootstrapDesc): Effect.Effect<BootstrapDesc, BootstrapRejected> =>
      Effect.gen(function* () {
        const local = parseNicPath(desc.peer_nic_path)
        const remote = parseNicPath(desc.local_nic_path)
        if (local === undefined || remote === undefined) {
          return yield* new BootstrapRejected({
            message: `malformed NIC paths ${desc.local_nic_path} → ${desc.peer_nic_path}`
          })
        }
        const device = devices.find((d) => d.name === local.nic)
        if (device === undefined) {
          return yield* new BootstrapRejected({ message: `NOT_READY: no device ${local.nic}` })
        }
        const ep = device.store.getOrInsert(
          desc.local_nic_path,
          () => new RdmaEndpoint(host, device, desc.local_nic_path, remote.server)
        )
        yield* construct(ep).pipe(Effect.mapError((e) => new BootstrapRejected({ message: e.message })))
        return yield* ep.accept(desc).pipe(
          Effect.catchTag("RdmaError", (e) => Effect.fail(new BootstrapRejected({ message: e.message }))),
          Effect.tapError(() => Effect.sync(() => (ep.status === "DESTROYING" ? device.store.remove(ep) : undefined)))
        )
      })

    // -----------------------------------------------------------------------------------------------------------------
    // sendNotification
    // -----------------------------------------------------------------------------------------------------------------

    const resolve = (segment: string) =>
      deps.cache.withSegment(segment, (desc) => {
        const nic = desc.devices[0]?.name
        return nic === undefined || desc.rpc_server_addr === "" || desc.name === ""
          ? Effect.fail(new NeedsRefreshCache({ segment, message: "segment has no RDMA device or RPC address" }))
          : Effect.succeed({ target: { server: desc.name, address: desc.rpc_server_addr }, nic })
      })

    const post = (ep: RdmaEndpoint, n: Notification): Effect.Effect<void, RdmaNotifyError> =>
      Effect.suspend(() => {
        const rc = ep.postNotification(n)
        if (rc === 0) {
          counters.sent++
          return Effect.void
        }
        if (rc === -1) {
          return Effect.fail(
            new NotificationTooLarge({ size: n.name.length + n.msg.length, max: deps.dedup.maxPayload })
          )
        }
        if (rc === -2) {
          if (!ep.connected) {
            return Effect.fail(
              new EndpointUnavailable({
                segment: ep.segment,
                peerNicPath: ep.peerNicPath,
                message: "Notification QP not connected"
              })
            )
          }
          return Effect.zipRight(ep.awaitSlot, post(ep, n))
        }
        return Effect.fail(new RdmaError({ op: "ibv_post_send", errno: rc, message: "posting a notification failed" }))
      })

    // The endpoint each segment's notifications went to last. While it stays READY and the first enabled device is
    // still its device, a notification is posted at once: the same outcome as the full path below (descriptor from
    // the cache, the endpoint from the store, a free slot), without its Effects. Anything else takes the full path.
    const lastEndpoint = new Map<string, RdmaEndpoint>()

    const sendNotification = (segment: string, n: Notification): Effect.Effect<void, RdmaNotifyError> =>
      Effect.suspend(() => {
        const ep = lastEndpoint.get(segment)
        if (ep !== undefined && ep.status === "READY" && ep.connected && ep.device === devices.find((d) => d.enabled)) {
          const rc = ep.postNotification(n)
          if (rc === 0) {
            counters.sent++
            void (ep.device as RdmaDevice).store.get(ep.peerNicPath) // a use, for SIEVE (as the full path's lookup)
            return Effect.void
          }
          if (rc === -1) {
            return Effect.fail(
              new NotificationTooLarge({ size: n.name.length + n.msg.length, max: deps.dedup.maxPayload })
            )
          }
        }
        return sendNotificationFull(segment, n)
      })

    const sendNotificationFull = (segment: string, n: Notification): Effect.Effect<void, RdmaNotifyError> =>
      Effect.gen(function* () {
        const device = devices.find((d) => d.enabled)
        if (device === undefined) {
          return yield* new DeviceNotFound({
            available: devices.map((d) => d.name),
            message: "no enabled RDMA device for notifications"
          })
        }
        const { nic, target } = yield* resolve(segment)
        const ep = yield* getEndpoint(device, target, nic)
        lastEndpoint.set(segment, ep)
        yield* Effect.zipRight(ep.awaitSlot, post(ep, n))
      }) as Effect.Effect<void, RdmaNotifyError>

    const find = (localNic: string, peerNicPath: string) =>
      devices.find((d) => d.name === localNic)?.store.active.get(peerNicPath)

    return {
      kind: "rdma",
      devices,
      inbox,
      counters,
      sendNotification,
      onBootstrap,
      getEndpoint,
      resetConnection,
      setDataPath: (s, c) => {
        sink = s
        cancel = c
      },
      endpoints: Effect.sync(() =>
        devices.flatMap((d) =>
          Array.from(d.store.active.values(), (ep) => ({
            localNic: d.name,
            peerNicPath: ep.peerNicPath,
            status: ep.status,
            notifyQpNum: ep.notifyQpNum,
            dataQpNums: ep.dataQps.map((q) => q.qpNum),
            pending: ep.pending,
            connected: ep.connected
          }))
        )
      ),
      pauseNotifyPoller: (p) =>
        Effect.sync(() => {
          paused = p
          if (!p) notifyRun()
        }),
      retire: (localNic, peerNicPath) =>
        Effect.suspend(() => {
          const ep = find(localNic, peerNicPath)
          return ep === undefined ? Effect.succeed(false) : Effect.as(resetConnection(ep), true)
        })
    } satisfies RdmaTransport
  })
