/**
 * The `verbs` victim: one SoftVerbs NIC (`victim`, 127.0.0.1) with two RC QPs whose peer QPs live in the fuzzer's own
 * NIC: V1, the target of the forged datagrams (it keeps RECVs posted), and V2, the real client's (the fuzzer WRITEs
 * into V2's region and SENDs the round number; V2 checks the bytes and counts the round). Both have random PSNs and
 * tokens (`SoftVerbs.setQpToken`), exchanged with the fuzzer as an engine's bootstrap would. Four regions between
 * guards (`Regions.ts`): `target` (V1's RECVs and any remote WRITE through V1 land there), `canary` (registered with
 * remote write in another protection domain: V1 must never write it), `readonly` (remote read only, V1's domain),
 * `client` (V2's).
 *
 * Requests: `connect` and `reconnect` (V1 again from RESET, after a forged packet took it to ERR), `warm` (V1 as a
 * requester: a SEND, a READ and a WRITE to the fuzzer's QP, so the fuzzer captures its responses), `state` (the
 * datagrams the NIC read and V1's position), `stats`, `memory`, `inject`.
 */
import {
  AccessFlags,
  type CompletionQueue,
  type MemoryRegion,
  Mtu,
  QpAttrMask,
  QpState,
  QpType,
  type QueuePair,
  Rc,
  SendFlags,
  SoftVerbs,
  WcOpcode,
  WcStatus,
  WorkCompletion,
  WrOpcode
} from "@tent/verbs"
import { Effect, type Scope } from "effect"
import { afterGc, type Guarded, guarded } from "./Regions.js"
import type { Role } from "./role.js"

/** Bytes of each region; V1's RECVs take the first half of the target, V2's the second half of the client. */
export const VERBS_REGION_BYTES = 64 * 1024
/** RECVs V1 keeps posted, and their size. */
export const V1_RECVS = 32
export const V1_RECV_BYTES = 1024
/** RECVs V2 keeps posted (64 bytes each, at the middle of the client region), and the client's WRITE area. */
export const V2_RECVS = 16
export const CLIENT_WRITE_BYTES = 1024
/** The RC parameters of both pairs: a small MTU, so that the warm-up's messages take several packets. */
export const params: Rc.RcParams = { ...Rc.defaultParams, pathMtu: Mtu.MTU_1024 }

/** A peer QP as the other side describes it. */
export interface PeerQp {
  readonly gid: string
  readonly qpNum: number
  readonly psn: number
  readonly token: string
}

const hex = (gid: Uint8Array) => Array.from(gid, (b) => b.toString(16).padStart(2, "0")).join(":")
const parseGid = (text: string) => Uint8Array.from(text.split(":").map((h) => Number.parseInt(h, 16)))

/** What the victim reads of a SoftVerbs QP besides the verbs API: its position in both PSN spaces. */
type Internals = { ePsn: number; psnNext: number; acked: number; onPacket: (m: Buffer, h: string, p: number) => void }

/** Drains `cq` whenever its channel fires, handing each completion to `handle`. */
const poll = (cq: CompletionQueue, handle: (w: WorkCompletion) => void): void => {
  const wc = WorkCompletion.array(32)
  const drain = (): void => {
    for (let round = 0; round < 1000; round++) {
      const n = cq.pollCq(32, wc)
      for (let i = 0; i < n; i++) handle(wc[i] as WorkCompletion)
      if (n === 32) continue
      cq.reqNotifyCq()
      const again = cq.pollCq(32, wc)
      for (let i = 0; i < again; i++) handle(wc[i] as WorkCompletion)
      if (again === 0) return
    }
    setImmediate(drain)
  }
  cq.setNotify(drain)
  cq.reqNotifyCq()
}

/** The verbs victim, built in the caller's scope. */
export const make = (opts: Record<string, unknown>): Effect.Effect<Role, unknown, Scope.Scope> =>
  Effect.gen(function* () {
    const seed = Number(opts.seed ?? 1)
    const { verbs, control } = yield* SoftVerbs.make({ devices: [{ name: "victim", host: "127.0.0.1" }] })
    const device = control.devices[0] as (typeof control.devices)[number]
    const ctx = yield* verbs.openDevice("victim")
    const pd = yield* ctx.allocPd
    const otherPd = yield* ctx.allocPd
    const cq1 = yield* ctx.createCq(4096)
    const cq2 = yield* ctx.createCq(1024)
    const cap = { maxSendWr: 64, maxRecvWr: 256, maxSendSge: 2, maxRecvSge: 2, maxInlineData: 64 }
    const v1 = yield* pd.createQp({ sendCq: cq1, recvCq: cq1, qpType: QpType.RC, cap })
    const v2 = yield* pd.createQp({ sendCq: cq2, recvCq: cq2, qpType: QpType.RC, cap })
    const all = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ
    const regions: Record<string, Guarded> = {
      target: guarded(VERBS_REGION_BYTES, seed ^ 0x7a11),
      canary: guarded(VERBS_REGION_BYTES, seed ^ 0xca4a),
      readonly: guarded(VERBS_REGION_BYTES, seed ^ 0x4ead),
      client: guarded(VERBS_REGION_BYTES, seed ^ 0xc11e)
    }
    const mrs: Record<string, MemoryRegion> = {
      target: yield* pd.regMr((regions.target as Guarded).bytes, all),
      canary: yield* otherPd.regMr((regions.canary as Guarded).bytes, all),
      readonly: yield* pd.regMr((regions.readonly as Guarded).bytes, AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_READ),
      client: yield* pd.regMr((regions.client as Guarded).bytes, all)
    }
    const target = mrs.target as MemoryRegion
    const clientMr = mrs.client as MemoryRegion
    const gid = yield* ctx.queryGid(1, 0)
    const own = {
      v1: { psn: Rc.randomPsn(), token: SoftVerbs.randomToken() },
      v2: { psn: Rc.randomPsn(), token: SoftVerbs.randomToken() }
    }
    const completions = { v1: {} as Record<string, number>, clientOk: 0, clientBad: [] as Array<string> }

    const postV1 = (slot: number) =>
      v1.postRecv({
        wrId: slot,
        sgList: [{ addr: target.addr + slot * V1_RECV_BYTES, length: V1_RECV_BYTES, lkey: target.lkey }]
      })
    const v2Recv = (slot: number) => VERBS_REGION_BYTES / 2 + slot * 64
    const postV2 = (slot: number) =>
      v2.postRecv({ wrId: slot, sgList: [{ addr: clientMr.addr + v2Recv(slot), length: 64, lkey: clientMr.lkey }] })
    poll(cq1, (w) => {
      // a RECV is completed by a SEND or, with its immediate, by a WRITE_WITH_IMM: either way it is posted again
      const imm = w.opcode === WcOpcode.RECV_RDMA_WITH_IMM
      const recv = imm || w.opcode === WcOpcode.RECV
      const ok = w.status === WcStatus.SUCCESS
      const key = `${imm ? "recvImm" : recv ? "recv" : "send"}:${ok ? "ok" : `status${w.status}`}`
      completions.v1[key] = (completions.v1[key] ?? 0) + 1
      if (recv && ok && w.wrId < V1_RECVS) postV1(w.wrId)
    })
    poll(cq2, (w) => {
      if (w.opcode !== WcOpcode.RECV) return
      if (w.status !== WcStatus.SUCCESS) {
        completions.clientBad.push(`V2 RECV status ${w.status}`)
        return
      }
      const bytes = (regions.client as Guarded).bytes
      const k = bytes.readUInt32LE(v2Recv(w.wrId))
      const want = (k * 37 + 1) & 0xff
      if (bytes.subarray(0, CLIENT_WRITE_BYTES).every((b) => b === want)) completions.clientOk++
      else if (completions.clientBad.length < 20) completions.clientBad.push(`round ${k}: the WRITE's bytes differ`)
      postV2(w.wrId)
    })

    const connect = (qp: QueuePair, mine: { psn: number; token: bigint }, peer: PeerQp) =>
      Effect.gen(function* () {
        yield* qp.modifyQp({ qpState: QpState.RESET }, QpAttrMask.STATE)
        yield* SoftVerbs.setQpToken(qp, { local: mine.token, remote: BigInt(peer.token) })
        yield* Rc.connect(qp, mine.psn, { gid: parseGid(peer.gid), qpNum: peer.qpNum, psn: peer.psn }, params)
      })
    const describe = (qp: QueuePair, mine: { psn: number; token: bigint }) => ({
      qpNum: qp.qpNum,
      psn: mine.psn,
      token: String(mine.token)
    })
    let peer1: PeerQp | undefined
    let failEvery = 0
    let packets = 0

    const on = (m: Record<string, unknown>): Effect.Effect<Record<string, unknown>, unknown> =>
      Effect.gen(function* () {
        switch (m.cmd) {
          case "connect": {
            peer1 = m.p1 as PeerQp
            yield* connect(v1, own.v1, peer1)
            yield* connect(v2, own.v2, m.p2 as PeerQp)
            for (let s = 0; s < V1_RECVS; s++) postV1(s)
            for (let s = 0; s < V2_RECVS; s++) postV2(s)
            return { ok: true }
          }
          case "reconnect": {
            peer1 = m.p1 as PeerQp
            own.v1 = { psn: Rc.randomPsn(), token: SoftVerbs.randomToken() }
            yield* connect(v1, own.v1, peer1)
            for (let s = 0; s < V1_RECVS; s++) postV1(s)
            return { v1: describe(v1, own.v1) }
          }
          case "warm": {
            const peer = m.mr as { addr: number; rkey: number }
            const sge = (off: number, length: number) => [{ addr: target.addr + off, length, lkey: target.lkey }]
            const flags = SendFlags.SIGNALED
            v1.postSend({ wrId: 1001, opcode: WrOpcode.SEND, sendFlags: flags, sgList: sge(40_000, 64) })
            v1.postSend({
              wrId: 1002,
              opcode: WrOpcode.RDMA_READ,
              sendFlags: flags,
              sgList: sge(42_000, 2000),
              remoteAddr: peer.addr,
              rkey: peer.rkey
            })
            v1.postSend({
              wrId: 1003,
              opcode: WrOpcode.RDMA_WRITE,
              sendFlags: flags,
              sgList: sge(45_000, 3000),
              remoteAddr: peer.addr + 8192,
              rkey: peer.rkey
            })
            return { ok: true }
          }
          case "state": {
            const i = v1 as unknown as Internals
            return {
              rxPackets: device.counters.rxPackets,
              v1: { state: v1.state, ePsn: i.ePsn, psnNext: i.psnNext, acked: i.acked },
              v2: v2.state
            }
          }
          case "stats":
            return {
              memory: yield* Effect.promise(afterGc),
              soft: yield* control.counters("victim"),
              completions: { v1: completions.v1 },
              client: { ok: completions.clientOk, bad: completions.clientBad },
              v1: v1.state,
              v2: v2.state
            }
          case "memory":
            return {
              regions: Object.fromEntries(
                Object.entries(regions).map(([name, r]) => [
                  name,
                  { addr: (mrs[name] as MemoryRegion).addr, length: r.bytes.length, bytes: r.all.toString("base64") }
                ])
              )
            }
          case "inject": {
            if (m.kind === "canary") (regions.canary as Guarded).bytes[100] ^= 0xff
            else if (m.kind === "crash") setImmediate(() => process.exit(70))
            else if (m.kind === "throw" && failEvery === 0) {
              // a decoder that throws: V1's packet handler fails on every 100th datagram (the NIC counts it)
              failEvery = 100
              const i = v1 as unknown as Internals
              const original = i.onPacket.bind(v1)
              i.onPacket = (msg, host, port) => {
                if (++packets % failEvery === 0)
                  throw new Error("injected: the packet handler throws (negative control)")
                original(msg, host, port)
              }
            }
            return { injected: m.kind }
          }
          default:
            return yield* Effect.fail(`unknown request ${String(m.cmd)}`)
        }
      })

    return {
      ready: {
        gid: hex(gid),
        host: device.host,
        port: device.port,
        v1: describe(v1, own.v1),
        v2: describe(v2, own.v2),
        mrs: Object.fromEntries(
          Object.entries(mrs).map(([name, mr]) => [name, { addr: mr.addr, length: mr.length, rkey: mr.rkey }])
        ),
        pid: process.pid
      },
      on
    }
  })
