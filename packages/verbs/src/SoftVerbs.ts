/**
 * `SoftVerbs`: the `Verbs` service over UDP sockets, for hosts without an RDMA NIC, for tests and the demo. Each
 * configured device is one UDP socket (`host:port`); a process may open several to model several NICs. A QP is an
 * InfiniBand RC state machine (see `soft/SoftQp.ts`), so QPs die, retry, RNR and flush as they do on hardware, between
 * real processes over real sockets.
 *
 * `SoftVerbsControl` is the fault-injection handle: packet loss and delay per device or per peer, port down/up,
 * forcing a QP to ERR from outside its owner, and the device counters. `setQpToken` gives a QP a 64-bit token that
 * every datagram for it must carry (`soft/Token.ts`), against a host that forges the peer's source address.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, type Scope, Stream } from "effect"
import { AccessFlags, Errno, GidType, LinkLayer, Mtu } from "./Constants.js"
import { DeviceNotFound, type InvalidFaults, RdmaError } from "./Errors.js"
import { softGid } from "./soft/Address.js"
import { DEFAULT_TRIM_THRESHOLD, type HeapTrim, heapTrim, keepHeapTop } from "./soft/Heap.js"
import { DEFAULT_SCAVENGE_EVERY_BYTES, paceScavenges, pacing, type ScavengePacing } from "./soft/Scavenge.js"
import { SoftCq } from "./soft/SoftCq.js"
import {
  checkDeviceConfig,
  type SocketBuffers,
  type SoftCounters,
  SoftDevice,
  type SoftDeviceConfig,
  type SoftFaults
} from "./soft/SoftDevice.js"
import type { SoftQp } from "./soft/SoftQp.js"
import { createSrq, usableSrq } from "./soft/SoftSrq.js"
import {
  type AsyncEvent,
  type CompletionQueue,
  type DeviceContext,
  type DeviceInfo,
  type MemoryRegion,
  type PortAttr,
  type ProtectionDomain,
  type QpInitAttr,
  type QueuePair,
  Verbs,
  type VerbsShape
} from "./Verbs.js"

export type {
  /**
   * The tokens of a SoftVerbs QP: `local`, required on every datagram it receives (0n: none), and `remote`, carried
   * on every datagram it sends (the peer QP's `local`).
   *
   * @since 0.2.0
   */
  QpToken
} from "./soft/Token.js"

export {
  /**
   * A random non-zero 64-bit token (system CSPRNG) for a QP to require: send it to the peer, which sets it as its
   * QP's `remote`.
   *
   * @since 0.2.0
   */
  randomToken,
  /**
   * Sets a SoftVerbs QP's token (`{ local, remote }`): a datagram for the QP without `local` is dropped and counted
   * (`badToken`) before it can complete anything, change memory or move the QP's state; what the QP sends carries
   * `remote`. `local` 0n checks nothing (the default). Succeeds with false on another provider's QP (left as it is);
   * EINVAL for a value outside 0..2^64-1 or a destroyed QP. Kept across RESET; set it before RTR.
   *
   * @since 0.2.0
   */
  setQpToken
} from "./soft/Token.js"
export type {
  /**
   * What setting glibc's trim threshold did: `Set` with the threshold in bytes, or `Left` with the reason the heap was
   * left as it was.
   *
   * @since 0.1.0
   */
  HeapTrim,
  /**
   * Whether the paced young-generation GCs run: `Paced` every so many bytes of datagrams read, or `Off` and why.
   *
   * @since 0.1.0
   */
  ScavengePacing,
  /**
   * A device's socket buffers: the bytes asked for, and the receive and send sizes the kernel granted.
   *
   * @since 0.1.0
   */
  SocketBuffers,
  /**
   * The counters of a SoftVerbs device (a snapshot from `SoftVerbsControlShape.counters`).
   *
   * @since 0.1.0
   */
  SoftCounters,
  /**
   * A SoftVerbs device's name, where it listens (`host:port`), the socket buffer size it asks for and how late an RDMA
   * WRITE's payload may land after its ACK (`placementDelayMs`, default 0).
   *
   * @since 0.1.0
   */
  SoftDeviceConfig,
  /**
   * Packet loss and delay to inject, device-wide or towards and from one peer device.
   *
   * @since 0.1.0
   */
  SoftFaults
}

/**
 * Limits of a SoftVerbs device (what `ibv_query_device` would report).
 *
 * @since 0.1.0
 */
export const limits = {
  maxQpWr: 16384,
  maxSge: 16,
  maxCqe: 1 << 20,
  maxInlineData: 4096,
  maxMrSize: 2 ** 31
} as const

/**
 * Options of the SoftVerbs provider.
 *
 * @since 0.1.0
 */
export interface SoftVerbsOptions {
  /** The devices to create (each binds one UDP socket). */
  readonly devices: ReadonlyArray<SoftDeviceConfig>
  /**
   * Bytes of free C heap glibc keeps at the top of its heap instead of returning them to the kernel
   * (`mallopt(M_TRIM_THRESHOLD)`, process-wide). Node allocates every received datagram's memory there; with glibc's
   * 128 KiB default a receiving process could fault every packet's page in afresh (see `soft/Heap.ts`). Default
   * 64 MiB; 0 leaves the heap as it is (a threshold set earlier in the process stays). Without glibc it is left as it
   * is (`SoftVerbsControl.heap` says so).
   */
  readonly mallocTrimThreshold?: number
  /**
   * Bytes of datagrams read (all devices of the process together) after which a device runs a young-generation GC
   * itself, so that dead datagrams are swept before V8 counts them as external memory pressure and starts full GCs
   * (see `soft/Scavenge.ts`). Process-wide. Default 4 MiB; 0 leaves V8 to itself.
   */
  readonly scavengeEveryBytes?: number
}

/**
 * What SoftVerbs did to this process's heaps (both settings are process-wide, as last set).
 *
 * @since 0.1.0
 */
export interface HeapSettings {
  /** glibc's trim threshold (`mallocTrimThreshold`). */
  readonly trim: HeapTrim
  /** The paced scavenges (`scavengeEveryBytes`). */
  readonly scavenge: ScavengePacing
  /** Paced scavenges run so far in this process. */
  readonly scavenges: number
}

/**
 * The fault-injection and inspection handle of the SoftVerbs devices of this process.
 *
 * @since 0.1.0
 */
export interface SoftVerbsControlShape {
  /** The devices, in configuration order. */
  readonly devices: ReadonlyArray<SoftDevice>
  /** The device with this name, or `DeviceNotFound`. */
  device(name: string): Effect.Effect<SoftDevice, DeviceNotFound>
  /** The `host:port` a device listens on (what a peer uses in `setFaults(..., peer)`). */
  address(name: string): Effect.Effect<string, DeviceNotFound>
  /**
   * Packet loss and delay, device-wide or for one peer (`host:port`); `{}` clears. A value out of range (a drop rate
   * outside 0..1, a negative or non-finite delay, NaN), an unknown key or a malformed peer fails `InvalidFaults`
   * naming the field, and changes nothing.
   */
  setFaults(name: string, faults: SoftFaults, peer?: string): Effect.Effect<void, DeviceNotFound | InvalidFaults>
  /** Port down (all traffic lost, `PORT_ERR`) or up (`PORT_ACTIVE`). */
  setPortState(name: string, up: boolean): Effect.Effect<void, DeviceNotFound>
  /** Moves a QP to ERR from outside its owner; `RdmaError` ENOENT when the device has no such QP. */
  forceQpError(name: string, qpNum: number): Effect.Effect<void, DeviceNotFound | RdmaError>
  /** A snapshot of the device's counters. */
  counters(name: string): Effect.Effect<SoftCounters, DeviceNotFound>
  /** What was done to the C heap and to V8's (`mallocTrimThreshold`, `scavengeEveryBytes`), process-wide. */
  readonly heap: () => HeapSettings
}

/**
 * The SoftVerbs control handle.
 *
 * @since 0.1.0
 */
export class SoftVerbsControl extends Context.Tag("@tent/verbs/SoftVerbsControl")<
  SoftVerbsControl,
  SoftVerbsControlShape
>() {}

const notFound = (name: string, devices: ReadonlyArray<SoftDevice>) =>
  new DeviceNotFound({
    reason: devices.length === 0 ? "NoDevices" : "Absent",
    device: name,
    available: devices.map((d) => d.name),
    message:
      devices.length === 0
        ? `SoftVerbs device "${name}" not found: no SoftVerbs devices are configured (give SoftVerbs.layer at least one device)`
        : `SoftVerbs device "${name}" not found; present: ${devices.map((d) => d.name).join(", ")}`
  })

const rdmaError = (op: string, errno: number, message: string) => new RdmaError({ op, errno, message })

const within = (v: number, lo: number, hi: number) => Number.isInteger(v) && v >= lo && v <= hi

const checkCap = (init: QpInitAttr): string | undefined => {
  const c = init.cap
  if (!within(c.maxSendWr, 1, limits.maxQpWr)) return `cap.max_send_wr must be in 1..${limits.maxQpWr}`
  if (!within(c.maxSendSge, 1, limits.maxSge)) return `cap.max_send_sge must be in 1..${limits.maxSge}`
  // With an SRQ the receive capacities are the SRQ's (verbs ignores the QP's).
  const own = init.srq === undefined
  if (own && !within(c.maxRecvWr, 1, limits.maxQpWr)) return `cap.max_recv_wr must be in 1..${limits.maxQpWr}`
  if (own && !within(c.maxRecvSge, 1, limits.maxSge)) return `cap.max_recv_sge must be in 1..${limits.maxSge}`
  if (!within(c.maxInlineData, 0, limits.maxInlineData)) {
    return `cap.max_inline_data must be in 0..${limits.maxInlineData}`
  }
  if (init.qpType !== 2) return "SoftVerbs implements RC QPs only (qp_type IBV_QPT_RC = 2)"
  return undefined
}

const makeContext = (device: SoftDevice): DeviceContext => {
  const info: DeviceInfo = { name: device.name, guid: device.guid }
  const ownCq = (cq: CompletionQueue): cq is SoftCq => cq instanceof SoftCq
  const makePd = (pdId: number): ProtectionDomain => ({
    regMr: (buffer, access) =>
      Effect.acquireRelease(
        Effect.suspend(() => {
          if (!Buffer.isBuffer(buffer)) return Effect.fail(rdmaError("ibv_reg_mr", Errno.EINVAL, "not a Buffer"))
          if (!Number.isInteger(access) || access < 0) {
            return Effect.fail(
              rdmaError("ibv_reg_mr", Errno.EINVAL, `access must be IBV_ACCESS_* flags, got ${access}`)
            )
          }
          // As libibverbs and the kernel: remote write or atomic access to memory the NIC may not write locally is
          // refused (IBV_ACCESS_REMOTE_WRITE / REMOTE_ATOMIC require IBV_ACCESS_LOCAL_WRITE).
          if (
            (access & (AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_ATOMIC)) !== 0 &&
            (access & AccessFlags.LOCAL_WRITE) === 0
          ) {
            return Effect.fail(
              rdmaError("ibv_reg_mr", Errno.EINVAL, "REMOTE_WRITE and REMOTE_ATOMIC access require LOCAL_WRITE")
            )
          }
          if (buffer.length > limits.maxMrSize) {
            return Effect.fail(rdmaError("ibv_reg_mr", Errno.EINVAL, `MR larger than ${limits.maxMrSize} bytes`))
          }
          const mr = device.registerMr(buffer, access, pdId)
          return Effect.succeed(mr satisfies MemoryRegion)
        }),
        (mr) => Effect.sync(() => device.deregisterMr(mr))
      ),
    createQp: (init) =>
      Effect.acquireRelease(
        Effect.suspend(() => {
          const bad = checkCap(init)
          if (bad !== undefined) return Effect.fail(rdmaError("ibv_create_qp", Errno.EINVAL, bad))
          if (!ownCq(init.sendCq) || !ownCq(init.recvCq)) {
            return Effect.fail(rdmaError("ibv_create_qp", Errno.EINVAL, "send_cq and recv_cq must be SoftVerbs CQs"))
          }
          const srq = init.srq
          if (srq !== undefined && !usableSrq(srq, device, pdId)) {
            return Effect.fail(rdmaError("ibv_create_qp", Errno.EINVAL, "srq must be a live SRQ of the QP's PD"))
          }
          if (device.isClosed) return Effect.fail(rdmaError("ibv_create_qp", Errno.ENODEV, "device closed"))
          const qp = device.createQp(pdId, init.sendCq, init.recvCq, init.cap, init.sqSigAll === true, srq?.queue)
          attachEffects(device, qp)
          return Effect.succeed(qp as QueuePair)
        }),
        (qp) => Effect.sync(() => device.destroyQp(qp as SoftQp))
      ),
    createSrq: (init) => createSrq(device, pdId, init, limits)
  })
  return {
    device: info,
    queryPort: (portNum) =>
      portNum === 1
        ? Effect.sync(
            (): PortAttr => ({
              state: device.portState,
              maxMtu: Mtu.MTU_4096,
              activeMtu: Mtu.MTU_4096,
              gidTblLen: 1,
              lid: 0,
              linkLayer: LinkLayer.ETHERNET,
              activeSpeed: 0,
              activeWidth: 0
            })
          )
        : Effect.fail(rdmaError("ibv_query_port", Errno.EINVAL, `SoftVerbs devices have one port (1), not ${portNum}`)),
    queryGid: (portNum, index) =>
      portNum === 1 && index === 0
        ? Effect.sync(() => softGid(device.host, device.port))
        : Effect.fail(rdmaError("ibv_query_gid", Errno.EINVAL, "SoftVerbs ports have one GID: port 1, index 0")),
    // The one GID, typed RoCE v2 and bound to no kernel network device; auto-selection picks it as the only one.
    queryGidEntry: (portNum, index) =>
      portNum === 1 && index === 0
        ? Effect.sync(() => ({ index, gid: softGid(device.host, device.port), gidType: GidType.ROCE_V2, ndev: "" }))
        : Effect.fail(rdmaError("ibv_query_gid_ex", Errno.EINVAL, "SoftVerbs ports have one GID: port 1, index 0")),
    allocPd: Effect.acquireRelease(
      Effect.sync(() => makePd(device.allocPd())),
      () => Effect.void
    ),
    createCq: (cqe) =>
      Effect.acquireRelease(
        Number.isInteger(cqe) && cqe >= 1 && cqe <= limits.maxCqe
          ? Effect.sync(() => device.createCq(cqe) as CompletionQueue)
          : Effect.fail(rdmaError("ibv_create_cq", Errno.EINVAL, `cqe must be in 1..${limits.maxCqe}, got ${cqe}`)),
        (cq) => Effect.sync(() => (cq as SoftCq).destroy())
      ),
    asyncEvents: Stream.async<AsyncEvent>((emit) => {
      const unsubscribe = device.subscribe((event) => {
        void emit.single(event)
      })
      return Effect.sync(unsubscribe)
    })
  }
}

const attachEffects = (device: SoftDevice, qp: SoftQp): void => {
  qp.modifyQp = (attr, mask) =>
    Effect.suspend(() => {
      let failure: ReturnType<SoftQp["modify"]>
      device.run(() => {
        failure = qp.modify(attr, mask)
      })
      return failure === undefined
        ? Effect.void
        : Effect.fail(rdmaError("ibv_modify_qp", failure.errno, failure.message))
    })
  qp.queryQp = () => Effect.sync(() => qp.query())
  qp.destroy = Effect.sync(() => device.destroyQp(qp))
}

/**
 * One line per device: the socket buffers the kernel granted and the window they allow. A warning when the kernel
 * granted less than was asked (its `net.core.rmem_max`/`wmem_max` are lower), since the window shrinks with them.
 */
const logSocketBuffers = (device: SoftDevice): Effect.Effect<void> => {
  const { asked, recv, send } = device.socketBuffers
  // Linux reports twice what it grants to a request (the other half is its bookkeeping).
  const capped = recv < 2 * asked || send < 2 * asked
  const line =
    `SoftVerbs device "${device.name}" (${device.host}:${device.port}): SO_RCVBUF ${recv} B and SO_SNDBUF ${send} B ` +
    `granted for ${asked} B asked; window ${device.windowFor(4096)} packets per QP at path MTU 4096` +
    (capped
      ? " (the kernel capped the buffers: raise net.core.rmem_max and net.core.wmem_max for a larger window)"
      : "")
  return capped ? Effect.logWarning(line) : Effect.logDebug(line)
}

/**
 * Creates the devices (binding their sockets) and the two services; everything closes with the scope. A device named
 * twice, or a setting out of range (`socketBufferBytes`, `placementDelayMs`, `mallocTrimThreshold`,
 * `scavengeEveryBytes`), fails `RdmaError` EINVAL naming it, before any socket is bound.
 *
 * @since 0.1.0
 */
export const make = (
  options: SoftVerbsOptions
): Effect.Effect<{ readonly verbs: VerbsShape; readonly control: SoftVerbsControlShape }, RdmaError, Scope.Scope> =>
  Effect.gen(function* () {
    const names = new Set<string>()
    for (const d of options.devices) {
      if (names.has(d.name)) {
        return yield* Effect.fail(
          rdmaError("ibv_open_device", Errno.EINVAL, `device name "${d.name}" is configured twice`)
        )
      }
      names.add(d.name)
      const bad = checkDeviceConfig(d)
      if (bad !== undefined) return yield* Effect.fail(rdmaError("ibv_open_device", Errno.EINVAL, bad))
    }
    const trim = options.mallocTrimThreshold ?? DEFAULT_TRIM_THRESHOLD
    if (!(Number.isSafeInteger(trim) && trim >= 0 && trim <= 2 ** 31 - 1)) {
      return yield* Effect.fail(
        rdmaError(
          "ibv_open_device",
          Errno.EINVAL,
          `mallocTrimThreshold must be an integer of bytes from 0 (the C library's setting) to 2^31-1, got ${trim}`
        )
      )
    }
    const every = options.scavengeEveryBytes ?? DEFAULT_SCAVENGE_EVERY_BYTES
    if (!(Number.isSafeInteger(every) && every >= 0)) {
      return yield* Effect.fail(
        rdmaError(
          "ibv_open_device",
          Errno.EINVAL,
          `scavengeEveryBytes must be an integer of bytes, 0 (V8 scavenges by itself) or more, got ${every}`
        )
      )
    }
    const paced = paceScavenges(every)
    yield* paced._tag === "Paced"
      ? Effect.logDebug(`SoftVerbs: a young-generation GC after every ${every} bytes of datagrams read`)
      : Effect.logDebug(`SoftVerbs: scavenges not paced: ${paced.reason}`)
    const heap = keepHeapTop(trim)
    yield* heap._tag === "Set"
      ? Effect.logDebug(`SoftVerbs: the C heap keeps up to ${trim} free bytes at its top`)
      : Effect.logDebug(`SoftVerbs: the C heap's trim threshold left as it is: ${heap.reason}`)
    const devices: Array<SoftDevice> = []
    for (const config of options.devices) {
      const device = yield* Effect.acquireRelease(
        Effect.tryPromise({
          try: () => SoftDevice.open(config),
          catch: (err) =>
            rdmaError(
              "bind",
              Math.abs((err as { errno?: number }).errno ?? Errno.EIO),
              `cannot bind SoftVerbs device "${config.name}" to ${config.host ?? "127.0.0.1"}:${config.port ?? 0}: ${(err as Error).message}`
            )
        }),
        (d) => Effect.promise(() => d.close())
      )
      yield* logSocketBuffers(device)
      devices.push(device)
    }
    const find = (name: string) => {
      const d = devices.find((x) => x.name === name)
      return d === undefined ? Effect.fail(notFound(name, devices)) : Effect.succeed(d)
    }
    const verbs: VerbsShape = {
      provider: "soft",
      getDeviceList: Effect.sync(() => devices.map((d) => ({ name: d.name, guid: d.guid }))),
      openDevice: (name) =>
        Effect.flatMap(find(name), (d) =>
          Effect.acquireRelease(
            Effect.sync(() => makeContext(d)),
            () => Effect.void
          )
        )
    }
    const control: SoftVerbsControlShape = {
      devices,
      device: find,
      address: (name) => Effect.map(find(name), (d) => `${d.host}:${d.port}`),
      setFaults: (name, faults, peer) =>
        Effect.flatMap(find(name), (d) =>
          Effect.suspend(() => {
            const bad = d.setFaults(faults, peer)
            return bad === undefined ? Effect.void : Effect.fail(bad)
          })
        ),
      setPortState: (name, up) => Effect.flatMap(find(name), (d) => Effect.sync(() => d.setPortState(up))),
      forceQpError: (name, qpNum) =>
        Effect.flatMap(find(name), (d) =>
          d.forceQpError(qpNum)
            ? Effect.void
            : Effect.fail(rdmaError("force_qp_error", Errno.ENOENT, `device "${name}" has no QP ${qpNum}`))
        ),
      counters: (name) => Effect.map(find(name), (d) => ({ ...d.counters })),
      heap: () => ({ trim: heapTrim(), scavenge: pacing.state, scavenges: pacing.scavenges })
    }
    return { verbs, control }
  })

/**
 * The SoftVerbs provider as a Layer: `Verbs` and `SoftVerbsControl`.
 *
 * @example
 * ```ts
 * import { gidToString, SoftVerbs, Verbs } from "@tent/verbs"
 * import { Effect } from "effect"
 *
 * const program = Effect.gen(function* () {
 *   const verbs = yield* Verbs
 *   const context = yield* verbs.openDevice("soft0")
 *   const port = yield* context.queryPort(1)
 *   const gid = yield* context.queryGid(1, 0)
 *   console.log(context.device.name, port.state, gidToString(gid))
 * })
 *
 * // One device, a UDP socket on a free port of the loopback; it closes with the scope.
 * const devices = [{ name: "soft0", host: "127.0.0.1" }]
 * Effect.runPromise(program.pipe(Effect.scoped, Effect.provide(SoftVerbs.layer({ devices }))))
 * ```
 *
 * @since 0.1.0
 */
export const layer = (options: SoftVerbsOptions): Layer.Layer<Verbs | SoftVerbsControl, RdmaError> =>
  Layer.scopedContext(
    Effect.map(make(options), ({ control, verbs }) =>
      Context.make(Verbs, verbs).pipe(Context.add(SoftVerbsControl, control))
    )
  )
