/**
 * The RDMA contexts, as TENT's `RdmaContext` (`context.cpp`): each device opened with a protection domain, a notify
 * CQ, `num_cq_list` data CQs (at most the device's `max_cqe` each), its port (`device/port`: its link layer, LID and
 * limits) and GID, and its async events (TENT's monitor thread: `PORT_ERR` and
 * `DEVICE_FATAL` pause the context, `PORT_ACTIVE` resumes it). The data CQ poller of each device lives here too: it
 * runs as the CQs' completion-channel listener and hands each completion to the slice engine.
 */
import {
  autoSelectGid,
  type CompletionQueue,
  type DeviceContext,
  Errno,
  EventType,
  type Mtu,
  type ProtectionDomain,
  Rc,
  RdmaError,
  type VerbsShape,
  type WorkCompletion,
  WorkCompletion as WorkCompletions
} from "@tent/verbs"
import { Effect, type Scope, Stream } from "effect"
import type { EngineSettings } from "../../EngineConfig.js"
import { EndpointStore } from "../EndpointStore.js"
import { makeSharedRecv, SharedRecv } from "../SharedRecv.js"
import { isImmRecv } from "./DataRecvs.js"
import { gidText } from "./NicPath.js"
import type { EndpointDevice, RdmaEndpoint } from "./RdmaEndpoint.js"

/** One opened device. */
export interface RdmaDevice extends EndpointDevice {
  readonly index: number
  /** Its endpoints (TENT: a `SIEVEEndpointStore` of `endpoint_store_cap` per RDMA context). */
  readonly store: EndpointStore
  /** Port up (cleared by `PORT_ERR`, set by `PORT_ACTIVE`, as TENT pauses and resumes a context). */
  enabled: boolean
}

/** A completion on a data QP, handed to the slice engine. */
export type DataCompletionSink = (ep: RdmaEndpoint, lane: number, wc: WorkCompletion) => void

/** The devices the settings select (`topology/rdma_whitelist`, `topology/rdma_blacklist`); none if no device. */
export const selectDevices = (verbs: VerbsShape, settings: EngineSettings): Effect.Effect<ReadonlyArray<string>> =>
  Effect.map(
    Effect.orElseSucceed(verbs.getDeviceList, () => []),
    (list) =>
      list
        .map((d) => d.name)
        .filter((n) => settings.whitelist.length === 0 || settings.whitelist.includes(n))
        .filter((n) => !settings.blacklist.includes(n))
  )

/**
 * The GID a device's QPs use: `gid_index` -1 picks one as TENT does (`autoSelectGid`: RoCE v2 IPv4-mapped or IB on a
 * non-overlay network device first); an explicit index must be inside the port's table. A zero GID fails, as in TENT.
 */
const resolveGid = (ctx: DeviceContext, name: string, portNum: number, gidIndex: number) =>
  Effect.gen(function* () {
    let sgidIndex = gidIndex
    if (gidIndex < 0) {
      const picked = yield* autoSelectGid(ctx, portNum)
      sgidIndex = picked.entry.index
      yield* Effect.logDebug(
        `${name} port ${portNum}: GID index ${sgidIndex} chosen automatically (${picked.choice}` +
          `${picked.entry.ndev === "" ? "" : `, ${picked.entry.ndev}`})`
      )
    } else {
      const port = yield* ctx.queryPort(portNum)
      if (gidIndex >= port.gidTblLen) {
        return yield* new RdmaError({
          op: "ibv_query_gid",
          errno: Errno.EINVAL,
          message:
            `transports/rdma/device/gid_index ${gidIndex} is past the GID table of ${name} port ` +
            `${portNum} (${port.gidTblLen} entries)`
        })
      }
    }
    const gid = yield* ctx.queryGid(portNum, sgidIndex)
    if (gid.every((b) => b === 0)) {
      return yield* new RdmaError({
        op: "ibv_query_gid",
        errno: Errno.EINVAL,
        message: `GID ${sgidIndex} of ${name} port ${portNum} is empty (transports/rdma/device/gid_index)`
      })
    }
    return { sgidIndex, gid }
  })

/**
 * The device's shared notify receive ring (`notify/shared_recv`), its depth at most the device's `max_srq_wr`; none
 * (each endpoint then keeps receive slots of its own, said in a warning) when the provider has no SRQs or refuses one.
 */
const openSharedRecv = (name: string, pd: ProtectionDomain, settings: EngineSettings, maxSrqWr: number | undefined) =>
  Effect.gen(function* () {
    const n = settings.notify
    if (n.sharedRecv !== true) return undefined
    const maxSlots = Math.min(n.sharedRecvMaxSlots ?? 4096, maxSrqWr ?? Number.POSITIVE_INFINITY)
    const slots = Math.min(n.sharedRecvSlots ?? 256, maxSlots)
    const made: SharedRecv | string | undefined =
      maxSlots < 1
        ? "the device reports no SRQ: max_srq_wr 0"
        : yield* Effect.catchAll(makeSharedRecv(pd, { slots, maxSlots, slotBytes: n.slotBytes, perQp: n.slots }), (e) =>
            Effect.succeed(e.message)
          )
    if (made instanceof SharedRecv) return made
    yield* Effect.logWarning(
      `${name}: transports/rdma/notify/shared_recv is not used (${made ?? "the verbs provider has no SRQs"}); ` +
        "each endpoint keeps receive slots of its own"
    )
    return undefined
  })

/** Opens `names` (closed with the scope) and follows each one's port events. */
export const openDevices = (
  verbs: VerbsShape,
  settings: EngineSettings,
  names: ReadonlyArray<string>
): Effect.Effect<ReadonlyArray<RdmaDevice>, RdmaError, Scope.Scope> =>
  Effect.gen(function* () {
    const devices: Array<RdmaDevice> = []
    for (const name of names) {
      const ctx = yield* verbs
        .openDevice(name)
        .pipe(
          Effect.catchTag("DeviceNotFound", (e) =>
            Effect.fail(new RdmaError({ op: "ibv_open_device", errno: 19, message: e.message }))
          )
        )
      const pd = yield* ctx.allocPd
      // TENT's `device/port` (not always 1), its link layer and LID, and what the device allows.
      const limits = yield* Rc.queryLimits(ctx, settings.device.port)
      const port = limits.port
      const { sgidIndex, gid } = yield* resolveGid(ctx, name, settings.device.port, settings.device.gidIndex)
      const cqe = Rc.clampCqe(settings.device.maxCqe, limits)
      const notifyCq = yield* ctx.createCq(cqe)
      const dataCqs: Array<CompletionQueue> = []
      for (let i = 0; i < settings.device.numCqList; i++) dataCqs.push(yield* ctx.createCq(cqe))
      const sharedRecv = yield* openSharedRecv(name, pd, settings, limits.device?.maxSrqWr)
      const device: RdmaDevice = {
        name,
        index: devices.length,
        pd,
        notifyCq,
        dataCqs,
        gid,
        gidText: gidText(gid),
        sgidIndex,
        activeMtu: port.activeMtu as Mtu,
        limits,
        store: new EndpointStore(settings.endpoint.endpointStoreCap),
        sharedRecv,
        enabled: port.state === 4
      }
      devices.push(device)
      yield* Stream.runForEach(ctx.asyncEvents, (event) =>
        Effect.sync(() => {
          if (event.eventType === EventType.PORT_ERR || event.eventType === EventType.DEVICE_FATAL) {
            device.enabled = false
          } else if (event.eventType === EventType.PORT_ACTIVE) {
            device.enabled = true
          } else if (event.eventType === EventType.SRQ_LIMIT_REACHED) {
            device.sharedRecv?.onLimit()
          }
        })
      ).pipe(Effect.forkScoped)
    }
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        for (const d of devices) {
          d.notifyCq.setNotify(null)
          for (const cq of d.dataCqs) cq.setNotify(null)
        }
      })
    )
    return devices
  })

/**
 * Polls `device`'s data CQs 64 completions a pass as their completion-channel listener, handing each completion of a
 * QP in `table` (QP number → endpoint and lane) to `sink()` (read per completion: the slice engine installs it), and
 * each of the data QPs' receives (immediates, `Immediates.ts`) to `imm`.
 * Returns how to pause it (completions stay in the CQ) and resume it (the CQ is polled at once).
 */
export const pollData = (
  device: RdmaDevice,
  table: ReadonlyMap<number, { readonly ep: RdmaEndpoint; readonly lane: number }>,
  sink: () => DataCompletionSink,
  imm: DataCompletionSink
): ((paused: boolean) => void) => {
  const wc = WorkCompletions.array(64)
  let paused = false
  const pass = (): number => {
    let total = 0
    const deliver = sink()
    for (const cq of device.dataCqs) {
      const n = cq.pollCq(64, wc)
      for (let i = 0; i < n; i++) {
        const w = wc[i] as WorkCompletion
        const e = table.get(w.qpNum)
        if (e === undefined) continue
        if (isImmRecv(w.wrId)) imm(e.ep, e.lane, w)
        else deliver(e.ep, e.lane, w)
      }
      if (n > 0) total += n
    }
    return total
  }
  let inRun = false
  const run = (): void => {
    if (inRun || paused) return
    inRun = true
    try {
      for (;;) {
        if (pass() > 0) continue
        for (const cq of device.dataCqs) cq.reqNotifyCq()
        if (pass() === 0) return
      }
    } finally {
      inRun = false
    }
  }
  for (const cq of device.dataCqs) cq.setNotify(run)
  run()
  return (p) => {
    paused = p
    if (!p) run()
  }
}
