/**
 * Target `softverbs`: SoftVerbs datagrams sent to a connected QP (V1, in the victim process) from the connected peer's
 * own UDP address and port — the fuzzer's NIC is V1's peer, and it sends the forged datagrams through that NIC's own
 * socket (`SoftDevice.transmit`, the path its QPs send by), so every one passes the source check. They are mutated from
 * datagrams the peer QP really sent (captured at that socket during a warm-up of WRITEs, SENDs, READs and the
 * responses to V1's own requests), most with V1's token, so the parser and the handlers behind the token check are
 * reached (`SoftInputs.ts`). A forged packet may take V1 to ERR — an authenticated peer may do that — and V1 is then
 * connected again, with new PSNs and tokens. Bursts of 64, each read by the victim's NIC before the next (its
 * `rxPackets` reach what this NIC sent: none is lost in the socket buffer). Every 4 bursts the real client (P2 → V2)
 * WRITEs 1 KiB and SENDs the round number; V2 checks the bytes.
 */
import {
  AccessFlags,
  QpAttrMask,
  QpState,
  QpType,
  Rc,
  SendFlags,
  SoftVerbs,
  WcStatus,
  WorkCompletion,
  WrOpcode
} from "@tent/verbs"
import { Effect } from "effect"
import { spawnVictim } from "./Child.js"
import { Prng } from "./Prng.js"
import { type Range, sha256 } from "./Regions.js"
import * as SoftInputs from "./SoftInputs.js"
import { ask, checkRegion, commonViolations, mib, type TargetOptions, type TargetResult } from "./Target.js"
import { CLIENT_WRITE_BYTES, params, V2_RECVS, VERBS_REGION_BYTES } from "./victimVerbs.js"

/** Datagrams per burst: small, since a burst that took V1 to ERR loses its rest to the QP's state. */
const BURST = 64
/** Bursts between two rounds of the real client. */
const CLIENT_EVERY = 4

interface Ready {
  readonly gid: string
  readonly host: string
  readonly port: number
  readonly v1: { readonly qpNum: number; readonly psn: number; readonly token: string }
  readonly v2: { readonly qpNum: number; readonly psn: number; readonly token: string }
  readonly mrs: Record<string, { readonly addr: number; readonly length: number; readonly rkey: number }>
}
interface State {
  readonly rxPackets: number
  readonly v1: { readonly state: number; readonly ePsn: number; readonly psnNext: number; readonly acked: number }
  readonly v2: number
}
interface Stats {
  readonly memory: { readonly rss: number; readonly heapUsed: number }
  readonly soft: Record<string, number>
  readonly completions: Record<string, unknown>
  readonly client: { readonly ok: number; readonly bad: ReadonlyArray<string> }
  readonly v1: number
  readonly v2: number
}
type Regions = Record<string, { readonly addr: number; readonly length: number; readonly bytes: string }>

const hex = (gid: Uint8Array) => Array.from(gid, (b) => b.toString(16).padStart(2, "0")).join(":")
const parseGid = (text: string) => Uint8Array.from(text.split(":").map((h) => Number.parseInt(h, 16)))

/** Runs the target. */
export const run = (o: TargetOptions): Effect.Effect<TargetResult, unknown> =>
  Effect.scoped(
    Effect.gen(function* () {
      const victim = yield* spawnVictim({ role: "verbs", seed: o.seed })
      const ready = victim.ready as unknown as Ready
      const { verbs, control } = yield* SoftVerbs.make({ devices: [{ name: "peer", host: "127.0.0.1" }] })
      const dev = control.devices[0] as (typeof control.devices)[number]
      const ctx = yield* verbs.openDevice("peer")
      const pd = yield* ctx.allocPd
      const cq1 = yield* ctx.createCq(4096)
      const cq2 = yield* ctx.createCq(1024)
      const cap = { maxSendWr: 64, maxRecvWr: 64, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 64 }
      const p1 = yield* pd.createQp({ sendCq: cq1, recvCq: cq1, qpType: QpType.RC, cap })
      const p2 = yield* pd.createQp({ sendCq: cq2, recvCq: cq2, qpType: QpType.RC, cap })
      const all = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ
      const buf1 = Buffer.alloc(64 * 1024, 0x11)
      const buf2 = Buffer.alloc(4096)
      const mr1 = yield* pd.regMr(buf1, all)
      const mr2 = yield* pd.regMr(buf2, all)
      const gid = hex(yield* ctx.queryGid(1, 0))
      const victimGid = parseGid(ready.gid)
      const before = (yield* victim.request<{ regions: Regions }>({ cmd: "memory" })).regions

      // V1 ↔ P1 and V2 ↔ P2, with random PSNs and tokens both ways
      const peer = (qpNum: number) => ({ psn: Rc.randomPsn(), token: SoftVerbs.randomToken(), qpNum })
      let mine1 = peer(p1.qpNum)
      const mine2 = peer(p2.qpNum)
      const describe = (m: typeof mine1) => ({ gid, qpNum: m.qpNum, psn: m.psn, token: String(m.token) })
      yield* victim.request({ cmd: "connect", p1: describe(mine1), p2: describe(mine2) })
      const connectP = (qp: typeof p1, m: typeof mine1, v: Ready["v1"]) =>
        Effect.gen(function* () {
          yield* qp.modifyQp({ qpState: QpState.RESET }, QpAttrMask.STATE)
          yield* SoftVerbs.setQpToken(qp, { local: m.token, remote: BigInt(v.token) })
          yield* Rc.connect(qp, m.psn, { gid: victimGid, qpNum: v.qpNum, psn: v.psn }, params)
        })
      let v1 = ready.v1
      yield* connectP(p1, mine1, v1)
      yield* connectP(p2, mine2, ready.v2)

      // the warm-up, its datagrams to V1 captured at this NIC's socket
      const captured: Array<Buffer> = []
      const transmit = dev.transmit.bind(dev)
      dev.transmit = (b, length, host, port) => {
        if (length >= SoftInputs.HDR && b.readUInt32LE(SoftInputs.Off.dstQpn) === v1.qpNum && captured.length < 256)
          captured.push(Buffer.from(b.subarray(0, length)))
        transmit(b, length, host, port)
      }
      const wc = WorkCompletion.array(32)
      const completions = (cq: typeof cq1, n: number, ms: number) =>
        Effect.gen(function* () {
          const out: Array<number> = []
          const deadline = Date.now() + ms
          while (out.length < n && Date.now() < deadline) {
            const got = cq.pollCq(32, wc)
            for (let i = 0; i < got; i++) out.push((wc[i] as WorkCompletion).status)
            if (got === 0) yield* Effect.race(cq.awaitNotify, Effect.sleep("50 millis"))
          }
          return out
        })
      const target = ready.mrs.target as Ready["mrs"][string]
      const sge = (off: number, length: number) => [{ addr: mr1.addr + off, length, lkey: mr1.lkey }]
      const flags = SendFlags.SIGNALED
      for (let r = 0; r < 2; r++) p1.postRecv({ wrId: 100 + r, sgList: sge(16_384 + r * 1024, 1024) })
      p1.postSend({
        wrId: 1,
        opcode: WrOpcode.RDMA_WRITE,
        sendFlags: flags,
        sgList: sge(0, 3000),
        remoteAddr: target.addr + 33_000,
        rkey: target.rkey
      })
      p1.postSend({
        wrId: 2,
        opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
        sendFlags: flags,
        sgList: sge(0, 100),
        remoteAddr: target.addr + 37_000,
        rkey: target.rkey,
        immData: 7
      })
      p1.postSend({ wrId: 3, opcode: WrOpcode.SEND, sendFlags: flags, sgList: sge(0, 100) })
      p1.postSend({ wrId: 4, opcode: WrOpcode.SEND, sendFlags: flags, sgList: sge(0, 1000) })
      p1.postSend({
        wrId: 5,
        opcode: WrOpcode.RDMA_READ,
        sendFlags: flags,
        sgList: sge(4096, 2000),
        remoteAddr: target.addr + 38_000,
        rkey: target.rkey
      })
      yield* victim.request({ cmd: "warm", mr: { addr: mr1.addr, rkey: mr1.rkey } })
      const warm = yield* completions(cq1, 6, 10_000)
      yield* Effect.sleep("200 millis")
      dev.transmit = transmit
      if (captured.length === 0) return yield* Effect.fail(`the warm-up sent V1 no datagram (completions ${warm})`)
      // one of each kind (op, flags, payload length), in that order: the seeds do not depend on how ACKs coalesced
      const kind = (d: Buffer) => d[SoftInputs.Off.op] * 2 ** 24 + d[SoftInputs.Off.flags] * 2 ** 16 + d.length
      const seeds = [...new Map(captured.map((d) => [kind(d), d])).values()].sort((a, b) => kind(a) - kind(b))

      const baseline = yield* victim.request<Stats>({ cmd: "stats" })
      const rng = Prng.forTarget(o.seed, "softverbs")
      const classes: Record<string, number> = {}
      const counters = { sent: 0, reconnects: 0, lostBursts: 0, clientRounds: 0 }
      const clientErrors: Array<string> = []
      let peakRss = baseline.memory.rss
      let injected = false
      const started = performance.now()
      let lastReport = started
      const state = () => victim.request<State>({ cmd: "state" }, 10_000)
      let st = yield* state()
      let bursts = 0
      while (counters.sent < o.count && victim.exited() === undefined) {
        if (st.v1.state !== QpState.RTS) {
          // a forged packet took V1 to ERR: connected again, new PSNs and tokens both ways
          counters.reconnects++
          mine1 = peer(p1.qpNum)
          v1 = (
            (yield* victim.request<{ v1: Ready["v1"] }>({ cmd: "reconnect", p1: describe(mine1) })) as {
              v1: Ready["v1"]
            }
          ).v1
          yield* connectP(p1, mine1, v1)
          st = yield* state()
        }
        const aim: SoftInputs.Aim = {
          v1: v1.qpNum,
          v2: ready.v2.qpNum,
          p1: p1.qpNum,
          token: BigInt(v1.token),
          ePsn: st.v1.ePsn,
          psnNext: st.v1.psnNext,
          acked: st.v1.acked,
          mrs: ready.mrs
        }
        const n = Math.min(BURST, o.count - counters.sent)
        for (let i = 0; i < n; i++) {
          const { bytes: d, what } = SoftInputs.next(rng, seeds, aim)
          classes[what] = (classes[what] ?? 0) + 1
          dev.transmit(d, d.length, ready.host, ready.port)
        }
        counters.sent += n
        if (o.inject !== undefined && !injected && counters.sent >= o.count / 2) {
          yield* ask(victim, { cmd: "inject", kind: o.inject })
          injected = true
        }
        // the real client: a WRITE of the round's byte and a SEND of its number, both completed
        if (++bursts % CLIENT_EVERY === 0) {
          const k = counters.clientRounds++
          buf2.fill((k * 37 + 1) & 0xff, 0, CLIENT_WRITE_BYTES)
          buf2.writeUInt32LE(k, 2048)
          const client = ready.mrs.client as Ready["mrs"][string]
          p2.postSend({
            wrId: 2 * k,
            opcode: WrOpcode.RDMA_WRITE,
            sendFlags: flags,
            sgList: [{ addr: mr2.addr, length: CLIENT_WRITE_BYTES, lkey: mr2.lkey }],
            remoteAddr: client.addr,
            rkey: client.rkey
          })
          p2.postSend({
            wrId: 2 * k + 1,
            opcode: WrOpcode.SEND,
            sendFlags: flags,
            sgList: [{ addr: mr2.addr + 2048, length: 16, lkey: mr2.lkey }]
          })
          const done = yield* completions(cq2, 2, 10_000)
          if (done.length !== 2 || done.some((s) => s !== WcStatus.SUCCESS))
            clientErrors.push(`round ${k}: completions ${JSON.stringify(done)}`)
        }
        // every datagram read by the victim's NIC before the next burst
        const deadline = Date.now() + 5000
        st = yield* state()
        while (st.rxPackets < dev.counters.txPackets && Date.now() < deadline && victim.exited() === undefined) {
          yield* Effect.sleep("1 millis")
          st = yield* state()
        }
        if (st.rxPackets < dev.counters.txPackets) counters.lostBursts++
        if (performance.now() - lastReport > 5000) {
          lastReport = performance.now()
          const s = yield* ask<Stats>(victim, { cmd: "stats" })
          if (s !== undefined) peakRss = Math.max(peakRss, s.memory.rss)
          const secs = (lastReport - started) / 1000
          o.progress(
            `softverbs: ${counters.sent}/${o.count} datagrams (${Math.round(counters.sent / secs)}/s), ${counters.reconnects} reconnects, victim RSS ${s === undefined ? "?" : mib(s.memory.rss)}`
          )
        }
        if (clientErrors.length > 20) break
      }
      const seconds = (performance.now() - started) / 1000
      const final = yield* ask<Stats>(victim, { cmd: "stats" })
      const after = (yield* ask<{ regions: Regions }>(victim, { cmd: "memory" }))?.regions
      const client = ready.mrs.client as Ready["mrs"][string]
      const asked: Record<string, ReadonlyArray<Range>> = {
        target: [{ start: target.addr, end: target.addr + target.length }],
        client: [
          { start: client.addr, end: client.addr + CLIENT_WRITE_BYTES },
          { start: client.addr + VERBS_REGION_BYTES / 2, end: client.addr + VERBS_REGION_BYTES / 2 + V2_RECVS * 64 }
        ]
      }
      const regions = Object.fromEntries(
        Object.entries(before).map(([name, r]) => [
          name,
          checkRegion(sha256, r, after?.[name] ?? { bytes: "" }, asked[name] ?? [])
        ])
      )
      const memory = {
        baselineRss: baseline.memory.rss,
        finalRss: final?.memory.rss ?? 0,
        growth: (final?.memory.rss ?? 0) - baseline.memory.rss,
        peakRss: Math.max(peakRss, final?.memory.rss ?? 0),
        heapGrowth: (final?.memory.heapUsed ?? 0) - baseline.memory.heapUsed
      }
      const errors = [...clientErrors, ...(final?.client.bad ?? [])]
      const violations = commonViolations(victim, memory, regions, { rounds: counters.clientRounds, errors })
      if (final !== undefined) {
        if ((final.soft.handlerErrors ?? 0) > 0)
          violations.push(`the victim's NIC counted ${final.soft.handlerErrors} handler error(s)`)
        if (final.client.ok !== counters.clientRounds)
          violations.push(`V2 checked ${final.client.ok} of the client's ${counters.clientRounds} rounds`)
        if (final.v2 !== QpState.RTS) violations.push(`the client's QP V2 left RTS (state ${final.v2})`)
      }
      if (counters.lostBursts > 0)
        violations.push(`${counters.lostBursts} burst(s) not all read by the victim within 5 s`)
      if (counters.sent < o.count) violations.push(`only ${counters.sent} of ${o.count} datagrams were sent`)
      const soft = final?.soft ?? {}
      return {
        target: "softverbs",
        seed: o.seed,
        inputs: counters.sent,
        seconds,
        rate: counters.sent / seconds,
        connections: counters.reconnects + 1,
        counters: {
          inputs: classes,
          harness: { ...counters, captured: captured.length, seeds: seeds.length },
          nic: Object.fromEntries(Object.entries(soft).filter(([, v]) => v !== 0)),
          v1Completions: final?.completions.v1,
          injected: injected ? o.inject : undefined,
          victimLog: victim.logLines()
        },
        memory,
        regions,
        client: { rounds: counters.clientRounds, errors },
        violations,
        samples: violations.length > 0 ? [victim.stderr().slice(-2000)] : []
      } satisfies TargetResult
    })
  )
