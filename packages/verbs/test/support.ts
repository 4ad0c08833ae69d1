/**
 * Test support: a connected pair of SoftVerbs RC QPs on two devices of this process, and helpers to poll.
 */
import * as dgram from "node:dgram"
import { Effect, type Scope, Stream } from "effect"
import {
  AccessFlags,
  type AsyncEvent,
  type CompletionQueue,
  type DeviceContext,
  type MemoryRegion,
  type ProtectionDomain,
  QpType,
  type QueuePair,
  Rc,
  type RecvWr,
  type SendWr,
  SoftVerbs,
  type VerbsShape,
  WorkCompletion,
  WrOpcode
} from "../src/index.js"
import type { SoftDevice } from "../src/soft/SoftDevice.js"

export interface Side {
  readonly ctx: DeviceContext
  readonly device: SoftDevice
  readonly pd: ProtectionDomain
  readonly cq: CompletionQueue
  readonly qp: QueuePair
  readonly buf: Buffer
  readonly mr: MemoryRegion
}

export interface PairOptions {
  readonly params?: Partial<Rc.RcParams>
  /** Per side RC parameter overrides. */
  readonly paramsA?: Partial<Rc.RcParams>
  readonly paramsB?: Partial<Rc.RcParams>
  readonly bufSize?: number
  readonly cqe?: number
  readonly maxWr?: number
  readonly access?: number
  readonly connect?: boolean
  /** Settings of both devices besides their names (`placementDelayMs`, `socketBufferBytes`). */
  readonly device?: Omit<SoftVerbs.SoftDeviceConfig, "name">
  /** Settings of device `a` alone, over `device`. */
  readonly deviceA?: Omit<SoftVerbs.SoftDeviceConfig, "name">
}

export const ALL_ACCESS = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ

/** Opens one side: device context, PD, one CQ for send and receive, an RC QP, a registered buffer. */
export const openSide = (
  verbs: VerbsShape,
  control: SoftVerbs.SoftVerbsControlShape,
  name: string,
  options: PairOptions
): Effect.Effect<Side, unknown, Scope.Scope> =>
  Effect.gen(function* () {
    const ctx = yield* verbs.openDevice(name)
    const device = yield* control.device(name)
    const pd = yield* ctx.allocPd
    const cq = yield* ctx.createCq(options.cqe ?? 4096)
    const maxWr = options.maxWr ?? 1024
    const qp = yield* pd.createQp({
      sendCq: cq,
      recvCq: cq,
      qpType: QpType.RC,
      cap: { maxSendWr: maxWr, maxRecvWr: maxWr, maxSendSge: 4, maxRecvSge: 4, maxInlineData: 256 }
    })
    const buf = Buffer.alloc(options.bufSize ?? 1 << 20)
    const mr = yield* pd.regMr(buf, options.access ?? ALL_ACCESS)
    return { ctx, device, pd, cq, qp, buf, mr }
  })

/** Two devices `a` and `b` in this process with a connected RC QP pair. */
export const makePair = (options: PairOptions = {}) =>
  Effect.gen(function* () {
    const { control, verbs } = yield* SoftVerbs.make({
      devices: [
        { ...options.device, ...options.deviceA, name: "a" },
        { ...options.device, name: "b" }
      ]
    })
    const a = yield* openSide(verbs, control, "a", options)
    const b = yield* openSide(verbs, control, "b", options)
    const psnA = Rc.randomPsn()
    const psnB = Rc.randomPsn()
    if (options.connect !== false) yield* connectSides(a, b, options, psnA, psnB)
    return { a, b, control, verbs, psnA, psnB }
  })

/** Connects the RC QPs of two sides to each other (RESET → RTS), with `options`' RC parameters. */
export const connectSides = (
  a: Side,
  b: Side,
  options: PairOptions = {},
  psnA = Rc.randomPsn(),
  psnB = Rc.randomPsn()
) =>
  Effect.gen(function* () {
    const pa = { ...Rc.defaultParams, ...options.params, ...options.paramsA }
    const pb = { ...Rc.defaultParams, ...options.params, ...options.paramsB }
    yield* Rc.connect(a.qp, psnA, { gid: yield* b.ctx.queryGid(1, 0), qpNum: b.qp.qpNum, psn: psnB }, pa)
    yield* Rc.connect(b.qp, psnB, { gid: yield* a.ctx.queryGid(1, 0), qpNum: a.qp.qpNum, psn: psnA }, pb)
  })

/** A plain copy of a work completion. */
export interface Wc {
  readonly wrId: number
  readonly status: number
  readonly opcode: number
  readonly byteLen: number
  readonly immData: number
  readonly wcFlags: number
  readonly qpNum: number
}

export const copyWc = (w: WorkCompletion): Wc => ({
  wrId: w.wrId,
  status: w.status,
  opcode: w.opcode,
  byteLen: w.byteLen,
  immData: w.immData,
  wcFlags: w.wcFlags,
  qpNum: w.qpNum
})

/** Polls `cq` until `n` completions arrived or `timeoutMs` passed (then returns what it has). */
export const pollN = (cq: CompletionQueue, n: number, timeoutMs = 5000): Effect.Effect<ReadonlyArray<Wc>> =>
  Effect.gen(function* () {
    const wc = WorkCompletion.array(64)
    const out: Array<Wc> = []
    const deadline = Date.now() + timeoutMs
    while (out.length < n && Date.now() < deadline) {
      const got = cq.pollCq(Math.min(64, n - out.length), wc)
      for (let i = 0; i < got; i++) out.push(copyWc(wc[i] as WorkCompletion))
      if (out.length >= n) break
      if (got === 0) {
        yield* cq.awaitNotify.pipe(Effect.timeoutOption(Math.max(1, deadline - Date.now())))
      }
    }
    return out
  })

/** Polls whatever is there now. */
export const drain = (cq: CompletionQueue): ReadonlyArray<Wc> => {
  const wc = WorkCompletion.array(64)
  const out: Array<Wc> = []
  for (let i = 0; i < 10_000; i++) {
    const got = cq.pollCq(64, wc)
    for (let k = 0; k < got; k++) out.push(copyWc(wc[k] as WorkCompletion))
    if (got < 64) break
  }
  return out
}

/** Waits `ms` of real time. */
export const sleep = (ms: number) => Effect.promise(() => new Promise<void>((r) => setTimeout(r, ms)))

export const recvWr = (side: Side, wrId: number, offset: number, length: number): RecvWr => ({
  wrId,
  sgList: [{ addr: side.mr.addr + offset, length, lkey: side.mr.lkey }]
})

export const sendWr = (
  side: Side,
  wrId: number,
  offset: number,
  length: number,
  extra: Partial<SendWr> = {}
): SendWr => ({
  wrId,
  opcode: WrOpcode.SEND,
  sendFlags: 2,
  sgList: [{ addr: side.mr.addr + offset, length, lkey: side.mr.lkey }],
  ...extra
})

/** Collects a device context's async events in the background (subscribed when this returns). */
export const collectEvents = (ctx: DeviceContext) =>
  Effect.gen(function* () {
    const events: Array<AsyncEvent> = []
    yield* Stream.runForEach(ctx.asyncEvents, (e) => Effect.sync(() => events.push(e))).pipe(Effect.forkScoped)
    yield* sleep(20)
    return events
  })

/** Waits until `check()` holds, polling every 5 ms, at most `timeoutMs`. */
export const waitFor = (check: () => boolean, timeoutMs = 5000) =>
  Effect.gen(function* () {
    const deadline = Date.now() + timeoutMs
    while (!check() && Date.now() < deadline) yield* sleep(5)
    return check()
  })

/** A plain UDP socket bound on 127.0.0.1 (a port of its own), closed when the scope closes. */
export const udpSocket: Effect.Effect<dgram.Socket, never, Scope.Scope> = Effect.acquireRelease(
  Effect.promise(
    () =>
      new Promise<dgram.Socket>((resolve) => {
        const s = dgram.createSocket("udp4")
        s.bind(0, "127.0.0.1", () => resolve(s))
      })
  ),
  (s) => Effect.promise(() => new Promise<void>((r) => s.close(() => r())))
)
