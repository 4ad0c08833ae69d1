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
 * The floor's stream datagrams carry a run and a sequence number; the peer acknowledges the highest it has seen in the
 * run, so its first ACK credits all it covers and a lost datagram does not shrink the window (see
 * {@link dgramStream}). Both streams count only what completed within the timed span. The set runs twice (`--quick`)
 * or four times, each pair alternating which side goes first (floor first in odd rounds, SoftVerbs first in even
 * ones); the best round is kept for each (these VMs are shared and swing up to 2x minute to minute).
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
import { type BenchOptions, type BenchResult, median } from "./contract.js"

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

/** What one windowed stream of the floor did: datagrams per second, and how many were sent but never received. */
interface StreamFigure {
  readonly perS: number
  readonly lost: number
  readonly stalls: number
  /** Datagrams the first ACK covered (all credited: an ACK counting from 1 would have kept the rest in the window). */
  readonly firstAck: number
}

/** How long a full window may wait for an ACK before its datagrams are taken as lost (the floor's only timer). */
const STALL_MS = 250

let floorRun = 0

/**
 * Streams `size`-byte datagrams with at most `window` unacknowledged for `ms`; the figure counts the datagrams the
 * peer received in the timed span. Each datagram carries this run's number and its sequence number; the peer's ACK
 * says how many of this run it received and the highest sequence it has seen, and the window is credited up to that
 * sequence: the first ACK credits all it covers (an earlier run's count does not carry over), and a lost datagram
 * frees its slot when a later one is acknowledged. A full window with no ACK for {@link STALL_MS} is taken as lost
 * (counted in `stalls`): a lost tail cannot hold the stream.
 */
const dgramStream = async (
  s: dgram.Socket,
  port: number,
  size: number,
  window: number,
  ms: number
): Promise<StreamFigure> => {
  const run = ++floorRun
  // A datagram the kernel could not take at once stays queued by reference: each of 2 × window slots has its own
  // buffer, reused only once the window has moved a whole window past it.
  const slots = Array.from({ length: 2 * window }, () => {
    const b = Buffer.alloc(size, 0x53)
    b.writeUInt32LE(run, 4)
    return b
  })
  let sent = 0
  let acked = 0
  let received = 0
  let stalls = 0
  let firstAck = 0
  const start = performance.now()
  let end = start
  let lastAck = start
  let watchdog: NodeJS.Timeout | undefined
  try {
    await until(ms + 10_000, (done) => {
      let finished = false
      const finish = () => {
        finished = true
        end = performance.now()
        s.removeAllListeners("message")
        done()
      }
      const pump = () => {
        while (sent - acked < window) {
          const msg = slots[sent % slots.length] as Buffer
          msg.writeUInt32LE(sent, 8)
          s.send(msg, 0, size, port, "127.0.0.1")
          sent++
        }
      }
      s.on("message", (m: Buffer) => {
        if (finished || m.length < 12 || m.readUInt32LE(0) !== run) return
        lastAck = performance.now()
        received = m.readUInt32LE(4)
        if (firstAck === 0) firstAck = received
        acked = Math.max(acked, m.readUInt32LE(8))
        if (lastAck - start >= ms) return finish()
        pump()
      })
      watchdog = setInterval(() => {
        const t = performance.now()
        if (finished) return
        if (t - start >= ms) return finish()
        if (sent - acked >= window && t - lastAck >= STALL_MS) {
          stalls++
          acked = sent
          lastAck = t
          pump()
        }
      }, STALL_MS / 2)
      pump()
    })
  } finally {
    clearInterval(watchdog)
  }
  return { perS: (received / (end - start)) * 1000, lost: acked - received, stalls, firstAck }
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

/**
 * Keeps `window` WRs in flight for `ms`, each signaled; returns completions per second within the span, and how many
 * completed after it while the window drained (not counted).
 */
const softStream = async (
  l: Local,
  window: number,
  ms: number,
  wr: SendWr
): Promise<{ readonly perS: number; readonly drained: number }> => {
  const wc = WorkCompletion.array(64)
  let inFlight = 0
  let completed = 0
  let drained = 0
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
          // Completions after the timed span (the drain) are not counted: the span ended at `end`.
          if (finished) drained++
          else completed++
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
  return { perS: (completed / (end - start)) * 1000, drained }
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
        const pings = 10_000
        const ms = quick ? 1500 : 4000
        const rounds = quick ? 2 : 4
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
        // Each pair alternates which side goes first: floor first in odd rounds, SoftVerbs first in even ones, so
        // neither always meets the warmer (or the more loaded) machine.
        const pair = <F, V>(round: number, floor: () => Promise<F>, value: () => Promise<V>) =>
          Effect.promise(async () => {
            if (round % 2 === 1) {
              const f = await floor()
              return { f, v: await value() }
            }
            const v = await value()
            return { f: await floor(), v }
          })
        const order = (round: number) => (round % 2 === 1 ? "floor first" : "SoftVerbs first")
        const acks = (x: StreamFigure) => `its first ACK covered ${x.firstAck}, lost ${x.lost}, ${x.stalls} stalls`
        const best = { pingF: Infinity, ping: Infinity, msgsF: 0, msgs: 0, bwF: 0, bw: 0 }
        for (let round = 1; round <= rounds; round++) {
          const ping = yield* pair(
            round,
            () => dgramPingPong(s, p.dgramPort, pings),
            () => softPingPong(local, pings)
          )
          log(`round ${round} (${order(round)}): one-way ${ping.v.toFixed(1)} us (floor ${ping.f.toFixed(1)})`)
          const msgs = yield* pair(
            round,
            () => dgramStream(s, p.dgramPort, 64, 256, ms),
            () => softStream(local, 256, ms, send64)
          )
          log(
            `round ${round}: ${msgs.v.perS.toFixed(0)} msgs/s, ${msgs.v.drained} drained after the span (floor ${msgs.f.perS.toFixed(0)}, ${acks(msgs.f)}); ${health()}`
          )
          const bw = yield* pair(
            round,
            () => dgramStream(s, p.dgramPort, 4096, 128, ms),
            () => softStream(local, 8, ms, write64k)
          )
          const bwF = (bw.f.perS * 4096) / MB
          const bwV = (bw.v.perS * 65536) / MB
          log(
            `round ${round}: 64 KiB WRITE ${bwV.toFixed(0)} MB/s, ${bw.v.drained} drained after the span (floor ${bwF.toFixed(0)}, ${acks(bw.f)}); ${health()}`
          )
          best.pingF = Math.min(best.pingF, ping.f)
          best.ping = Math.min(best.ping, ping.v)
          best.msgsF = Math.max(best.msgsF, msgs.f.perS)
          best.msgs = Math.max(best.msgs, msgs.v.perS)
          best.bwF = Math.max(best.bwF, bwF)
          best.bw = Math.max(best.bw, bwV)
        }
        return [
          result("send_one_way_us", "us", "lower", best.ping, best.pingF),
          result("send_msgs_per_s", "msg/s", "higher", best.msgs, best.msgsF),
          result("write_64k_mb_per_s", "MB/s", "higher", best.bw, best.bwF)
        ]
      })
    )
  )
