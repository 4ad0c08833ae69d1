/**
 * `pnpm bench verbs [--quick] [--json]`: SoftVerbs between two processes on loopback, each figure beside the same
 * measurement made with plain `node:dgram` in the same run (the floor), `ratio = value / floor`.
 *
 * - `send_one_way_us`: median of RTT/2 over a ping-pong of 64-byte SENDs (floor: a 64-byte datagram echo).
 * - `send_msgs_per_s`: 64-byte SENDs with 256 in flight (floor: 64-byte datagrams, 256 unacknowledged, the receiver
 *   acknowledging once per event-loop turn).
 * - `write_64k_mb_per_s`: 64 KiB RDMA WRITEs, 8 in flight (floor: a windowed stream of 4 KiB datagrams, 128 in
 *   flight, acknowledged as above).
 *
 * Each pair is measured floor first, then SoftVerbs, and the whole set twice; the better of the two rounds is kept
 * for each (these VMs are shared and swing up to 2x minute to minute).
 */
import * as dgram from "node:dgram"
import type { AddressInfo } from "node:net"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import {
  AccessFlags,
  type CompletionQueue,
  gidFromString,
  gidToString,
  type QueuePair,
  Rc,
  type RecvWr,
  type SendWr,
  SoftVerbs,
  WcStatus,
  WorkCompletion,
  WrOpcode
} from "../src/index.js"
import { spawnChild } from "../test/fixtures/child.js"
import type { BenchOptions, BenchResult } from "./contract.js"

interface PeerReady {
  readonly dgramPort: number
  readonly gid: string
  readonly qpNum: number
  readonly psn: number
  readonly writeAddr: number
  readonly writeRkey: number
  readonly writeLen: number
}

const MB = 1 << 20

const median = (xs: Array<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)] as number
}

/** Runs `step(done)` until it calls `done`, or `limitMs` passes (then rejects). */
const until = (limitMs: number, start: (done: () => void) => void): Promise<void> =>
  new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`benchmark step did not finish within ${limitMs} ms`)), limitMs)
    start(() => {
      clearTimeout(t)
      resolve()
    })
  })

const openSocket = async (): Promise<dgram.Socket> => {
  const s = dgram.createSocket({
    type: "udp4",
    lookup: ((a: string, _o: unknown, cb: (e: null, a: string, f: number) => void) => cb(null, a, 4)) as never
  })
  await new Promise<void>((r) => s.bind(0, "127.0.0.1", () => r()))
  s.setRecvBufferSize(4 * MB)
  s.setSendBufferSize(4 * MB)
  return s
}

// ---------------------------------------------------------------------------------------------------------------------
// Floors: plain node:dgram
// ---------------------------------------------------------------------------------------------------------------------

const dgramPingPong = async (s: dgram.Socket, port: number, rounds: number): Promise<number> => {
  const msg = Buffer.alloc(64, 0x50)
  const rtts: Array<number> = []
  let t0 = 0
  await until(60_000, (done) => {
    s.on("message", () => {
      rtts.push(performance.now() - t0)
      if (rtts.length >= rounds) {
        s.removeAllListeners("message")
        done()
        return
      }
      t0 = performance.now()
      s.send(msg, 0, 64, port, "127.0.0.1")
    })
    t0 = performance.now()
    s.send(msg, 0, 64, port, "127.0.0.1")
  })
  return (median(rtts.slice(Math.floor(rounds / 10))) / 2) * 1000
}

/** Streams `size`-byte datagrams with at most `window` unacknowledged for `ms`; returns datagrams per second. */
const dgramStream = async (s: dgram.Socket, port: number, size: number, window: number, ms: number) => {
  const msg = Buffer.alloc(size, 0x53)
  let sent = 0
  let acked = 0
  let base = -1
  const start = performance.now()
  let end = start
  await until(ms + 10_000, (done) => {
    let finished = false
    const pump = () => {
      while (sent - acked < window) {
        s.send(msg, 0, size, port, "127.0.0.1")
        sent++
      }
    }
    s.on("message", (m: Buffer) => {
      const count = m.readUInt32LE(0)
      if (base < 0) base = count - 1
      acked = Math.max(acked, count - base)
      if (finished) return
      if (performance.now() - start >= ms) {
        finished = true
        end = performance.now()
        s.removeAllListeners("message")
        done()
        return
      }
      pump()
    })
    pump()
  })
  // The receiver's counter started where earlier runs left it: `base` aligns it to this run.
  return (acked / (end - start)) * 1000
}

// ---------------------------------------------------------------------------------------------------------------------
// SoftVerbs
// ---------------------------------------------------------------------------------------------------------------------

interface Local {
  readonly qp: QueuePair
  readonly cq: CompletionQueue
  readonly buf: Buffer
  readonly lkey: number
  readonly addr: number
}

const softPingPong = async (l: Local, rounds: number): Promise<number> => {
  const rtts: Array<number> = []
  const wc = WorkCompletion.array(16)
  l.buf.fill(0x50, 0, 64)
  const ping: SendWr = {
    wrId: 1,
    opcode: WrOpcode.SEND,
    sendFlags: 0,
    sgList: [{ addr: l.addr, length: 64, lkey: l.lkey }]
  }
  const recvSge = { addr: l.addr + 4096, length: 4096, lkey: l.lkey }
  const recv: RecvWr = { wrId: 2, sgList: [recvSge] }
  for (let i = 0; i < 64; i++) l.qp.postRecv(recv)
  let t0 = 0
  let n = 0
  await until(60_000, (done) => {
    l.cq.setNotify(() => {
      for (;;) {
        const got = l.cq.pollCq(16, wc)
        for (let i = 0; i < got; i++) {
          const w = wc[i] as WorkCompletion
          if (w.status !== WcStatus.SUCCESS) throw new Error(`completion failed: ${w.status}`)
          if (w.opcode < 128) continue
          rtts.push(performance.now() - t0)
          l.qp.postRecv(recv)
          if (rtts.length >= rounds) {
            l.cq.setNotify(null)
            done()
            return
          }
          ping.sendFlags = ++n % 64 === 0 ? 2 : 0
          t0 = performance.now()
          l.qp.postSend(ping)
        }
        if (got < 16) break
      }
      l.cq.reqNotifyCq()
    })
    l.cq.reqNotifyCq()
    t0 = performance.now()
    l.qp.postSend(ping)
  })
  return (median(rtts.slice(Math.floor(rounds / 10))) / 2) * 1000
}

/** Keeps `window` WRs in flight for `ms`, each signaled; returns completions per second. */
const softStream = async (l: Local, window: number, ms: number, wr: SendWr): Promise<number> => {
  const wc = WorkCompletion.array(64)
  let inFlight = 0
  let completed = 0
  const start = performance.now()
  let end = start
  await until(ms + 10_000, (done) => {
    let finished = false
    const pump = () => {
      while (inFlight < window) {
        if (l.qp.postSend(wr) !== 0) break
        inFlight++
      }
    }
    l.cq.setNotify(() => {
      for (;;) {
        const got = l.cq.pollCq(64, wc)
        for (let i = 0; i < got; i++) {
          const w = wc[i] as WorkCompletion
          if (w.status !== WcStatus.SUCCESS) throw new Error(`completion failed: ${w.status}`)
          if (w.opcode >= 128) continue
          inFlight--
          completed++
        }
        if (got < 64) break
      }
      if (!finished && performance.now() - start >= ms) {
        finished = true
        end = performance.now()
      }
      if (finished) {
        if (inFlight === 0) {
          l.cq.setNotify(null)
          done()
          return
        }
      } else {
        pump()
      }
      l.cq.reqNotifyCq()
    })
    l.cq.reqNotifyCq()
    pump()
  })
  return (completed / (end - start)) * 1000
}

// ---------------------------------------------------------------------------------------------------------------------

const result = (name: string, unit: string, better: "lower" | "higher", value: number, floor: number): BenchResult => ({
  name,
  unit,
  better,
  value: Number(value.toFixed(2)),
  floor: Number(floor.toFixed(2)),
  ratio: Number((value / floor).toFixed(3))
})

/** Runs the suite. */
export const run = (options: BenchOptions): Promise<ReadonlyArray<BenchResult>> =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const { log, quick } = options
        const rounds = 10_000
        const ms = quick ? 1500 : 4000
        // TENT_BENCH_PROFILE_DIR=<dir> writes a CPU profile of the peer process there (run this process with
        // `node --cpu-prof` to profile this side too).
        const profileDir = process.env.TENT_BENCH_PROFILE_DIR
        const nodeArgs = profileDir ? ["--cpu-prof", `--cpu-prof-dir=${profileDir}`] : []
        const peer = yield* spawnChild<PeerReady>(fileURLToPath(new URL("peer.ts", import.meta.url)), [], nodeArgs)
        const p = peer.ready
        const s = yield* Effect.acquireRelease(Effect.promise(openSocket), (x) => Effect.sync(() => x.close()))
        log(`floor socket 127.0.0.1:${(s.address() as AddressInfo).port}, peer ${p.dgramPort}`)

        const { control, verbs } = yield* SoftVerbs.make({ devices: [{ name: "bench0" }] })
        const device = yield* control.device("bench0")
        const health = () =>
          `retransmits ${device.counters.retransmits}, seq NAKs ${device.counters.seqNaksSent}, duplicates ${device.counters.duplicates}`
        const { ctx, pd, cq, qp } = yield* Rc.open(verbs, "bench0", {
          cqe: 8192,
          maxSendWr: 1024,
          maxRecvWr: 256,
          maxInlineData: 64
        })
        const buf = Buffer.alloc(4 * MB)
        const mr = yield* pd.regMr(buf, AccessFlags.LOCAL_WRITE)
        const psn = Rc.randomPsn()
        const gid = gidToString(yield* ctx.queryGid(1, 0))
        const reply = yield* Effect.promise(() => peer.request({ cmd: "connect", gid, qpNum: qp.qpNum, psn }))
        if ((reply as { ok?: boolean }).ok !== true) throw new Error(`peer could not connect: ${JSON.stringify(reply)}`)
        yield* Rc.connect(qp, psn, { gid: gidFromString(p.gid) as Uint8Array, qpNum: p.qpNum, psn: p.psn })
        const local: Local = { qp, cq, buf, lkey: mr.lkey, addr: mr.addr }

        const send64: SendWr = {
          wrId: 3,
          opcode: WrOpcode.SEND,
          sendFlags: 2,
          sgList: [{ addr: mr.addr + 2 * MB, length: 64, lkey: mr.lkey }]
        }
        buf.fill(0x53, 2 * MB, 2 * MB + 64)
        const write64k: SendWr = {
          wrId: 4,
          opcode: WrOpcode.RDMA_WRITE,
          sendFlags: 2,
          sgList: [{ addr: mr.addr + MB, length: 65536, lkey: mr.lkey }],
          remoteAddr: p.writeAddr,
          rkey: p.writeRkey
        }
        const best = { pingF: Infinity, ping: Infinity, msgsF: 0, msgs: 0, bwF: 0, bw: 0 }
        for (let round = 1; round <= 2; round++) {
          const pingF = yield* Effect.promise(() => dgramPingPong(s, p.dgramPort, rounds))
          const ping = yield* Effect.promise(() => softPingPong(local, rounds))
          log(`round ${round}: one-way ${ping.toFixed(1)} us (floor ${pingF.toFixed(1)})`)
          const msgsF = yield* Effect.promise(() => dgramStream(s, p.dgramPort, 64, 256, ms))
          const msgs = yield* Effect.promise(() => softStream(local, 256, ms, send64))
          log(`round ${round}: ${msgs.toFixed(0)} msgs/s (floor ${msgsF.toFixed(0)}); ${health()}`)
          const bwF = ((yield* Effect.promise(() => dgramStream(s, p.dgramPort, 4096, 128, ms))) * 4096) / MB
          const bw = ((yield* Effect.promise(() => softStream(local, 8, ms, write64k))) * 65536) / MB
          log(`round ${round}: 64 KiB WRITE ${bw.toFixed(0)} MB/s (floor ${bwF.toFixed(0)}); ${health()}`)
          best.pingF = Math.min(best.pingF, pingF)
          best.ping = Math.min(best.ping, ping)
          best.msgsF = Math.max(best.msgsF, msgsF)
          best.msgs = Math.max(best.msgs, msgs)
          best.bwF = Math.max(best.bwF, bwF)
          best.bw = Math.max(best.bw, bw)
        }
        return [
          result("send_one_way_us", "us", "lower", best.ping, best.pingF),
          result("send_msgs_per_s", "msg/s", "higher", best.msgs, best.msgsF),
          result("write_64k_mb_per_s", "MB/s", "higher", best.bw, best.bwF)
        ]
      })
    )
  )
