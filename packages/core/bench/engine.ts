/**
 * `pnpm bench engine [--quick] [--json]`: the engine (legacy series, two SoftVerbs devices per process) between this
 * process and a child process, each figure beside a floor measured in the same run with raw SoftVerbs verbs.
 *
 * The raw SoftVerbs floors (of `notify_one_way_us`, `burst_2000_p50_ms`, `write_64k_mb_per_s` and
 * `send_msgs_per_s_pr7_off`) are measured right before and right after the engine's first three figures, each floor
 * the mean of the two (both logged).
 *
 * - `notify_one_way_us`: median of RTT/2 of a notification ping-pong through the engine's fast send → the peer's fast
 *   consumer (`subscribe`: its handler sends the echo with `trySendNotification`, the synchronous fast path, falling
 *   back to `sendNotification` with `Runtime.runSync`) → back → this engine's `subscribe` handler, which sends the
 *   next ping the same way (floor: a raw 64-byte SEND echo between the same two kinds of
 *   process); both after the same number of untimed warm-up rounds ({@link WARM_CYCLES} cycles of them for the engine,
 *   alternating with the stream's, as many in one go for the floor). The peer is `notify-echo-peer.ts`.
 * - `notify_one_way_us_stream`: the same ping-pong with the `notifications` stream as the consumer on both sides (each
 *   send made from the stream's consumer of the previous arrival), against the same peer switched to its stream echo;
 *   the same floor and the same warm-up rounds. After both warm-ups, the timed rounds of the two run in blocks of half
 *   of them each (subscribe, stream, stream, subscribe).
 * - `burst_2000_p50_ms`: 2000 notifications of {@link ping}'s size sent back to back through `sendNotification`
 *   (which the notify window paces: 256 in flight), each carrying its index and timed from its call, echoed by the
 *   peer; p50 of echo RTT / 2 on this process's clock (floor: 2000 raw SENDs of the ping's 68 encoded bytes, at most
 *   256 in flight, each timed from the previous one's post, echoed by the echo peer; p50 of echo RTT / 2 the same
 *   way). Both are measured the same way: the same pacing, one clock, the queues of both directions. The RFC's
 *   figure (1.6 ms after PR 2) is one-way; this one is not, so the log adds, for reference only, the one-way p50 of a
 *   burst the peer sends, stamped on its clock and read on this one (two processes' clocks: not a figure).
 * - `write_64k_mb_per_s`: 64 KiB WRITE requests through `submitTransfer` over two rails, 16 per batch, two batches in
 *   flight (the next is submitted before the previous is waited for) (floor: raw 64 KiB RDMA WRITEs in the same
 *   batches, two in flight, over two QPs on two SoftVerbs devices, WRITE k of a batch on rail k % 2 as the engine's
 *   round robin: the same depth, 16 to 32 in flight, on the same number of rails; the engine spreads a rail's slices
 *   over its data QPs (`transports/rdma/num_lanes`), the floor has one QP per rail, on the same socket). Both are
 *   sustained throughput with the wire kept busy, both after an untimed warm-up (256 MiB with `--quick`, else 512
 *   MiB: the engine's WRITE path runs at 90-115 MB/s in its first 64 MiB and reaches its steady rate after 128-192),
 *   timed over 128 MiB (`--quick`) or 512 MiB. The log gives, for each arm, the CPU per MiB of the sender and of the
 *   receiver over the timed span, main thread and other threads (V8's GC helpers) apart (Linux, from `/proc`).
 * - `notify_fallback_rtt_us`: median RTT (not halved) of the same notification ping-pong as `notify_one_way_us`, but
 *   carried by the control plane's `Notify` RPC with the peer alive: both engines run with
 *   `transports/rdma/enable: false` (legacy series), so `sendNotification` goes to the TCP transport, which is the
 *   `Notify` call (each send completes when the peer acknowledges it), and the engine's stream drains the queue
 *   `Notify` lands in; the bench checks that no RDMA transport is installed and that every echo arrived by `Notify`.
 *   Floor: a plain `node:net` ping-pong over 127.0.0.1 of the same notification payload (TENT's 68-byte encoding of
 *   the ping, in a `[u32 len]` frame) against `bench/tcp-echo-peer.ts`, a child process of the same kind, measured
 *   right before and right after the engine and averaged; the same untimed warm-up rounds for both.
 * - `frozen_peer_second_call_ms` and `recovery_ms` (RFC PR 4, `Series.PeerHealth`): an engine with `Series.all`, a
 *   fresh one per round (its record starts empty: each round's mark is its own), against one `engine-peer.ts` child:
 *   the descriptor cached (`openSegment`), the peer's node process SIGSTOPped, two `sendNotification`s with a 300 ms
 *   `rpc/bootstrap_timeout_ms` — the first waits the timeout and marks the peer, the second is refused by the record
 *   without a call — then SIGCONT. `frozen_peer_second_call_ms` is the median of the second call's time over every
 *   round (floor: a `sendNotification` in the same round, before the freeze, that fails at once without I/O for
 *   another reason — larger than `rpc/max_notify_bytes`, so both its senders refuse it before sending; median over
 *   the same rounds). The first rounds SIGCONT at once; in the last ones a send every 5 ms follows the SIGCONT until
 *   one succeeds: `recovery_ms` is the median time from SIGCONT to that success, the thaws aimed at evenly spread
 *   points of the prober's period (round j of n thaws (j + 0.5)/n of a period before one of the prober's rounds,
 *   which run every `peer_health/probe_interval_ms` from the engine's start), so it is the median of a thaw at a
 *   random moment; floor: `peer_health/probe_interval_ms` itself (ratio: the share of a prober period a resumed peer
 *   stays refused; the prober's design alone gives 0.5).
 * - `dedup_ns_per_op` and `dedup_mixed_ns_per_op` (RFC PR 6, `internal/ReplayWindow.ts`): `SessionTable.admit(session,
 *   seq, now)` in this process, the clock read once per 16 stamps as the notify poller reads it once per pass, median ns per call over untimed-warmed repetitions of 2^18 (`--quick`) or 2^20 stamps on one
 *   session, each repetition on a fresh table: seqs in order, then the same count reordered within the window (blocks
 *   of 256 shuffled, one copy of a seq 100 places away every 8 stamps, so about 11% duplicates). Goal ≤ 100 ns. Floor:
 *   the least the window's bookkeeping could cost, a bit test-and-set in one `Uint32Array(128)` per stamp of the same
 *   stream as plain numbers (no BigInt, no session lookup, no clock). The log splits the figure: the table with `now`
 *   passed by the caller, the window alone, and one read of the table's clock.
 * - `send_msgs_per_s` and `send_msgs_per_s_pr7_off` (RFC PR 7's pending table on the send path): {@link ping}s through
 *   `sendNotification` back to back, as fast as the notify window (256 in flight) allows, to a `notify-sink-peer.ts`
 *   child (`Series.all`, `notify_proto` 1), messages per second until the last send completed, over rounds of 3000
 *   (`--quick`) or 20 000. Two engines in this process, identical but for PR 7: `Series.all`'s Layers with
 *   `Series.Resend` (`Resend.makeSeries`, `track`: each send pushed to the pending table, each completion shifts it)
 *   or `Resend.layerLegacy` (`track` false); PR 6's `Series.Dedup` in both, so both stamp. Two untimed rounds per
 *   arm, then timed rounds in blocks of (on, off, off, on), each arm's figure its messages over its seconds. Floor of
 *   `send_msgs_per_s`: the PR 7-off arm (ratio on/off; goal ≥ 0.95). Floor of the off arm: raw SoftVerbs SENDs of
 *   the stamped ping's length (112 B), 256 in flight, against the floor's echo peer (which echoes each: this process
 *   takes the echoes too), median of three timed runs after one untimed.
 * - `dedup_bytes_per_session`: heap plus `ArrayBuffer` growth (`process.memoryUsage()`, after a full GC) of one table
 *   given 10 000 new sessions, per session, the session ids created inside the measurement (the table keeps them).
 *   Goal ≤ 600 B. Floor: the 4096-bit bitmap itself, 512 B.
 */
import { readdirSync, readFileSync } from "node:fs"
import * as Net from "node:net"
import { fileURLToPath } from "node:url"
import * as V8 from "node:v8"
import * as Vm from "node:vm"
import { PeerHealth } from "@tent/health"
import { type Notification, NotifyWire, RpcConfig } from "@tent/rpc"
import {
  AccessFlags,
  type CompletionQueue,
  gidFromString,
  gidToString,
  type QueuePair,
  Rc,
  SendFlags,
  SoftVerbs,
  WcStatus,
  WorkCompletion,
  WrOpcode,
  wcStatusName
} from "@tent/verbs"
import { type BenchOptions, type BenchResult, median } from "@tent/verbs/bench"
import { frameSplitter } from "@tent/verbs/bench/frames"
import {
  Context,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  Layer,
  Logger,
  LogLevel,
  Runtime,
  type Scope,
  Stream
} from "effect"
import type { ConfigError } from "effect/ConfigError"
import { CtrlFrame, Dedup, Diagnostics, Receipts, Resend, Series, SubmitHooks, TransferEngine } from "../src/index.js"
import { NOTIFY_SLOTS } from "../src/internal/NotifyChannel.js"
import { ReplayWindow, SessionTable, Verdict, WINDOW_WORDS } from "../src/internal/ReplayWindow.js"
import { type Child, spawnChild } from "../test/fixtures/child.js"
import { engineLayer } from "../test/fixtures/engine.js"
import * as TransferNotify from "./transfer-notify.js"

const here = (f: string) => fileURLToPath(new URL(f, import.meta.url))
const now = () => performance.timeOrigin + performance.now()

/**
 * CPU time (user + system, ms) so far of a process's main thread and of all its other threads together (V8's GC and
 * compiler helpers, libuv's pool), from `/proc` (Linux; NaN elsewhere): the WRITE figures log what each side spent per
 * MiB, the figure that decides the rate when two processes share two cores.
 */
const threadCpuMs = (pid: number | undefined): readonly [number, number] => {
  const ms = (path: string) => {
    const f = readFileSync(path, "utf8").split(") ")[1]?.split(" ") ?? []
    return (Number(f[11]) + Number(f[12])) * (1000 / 100)
  }
  try {
    let main = 0
    let others = 0
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      if (tid === String(pid)) main = ms(`/proc/${pid}/task/${tid}/stat`)
      else others += ms(`/proc/${pid}/task/${tid}/stat`)
    }
    return [main, others]
  } catch {
    return [Number.NaN, Number.NaN]
  }
}

/** Sender and receiver CPU per MiB (main thread + the others) over a timed WRITE span, as a log fragment. */
const cpuPerMiB = (pids: readonly [number | undefined, number | undefined]) => {
  const before = pids.map(threadCpuMs)
  return (mib: number) => {
    const [s, r] = pids.map((pid, i) => {
      const [main, others] = threadCpuMs(pid)
      const [main0, others0] = before[i] as readonly [number, number]
      return `${((main - main0) / mib).toFixed(2)} + ${((others - others0) / mib).toFixed(2)} ms`
    })
    return `CPU per MiB (main thread + other threads): sender ${s}, receiver ${r}`
  }
}

/** A SoftVerbs device's counters (`SoftVerbsControl.counters`; the engine peer's `stats` sends them as JSON). */
type WireCounters = SoftVerbs.SoftCounters

/** The counters of {@link wireDelta}: what a wire that needed repair, or a sender that ran short, leaves behind. */
const WIRE_KEYS: ReadonlyArray<keyof WireCounters> = [
  "retransmits",
  "seqNaksSent",
  "rnrNaksSent",
  "rnrRetries",
  "duplicates",
  "sendSlotsBusy",
  "sendErrors"
]

/** What the wire did between two readings of devices' counters, summed over the devices: the counters that moved. */
const wireDelta = (before: ReadonlyArray<WireCounters>, after: ReadonlyArray<WireCounters>): string => {
  const sum = (list: ReadonlyArray<WireCounters>, k: keyof WireCounters) => list.reduce((a, c) => a + c[k], 0)
  const moved = WIRE_KEYS.map((k) => [k, sum(after, k) - sum(before, k)] as const).filter(([, d]) => d !== 0)
  return moved.length === 0 ? `clean (no ${WIRE_KEYS.join(", ")})` : moved.map(([k, d]) => `${k} ${d}`).join(", ")
}

/** The ping of the notification ping-pongs: a 4-byte name and a 56-byte message (68 bytes in TENT's encoding). */
const ping: Notification = { name: new TextEncoder().encode("ping"), msg: new Uint8Array(56) }

/**
 * `total` ping-pongs of {@link ping} with an engine peer that echoes it, consumed by the engine's fast consumer:
 * `sendNotification` → the peer → back → this engine's `subscribe` handler, which records the RTT and sends the next
 * ping with `Runtime.runSync` (a send on a READY endpoint completes synchronously; the first, which may bootstrap the
 * endpoint, is run as an effect); a Deferred completed by the last one ends the round. The RTT of each in ms. Drains
 * the queues after (the subscriber's notifications are queued as well) and checks that they held `total`.
 */
const pingPongSubscribe = (engine: TransferEngine.TransferEngineShape, segment: string, total: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const rtts: Array<number> = []
      const done = yield* Deferred.make<void, unknown>()
      const runSync = Runtime.runSync(yield* Effect.runtime<never>())
      const send = engine.sendNotification(segment, ping)
      let t0 = 0
      yield* engine.subscribe(() => {
        if (rtts.length >= total) return
        rtts.push(performance.now() - t0)
        if (rtts.length >= total) {
          Deferred.unsafeDone(done, Exit.void)
          return
        }
        t0 = performance.now()
        if (engine.trySendNotification(segment, ping)) return
        try {
          runSync(send)
        } catch (e) {
          Deferred.unsafeDone(done, Exit.fail(e))
        }
      })
      t0 = performance.now()
      yield* send
      yield* Deferred.await(done).pipe(
        Effect.timeoutFail({ duration: PHASE_TIMEOUT, onTimeout: () => new Error("subscribe ping-pong timed out") })
      )
      const queued = (yield* engine.receiveNotifications).length
      if (queued !== total) {
        return yield* Effect.fail(new Error(`subscribe ping-pong: ${queued} notifications queued, ${total} expected`))
      }
      return rtts
    })
  )

/**
 * `total` ping-pongs of {@link ping} with an engine peer that echoes it: `sendNotification` → the peer's stream → back
 * → this engine's `notifications` stream, each send made from the consumer of the previous arrival; the RTT of each
 * in ms.
 */
const pingPong = (engine: TransferEngine.TransferEngineShape, segment: string, total: number) =>
  Effect.gen(function* () {
    const rtts: Array<number> = []
    let t0 = performance.now()
    yield* engine.sendNotification(segment, ping)
    yield* engine.notifications.pipe(
      Stream.take(total),
      Stream.runForEach(() =>
        Effect.suspend(() => {
          rtts.push(performance.now() - t0)
          if (rtts.length >= total) return Effect.void
          t0 = performance.now()
          return engine.sendNotification(segment, ping)
        })
      )
    )
    return rtts
  })

/** The notify channel's send window (TENT `kNotifyMaxPendingSends`): the raw SEND floor keeps as many in flight. */
const NOTIFY_WINDOW = NOTIFY_SLOTS

/** Bytes of {@link ping} on the wire to a peer at `notify_proto` 1: its `CtrlFrame` v1, stamped (RFC PR 6). */
const STAMPED_PING_BYTES = CtrlFrame.encodeInto(Buffer.alloc(1024), 0, 1n, 1n, ping.name, ping.msg)

/** The burst of `burst_2000_p50_ms`: this many notifications (or raw SENDs), at most {@link NOTIFY_WINDOW} in flight. */
const BURST = 2000

/** Bytes of {@link ping} in TENT's encoding (what a legacy engine's notify SEND carries): the burst floor's SEND. */
const PING_BYTES = NotifyWire.HEADER_BYTES + ping.name.length + ping.msg.length

/**
 * Cycles of the one-way ping-pongs' untimed warm-up: `warmup` rounds of the fast consumer, then of the stream, this many
 * times; the raw floor's warm-up is as many rounds (`WARM_CYCLES × warmup`). V8 reaches the stream path's steady state
 * only after both consumers' code has run alternately for a while. Measured in a scratch loop (blocks of 500 timed
 * rounds of each, in the bench's order): after one cycle of 3000 the stream's one way was 52–72 µs in the first three
 * blocks and 34 µs from the fourth; after two cycles, 46–51 µs in the first block and 33–34 µs from the second; the
 * fast consumer 23–26 µs from the first block in both.
 */
const WARM_CYCLES = 4

/** WRITEs per batch of `write_64k_mb_per_s`, and batches in flight (the engine's loop keeps two): both arms' depth. */
const WRITE_BATCH = 16
const WRITE_BATCHES_IN_FLIGHT = 2

/**
 * What a failed floor completion most likely says: the raw floor has no retry of its own (the engine retries a failed
 * slice on another rail), so a QP that saw no ACK for `timeout` × `retry_cnt` (TENT's defaults, as the engine's) ends
 * the suite.
 */
const statusHint = (status: number) =>
  status === WcStatus.RETRY_EXC_ERR
    ? " (no ACK from the echo peer within timeout × retry_cnt: is the machine too loaded for the peer to run?)"
    : ""

/** A rail of the floor: a QP on its own SoftVerbs device, as the engine's two devices are two rails. */
interface FloorRail {
  readonly qp: QueuePair
  readonly cq: CompletionQueue
  readonly lkey: number
  readonly remote: { readonly addr: number; readonly rkey: number }
}

/**
 * Raw SoftVerbs floor: this process's QPs against the echo peer, one per device (`floor0`, `floor1`, as the engine's
 * two rails). Rail 0 carries the SENDs (the peer echoes each); the WRITEs go over both.
 */
const floors = (rounds: number, warmup: number, warmMb: number, writeMb: number, sendCount: number) =>
  Effect.gen(function* () {
    type PeerRail = { gid: string; qpNum: number; psn: number; addr: number; rkey: number }
    const peer = yield* spawnChild<{ rails: ReadonlyArray<PeerRail> }>(here("echo-peer.ts"))
    const names = ["floor0", "floor1"]
    if (peer.ready.rails.length !== names.length) {
      return yield* Effect.fail(new Error(`floor: the echo peer has ${peer.ready.rails.length} rails`))
    }
    const { verbs } = yield* SoftVerbs.make({ devices: names.map((name) => ({ name })) })
    const buf = Buffer.alloc(64 << 20)
    const opened = yield* Effect.forEach(names, (name, i) =>
      Effect.gen(function* () {
        const { ctx, pd, cq, qp } = yield* Rc.open(verbs, name, { cqe: 16384, maxSendWr: 4096, maxRecvWr: 4096 })
        const mr = yield* pd.regMr(buf, AccessFlags.LOCAL_WRITE)
        const psn = Rc.randomPsn()
        const far = peer.ready.rails[i] as PeerRail
        yield* Rc.connect(qp, psn, { gid: gidFromString(far.gid) as Uint8Array, qpNum: far.qpNum, psn: far.psn })
        const rail: FloorRail = { qp, cq, lkey: mr.lkey, remote: { addr: far.addr, rkey: far.rkey } }
        return { rail, addr: mr.addr, local: { gid: gidToString(yield* ctx.queryGid(1, 0)), qpNum: qp.qpNum, psn } }
      })
    )
    const reply = yield* Effect.promise(() => peer.request({ cmd: "connect", rails: opened.map((o) => o.local) }))
    if ((reply as { ok?: boolean }).ok !== true) {
      return yield* Effect.fail(new Error(`floor: the echo peer could not connect: ${JSON.stringify(reply)}`))
    }
    const rails = opened.map((o) => o.rail)
    const { qp, cq, lkey } = rails[0] as FloorRail
    const base = (opened[0] as (typeof opened)[number]).addr
    const recvSge = { addr: base, length: 256, lkey }
    const recvWr = { wrId: 0, sgList: [recvSge] }
    for (let i = 0; i < 4096; i++) {
      recvWr.wrId = i
      recvSge.addr = base + (1 << 20) + i * 256
      qp.postRecv(recvWr)
    }
    const sendSge = { addr: base, length: 64, lkey }
    const sendWr = { wrId: 0, opcode: WrOpcode.SEND, sendFlags: SendFlags.SIGNALED, sgList: [sendSge] }
    const wc = WorkCompletion.array(64)
    // Completion-driven loop on rail 0: `onRecv` per echoed message, `onSend` per completed send; the phase ends when
    // `ended()` holds after a completion, so no completion of one phase is left for the next.
    const run = (
      start: () => void,
      onRecv: (w: WorkCompletion) => void,
      onSend: () => void,
      ended: () => boolean,
      what: string
    ) =>
      Effect.async<void, Error>((resume) => {
        let finished = false
        cq.setNotify(() => {
          for (;;) {
            const n = cq.pollCq(64, wc)
            for (let i = 0; i < n; i++) {
              const w = wc[i] as WorkCompletion
              if (w.status !== 0) {
                finished = true
                cq.setNotify(null)
                resume(
                  Effect.fail(new Error(`floor ${what}: completion ${wcStatusName(w.status)}${statusHint(w.status)}`))
                )
                return
              }
              if (w.opcode === 128) {
                recvWr.wrId = w.wrId
                recvSge.addr = base + (1 << 20) + w.wrId * 256
                qp.postRecv(recvWr)
                onRecv(w)
              } else onSend()
              if (ended()) {
                finished = true
                cq.setNotify(null)
                resume(Effect.void)
                return
              }
            }
            if (n < 64) break
          }
          cq.reqNotifyCq()
        })
        cq.reqNotifyCq()
        start()
        return Effect.sync(() => {
          if (!finished) cq.setNotify(null)
        })
      }).pipe(Effect.timeoutFail({ duration: PHASE_TIMEOUT, onTimeout: () => new Error(`floor ${what} timed out`) }))
    // One-way: ping-pong, `warmup` untimed rounds first (as many as each of the engine's consumers gets).
    const rtts: Array<number> = []
    let t0 = 0
    let pings = 0
    let pingsDone = 0
    const ping1 = () => {
      pings++
      t0 = performance.now()
      qp.postSend(sendWr)
    }
    yield* run(
      ping1,
      () => {
        rtts.push(performance.now() - t0)
        if (rtts.length < warmup + rounds) ping1()
      },
      () => pingsDone++,
      () => rtts.length >= warmup + rounds && pingsDone === pings,
      "ping-pong"
    )
    const oneWayUs = (median(rtts.slice(warmup)) / 2) * 1000
    // Burst: BURST SENDs of the ping's encoded length back to back, at most NOTIFY_WINDOW in flight (the notify
    // channel's window, which paces the engine's `sendNotification`s the same way); p50 of echo RTT / 2, every time
    // on this process's clock, as the engine's figure.
    const sentAt = new Float64Array(BURST)
    const lat: Array<number> = []
    let posted = 0
    let sendsDone = 0
    // A SEND's time starts when the previous one was posted: as the engine's loop calls `sendNotification` for the
    // next right after the previous returns, a wait for the window is part of the SEND's time in both.
    let offered = 0
    const postBurst = () => {
      const i = posted++
      sendSge.addr = base + (i % 1024) * 128
      buf.writeUInt32LE(i, (i % 1024) * 128)
      sentAt[i] = i === 0 ? performance.now() : offered
      qp.postSend(sendWr)
      offered = performance.now()
    }
    sendSge.length = PING_BYTES
    yield* run(
      () => {
        while (posted < Math.min(NOTIFY_WINDOW, BURST)) postBurst()
      },
      (w) => {
        const i = buf.readUInt32LE((1 << 20) + w.wrId * 256)
        lat.push((performance.now() - (sentAt[i] as number)) / 2)
      },
      () => {
        sendsDone++
        if (posted < BURST) postBurst()
      },
      () => lat.length >= BURST && sendsDone === BURST,
      "burst"
    )
    sendSge.addr = base
    sendSge.length = 64
    const burstMs = median(lat)
    // 64 KiB WRITEs over both rails, as the engine's: batches of WRITE_BATCH, WRITE k of a batch on rail k % 2 (the
    // engine's round robin), WRITE_BATCHES_IN_FLIGHT batches in flight (the next posted when the oldest has
    // completed); an untimed warm-up of `warmMb`, then `writeMb` timed.
    const writeWcs = WorkCompletion.array(64)
    const writes = (mb: number) =>
      Effect.async<number, Error>((resume) => {
        const total = mb * 16
        const batches = Math.ceil(total / WRITE_BATCH)
        const doneIn = new Int32Array(batches)
        let nextBatch = 0
        let oldest = 0
        let completed = 0
        let failed = false
        const w0 = performance.now()
        const wsge = { addr: 0, length: 65536, lkey: 0 }
        const wwr = {
          wrId: 0,
          opcode: WrOpcode.RDMA_WRITE,
          sendFlags: SendFlags.SIGNALED,
          sgList: [wsge],
          remoteAddr: 0,
          rkey: 0
        }
        const postBatch = () => {
          const b = nextBatch++
          for (let k = 0; k < WRITE_BATCH && b * WRITE_BATCH + k < total; k++) {
            const slot = (b * WRITE_BATCH + k) % 512
            const rail = rails[k % rails.length] as FloorRail
            wsge.addr = base + slot * 65536
            wsge.lkey = rail.lkey
            wwr.wrId = b
            wwr.remoteAddr = rail.remote.addr + slot * 65536
            wwr.rkey = rail.remote.rkey
            rail.qp.postSend(wwr)
          }
        }
        const stop = () => {
          for (const r of rails) r.cq.setNotify(null)
        }
        for (const r of rails) {
          r.cq.setNotify(() => {
            for (;;) {
              const n = r.cq.pollCq(64, writeWcs)
              for (let i = 0; i < n; i++) {
                const w = writeWcs[i] as WorkCompletion
                if (w.status !== 0 && !failed) {
                  failed = true
                  stop()
                  resume(
                    Effect.fail(new Error(`floor WRITE: completion ${wcStatusName(w.status)}${statusHint(w.status)}`))
                  )
                  return
                }
                completed++
                doneIn[w.wrId] = (doneIn[w.wrId] as number) + 1
              }
              if (n < 64) break
            }
            // The oldest batch done: the next is posted (the engine waits for the oldest, then submits).
            while (
              oldest < batches &&
              (doneIn[oldest] as number) >= Math.min(WRITE_BATCH, total - oldest * WRITE_BATCH)
            ) {
              oldest++
              if (nextBatch < batches) postBatch()
            }
            if (completed >= total) {
              stop()
              resume(Effect.succeed((total * 65536) / (1 << 20) / ((performance.now() - w0) / 1000)))
              return
            }
            r.cq.reqNotifyCq()
          })
          r.cq.reqNotifyCq()
        }
        for (let b = 0; b < WRITE_BATCHES_IN_FLIGHT && nextBatch < batches; b++) postBatch()
        return Effect.sync(stop)
      }).pipe(Effect.timeoutFail({ duration: PHASE_TIMEOUT, onTimeout: () => new Error("floor WRITE timed out") }))
    yield* writes(warmMb)
    const cpu = cpuPerMiB([process.pid, peer.process.pid])
    const writeMbps = yield* writes(writeMb)
    const writeCpu = cpu(writeMb)
    // SEND throughput: `sendCount` SENDs of a stamped ping's frame length, at most NOTIFY_WINDOW in flight (the notify
    // channel's window), timed until the last completes and its echo is in; the echoes' receives are reposted.
    const sendRate = Effect.suspend(() => {
      let sent = 0
      let completed = 0
      let echoes = 0
      const postOne = () => {
        sent++
        qp.postSend(sendWr)
      }
      sendSge.length = STAMPED_PING_BYTES
      const s0 = performance.now()
      let s1 = s0
      return Effect.map(
        run(
          () => {
            while (sent < Math.min(NOTIFY_WINDOW, sendCount)) postOne()
          },
          () => echoes++,
          () => {
            completed++
            if (completed === sendCount) s1 = performance.now()
            if (sent < sendCount) postOne()
          },
          () => completed >= sendCount && echoes >= sendCount,
          "SEND rate"
        ),
        () => {
          sendSge.length = 64
          return sendCount / ((s1 - s0) / 1000)
        }
      )
    })
    yield* sendRate
    const sendRates: Array<number> = []
    for (let i = 0; i < 3; i++) sendRates.push(yield* sendRate)
    return { oneWayUs, burstMs, writeMbps, writeCpu, sendMsgsPerS: median(sendRates) }
  })

const engineFigures = (rounds: number, warmup: number, warmMb: number, writeMb: number, log: (l: string) => void) =>
  Effect.gen(function* () {
    const peer = yield* spawnChild<{ segment: string }>(here("../test/fixtures/engine-peer.ts"), ["{}"])
    const ctx = yield* Layer.build(engineLayer({}))
    const engine = ctx.unsafeMap.get(TransferEngine.TransferEngine.key) as TransferEngine.TransferEngineShape
    const soft = Context.get(ctx, SoftVerbs.SoftVerbsControl)
    const arrivals = engine.notifications
    // Ping-pongs through the engine with another peer, `notify-echo-peer.ts`: first both sides on the fast consumer
    // (`subscribe`), then both on the `notifications` stream; the same untimed warm-up rounds before each.
    const echoPeer = yield* spawnChild<{ segment: string }>(here("notify-echo-peer.ts"))
    const echoMode = (mode: "subscribe" | "stream") =>
      Effect.gen(function* () {
        const r = yield* Effect.promise(() =>
          echoPeer.request<{ ok?: boolean }>({ cmd: "echo", target: engine.segmentName, mode })
        )
        if (r.ok !== true) return yield* Effect.fail(new Error(`echo peer (${mode}): ${JSON.stringify(r)}`))
      })
    // Each consumer's untimed warm-up (WARM_CYCLES cycles of `warmup` rounds each, alternating), then the timed rounds
    // in blocks (subscribe, stream, stream, subscribe), half the rounds each, so neither consumer always meets the
    // warmer (or the more loaded) machine.
    const pingPongWith = (mode: "subscribe" | "stream", total: number) =>
      Effect.zipRight(
        echoMode(mode),
        mode === "subscribe"
          ? pingPongSubscribe(engine, echoPeer.ready.segment, total)
          : pingPong(engine, echoPeer.ready.segment, total).pipe(
              Effect.timeoutFail({ duration: PHASE_TIMEOUT, onTimeout: () => new Error("stream ping-pong timed out") })
            )
      )
    for (let c = 0; c < WARM_CYCLES; c++) {
      yield* pingPongWith("subscribe", warmup)
      yield* pingPongWith("stream", warmup)
    }
    const timed = { subscribe: [] as Array<number>, stream: [] as Array<number> }
    for (const mode of ["subscribe", "stream", "stream", "subscribe"] as const) {
      timed[mode].push(...(yield* pingPongWith(mode, rounds / 2)))
    }
    const oneWayUs = (median(timed.subscribe) / 2) * 1000
    const oneWayStreamUs = (median(timed.stream) / 2) * 1000
    const echoStats = yield* Effect.promise(() =>
      echoPeer.request<{ echoed: number; failed: number; lastError?: string }>({ cmd: "stats" })
    )
    const echoes = 2 * (WARM_CYCLES * warmup + rounds)
    if (echoStats.echoed !== echoes || echoStats.failed !== 0) {
      return yield* Effect.fail(
        new Error(`echo peer: ${JSON.stringify(echoStats)}, ${echoes} echoes expected, none failed`)
      )
    }
    log(`engine notify one-way ${oneWayUs.toFixed(1)} µs (subscribe), ${oneWayStreamUs.toFixed(1)} µs (stream)`)
    yield* Effect.promise(() => peer.request({ cmd: "echo", target: engine.segmentName }))
    // Burst: BURST notifications back to back from this engine (each `sendNotification` returns once posted, the
    // notify window of 256 paces them), each carrying its index and timed from its call (a wait for the window
    // included); the peer echoes each; p50 of echo RTT / 2, every time on this process's clock, as the floor's.
    const sentAt = new Float64Array(BURST)
    const lat: Array<number> = []
    const collect = yield* arrivals.pipe(
      Stream.take(BURST),
      Stream.runForEach((n) =>
        Effect.sync(() => {
          const i = new DataView(n.msg.buffer, n.msg.byteOffset).getUint32(0, true)
          lat.push((performance.now() - (sentAt[i] as number)) / 2)
        })
      ),
      Effect.fork
    )
    for (let i = 0; i < BURST; i++) {
      const msg = new Uint8Array(ping.msg.length)
      new DataView(msg.buffer).setUint32(0, i, true)
      sentAt[i] = performance.now()
      yield* engine.sendNotification(peer.ready.segment, { name: ping.name, msg })
    }
    yield* Fiber.join(collect).pipe(
      Effect.timeoutFail({
        duration: PHASE_TIMEOUT,
        onTimeout: () => new Error("burst: the echoes did not all arrive")
      })
    )
    const burstMs = median(lat)
    log(`engine burst p50 ${burstMs.toFixed(2)} ms (echo RTT / 2)`)
    // For reference only (no floor, not a figure): the peer posts BURST notifications back to back, each stamped with
    // its send time on its clock (ms since the epoch), read against this process's; the two processes' clocks are
    // not one clock, so this one-way p50 carries their offset.
    const oneWay: Array<number> = []
    const collectOneWay = yield* arrivals.pipe(
      Stream.take(BURST),
      Stream.runForEach((n) =>
        Effect.sync(() => oneWay.push(now() - new DataView(n.msg.buffer, n.msg.byteOffset).getFloat64(0, true)))
      ),
      Effect.fork
    )
    yield* Effect.promise(() => peer.request({ cmd: "burst", target: engine.segmentName, count: BURST }, 60_000))
    yield* Fiber.join(collectOneWay).pipe(
      Effect.timeoutFail({ duration: PHASE_TIMEOUT, onTimeout: () => new Error("burst: the one-way burst stalled") })
    )
    log(`engine burst one-way p50 ${median(oneWay).toFixed(2)} ms, across the two processes' clocks (reference only)`)
    // WRITE throughput through submitTransfer over both rails.
    const remote = yield* Effect.promise(() => peer.request<{ addr: number }>({ cmd: "register", size: 32 << 20 }))
    const local = Buffer.alloc(32 << 20, 3)
    const mem = yield* engine.registerSegment(local)
    const target = yield* engine.openSegment(peer.ready.segment)
    const submit = (b: number) =>
      Effect.gen(function* () {
        const batch = yield* engine.allocateBatch
        yield* engine.submitTransfer(
          batch,
          Array.from({ length: WRITE_BATCH }, (_, i) => ({
            opcode: "WRITE" as const,
            source: mem.addr + ((b * WRITE_BATCH + i) % 512) * 65536,
            target,
            targetOffset: remote.addr + ((b * WRITE_BATCH + i) % 512) * 65536,
            length: 65536
          }))
        )
        return batch
      })
    const finish = (b: number, batch: number) =>
      Effect.gen(function* () {
        const s = yield* engine.waitTransfer(batch, 60_000)
        if (s.status !== "COMPLETED") throw new Error(`batch ${b} ${s.status}`)
        yield* engine.freeBatch(batch)
      })
    // WRITE_BATCHES_IN_FLIGHT (two) batches in flight: batch b + 1 is submitted before batch b is waited for, so the
    // rails never drain between batches; the engine spreads each batch's slices round-robin over its two rails. The
    // floor posts the same batches on two QPs of two devices the same way: the same depth (16 to 32 WRITEs, 8 to 16
    // per rail) on the same rails. Each batch is 1 MiB.
    const writes = (batches: number) =>
      Effect.gen(function* () {
        let inFlight = yield* submit(0)
        for (let b = 1; b <= batches; b++) {
          const next = b < batches ? yield* submit(b) : undefined
          yield* finish(b - 1, inFlight)
          if (next !== undefined) inFlight = next
        }
      })
    yield* writes((warmMb << 4) / WRITE_BATCH)
    const batches = (writeMb << 4) / WRITE_BATCH
    const wire = () =>
      Effect.all({
        sender: Effect.forEach(soft.devices, (d) => soft.counters(d.name)),
        receiver: Effect.map(
          Effect.promise(() => peer.request<{ devices: ReadonlyArray<WireCounters> }>({ cmd: "stats" })),
          (r) => r.devices
        )
      })
    const wire0 = yield* wire()
    const cpu = cpuPerMiB([process.pid, peer.process.pid])
    const w0 = performance.now()
    yield* writes(batches)
    const writeMbps = (batches * WRITE_BATCH * 65536) / (1 << 20) / ((performance.now() - w0) / 1000)
    const cpuLine = cpu(writeMb)
    const wire1 = yield* wire()
    log(
      `engine WRITE ${writeMbps.toFixed(1)} MB/s; ${cpuLine}; wire: sender ${wireDelta(wire0.sender, wire1.sender)}, ` +
        `receiver ${wireDelta(wire0.receiver, wire1.receiver)}`
    )
    return { oneWayUs, oneWayStreamUs, burstMs, writeMbps }
  })

/** Both engines of `notify_fallback_rtt_us`: no RDMA transport, so notifications go over the control plane's `Notify`. */
const notifyOnly = { transports: { rdma: { enable: false } } }

/** How long one timed phase of `notify_fallback_rtt_us` may take before the suite fails. */
const PHASE_TIMEOUT = "60 seconds"

/**
 * The `node:net` floor of `notify_fallback_rtt_us`: `warmup` untimed, then `rounds` timed ping-pongs of `frame` (one
 * `[u32 len][bytes]` frame) with the echo peer on 127.0.0.1; the median RTT in µs.
 */
const tcpFloor = (
  port: number,
  frame: Buffer,
  rounds: number,
  warmup: number
): Effect.Effect<number, Error, Scope.Scope> =>
  Effect.gen(function* () {
    const socket = yield* Effect.acquireRelease(
      Effect.async<Net.Socket, Error>((resume) => {
        const s = Net.createConnection({ host: "127.0.0.1", port, noDelay: true })
        s.once("connect", () => resume(Effect.succeed(s)))
        // Stays attached: a later error fails the ping-pong through its own listener, and is never unhandled.
        s.on("error", (e) => resume(Effect.fail(e)))
      }),
      (s) => Effect.sync(() => s.destroy())
    )
    const rtts = yield* Effect.async<Array<number>, Error>((resume) => {
      const out: Array<number> = []
      let t0 = 0
      let done = false
      const stop = () => {
        done = true
        socket.off("data", onData)
        socket.off("error", onError)
      }
      const onData = frameSplitter(() => {
        if (done) return
        out.push(performance.now() - t0)
        if (out.length >= warmup + rounds) {
          stop()
          resume(Effect.succeed(out))
          return
        }
        t0 = performance.now()
        socket.write(frame)
      })
      const onError = (e: Error) => {
        stop()
        resume(Effect.fail(e))
      }
      socket.on("data", onData)
      socket.on("error", onError)
      t0 = performance.now()
      socket.write(frame)
      return Effect.sync(stop)
    }).pipe(Effect.timeoutFail({ duration: PHASE_TIMEOUT, onTimeout: () => new Error("node:net floor timed out") }))
    return median(rtts.slice(warmup)) * 1000
  })

/**
 * The notification ping-pong of {@link pingPong} between two engines without the RDMA transport (this process and
 * `engine-peer.ts` started with {@link notifyOnly}): every notification both ways is a `Notify` call. Checks that it
 * was: no RDMA transport installed here, and every echo counted by the TCP transport's `Notify` callback. Median RTT
 * in µs.
 */
const fallbackRtt = (rounds: number, warmup: number) =>
  Effect.gen(function* () {
    const peer = yield* spawnChild<{ segment: string }>(here("../test/fixtures/engine-peer.ts"), [
      JSON.stringify(notifyOnly)
    ])
    const ctx = yield* Layer.build(engineLayer(notifyOnly))
    const engine = Context.get(ctx, TransferEngine.TransferEngine)
    const diag = Context.get(ctx, Diagnostics.Diagnostics)
    const tcp = diag.counters.tcp
    if (diag.installed.rdma || tcp === undefined) {
      return yield* Effect.fail(
        new Error("notify_fallback_rtt_us: the engine has an RDMA transport or no TCP transport")
      )
    }
    yield* Effect.promise(() => peer.request({ cmd: "echo", target: engine.segmentName }))
    const rtts = yield* pingPong(engine, peer.ready.segment, warmup + rounds).pipe(
      Effect.timeoutFail({ duration: PHASE_TIMEOUT, onTimeout: () => new Error("Notify ping-pong timed out") })
    )
    if (tcp.sent !== warmup + rounds || tcp.received !== warmup + rounds) {
      return yield* Effect.fail(
        new Error(
          `notify_fallback_rtt_us: ${tcp.sent} Notify sent and ${tcp.received} received, ${warmup + rounds} expected`
        )
      )
    }
    return median(rtts.slice(warmup)) * 1000
  })

/** `notify_fallback_rtt_us` and its `node:net` floor, measured right before and right after it. */
const fallbackFigures = (rounds: number, warmup: number, log: (l: string) => void) =>
  Effect.gen(function* () {
    const echo = yield* spawnChild<{ port: number }>(here("tcp-echo-peer.ts"))
    // The Notify body of the ping (TENT's `[u32 name_len][name][u32 msg_len][msg]`) in a length-prefixed frame.
    const frame = Buffer.alloc(4 + NotifyWire.HEADER_BYTES + ping.name.length + ping.msg.length)
    frame.writeUInt32LE(frame.length - 4, 0)
    NotifyWire.encode(frame, 4, ping.name, ping.msg)
    const before = yield* Effect.scoped(tcpFloor(echo.ready.port, frame, rounds, warmup))
    const rttUs = yield* Effect.scoped(fallbackRtt(rounds, warmup))
    const after = yield* Effect.scoped(tcpFloor(echo.ready.port, frame, rounds, warmup))
    log(
      `engine notify RTT over Notify (RDMA transport disabled) ${rttUs.toFixed(1)} µs; node:net floor ${before.toFixed(1)} before, ${after.toFixed(1)} after`
    )
    return { rttUs, floorUs: (before + after) / 2 }
  })

/** The prober's period of the frozen-peer figures: the RFC's default, set explicitly so the floor is what ran. */
const PROBE_INTERVAL_MS = PeerHealth.defaults.probeIntervalMs

/** `rpc/bootstrap_timeout_ms` (and `notify_timeout_ms`) of the frozen-peer figures: the one wait each round pays. */
const BOOTSTRAP_TIMEOUT_MS = 300

/** The engine of the frozen-peer figures (with `Series.all`): short control-plane timeouts, the prober's period. */
const frozenJson = {
  rpc: { bootstrap_timeout_ms: BOOTSTRAP_TIMEOUT_MS, notify_timeout_ms: BOOTSTRAP_TIMEOUT_MS },
  peer_health: { probe_interval_ms: PROBE_INTERVAL_MS }
}

/** How long the peer is stopped before the thaw: the first call's timeout, the second call, and a margin. */
const FREEZE_MS = BOOTSTRAP_TIMEOUT_MS + 50

/** The bound on each call of a round (a call that takes longer fails the suite). */
const CALL_BOUND = Duration.seconds(5)

/** The bound on the wait for a send to get through after SIGCONT: two prober periods and a second. */
const RECOVERY_BOUND_MS = 2 * PROBE_INTERVAL_MS + 1000

/** A send every 5 ms after SIGCONT, at most this many. */
const RECOVERY_ATTEMPTS = Math.ceil(RECOVERY_BOUND_MS / 5)

/** A notification no sender takes: larger than a notify slot and than `rpc/max_notify_bytes` (the default). */
const tooLarge: Notification = {
  name: ping.name,
  msg: new Uint8Array(RpcConfig.keys["rpc/max_notify_bytes"].default + 1)
}

/** The frozen-peer figures' engines log to the bench's log (stderr), warnings and worse: stdout carries the JSON. */
const logsTo = (log: (l: string) => void) =>
  Layer.merge(
    Logger.replace(Logger.defaultLogger, Logger.map(Logger.logfmtLogger, log)),
    Logger.minimumLogLevel(LogLevel.Warning)
  )

/** `self`'s outcome and how long it took; bounded by {@link CALL_BOUND}. */
const timed = <A, E>(self: Effect.Effect<A, E>) =>
  Effect.suspend(() => {
    const t0 = performance.now()
    return Effect.map(
      Effect.either(
        Effect.timeoutFail(self, { duration: CALL_BOUND, onTimeout: () => new Error("call not done within 5 s") })
      ),
      (outcome) => ({ outcome, ms: performance.now() - t0 })
    )
  })

/** What a failed call's error looks like, for the checks and their messages. */
const errorOf = (e: unknown) => {
  const { _tag, reason, message } = e as { _tag?: string; reason?: string; message?: string }
  return { tag: _tag ?? "", reason, text: `${_tag ?? "?"}${reason === undefined ? "" : `(${reason})`}: ${message}` }
}

/**
 * One round of the frozen-peer figures on a fresh engine: the floor, the two calls to the stopped peer, then SIGCONT —
 * at once when `phaseMs` is undefined, else `phaseMs` before one of the prober's rounds, followed by a send every
 * 5 ms until one succeeds.
 */
const frozenRound = (peer: Child<{ segment: string }>, phaseMs: number | undefined) =>
  Effect.scoped(
    Effect.gen(function* () {
      const ctx = yield* Layer.build(engineLayer(frozenJson, undefined, Series.all))
      // The prober runs its rounds every PROBE_INTERVAL_MS from the engine's start (a round with no marked peer
      // ends as it starts), which is 10-20 ms before `built` here, up to ~100 ms under load: the thaw is aimed that
      // closely, and the log says when the Probe actually went out.
      const built = performance.now()
      // Runs before the engine's own finalizers: the engine never closes against a stopped peer, and a failure
      // between SIGSTOP and SIGCONT never leaves the peer stopped.
      yield* Effect.addFinalizer(() => Effect.sync(() => peer.signal("SIGCONT")))
      const engine = Context.get(ctx, TransferEngine.TransferEngine)
      const health = Context.get(ctx, Diagnostics.Diagnostics).counters.peerHealth
      if (health === undefined) return yield* Effect.fail(new Error("frozen peer: the engine has no PeerHealth record"))
      const segment = peer.ready.segment
      yield* engine.openSegment(segment)
      // Floor: with the peer alive and unmarked, a send that fails at once for another reason, without I/O.
      const floor = yield* timed(engine.sendNotification(segment, tooLarge))
      if (floor.outcome._tag === "Right" || errorOf(floor.outcome.left).tag !== "NotificationTooLarge") {
        return yield* Effect.fail(new Error("frozen peer: the too-large send did not fail as NotificationTooLarge"))
      }
      let thawAt = phaseMs === undefined ? 0 : built + PROBE_INTERVAL_MS - phaseMs
      if (phaseMs !== undefined && thawAt - FREEZE_MS < performance.now() + 5) thawAt += PROBE_INTERVAL_MS
      yield* Effect.sleep(Duration.millis(Math.max(0, thawAt - FREEZE_MS - performance.now())))
      peer.signal("SIGSTOP")
      const first = yield* timed(engine.sendNotification(segment, ping))
      const second = yield* timed(engine.sendNotification(segment, ping))
      if (first.outcome._tag === "Right" || errorOf(first.outcome.left).reason !== "Timeout") {
        return yield* Effect.fail(new Error("frozen peer: the first call to the stopped peer did not time out"))
      }
      if (second.outcome._tag === "Right" || !errorOf(second.outcome.left).text.includes("PeerHealth")) {
        const got = second.outcome._tag === "Right" ? "success" : errorOf(second.outcome.left).text
        return yield* Effect.fail(new Error(`frozen peer: the second call was not refused by PeerHealth: ${got}`))
      }
      const calls = { firstMs: first.ms, secondMs: second.ms, floorMs: floor.ms }
      if (phaseMs === undefined) {
        peer.signal("SIGCONT")
        return { ...calls, recovery: undefined }
      }
      yield* Effect.sleep(Duration.millis(Math.max(0, thawAt - performance.now())))
      const { probes, probeSuccesses } = health
      const t0 = performance.now()
      peer.signal("SIGCONT")
      // When the prober's Probe was first seen sent and answered (checked before each send: to 5 ms), and when a
      // send got through.
      let probedMs = -1
      let clearedMs = -1
      let recoveryMs = -1
      for (let attempt = 0; attempt < RECOVERY_ATTEMPTS && recoveryMs < 0; attempt++) {
        if (performance.now() - t0 > RECOVERY_BOUND_MS) break
        if (probedMs < 0 && health.probes > probes) probedMs = performance.now() - t0
        if (clearedMs < 0 && health.probeSuccesses > probeSuccesses) clearedMs = performance.now() - t0
        const r = yield* timed(engine.sendNotification(segment, ping))
        if (r.outcome._tag === "Right") recoveryMs = performance.now() - t0
        else yield* Effect.sleep("5 millis")
      }
      if (recoveryMs < 0) {
        return yield* Effect.fail(
          new Error(`frozen peer: no send got through within ${RECOVERY_BOUND_MS} ms of SIGCONT`)
        )
      }
      return { ...calls, recovery: { phaseMs, recoveryMs, probedMs, clearedMs, thawOffMs: t0 - thawAt } }
    })
  )

/**
 * `frozen_peer_second_call_ms` and `recovery_ms` against one peer: `quickRounds` rounds that SIGCONT at once (they
 * add samples of the second call cheaply, and warm the code up), then `recoveryRounds` rounds whose thaws are spread
 * evenly over the prober's period; the second call and its floor are sampled in every round.
 */
const frozenFigures = (quickRounds: number, recoveryRounds: number, log: (l: string) => void) =>
  Effect.gen(function* () {
    const peer = yield* spawnChild<{ segment: string }>(here("../test/fixtures/engine-peer.ts"), ["{}"])
    yield* Effect.addFinalizer(() => Effect.sync(() => peer.signal("SIGCONT")))
    const calls: Array<{ firstMs: number; secondMs: number; floorMs: number }> = []
    const recoveries: Array<number> = []
    const fmt = (ms: number) => ms.toFixed(3)
    for (let k = 0; k < quickRounds + recoveryRounds; k++) {
      const j = k - quickRounds
      const r = yield* frozenRound(peer, j < 0 ? undefined : ((j + 0.5) / recoveryRounds) * PROBE_INTERVAL_MS)
      calls.push(r)
      const line = `frozen peer round ${k + 1}: first call ${r.firstMs.toFixed(1)} ms, second ${fmt(r.secondMs)} ms (floor ${fmt(r.floorMs)} ms)`
      if (r.recovery === undefined) {
        log(line)
        continue
      }
      const { phaseMs, recoveryMs, probedMs, clearedMs, thawOffMs } = r.recovery
      recoveries.push(recoveryMs)
      log(
        `${line}; SIGCONT aimed ${phaseMs.toFixed(0)} ms before a prober round (${thawOffMs.toFixed(1)} ms off); ` +
          `after it the Probe seen sent by ${probedMs.toFixed(0)} ms, answered by ${clearedMs.toFixed(0)} ms, ` +
          `a send through at ${recoveryMs.toFixed(1)} ms`
      )
    }
    return {
      secondMs: median(calls.map((c) => c.secondMs)),
      floorMs: median(calls.map((c) => c.floorMs)),
      firstMs: median(calls.map((c) => c.firstMs)),
      recoveryMs: median(recoveries),
      recoveryMin: Math.min(...recoveries),
      recoveryMax: Math.max(...recoveries)
    }
  })

/** The session of the dedup figures: any u64 (a sender's random session id). */
const DEDUP_SESSION = 0x9e3779b97f4a7c15n

/** `count` seqs from 0 reordered within the window: blocks of 256 shuffled, a copy of a seq 100 places on every 8. */
const reordered = (count: number): Array<number> => {
  const out: Array<number> = []
  let x = 0x2545f491
  for (let b = 0; out.length < count; b += 256) {
    const block = Array.from({ length: 256 }, (_, i) => b + i)
    for (let i = 255; i > 0; i--) {
      x ^= x << 13
      x ^= x >>> 17
      x ^= x << 5
      const j = (x >>> 0) % (i + 1)
      const t = block[i] as number
      block[i] = block[j] as number
      block[j] = t
    }
    for (let i = 0; i < 256; i++) {
      out.push(block[i] as number)
      if (i % 8 === 0) out.push(block[(i + 100) % 256] as number)
    }
  }
  out.length = count
  return out
}

/** Median ns per element of `pass` over `reps` timed passes after one untimed one; `pass` returns a checksum. */
const nsPerOp = (count: number, reps: number, pass: () => number): number => {
  let sink = pass()
  const ns: Array<number> = []
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now()
    sink += pass()
    ns.push(((performance.now() - t0) * 1e6) / count)
  }
  if (sink < 0) throw new Error("unreachable")
  return median(ns)
}

/** A full GC if V8 lets this process have one (`--expose-gc` set at run time), for the bytes-per-session figure. */
const fullGc = (): (() => void) | undefined => {
  try {
    V8.setFlagsFromString("--expose-gc")
    return Vm.runInNewContext("gc") as () => void
  } catch {
    return undefined
  }
}

/** `dedup_ns_per_op`, `dedup_mixed_ns_per_op`, `dedup_bytes_per_session` and their floors (RFC PR 6's window). */
const dedupFigures = (quick: boolean, log: (l: string) => void) => {
  const count = quick ? 1 << 18 : 1 << 20
  const reps = quick ? 5 : 9
  const inOrder = Array.from({ length: count }, (_, i) => i)
  const mixed = reordered(count)
  const big = (xs: Array<number>) => xs.map((x) => BigInt(x))
  const inOrderBig = big(inOrder)
  const mixedBig = big(mixed)
  // As the engine admits: the notify poller reads the clock once per pass, at most 16 completions a CQ.
  const table = (seqs: Array<bigint>) => () => {
    const t = new SessionTable()
    let n = 0
    let now = 0
    for (let i = 0; i < seqs.length; i++) {
      if ((i & 15) === 0) now = performance.now()
      if (t.admit(DEDUP_SESSION, seqs[i] as bigint, now)) n++
    }
    return n
  }
  const tableNow = (seqs: Array<bigint>) => () => {
    const t = new SessionTable()
    const now = performance.now()
    let n = 0
    for (let i = 0; i < seqs.length; i++) if (t.admit(DEDUP_SESSION, seqs[i] as bigint, now)) n++
    return n
  }
  const window = (seqs: Array<bigint>) => () => {
    const w = new ReplayWindow()
    let n = 0
    for (let i = 0; i < seqs.length; i++) if (w.admit(seqs[i] as bigint) === Verdict.Accepted) n++
    return n
  }
  const floor = (seqs: Array<number>) => () => {
    const bits = new Uint32Array(WINDOW_WORDS)
    let n = 0
    for (let i = 0; i < seqs.length; i++) {
      const p = (seqs[i] as number) & 4095
      const w = p >>> 5
      const m = 1 << (p & 31)
      const v = bits[w] as number
      if ((v & m) === 0) {
        bits[w] = v | m
        n++
      } else bits[w] = v & ~m
    }
    return n
  }
  const clock = () => {
    let n = 0
    for (let i = 0; i < count; i++) n += performance.now()
    return n
  }
  const inOrderNs = nsPerOp(count, reps, table(inOrderBig))
  const inOrderFloor = nsPerOp(count, reps, floor(inOrder))
  const mixedNs = nsPerOp(count, reps, table(mixedBig))
  const mixedFloor = nsPerOp(count, reps, floor(mixed))
  const f = (ns: number) => ns.toFixed(1)
  log(
    `dedup admit: in order ${f(inOrderNs)} ns/op (floor ${f(inOrderFloor)}), reordered ${f(mixedNs)} ns/op ` +
      `(floor ${f(mixedFloor)}); goal ≤ 100 ns. With now passed: ${f(nsPerOp(count, reps, tableNow(inOrderBig)))} / ` +
      `${f(nsPerOp(count, reps, tableNow(mixedBig)))} ns; the window alone: ${f(nsPerOp(count, reps, window(inOrderBig)))} / ` +
      `${f(nsPerOp(count, reps, window(mixedBig)))} ns; one performance.now(): ${f(nsPerOp(count, reps, clock))} ns`
  )
  // Bytes per session: 10 000 new sessions in one table, ids made inside the measurement.
  const sessions = 10_000
  const gc = fullGc()
  const settle = () => {
    gc?.()
    gc?.()
    const m = process.memoryUsage()
    return m.heapUsed + m.arrayBuffers
  }
  const before = settle()
  const t = new SessionTable({ maxSessions: sessions })
  for (let i = 0; i < sessions; i++) t.admit(BigInt.asUintN(64, DEDUP_SESSION * BigInt(i + 1)), BigInt(i))
  const bytes = (settle() - before) / sessions
  if (t.counters.sessions !== sessions) throw new Error(`dedup: ${t.counters.sessions} sessions, ${sessions} expected`)
  log(
    `dedup bytes per session ${bytes.toFixed(1)} over ${sessions} sessions (floor: the 512 B bitmap); goal ≤ 600 B` +
      (gc === undefined ? " (no full GC available: noisy)" : "")
  )
  return { inOrderNs, inOrderFloor, mixedNs, mixedFloor, bytes }
}

/**
 * The policies of one `send_msgs_per_s` arm: `Series.all`'s Layers with PR 7's (`Series.Resend`: `Resend.makeSeries`
 * over its own `RailHealth`, `track` true) or its legacy twin (`Resend.layerLegacy`, `track` false). PR 6's
 * `Series.Dedup` is in both, so both stamp every send; only the pending table differs. `seen` records what was built.
 */
const sendSeries = (
  pr7: boolean,
  seen: { track?: boolean; notifyProto?: number }
): Layer.Layer<Series.Policies, ConfigError> =>
  Layer.mergeAll(
    Series.QpRetirement,
    Series.ParamsFromEndpoint,
    Series.RpcFallback,
    Series.PeerHealth,
    Series.DescriptorPolicy,
    Series.Dedup,
    pr7 ? Series.Resend : Resend.layerLegacy,
    Receipts.layerLegacy,
    SubmitHooks.layerLegacy
  ).pipe(
    Layer.tap((ctx) =>
      Effect.sync(() => {
        seen.track = Context.get(ctx, Resend.Resend).track
        seen.notifyProto = Context.get(ctx, Dedup.Dedup).notifyProto
      })
    )
  )

/** One arm of `send_msgs_per_s`: an engine in this process with {@link sendSeries}; its timed messages and ms. */
const sendArm = (pr7: boolean) =>
  Effect.gen(function* () {
    const seen: { track?: boolean; notifyProto?: number } = {}
    const ctx = yield* Layer.build(engineLayer({}, undefined, sendSeries(pr7, seen)))
    const engine = Context.get(ctx, TransferEngine.TransferEngine)
    const rdma = Context.get(ctx, Diagnostics.Diagnostics).counters.rdma
    if (rdma === undefined || seen.track !== pr7 || seen.notifyProto !== 1) {
      return yield* Effect.fail(
        new Error(
          `send_msgs_per_s: the PR 7 ${pr7 ? "on" : "off"} engine has track ${seen.track}, notify_proto ${seen.notifyProto}`
        )
      )
    }
    return { pr7, engine, rdma, rates: [] as Array<number>, messages: 0, ms: 0 }
  })

/**
 * One round of `send_msgs_per_s`: `count` {@link ping}s through `sendNotification` back to back (each returns once
 * posted; the window's 256 units bound what is in flight), timed until the last send has completed (the engine's
 * `sendsCompleted`, looked at every millisecond); adds the round to the arm's totals when `timed`.
 */
const sendRound = (
  arm: Effect.Effect.Success<ReturnType<typeof sendArm>>,
  segment: string,
  count: number,
  timed: boolean
) =>
  Effect.gen(function* () {
    const done0 = arm.rdma.sendsCompleted
    const t0 = performance.now()
    for (let i = 0; i < count; i++) yield* arm.engine.sendNotification(segment, ping)
    while (arm.rdma.sendsCompleted - done0 < count) yield* Effect.sleep("1 millis")
    const ms = performance.now() - t0
    if (!timed) return
    arm.rates.push(count / (ms / 1000))
    arm.messages += count
    arm.ms += ms
  }).pipe(
    Effect.timeoutFail({ duration: PHASE_TIMEOUT, onTimeout: () => new Error("send_msgs_per_s: a round timed out") })
  )

/**
 * `send_msgs_per_s` with RFC PR 7 on and off (see {@link sendSeries}): both engines in this process, against one
 * `notify-sink-peer.ts` child (`Series.all`: it advertises `notify_proto` 1, so both arms stamp). `warmRounds` untimed
 * rounds per arm first (the first connects its endpoint; all warm the code), then `blocks` blocks of timed rounds, on, off, off, on
 * each (two rounds per arm per block), so a drift linear in time (load, JIT tiering, heap growth) weighs
 * on both arms alike. Each arm's figure is its timed messages over its timed seconds. Checks that the peer received
 * every notification, each stamped and accepted once by its dedup window.
 */
const sendFigures = (count: number, warmRounds: number, blocks: number, log: (l: string) => void) =>
  Effect.gen(function* () {
    const t0 = performance.now()
    const peer = yield* spawnChild<{ segment: string }>(here("notify-sink-peer.ts"))
    const segment = peer.ready.segment
    const on = yield* sendArm(true)
    const off = yield* sendArm(false)
    const setupS = (performance.now() - t0) / 1000
    for (let k = 0; k < warmRounds; k++) {
      for (const arm of k % 2 === 0 ? [on, off] : [off, on]) yield* sendRound(arm, segment, count, false)
    }
    for (let k = 0; k < blocks; k++) {
      for (const arm of [on, off, off, on]) yield* sendRound(arm, segment, count, true)
    }
    const sent = (warmRounds + 2 * blocks) * 2 * count
    type Stats = { received: number; accepted: number; duplicates: number; unstamped: number }
    let stats: Stats = { received: 0, accepted: 0, duplicates: 0, unstamped: 0 }
    for (let i = 0; i < 500 && stats.received < sent; i++) {
      stats = yield* Effect.promise(() => peer.request<Stats>({ cmd: "stats" }))
      if (stats.received < sent) yield* Effect.sleep("10 millis")
    }
    if (stats.received !== sent || stats.accepted !== sent || stats.duplicates !== 0 || stats.unstamped !== 0) {
      return yield* Effect.fail(
        new Error(`send_msgs_per_s: ${sent} sent, the peer has ${JSON.stringify(stats)} (every one stamped expected)`)
      )
    }
    const k = (r: number) => (r / 1000).toFixed(1)
    log(
      `send ${count} notifications per round (setup ${setupS.toFixed(1)} s, ${warmRounds} untimed rounds per arm): ` +
        `PR 7 on ${on.rates.map(k).join(", ")} k/s; off ${off.rates.map(k).join(", ")} k/s ` +
        `(the peer received and accepted all ${sent}, stamped)`
    )
    return { onPerS: on.messages / (on.ms / 1000), offPerS: off.messages / (off.ms / 1000) }
  })

/**
 * What the pending table alone costs per send, in ns: RFC PR 7's push of `{notification, stamp, peerProto}` per send
 * and shift per completion, {@link NOTIFY_WINDOW} entries in flight (as `NotifyChannel` does with `track`), median
 * over untimed-warmed passes of `count` sends.
 */
const pendingTableNs = (count: number): number => {
  const stamp = { session: 1n, seq: 1n }
  return nsPerOp(count, 5, () => {
    const inFlight: Array<Resend.PendingNotification> = []
    for (let i = 0; i < count; i++) {
      inFlight.push({ notification: ping, stamp, peerProto: 1 })
      if (inFlight.length >= NOTIFY_WINDOW) inFlight.shift()
    }
    return inFlight.length
  })
}

/** Runs the suite. */
export const run = async (options: BenchOptions): Promise<ReadonlyArray<BenchResult>> => {
  const dedupStart = performance.now()
  const dedup = dedupFigures(options.quick, options.log)
  options.log(`dedup figures: ${((performance.now() - dedupStart) / 1000).toFixed(1)} s`)
  const rounds = options.quick ? 1000 : 5000
  // Untimed ping-pongs before the timed ones, for the floor and the engine alike: both processes' code is JIT-compiled
  // by then (with 1000 cold rounds the median measured V8's tiering, not the notify path).
  const warmup = options.quick ? 3000 : 5000
  // WRITE: an untimed warm-up (JIT) before the timed MiB, for the floor and the engine alike. Measured in a fresh pair
  // of engine processes, 64 MiB rounds: 92-115 MB/s in the first, 139-264 in the second, steady from the third or
  // fourth; with 32 MiB of warm-up the timed 128 MiB measured the engine's code being compiled.
  const warmMb = options.quick ? 256 : 512
  const writeMb = options.quick ? 128 : 512
  // send_msgs_per_s: notifications per round, untimed rounds per arm, blocks of timed rounds (on, off, off, on).
  const sendCount = options.quick ? 3000 : 20_000
  const sendWarmRounds = 2
  const sendBlocks = options.quick ? 2 : 3
  // The raw floors right before and right after the engine's figures, averaged: neither side always meets the
  // warmer (or the more loaded) machine.
  const floorSet = async (when: string) => {
    const f = await Effect.runPromise(Effect.scoped(floors(rounds, WARM_CYCLES * warmup, warmMb, writeMb, sendCount)))
    options.log(
      `floor ${when}: SEND one-way ${f.oneWayUs.toFixed(1)} µs, burst p50 ${f.burstMs.toFixed(2)} ms, WRITE ${f.writeMbps.toFixed(1)} MB/s (${f.writeCpu}), ` +
        `${STAMPED_PING_BYTES}-byte SENDs ${(f.sendMsgsPerS / 1000).toFixed(1)} k/s`
    )
    return f
  }
  const floorBefore = await floorSet("before the engine")
  const engine = await Effect.runPromise(Effect.scoped(engineFigures(rounds, warmup, warmMb, writeMb, options.log)))
  const floorAfter = await floorSet("after the engine")
  const mean = (k: "oneWayUs" | "burstMs" | "writeMbps" | "sendMsgsPerS") => (floorBefore[k] + floorAfter[k]) / 2
  const floor = {
    oneWayUs: mean("oneWayUs"),
    burstMs: mean("burstMs"),
    writeMbps: mean("writeMbps"),
    sendMsgsPerS: mean("sendMsgsPerS")
  }
  const sendStart = performance.now()
  const send = await Effect.runPromise(
    Effect.scoped(sendFigures(sendCount, sendWarmRounds, sendBlocks, options.log)).pipe(
      Effect.provide(logsTo(options.log))
    )
  )
  const sendRatio = send.onPerS / send.offPerS
  const tableNs = pendingTableNs(1 << 20)
  options.log(
    `send: PR 7 on ${(send.onPerS / 1000).toFixed(1)} k/s, off ${(send.offPerS / 1000).toFixed(1)} k/s, on/off ` +
      `${sendRatio.toFixed(3)} (goal ≥ 0.95); ${((performance.now() - sendStart) / 1000).toFixed(1)} s. The pending ` +
      `table alone: ${tableNs.toFixed(1)} ns per send (push + shift, ${NOTIFY_WINDOW} in flight), ` +
      `${((tableNs / (1e9 / send.offPerS)) * 100).toFixed(3)}% of an off-arm send's ${(1e6 / send.offPerS).toFixed(1)} µs`
  )
  const fallback = await Effect.runPromise(Effect.scoped(fallbackFigures(rounds, warmup, options.log)))
  const frozenStart = performance.now()
  const frozen = await Effect.runPromise(
    Effect.scoped(frozenFigures(options.quick ? 4 : 8, options.quick ? 3 : 7, options.log)).pipe(
      Effect.provide(logsTo(options.log))
    )
  )
  options.log(
    `frozen peer: second call ${frozen.secondMs.toFixed(3)} ms (floor ${frozen.floorMs.toFixed(3)} ms; the first ` +
      `waited ${frozen.firstMs.toFixed(1)} ms); recovery ${frozen.recoveryMs.toFixed(1)} ms (${frozen.recoveryMin.toFixed(1)}–${frozen.recoveryMax.toFixed(1)}); ` +
      `${((performance.now() - frozenStart) / 1000).toFixed(1)} s for both`
  )
  const transferBound = await Effect.runPromise(TransferNotify.figures(options))
  return [
    ...transferBound,
    {
      name: "notify_one_way_us",
      unit: "us",
      value: engine.oneWayUs,
      better: "lower",
      floor: floor.oneWayUs,
      ratio: engine.oneWayUs / floor.oneWayUs
    },
    {
      name: "notify_one_way_us_stream",
      unit: "us",
      value: engine.oneWayStreamUs,
      better: "lower",
      floor: floor.oneWayUs,
      ratio: engine.oneWayStreamUs / floor.oneWayUs
    },
    {
      name: "burst_2000_p50_ms",
      unit: "ms",
      value: engine.burstMs,
      better: "lower",
      floor: floor.burstMs,
      ratio: engine.burstMs / floor.burstMs
    },
    {
      name: "write_64k_mb_per_s",
      unit: "MB/s",
      value: engine.writeMbps,
      better: "higher",
      floor: floor.writeMbps,
      ratio: engine.writeMbps / floor.writeMbps
    },
    {
      name: "send_msgs_per_s",
      unit: "msg/s",
      value: send.onPerS,
      better: "higher",
      floor: send.offPerS,
      ratio: sendRatio
    },
    {
      name: "send_msgs_per_s_pr7_off",
      unit: "msg/s",
      value: send.offPerS,
      better: "higher",
      floor: floor.sendMsgsPerS,
      ratio: send.offPerS / floor.sendMsgsPerS
    },
    {
      name: "notify_fallback_rtt_us",
      unit: "us",
      value: fallback.rttUs,
      better: "lower",
      floor: fallback.floorUs,
      ratio: fallback.rttUs / fallback.floorUs
    },
    {
      name: "frozen_peer_second_call_ms",
      unit: "ms",
      value: frozen.secondMs,
      better: "lower",
      floor: frozen.floorMs,
      ratio: frozen.secondMs / frozen.floorMs
    },
    {
      name: "recovery_ms",
      unit: "ms",
      value: frozen.recoveryMs,
      better: "lower",
      floor: PROBE_INTERVAL_MS,
      ratio: frozen.recoveryMs / PROBE_INTERVAL_MS
    },
    {
      name: "dedup_ns_per_op",
      unit: "ns",
      value: dedup.inOrderNs,
      better: "lower",
      floor: dedup.inOrderFloor,
      ratio: dedup.inOrderNs / dedup.inOrderFloor
    },
    {
      name: "dedup_mixed_ns_per_op",
      unit: "ns",
      value: dedup.mixedNs,
      better: "lower",
      floor: dedup.mixedFloor,
      ratio: dedup.mixedNs / dedup.mixedFloor
    },
    {
      name: "dedup_bytes_per_session",
      unit: "B",
      value: dedup.bytes,
      better: "lower",
      floor: WINDOW_WORDS * 4,
      ratio: dedup.bytes / (WINDOW_WORDS * 4)
    }
  ]
}
