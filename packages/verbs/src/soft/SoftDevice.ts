/**
 * A SoftVerbs device: one UDP socket (its "NIC port"), its QPs, MRs and CQs, its counters and its fault injection.
 * Every datagram is validated before a QP sees it; a malformed one is counted and dropped, never thrown. Its
 * configuration, counters and fault checks are in `DeviceConfig.ts`; its optional delayed placement of WRITE payloads
 * (`placementDelayMs`) in `qp/Placement.ts`.
 */
import { randomInt } from "node:crypto"
import * as dgram from "node:dgram"
import type { AddressInfo } from "node:net"
import { EventType, PortState } from "../Constants.js"
import type { InvalidFaults } from "../Errors.js"
import type { AsyncEvent, QpCap } from "../Verbs.js"
import {
  checkDeviceConfig,
  checkFaults,
  datagramCost,
  MAX_PLACEMENT_DELAY_MS,
  newCounters,
  SOCKET_BUFFER,
  type SocketBuffers,
  type SoftCounters,
  type SoftDeviceConfig,
  type SoftFaults
} from "./DeviceConfig.js"
import { MrTable, type SoftMr } from "./Memory.js"
import { HDR, Off, validate } from "./Packet.js"
import { landAll } from "./qp/Placement.js"
import { WINDOW } from "./qp/Requester.js"
import type { RecvQueue } from "./RecvQueue.js"
import { pacing, received } from "./Scavenge.js"
import { type CqHost, SoftCq } from "./SoftCq.js"
import { type QpHost, SoftQp } from "./SoftQp.js"

export type { SocketBuffers, SoftCounters, SoftDeviceConfig, SoftFaults }
export { checkDeviceConfig, checkFaults, datagramCost, MAX_PLACEMENT_DELAY_MS, SOCKET_BUFFER }

/**
 * Requests a responder may accept before it must acknowledge, when more keep arriving; and datagrams a device may read
 * between two ACK flushes before every owed ACK goes at once (however few of them were for that QP).
 */
const ACK_COALESCE = 32
/**
 * Send slots per device: a slot is reused only after this many further datagrams (one still in libuv's send queue is
 * never overwritten: {@link SoftDevice.slot}). 64 slots are 264 KiB a device, touched in turn and so kept in the cache.
 * It was 2048 (8.2 MiB a device): the 165 engines of one process in the engine's scale bench each faulted in a fresh
 * page of that memory for nearly every packet they sent (one engine per ping, ~30 pings each a phase); one-way to 8
 * engines of one process went from 1.6–3 × one engine to 1.1 ×, and their build from 63 to 49 s.
 */
const SEND_SLOTS = 64
const SLOT_SIZE = HDR + 4096
/** QP numbers are 24 bits; IB reserves 0 (SMI) and 1 (GSI). */
const QPN_MIN = 2
const QPN_END = 0x1000000
const noLookup = (
  address: string,
  _options: unknown,
  callback: (err: Error | null, address: string, family: number) => void
) => callback(null, address, 4)

/** A SoftVerbs device. */
export class SoftDevice implements QpHost, CqHost {
  readonly counters: SoftCounters = newCounters()
  readonly guid: string
  portState: PortState = PortState.ACTIVE
  private readonly qps = new Map<number, SoftQp>()
  private readonly mrs = new MrTable()
  private readonly listeners = new Set<(event: AsyncEvent) => void>()
  private readonly slots: ReadonlyArray<Buffer> = (() => {
    const memory = Buffer.allocUnsafeSlow(SEND_SLOTS * SLOT_SIZE)
    return Array.from({ length: SEND_SLOTS }, (_, i) => memory.subarray(i * SLOT_SIZE, (i + 1) * SLOT_SIZE))
  })()
  private slotIndex = 0
  /** The slot handed out last (-1: a fresh buffer), and for each slot the number of the send that last carried it. */
  private lastSlot = -1
  private readonly slotSent = new Float64Array(SEND_SLOTS)
  /** Datagrams handed to the socket so far. */
  private sends = 0
  /** libuv still queued datagrams when the ring last came round to slot 0. */
  private queueAtRound = false
  private nextPd = 1
  private depth = 0
  private pendingCqs: Array<SoftCq> = []
  private microtaskQueued = false
  private ackQueue: Array<SoftQp> = []
  private ackQueued = false
  /** Datagrams handed to a QP since the last ACK flush. */
  private rxSinceFlush = 0
  private faults: SoftFaults = {}
  private readonly peerFaults = new Map<string, SoftFaults>()
  private closed = false

  private constructor(
    readonly name: string,
    readonly host: string,
    readonly port: number,
    private readonly socket: dgram.Socket,
    /** The socket buffers asked for and granted; the window of every QP follows them (`windowFor`). */
    readonly socketBuffers: SocketBuffers,
    /** How long an accepted RDMA WRITE payload waits before it lands in memory (`SoftDeviceConfig.placementDelayMs`). */
    readonly placementDelayMs: number
  ) {
    this.guid = (BigInt(port) | (BigInt(Math.floor(Math.random() * 0xffffff)) << 16n) | (0x02n << 56n))
      .toString(16)
      .padStart(16, "0")
    socket.on("message", this.onMessage)
  }

  /** Binds the device's socket. */
  static open(config: SoftDeviceConfig): Promise<SoftDevice> {
    const host = config.host ?? "127.0.0.1"
    return new Promise((resolve, reject) => {
      const socket = dgram.createSocket({ type: "udp4", lookup: noLookup as never })
      const onError = (err: Error) => {
        socket.close()
        reject(err)
      }
      socket.once("error", onError)
      socket.bind({ address: host, port: config.port ?? 0, exclusive: true }, () => {
        socket.off("error", onError)
        const asked = config.socketBufferBytes ?? SOCKET_BUFFER
        try {
          socket.setRecvBufferSize(asked)
          socket.setSendBufferSize(asked)
        } catch {
          // Refused outright: keep what the kernel gave; it is read back below and the window follows it.
        }
        const buffers = { asked, recv: socket.getRecvBufferSize(), send: socket.getSendBufferSize() }
        const address = socket.address() as AddressInfo
        const device = new SoftDevice(
          config.name,
          address.address,
          address.port,
          socket,
          buffers,
          config.placementDelayMs ?? 0
        )
        socket.on("error", () => {
          device.counters.sendErrors++
        })
        resolve(device)
      })
    })
  }

  /** Closes the socket; every QP is destroyed. */
  close(): Promise<void> {
    if (this.closed) return Promise.resolve()
    for (const qp of this.qps.values()) qp.destroyNow()
    this.qps.clear()
    this.closed = true
    return new Promise((resolve) => this.socket.close(() => resolve()))
  }

  get isClosed(): boolean {
    return this.closed
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Datagram path
  // ---------------------------------------------------------------------------------------------------------------

  private readonly onMessage = (msg: Buffer, rinfo: dgram.RemoteInfo): void => {
    const c = this.counters
    c.rxPackets++
    // Every datagram's memory counts, dropped or not: Node allocated it before this handler ran (see Scavenge.ts).
    if (pacing.everyBytes > 0) received(msg.length)
    if (this.portState !== PortState.ACTIVE) {
      c.droppedPortDown++
      return
    }
    if (this.faults.dropIn !== undefined && Math.random() < this.faults.dropIn) {
      c.droppedFault++
      return
    }
    if (this.peerFaults.size > 0) {
      const f = this.peerFaults.get(`${rinfo.address}:${rinfo.port}`)
      if (f?.dropIn !== undefined && Math.random() < f.dropIn) {
        c.droppedFault++
        return
      }
    }
    const bad = validate(msg)
    if (bad !== undefined) {
      c.malformed++
      if (bad === "short") c.malformedShort++
      else if (bad === "version") c.malformedVersion++
      else if (bad === "op") c.malformedOp++
      else c.malformedLength++
      return
    }
    const qp = this.qps.get(msg.readUInt32LE(Off.dstQpn))
    if (qp === undefined) {
      c.unknownQpn++
      return
    }
    this.rxSinceFlush++
    this.depth++
    try {
      qp.onPacket(msg, rinfo.address, rinfo.port)
    } catch {
      // A bug must never take the poller down with it; it is counted so that tests can insist on zero.
      c.handlerErrors++
    } finally {
      this.depth--
      if (this.depth === 0) {
        this.deliver()
        this.scheduleAcks()
      }
    }
  }

  /**
   * Packets in flight per QP at this path MTU: what both granted socket buffers hold (a receiver's kernel drops what
   * its buffer cannot hold, silently), at most `WINDOW`.
   */
  windowFor(mtu: number): number {
    const b = this.socketBuffers
    return Math.max(1, Math.min(WINDOW, Math.floor(Math.min(b.recv, b.send) / datagramCost(HDR + mtu))))
  }

  slot(): Buffer {
    const i = this.slotIndex
    this.slotIndex = i + 1 === SEND_SLOTS ? 0 : i + 1
    // A datagram the kernel could not take at once (EAGAIN) waits in libuv's queue, which points at its memory until
    // the kernel copies it; the queued ones are the last `getSendQueueCount()` sends. A slot among them is not
    // overwritten: this packet gets a fresh buffer (never on loopback, where the kernel takes every datagram at once).
    // Every slot is sent as soon as it is filled, so when the queue is empty at the start of a round of the ring, no
    // slot of that round can still be queued: the queue is looked at per slot only in a round that began with one.
    if (i === 0) this.queueAtRound = !this.closed && this.socket.getSendQueueCount() > 0
    if (
      this.queueAtRound &&
      !this.closed &&
      (this.slotSent[i] as number) > this.sends - this.socket.getSendQueueCount()
    ) {
      this.counters.sendSlotsBusy++
      this.lastSlot = -1
      return Buffer.allocUnsafe(SLOT_SIZE)
    }
    this.lastSlot = i
    return this.slots[i] as Buffer
  }

  transmit(buf: Buffer, length: number, host: string, port: number): void {
    const c = this.counters
    if (this.closed) return
    if (this.portState !== PortState.ACTIVE) {
      c.droppedPortDown++
      return
    }
    let delay = 0
    const f = this.faults
    if (f.dropOut !== undefined && Math.random() < f.dropOut) {
      c.droppedFault++
      return
    }
    if (f.delayMs !== undefined) delay = f.delayMs
    if (this.peerFaults.size > 0) {
      const pf = this.peerFaults.get(`${host}:${port}`)
      if (pf !== undefined) {
        if (pf.dropOut !== undefined && Math.random() < pf.dropOut) {
          c.droppedFault++
          return
        }
        if (pf.delayMs !== undefined) delay = Math.max(delay, pf.delayMs)
      }
    }
    c.txPackets++
    if (delay > 0) {
      const copy = Buffer.from(buf.subarray(0, length))
      setTimeout(() => {
        if (this.closed) return
        this.sends++
        this.socket.send(copy, 0, length, port, host)
      }, delay).unref()
      return
    }
    const sent = ++this.sends
    if (this.lastSlot >= 0 && buf === this.slots[this.lastSlot]) this.slotSent[this.lastSlot] = sent
    this.socket.send(buf, 0, length, port, host)
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Scheduling: completion channel events and coalesced ACKs
  // ---------------------------------------------------------------------------------------------------------------

  run(f: () => void): void {
    this.depth++
    try {
      f()
    } catch {
      this.counters.handlerErrors++
    } finally {
      this.depth--
      if (this.depth === 0) {
        this.deliver()
        this.scheduleAcks()
      }
    }
  }

  scheduleNotify(cq: SoftCq): void {
    this.pendingCqs.push(cq)
    if (this.depth === 0 && !this.microtaskQueued) {
      this.microtaskQueued = true
      queueMicrotask(this.deliverFromMicrotask)
    }
  }

  private readonly deliverFromMicrotask = (): void => {
    this.microtaskQueued = false
    this.deliver()
  }

  private deliver(): void {
    while (this.pendingCqs.length > 0) {
      const cqs = this.pendingCqs
      this.pendingCqs = []
      for (const cq of cqs) {
        try {
          cq.deliverNotify()
        } catch {
          this.counters.handlerErrors++
        }
      }
    }
  }

  queueAck(qp: SoftQp): void {
    if (qp.ackQueued) return
    qp.ackQueued = true
    this.ackQueue.push(qp)
    // Inside a handler the decision waits until it returns: a reply posted by the completion listener carries the
    // ACK, and then no ACK datagram (and no extra event-loop turn) is needed at all.
    if (this.depth === 0) this.scheduleAcks()
  }

  /** Schedules the coalesced ACKs of this turn, unless every owed ACK has already ridden on a reply. */
  private scheduleAcks(): void {
    if (this.ackQueued || this.ackQueue.length === 0) return
    let owed = false
    for (const qp of this.ackQueue) {
      if (qp.ackPending) {
        owed = true
        break
      }
    }
    if (!owed) {
      for (const qp of this.ackQueue) qp.ackQueued = false
      this.ackQueue = []
      return
    }
    this.ackQueued = true
    setImmediate(this.flushAcks)
  }

  private readonly flushAcks = (): void => {
    this.ackQueued = false
    // The device read a full burst since the last flush: every owed ACK goes now. The QPs that share the socket split
    // its datagrams, so counting a QP's own would delay its ACK a turn for each QP beside it (the engine's 6 data QPs
    // a rail: an ACK per 6 turns, the WRITEs it completes waiting for it; a QP alone on its socket: every turn).
    const busy = this.rxSinceFlush >= ACK_COALESCE
    this.rxSinceFlush = 0
    const queue = this.ackQueue
    this.ackQueue = []
    for (const qp of queue) {
      qp.ackQueued = false
      if (!qp.ackPending) continue
      // Delayed ACK: while requests keep arriving turn after turn, acknowledge every ACK_COALESCE of them (or of the
      // device's datagrams); once a turn brings none, acknowledge at once. A lone request waits one extra event-loop
      // iteration at most.
      if (!busy && qp.rxThisTurn && qp.rxSinceAck < ACK_COALESCE) {
        qp.rxThisTurn = false
        this.queueAck(qp)
        continue
      }
      qp.rxThisTurn = false
      qp.sendAck()
    }
  }

  raise(event: AsyncEvent): void {
    for (const l of this.listeners) l(event)
  }

  /** Subscribes to the device's async events; returns the unsubscribe function. */
  subscribe(listener: (event: AsyncEvent) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Resources
  // ---------------------------------------------------------------------------------------------------------------

  allocPd(): number {
    return this.nextPd++
  }

  registerMr(buffer: Buffer, access: number, pdId: number): SoftMr {
    return this.mrs.register(buffer, access, pdId)
  }

  deregisterMr(mr: SoftMr): void {
    // A NIC finishes its writes to a region before the region is gone: what is still to land, lands now.
    if (this.placementDelayMs > 0) {
      this.run(() => {
        for (const qp of this.qps.values()) landAll(qp, true)
      })
    }
    this.mrs.deregister(mr)
  }

  lookupMr(key: number): SoftMr | undefined {
    return this.mrs.lookup(key)
  }

  createCq(cqe: number): SoftCq {
    return new SoftCq(cqe, this)
  }

  /**
   * A QP number no QP of this device has, drawn from the system's CSPRNG in 2..2^24-1: a host that is not told it
   * cannot guess it, and a destroyed QP's number is unlikely to come back while its peer may still send to it.
   */
  private freshQpn(): number {
    let qpn = randomInt(QPN_MIN, QPN_END)
    // At most `qps.size` steps: the device holds far fewer QPs than there are numbers.
    for (let i = 0; i <= this.qps.size && this.qps.has(qpn); i++) qpn = qpn + 1 === QPN_END ? QPN_MIN : qpn + 1
    return qpn
  }

  createQp(pdId: number, sendCq: SoftCq, recvCq: SoftCq, cap: QpCap, sqSigAll: boolean, srq?: RecvQueue): SoftQp {
    const qpn = this.freshQpn()
    const qp = new SoftQp(qpn, this, pdId, sendCq, recvCq, cap, sqSigAll, srq)
    if (srq !== undefined) srq.attached++
    this.qps.set(qpn, qp)
    return qp
  }

  destroyQp(qp: SoftQp): void {
    if (!qp.destroyed && qp.shared) qp.rq.attached--
    qp.destroyNow()
    this.qps.delete(qp.qpNum)
  }

  /** The QP with this number, if it exists on this device. */
  qp(qpNum: number): SoftQp | undefined {
    return this.qps.get(qpNum)
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Fault injection
  // ---------------------------------------------------------------------------------------------------------------

  /**
   * Sets packet loss/delay device-wide, or for traffic with one peer device (`host:port`) when `peer` is given; `{}`
   * clears. A bad value changes nothing and is returned as `InvalidFaults` naming the field (undefined when applied).
   */
  setFaults(faults: SoftFaults, peer?: string): InvalidFaults | undefined {
    const bad = checkFaults(faults, peer)
    if (bad !== undefined) return bad
    if (peer === undefined) this.faults = { ...faults }
    else if (Object.keys(faults).length === 0) this.peerFaults.delete(peer)
    else this.peerFaults.set(peer, { ...faults })
    return undefined
  }

  /** Takes the port down (every datagram in or out is lost, `PORT_ERR` is raised) or up again (`PORT_ACTIVE`). */
  setPortState(up: boolean): void {
    const next = up ? PortState.ACTIVE : PortState.DOWN
    if (next === this.portState) return
    this.portState = next
    this.raise({
      eventType: up ? EventType.PORT_ACTIVE : EventType.PORT_ERR,
      portNum: 1,
      detail: up ? "port up" : "port down"
    })
  }

  /** Moves a QP to ERR from outside its owner (a fatal QP error): `QP_FATAL` is raised and its WRs flush. */
  forceQpError(qpNum: number): boolean {
    const qp = this.qps.get(qpNum)
    if (qp === undefined) return false
    this.run(() => qp.enterError())
    this.raise({ eventType: EventType.QP_FATAL, qpNum, detail: "QP forced to ERR (fault injection)" })
    return true
  }
}
