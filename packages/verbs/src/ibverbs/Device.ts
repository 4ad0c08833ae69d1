/**
 * Devices, contexts, protection domains and memory regions over the bound libibverbs: the lifecycle half of the
 * provider, every resource an `Effect.acquireRelease`, every failure an `RdmaError` with the errno the call returned.
 *
 * @internal
 */
import { Effect, PubSub, type Scope, Stream } from "effect"
import koffi from "koffi"
import { EventType, QpType } from "../Constants.js"
import { DeviceNotFound, RdmaError } from "../Errors.js"
import type {
  AsyncEvent,
  CompletionQueue,
  DeviceAttr,
  DeviceContext,
  DeviceInfo,
  Gid,
  GidEntry,
  MemoryRegion,
  PortAttr,
  ProtectionDomain,
  QpInitAttr,
  QueuePair,
  SharedReceiveQueue,
  SrqInitAttr
} from "../Verbs.js"
import { addressOf, decodeFields, fieldsOf, readU64, stableBuffer, viewAt } from "./Codec.js"
import { type CqOps, IbvCompletionQueue } from "./CompletionQueue.js"
import { type GidSource, queryGidEntry } from "./GidEntry.js"
import { ibv_device_attr, ibv_port_attr, Off, Size, verbs_context } from "./Layout.js"
import {
  address,
  errnoOf,
  errnoText,
  type Library,
  PollCqProto,
  PostProto,
  QueryPortExProto,
  ReqNotifyCqProto,
  setNonBlocking
} from "./Library.js"
import { IbvQueuePair, type QpOps, qpInitAttr } from "./QueuePair.js"
import { createSrq, IbvSrq } from "./Srq.js"

/** `IBV_ACCESS_OPTIONAL_RANGE`: access bits 20–29, which `ibv_reg_mr` (the macro) routes to `ibv_reg_mr_iova2`. */
const ACCESS_OPTIONAL_RANGE = 0x3ff00000

const rdmaError = (op: string, errno: number, what: string) =>
  new RdmaError({ op, errno, message: `${op} ${what}failed: ${errnoText(errno)}` })

/** Formats the `__be64` node GUID as 16 hex digits in network order. */
const guidHex = (raw: number | bigint): string => {
  const b = Buffer.alloc(8)
  b.writeBigUInt64LE(BigInt(raw))
  return b.toString("hex")
}

const noDevicesMessage = (errno: number): string =>
  errno === 38
    ? "No RDMA device: ibv_get_device_list found none (ENOSYS (function not implemented): this kernel exposes no " +
      "RDMA/uverbs devices — no NIC driver such as mlx5_ib is loaded, and no rdma_rxe/siw soft device). Check " +
      "`ls /sys/class/infiniband` and `ibv_devices`; on a host without a NIC use the SoftVerbs provider."
    : `No RDMA device: ibv_get_device_list found none (${errno === 0 ? "empty list" : errnoText(errno)}). Check ` +
      "`ibv_devices` and that the NIC's kernel driver and rdma-core provider (ibverbs-providers) are installed; on a " +
      "host without a NIC use the SoftVerbs provider."

/**
 * Calls `ibv_get_device_list` and hands each device to `use` before the list is freed (a device must be opened before
 * `ibv_free_device_list`). A NULL list (what a host without RDMA support returns, with errno ENOSYS) is never freed:
 * `ibv_free_device_list(NULL)` crashes.
 */
const withDeviceList = <A>(
  lib: Library,
  use: (devices: ReadonlyArray<{ readonly info: DeviceInfo; readonly ptr: number }>) => A
): { readonly _tag: "Left"; readonly left: DeviceNotFound } | { readonly _tag: "Right"; readonly right: A } => {
  const num = stableBuffer(4)
  const list = address(lib.getDeviceList(addressOf(num)))
  if (list === 0) {
    return {
      _tag: "Left",
      left: new DeviceNotFound({ reason: "NoDevices", available: [], message: noDevicesMessage(koffi.errno()) })
    }
  }
  try {
    const n = num.readInt32LE(0)
    const view = viewAt(list, Math.max(1, n) * 8)
    const devices = Array.from({ length: n }, (_, i) => {
      const ptr = readU64(view, i * 8)
      return { ptr, info: { name: lib.getDeviceName(ptr) ?? `device${i}`, guid: guidHex(lib.getDeviceGuid(ptr)) } }
    })
    if (devices.length === 0) {
      return {
        _tag: "Left",
        left: new DeviceNotFound({ reason: "NoDevices", available: [], message: noDevicesMessage(0) })
      }
    }
    return { _tag: "Right", right: use(devices) }
  } finally {
    lib.freeDeviceList(list)
  }
}

/** `ibv_get_device_list`, as the service's `getDeviceList`. */
export const getDeviceList = (lib: Library): Effect.Effect<ReadonlyArray<DeviceInfo>, DeviceNotFound> =>
  Effect.suspend(() => {
    const r = withDeviceList(lib, (devices) => devices.map((d) => d.info))
    return r._tag === "Left" ? Effect.fail(r.left) : Effect.succeed(r.right)
  })

/** `ibv_open_device` by name, closed when the scope closes. */
export const openDevice = (
  lib: Library,
  name: string,
  sysfs = "/sys"
): Effect.Effect<DeviceContext, DeviceNotFound | RdmaError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const r = withDeviceList(lib, (devices) => {
        const found = devices.find((d) => d.info.name === name)
        if (found === undefined) {
          const available = devices.map((d) => d.info.name)
          return new DeviceNotFound({
            reason: "Absent",
            device: name,
            available,
            message: `RDMA device "${name}" not found; present: ${available.join(", ")}`
          })
        }
        const ctx = address(lib.openDevice(found.ptr))
        return ctx === 0 ? rdmaError("ibv_open_device", errnoOf(-1), `of ${name} `) : { ctx, info: found.info }
      })
      if (r._tag === "Left") return Effect.fail(r.left)
      const opened = r.right
      if (opened instanceof DeviceNotFound || opened instanceof RdmaError) return Effect.fail(opened)
      return Effect.succeed(new IbvDevice(lib, opened.ctx, opened.info, sysfs))
    }),
    (device) => device.close
  )

/** An opened `ibv_context`. */
export class IbvDevice implements DeviceContext {
  readonly #lib: Library
  readonly #ctx: number
  readonly #cqOps: CqOps
  readonly #qpOps: QpOps
  readonly #cqs = new Map<number, IbvCompletionQueue>()
  readonly #pubsub = Effect.runSync(PubSub.sliding<AsyncEvent>(1024))
  readonly #eventBuf = stableBuffer(Size.asyncEvent)
  readonly #asyncPoll: ReturnType<typeof koffi.node.poll> | undefined
  readonly #portBuf = stableBuffer(Size.portAttr)
  readonly #deviceBuf = stableBuffer(Size.deviceAttr)
  readonly #gidBuf = stableBuffer(16)
  #closed = false

  readonly #gidSource: GidSource

  constructor(
    lib: Library,
    ctx: number,
    readonly device: DeviceInfo,
    sysfs: string
  ) {
    this.#lib = lib
    this.#ctx = ctx
    this.#gidSource = {
      lib,
      ctx,
      device: device.name,
      sysfs,
      queryGid: (port, index) => this.queryGid(port, index),
      linkLayer: (port) => Effect.map(this.queryPort(port), (p) => p.linkLayer)
    }
    // The static inline verbs dispatch through ibv_context.ops; decode each function pointer once.
    const v = viewAt(ctx, Size.context)
    this.#cqOps = {
      pollCq: koffi.decode(BigInt(readU64(v, Off.context.pollCq)), PollCqProto),
      reqNotifyCq: koffi.decode(BigInt(readU64(v, Off.context.reqNotifyCq)), ReqNotifyCqProto)
    }
    this.#qpOps = {
      postSend: koffi.decode(BigInt(readU64(v, Off.context.postSend)), PostProto),
      postRecv: koffi.decode(BigInt(readU64(v, Off.context.postRecv)), PostProto),
      postSrqRecv: koffi.decode(BigInt(readU64(v, Off.context.postSrqRecv)), PostProto)
    }
    const asyncFd = v.getInt32(Off.context.asyncFd, true)
    if (asyncFd >= 0 && setNonBlocking(asyncFd) === 0) {
      const poll = koffi.node.poll(asyncFd, { readable: true }, () => this.#drainAsync())
      poll.unref()
      this.#asyncPoll = poll
    }
  }

  /** Stops the async-event watch and closes the context. */
  readonly close: Effect.Effect<void> = Effect.suspend(() => {
    if (this.#closed) return Effect.void
    this.#closed = true
    this.#asyncPoll?.close()
    const rc = this.#lib.closeDevice(this.#ctx)
    return PubSub.shutdown(this.#pubsub).pipe(
      Effect.zipRight(
        rc === 0
          ? Effect.void
          : Effect.logWarning(rdmaError("ibv_close_device", errnoOf(rc), `of ${this.device.name} `).message)
      )
    )
  })

  readonly queryDevice: Effect.Effect<DeviceAttr, RdmaError> = Effect.suspend(() => {
    const buf = this.#deviceBuf
    buf.fill(0)
    const rc = this.#lib.queryDevice(this.#ctx, addressOf(buf))
    if (rc !== 0) return Effect.fail(rdmaError("ibv_query_device", errnoOf(rc), `of ${this.device.name} `))
    return Effect.succeed(decodeFields(new DataView(buf.buffer), deviceFields, deviceKeys))
  })

  queryPort(portNum: number): Effect.Effect<PortAttr, RdmaError> {
    return Effect.suspend(() => {
      const buf = this.#portBuf
      buf.fill(0)
      const rc = this.#queryPort(portNum, addressOf(buf))
      if (rc !== 0) return Effect.fail(rdmaError("ibv_query_port", errnoOf(rc), `of port ${portNum} `))
      const a = decodeFields(new DataView(buf.buffer), portFields, portKeys)
      return Effect.succeed({
        state: a.state as PortAttr["state"],
        maxMtu: a.maxMtu as PortAttr["maxMtu"],
        activeMtu: a.activeMtu as PortAttr["activeMtu"],
        gidTblLen: a.gidTblLen,
        lid: a.lid,
        linkLayer: a.linkLayer,
        activeSpeed: a.activeSpeed,
        activeWidth: a.activeWidth
      })
    })
  }

  /**
   * `ibv_query_port` as the header's inline wrapper does it: through `verbs_context.query_port` with the full struct
   * size when the context is extended and the provider has the op, else the exported compat call (48 of 52 bytes).
   */
  #queryPort(portNum: number, attr: number): number {
    const v = viewAt(this.#ctx, Size.context)
    const extended = v.getUint32(Off.context.abiCompat, true) === 0xffffffff
    if (extended && v.getUint32(Off.context.abiCompat + 4, true) === 0xffffffff) {
      const vctx = this.#ctx - Off.verbsContext.context
      const vv = viewAt(vctx, Off.verbsContext.context)
      const sz = readU64(vv, Off.verbsContext.sz)
      const op = readU64(vv, Off.verbsContext.queryPort)
      if (op !== 0 && sz >= koffi.sizeof(verbs_context) - Off.verbsContext.queryPort) {
        return koffi.decode(BigInt(op), QueryPortExProto)(this.#ctx, portNum, attr, Size.portAttr)
      }
    }
    return this.#lib.queryPortCompat(this.#ctx, portNum, attr)
  }

  queryGid(portNum: number, index: number): Effect.Effect<Gid, RdmaError> {
    return Effect.suspend(() => {
      const rc = this.#lib.queryGid(this.#ctx, portNum, index, addressOf(this.#gidBuf))
      if (rc !== 0) return Effect.fail(rdmaError("ibv_query_gid", errnoOf(rc), `of port ${portNum} index ${index} `))
      return Effect.succeed(new Uint8Array(this.#gidBuf))
    })
  }

  queryGidEntry(portNum: number, index: number): Effect.Effect<GidEntry, RdmaError> {
    return queryGidEntry(this.#gidSource, portNum, index)
  }

  readonly allocPd: Effect.Effect<ProtectionDomain, RdmaError, Scope.Scope> = Effect.acquireRelease(
    Effect.suspend(() => {
      const pd = address(this.#lib.allocPd(this.#ctx))
      return pd === 0
        ? Effect.fail(rdmaError("ibv_alloc_pd", errnoOf(-1), ""))
        : Effect.succeed(new IbvProtectionDomain(this.#lib, pd, this.#qpOps))
    }),
    (pd) => warnOnFailure("ibv_dealloc_pd", this.#lib.deallocPd(pd.address))
  )

  createCq(cqe: number): Effect.Effect<CompletionQueue, RdmaError, Scope.Scope> {
    const lib = this.#lib
    return Effect.acquireRelease(
      Effect.suspend(() => {
        const channel = address(lib.createCompChannel(this.#ctx))
        if (channel === 0) return Effect.fail(rdmaError("ibv_create_comp_channel", errnoOf(-1), ""))
        const cq = address(lib.createCq(this.#ctx, cqe, 0, channel, 0))
        if (cq === 0) {
          const errno = errnoOf(-1)
          lib.destroyCompChannel(channel)
          return Effect.fail(rdmaError("ibv_create_cq", errno, `with ${cqe} entries `))
        }
        const fd = viewAt(channel, 16).getInt32(Off.compChannel.fd, true)
        const nb = setNonBlocking(fd)
        if (nb !== 0) {
          lib.destroyCq(cq)
          lib.destroyCompChannel(channel)
          return Effect.fail(rdmaError("fcntl", nb, "on the completion channel "))
        }
        const actual = viewAt(cq, Size.cq).getInt32(Off.cq.cqe, true)
        const q = new IbvCompletionQueue(lib, this.#cqOps, cq, channel, fd, actual)
        this.#cqs.set(cq, q)
        return Effect.succeed(q)
      }),
      (q) =>
        Effect.suspend(() => {
          q.close()
          this.#cqs.delete(q.address)
          return warnOnFailure("ibv_destroy_cq", lib.destroyCq(q.address)).pipe(
            Effect.zipRight(warnOnFailure("ibv_destroy_comp_channel", lib.destroyCompChannel(q.channel)))
          )
        })
    )
  }

  readonly asyncEvents: Stream.Stream<AsyncEvent> = Stream.unwrapScoped(
    Effect.map(PubSub.subscribe(this.#pubsub), (queue) => Stream.fromQueue(queue))
  )

  /** Reads every pending async event, publishes it, and acknowledges it. */
  #drainAsync(): void {
    const buf = this.#eventBuf
    const view = new DataView(buf.buffer)
    while (!this.#closed && this.#lib.getAsyncEvent(this.#ctx, addressOf(buf)) === 0) {
      const eventType = view.getUint32(Off.asyncEvent.eventType, true) as AsyncEvent["eventType"]
      const element = readU64(view, Off.asyncEvent.element)
      const event = this.#describe(eventType, element, view)
      this.#lib.ackAsyncEvent(addressOf(buf))
      Effect.runSync(PubSub.publish(this.#pubsub, event))
    }
  }

  #describe(eventType: AsyncEvent["eventType"], element: number, view: DataView): AsyncEvent {
    const name = eventNames[eventType] ?? `event ${eventType}`
    if (eventType === EventType.CQ_ERR) {
      const cq = this.#cqs.get(element)
      return cq === undefined ? { eventType, detail: name } : { eventType, cq, detail: name }
    }
    if (portEvents.has(eventType)) {
      const portNum = view.getInt32(Off.asyncEvent.element, true)
      return { eventType, portNum, detail: `${name} on port ${portNum}` }
    }
    if (qpEvents.has(eventType) && element !== 0) {
      const qpNum = viewAt(element, Size.qp).getUint32(Off.qp.qpNum, true)
      return { eventType, qpNum, detail: `${name} on QP ${qpNum}` }
    }
    return { eventType, detail: name }
  }
}

const deviceFields = fieldsOf(ibv_device_attr)
const deviceKeys = [
  "maxQp",
  "maxQpWr",
  "maxSge",
  "maxCq",
  "maxCqe",
  "maxMrSize",
  "maxQpRdAtom",
  "maxQpInitRdAtom",
  "physPortCnt",
  "maxSrqWr"
] as const
const portFields = fieldsOf(ibv_port_attr)
const portKeys = [
  "state",
  "maxMtu",
  "activeMtu",
  "gidTblLen",
  "lid",
  "linkLayer",
  "activeSpeed",
  "activeWidth"
] as const
const eventNames = Object.keys(EventType)
const portEvents = new Set<number>([
  EventType.PORT_ACTIVE,
  EventType.PORT_ERR,
  EventType.LID_CHANGE,
  EventType.PKEY_CHANGE,
  EventType.SM_CHANGE,
  EventType.CLIENT_REREGISTER,
  EventType.GID_CHANGE
])
const qpEvents = new Set<number>([
  EventType.QP_FATAL,
  EventType.QP_REQ_ERR,
  EventType.QP_ACCESS_ERR,
  EventType.COMM_EST,
  EventType.SQ_DRAINED,
  EventType.PATH_MIG,
  EventType.PATH_MIG_ERR,
  EventType.QP_LAST_WQE_REACHED
])

/** A release cannot fail; a failed destroy is logged with its errno. */
const warnOnFailure = (op: string, rc: number): Effect.Effect<void> =>
  rc === 0 ? Effect.void : Effect.logWarning(rdmaError(op, errnoOf(rc), "").message)

/** An `ibv_pd`. */
export class IbvProtectionDomain implements ProtectionDomain {
  readonly #lib: Library
  readonly #qpOps: QpOps

  constructor(
    lib: Library,
    readonly address: number,
    qpOps: QpOps
  ) {
    this.#lib = lib
    this.#qpOps = qpOps
  }

  regMr(buffer: Buffer, access: number): Effect.Effect<MemoryRegion, RdmaError, Scope.Scope> {
    const lib = this.#lib
    return Effect.acquireRelease(
      Effect.suspend(() => {
        const addr = addressOf(buffer)
        // The `ibv_reg_mr` macro: optional access bits go through ibv_reg_mr_iova2. A libibverbs without it (older
        // rdma-core) registers with ibv_reg_mr and without those bits, which are hints (relaxed ordering) a provider
        // may ignore anyway; the region's `access` says what was registered.
        const iova2 = (access & ACCESS_OPTIONAL_RANGE) !== 0 ? lib.optional.regMrIova2() : undefined
        const registered = iova2 === undefined ? access & ~ACCESS_OPTIONAL_RANGE : access
        const mr = address(
          iova2 === undefined
            ? lib.regMr(this.address, addr, buffer.length, registered)
            : iova2(this.address, addr, buffer.length, addr, access)
        )
        if (mr === 0) {
          return Effect.fail(
            rdmaError("ibv_reg_mr", errnoOf(-1), `of ${buffer.length} bytes at 0x${addr.toString(16)} `)
          )
        }
        const v = viewAt(mr, Size.mr)
        const region: MemoryRegion & { readonly mr: number } = {
          mr,
          addr,
          length: buffer.length,
          lkey: v.getUint32(Off.mr.lkey, true),
          rkey: v.getUint32(Off.mr.rkey, true),
          access: registered,
          buffer
        }
        return registered === access
          ? Effect.succeed(region)
          : Effect.as(
              Effect.logWarning(
                `ibv_reg_mr: this libibverbs has no ibv_reg_mr_iova2 (rdma-core too old); registered without the ` +
                  `optional access bits 0x${(access & ACCESS_OPTIONAL_RANGE).toString(16)} (relaxed ordering off)`
              ),
              region
            )
      }),
      (region) => warnOnFailure("ibv_dereg_mr", lib.deregMr(region.mr))
    )
  }

  createSrq = (init: SrqInitAttr): Effect.Effect<SharedReceiveQueue, RdmaError, Scope.Scope> =>
    createSrq(this.#lib, this.#qpOps, this.address, init)

  createQp(init: QpInitAttr): Effect.Effect<QueuePair, RdmaError, Scope.Scope> {
    const lib = this.#lib
    return Effect.acquireRelease(
      Effect.suspend(() => {
        if (init.srq !== undefined && !(init.srq instanceof IbvSrq)) {
          return Effect.fail(rdmaError("ibv_create_qp", 22, "with an SRQ not made by Ibverbs "))
        }
        if (!(init.sendCq instanceof IbvCompletionQueue) || !(init.recvCq instanceof IbvCompletionQueue)) {
          return Effect.fail(
            new RdmaError({
              op: "ibv_create_qp",
              errno: 22,
              message: "ibv_create_qp: the CQs were not made by Ibverbs"
            })
          )
        }
        if (init.qpType !== QpType.RC) {
          return Effect.fail(
            new RdmaError({ op: "ibv_create_qp", errno: 22, message: "ibv_create_qp: only RC QPs are supported" })
          )
        }
        const buf = stableBuffer(Size.qpInitAttr)
        qpInitAttr.encode(buf, init.sendCq.address, init.recvCq.address, init, init.srq?.address ?? 0)
        const qp = address(lib.createQp(this.address, addressOf(buf)))
        if (qp === 0) return Effect.fail(rdmaError("ibv_create_qp", errnoOf(-1), ""))
        return Effect.succeed(new IbvQueuePair(lib, this.#qpOps, qp, qpInitAttr.cap(buf)))
      }),
      (qp) => Effect.catchAll(qp.destroy, (e) => Effect.logWarning(e.message))
    )
  }
}
