/**
 * Fuzz that reaches the QP's handlers. The fuzzer IS the connected peer: a plain UDP socket on 127.0.0.1 whose GID the
 * SoftVerbs QP under test is connected to, so every datagram passes the source check. It sends one datagram at a time
 * and waits until the device has taken it, built from the QP's current state (PSNs at or near the expected PSN, ACKs,
 * NAKs and READ responses inside the requester's outstanding range) while the QP has RECVs posted and its own SENDs,
 * WRITEs and READs in flight; a quarter of the datagrams have their opcode, flags, PSN, lengths, rkey, address, offset,
 * immediate, payload or size mutated. A quarter of the rounds start both PSN spaces just below 0xFFFFFF.
 *
 * Each datagram is classified by the handler it reached, from the QP's state just before the device took it (the
 * dispatch is a function of state, source, opcode and PSN: the test reads the QP record's `ePsn`, `acked` and
 * `psnNext`) and the device's counters (it was not dropped before the QP), and by what it did (the expected PSN or the
 * ACKed PSN moved, a NAK was counted, the QP went to ERR). The test prints the counts and requires every handler to have
 * been reached and to have done its work.
 *
 * Checked throughout: no handler throws (the device counts what it catches), the QP is in RTS or ERR, an ERR has a
 * cause (an error completion, QP_ACCESS_ERR or QP_REQ_ERR), a QP in ERR drops what comes, every WR completes once and
 * in order (a READ response that cannot be scattered fails the READ after the older WRs it acknowledges), a request
 * out of IB's opcode sequence is refused (see `ibSequence`), every accepted SEND and WRITE_WITH_IMM lands in its RECV
 * with the right length, bytes and immediate, and no byte of the memory changes except where an accepted WRITE put it
 * or a posted RECV or READ may write (guards around and between every region).
 *
 * `TENT_FUZZ_SEED` picks another sequence.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import {
  AccessFlags,
  type AsyncEvent,
  EventType,
  QpAttrMask as M,
  type MemoryRegion,
  Mtu,
  QpState,
  QpType,
  Rc,
  SendFlags,
  SoftVerbs,
  WcFlags,
  WcOpcode,
  WcStatus,
  WorkCompletion,
  WrOpcode,
  wcStatusName
} from "../src/index.js"
import { softGid } from "../src/soft/Address.js"
import { Flag, HDR, Off, Op, unwrapPsn, writeHeader } from "../src/soft/Packet.js"
import type { SoftQp } from "../src/soft/SoftQp.js"
import { udpSocket } from "./support.js"

const MTU = 256
/** The QPN the fuzzer claims as the peer's. */
const PEER_QPN = 0x5a5a5
/** Stop after this many datagrams or this much time, whichever comes first. */
const MAX_DATAGRAMS = 8000
const MAX_MS = 14_000
/** Datagrams per round at most; a round also ends when the QP reaches ERR. */
const ROUND_DATAGRAMS = 120
const GUARD = 256

/** xorshift32: the same sequence for the same seed. */
const prng = (seed: number) => {
  let s = seed >>> 0 || 1
  const next = () => {
    s ^= s << 13
    s ^= s >>> 17
    s ^= s << 5
    return (s >>> 0) / 0x1_0000_0000
  }
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    chance: (p: number) => next() < p,
    pick: <T>(xs: ReadonlyArray<T>): T => xs[Math.floor(next() * xs.length)] as T
  }
}

/** The fields of a datagram as it was really sent (after mutation). */
interface Sent {
  readonly op: number
  readonly flags: number
  readonly syndrome: number
  readonly psn: number
  readonly imm: number
  readonly rkey: number
  readonly msgLen: number
  readonly raddr: number
  readonly offset: number
  readonly payload: Buffer
}

const decode = (d: Buffer): Sent | undefined =>
  d.length < HDR
    ? undefined
    : {
        op: d[Off.op] as number,
        flags: d[Off.flags] as number,
        syndrome: d[Off.syndrome] as number,
        psn: d.readUInt32LE(Off.psn),
        imm: d.readUInt32LE(Off.imm),
        rkey: d.readUInt32LE(Off.rkey),
        msgLen: d.readUInt32LE(Off.msgLen),
        raddr: d.readDoubleLE(Off.raddr),
        offset: d.readUInt32LE(Off.offset),
        payload: d.subarray(HDR, HDR + d.readUInt16LE(Off.payloadLen))
      }

/** What the fuzzer saw of one READ request from the QP under test. */
interface SeenRead {
  readonly first: number
  readonly npkts: number
  readonly msgLen: number
  next: number
}

/** What the QP must deliver into its next RECV, in order. */
type Expected =
  | { readonly kind: "send"; readonly bytes: Buffer; readonly imm: number | undefined }
  | { readonly kind: "writeImm"; readonly imm: number; readonly byteLen: number }

const SEND_STATUSES = new Set<number>([
  WcStatus.SUCCESS,
  WcStatus.WR_FLUSH_ERR,
  WcStatus.REM_ACCESS_ERR,
  WcStatus.REM_INV_REQ_ERR,
  WcStatus.RETRY_EXC_ERR,
  WcStatus.RNR_RETRY_EXC_ERR,
  WcStatus.LOC_PROT_ERR
])
const RECV_STATUSES = new Set<number>([
  WcStatus.SUCCESS,
  WcStatus.WR_FLUSH_ERR,
  WcStatus.LOC_LEN_ERR,
  WcStatus.LOC_PROT_ERR,
  WcStatus.REM_INV_REQ_ERR
])

describe("SoftVerbs fuzz that reaches the QP (from the connected peer's own address)", () => {
  it.scopedLive("mutated requests, ACKs, NAKs and READ responses inside the PSN windows, with WRs outstanding", () =>
    Effect.gen(function* () {
      const seed = Number(process.env.TENT_FUZZ_SEED ?? 0x6d2b79f5)
      const rnd = prng(seed)
      const { control, verbs } = yield* SoftVerbs.make({ devices: [{ name: "b" }] })
      const ctx = yield* verbs.openDevice("b")
      const dev = yield* control.device("b")
      const pd = yield* ctx.allocPd
      const otherPd = yield* ctx.allocPd
      const sendCq = yield* ctx.createCq(256)
      const recvCq = yield* ctx.createCq(256)
      const qp = yield* pd.createQp({
        sendCq,
        recvCq,
        qpType: QpType.RC,
        cap: { maxSendWr: 16, maxRecvWr: 16, maxSendSge: 1, maxRecvSge: 2, maxInlineData: 0 }
      })
      const sq = qp as unknown as SoftQp

      // ---- Memory: one arena, every region between guards. -------------------------------------------------------
      let cursor = GUARD
      const carve = (len: number) => {
        const at = cursor
        cursor += len + GUARD
        return at
      }
      const RECV_SLOTS = 16
      const READ_SLOTS = 8
      const at = {
        rw: carve(16384),
        ro: carve(4096),
        wo: carve(4096),
        otherPd: carve(4096),
        stale: carve(4096),
        recv: carve(RECV_SLOTS * 1024),
        src: carve(4096),
        readDst: carve(READ_SLOTS * 1024)
      }
      const arena = Buffer.alloc(cursor)
      for (let i = 0; i < arena.length; i++) arena[i] = rnd.int(256)
      const shadow = Buffer.from(arena)
      const region = (offset: number, len: number) => arena.subarray(offset, offset + len)
      const LW = AccessFlags.LOCAL_WRITE
      const RW = AccessFlags.REMOTE_WRITE
      const RR = AccessFlags.REMOTE_READ
      const mr = {
        rw: yield* pd.regMr(region(at.rw, 16384), LW | RW | RR),
        ro: yield* pd.regMr(region(at.ro, 4096), LW | RR),
        wo: yield* pd.regMr(region(at.wo, 4096), LW | RW),
        otherPd: yield* otherPd.regMr(region(at.otherPd, 4096), LW | RW | RR),
        // Registered and deregistered again: its rkey is stale.
        stale: yield* Effect.scoped(pd.regMr(region(at.stale, 4096), LW | RW | RR)),
        recv: yield* pd.regMr(region(at.recv, RECV_SLOTS * 1024), LW),
        local: yield* pd.regMr(region(at.src, at.readDst + READ_SLOTS * 1024 - at.src), LW)
      }
      const arenaOffsetOf = (m: MemoryRegion) =>
        m === mr.rw ? at.rw : m === mr.wo ? at.wo : m === mr.ro ? at.ro : m === mr.otherPd ? at.otherPd : at.stale
      const remoteTargets: ReadonlyArray<MemoryRegion> = [mr.rw, mr.wo, mr.ro, mr.otherPd, mr.stale]
      /** Mostly a region that allows the access; one time in 16 one whose rights, PD or rkey refuse it. */
      const targetFor = (op: number): MemoryRegion =>
        rnd.chance(1 / 16)
          ? rnd.pick(op === Op.WRITE ? [mr.ro, mr.otherPd, mr.stale] : [mr.wo, mr.otherPd, mr.stale])
          : rnd.chance(0.8)
            ? mr.rw
            : op === Op.WRITE
              ? mr.wo
              : mr.ro
      // Bytes a posted RECV or READ may write: SGE 1 of a RECV slot is [0, 256), SGE 2 is [272, 784); a READ
      // writes [0, 1000) of its slot. Everything else must always equal the shadow.
      const mayChange = new Uint8Array(arena.length)
      for (let s = 0; s < RECV_SLOTS; s++) {
        mayChange.fill(1, at.recv + s * 1024, at.recv + s * 1024 + 256)
        mayChange.fill(1, at.recv + s * 1024 + 272, at.recv + s * 1024 + 784)
      }
      for (let s = 0; s < READ_SLOTS; s++) mayChange.fill(1, at.readDst + s * 1024, at.readDst + s * 1024 + 1000)
      const memoryViolations = () => {
        let bad = 0
        for (let i = 0; i < arena.length; i++) if (mayChange[i] === 0 && arena[i] !== shadow[i]) bad++
        return bad
      }

      // ---- The peer: a raw UDP socket the QP is connected to. --------------------------------------------------
      const sock = yield* udpSocket
      const peerGid = softGid("127.0.0.1", sock.address().port)
      const fromQp = { requests: 0, acks: 0, naks: 0, readResponses: 0 }
      let reads = new Map<number, SeenRead>()
      sock.on("message", (m: Buffer) => {
        const op = m[Off.op]
        if (op === Op.READ_REQ) {
          // A re-requested READ may start at its first missing response: `offset` says how far into the message.
          const first = unwrapPsn(m.readUInt32LE(Off.psn), sq.psnNext) - Math.floor(m.readUInt32LE(Off.offset) / MTU)
          const msgLen = m.readUInt32LE(Off.msgLen)
          if (!reads.has(first))
            reads.set(first, { first, npkts: Math.max(1, Math.ceil(msgLen / MTU)), msgLen, next: 0 })
        }
        if (op === Op.SEND || op === Op.WRITE || op === Op.READ_REQ) fromQp.requests++
        else if (op === Op.ACK) fromQp.acks++
        else if (op === Op.NAK) fromQp.naks++
        else if (op === Op.READ_RESP) fromQp.readResponses++
      })
      const events: Array<AsyncEvent> = []
      yield* Effect.acquireRelease(
        Effect.sync(() => dev.subscribe((e) => events.push(e))),
        (unsubscribe) => Effect.sync(unsubscribe)
      )

      // ---- Work requests of the QP under test, and their completions. -------------------------------------------
      const wc = WorkCompletion.array(64)
      let nextWrId = 1
      let sendPosted: Array<number> = []
      let sendDone = 0
      let recvPosted: Array<{ wrId: number; slot: number }> = []
      let recvDone = 0
      let recvSlot = 0
      let readSlot = 0
      let expected: Array<Expected> = []
      let accum: Array<Buffer> = []
      /**
       * The IB opcode sequence of the requests accepted so far: inside a SEND (after SEND FIRST, before LAST) only SEND
       * middle/last packets are valid, inside a WRITE only WRITE ones, outside both only a FIRST (or ONLY) or a READ.
       * A request at the expected PSN out of that sequence must be refused: NAK Invalid Request, the QP to ERR, the
       * open RECV (inside a SEND) completed REM_INV_REQ_ERR. Counted (`outOfSequence`) and printed.
       */
      let ibSequence: "none" | "send" | "write" = "none"
      /** A SEND's FIRST packet was accepted and its LAST not yet (the responder has a RECV open). */
      let sendOpen = false
      let outOfSequence = 0
      /** The open RECV that an out-of-sequence request must complete REM_INV_REQ_ERR (its index in `recvPosted`). */
      let invalidatedRecv = -1
      let roundErrors: Array<string> = []
      const problems: Array<string> = []
      const statuses = new Map<string, number>()
      const tally = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1)
      let verifiedRecvs = 0
      /** Rounds in which RECVs are posted only now and then: SENDs meet an empty receive queue (RNR). */
      let starved = false

      const postWork = () => {
        if (qp.state !== QpState.RTS) return
        while (recvPosted.length - recvDone < 8 && (!starved || rnd.chance(0.05))) {
          const slot = recvSlot++ % RECV_SLOTS
          const base = mr.recv.addr + slot * 1024
          const wrId = nextWrId++
          const rc = qp.postRecv({
            wrId,
            sgList: [
              { addr: base, length: 256, lkey: mr.recv.lkey },
              { addr: base + 272, length: 512, lkey: mr.recv.lkey }
            ]
          })
          if (rc !== 0) problems.push(`postRecv returned ${rc}`)
          recvPosted.push({ wrId, slot })
        }
        while (sendPosted.length - sendDone < 6) {
          const wrId = nextWrId++
          const kind = rnd.int(10)
          const len = rnd.int(700)
          const remote = { remoteAddr: rnd.int(2 ** 40), rkey: rnd.int(2 ** 32) }
          let rc: number
          if (kind < 3) {
            const opcode = kind === 0 ? WrOpcode.SEND_WITH_IMM : WrOpcode.SEND
            const sgList = [{ addr: mr.local.addr + rnd.int(4096 - len), length: len, lkey: mr.local.lkey }]
            rc = qp.postSend({ wrId, opcode, sendFlags: SendFlags.SIGNALED, sgList, immData: rnd.int(2 ** 32) })
          } else if (kind < 6) {
            const opcode = kind === 3 ? WrOpcode.RDMA_WRITE_WITH_IMM : WrOpcode.RDMA_WRITE
            const sgList = [{ addr: mr.local.addr + rnd.int(4096 - len), length: len, lkey: mr.local.lkey }]
            rc = qp.postSend({ wrId, opcode, sendFlags: SendFlags.SIGNALED, sgList, ...remote })
          } else {
            const slot = readSlot++ % READ_SLOTS
            const addr = mr.local.addr + (at.readDst - at.src) + slot * 1024
            const sgList = [{ addr, length: 1 + rnd.int(1000), lkey: mr.local.lkey }]
            rc = qp.postSend({ wrId, opcode: WrOpcode.RDMA_READ, sendFlags: SendFlags.SIGNALED, sgList, ...remote })
          }
          if (rc !== 0) problems.push(`postSend returned ${rc}`)
          sendPosted.push(wrId)
        }
      }

      const pollCompletions = () => {
        for (let guard = 0; guard < 100; guard++) {
          const got = sendCq.pollCq(64, wc)
          for (let i = 0; i < got; i++) {
            const w = wc[i] as WorkCompletion
            tally(statuses, `send ${wcStatusName(w.status)}`)
            if (w.wrId !== sendPosted[sendDone]) {
              problems.push(`send completion ${w.wrId} (${wcStatusName(w.status)}), expected ${sendPosted[sendDone]}`)
            }
            sendDone++
            if (!SEND_STATUSES.has(w.status)) problems.push(`send status ${wcStatusName(w.status)}`)
            if (w.status !== WcStatus.SUCCESS && w.status !== WcStatus.WR_FLUSH_ERR) {
              roundErrors.push(wcStatusName(w.status))
            }
          }
          if (got < 64) break
        }
        for (let guard = 0; guard < 100; guard++) {
          const got = recvCq.pollCq(64, wc)
          for (let i = 0; i < got; i++) {
            const w = wc[i] as WorkCompletion
            tally(statuses, `recv ${wcStatusName(w.status)}`)
            const posted = recvPosted[recvDone]
            recvDone++
            if (posted === undefined || w.wrId !== posted.wrId) {
              problems.push(`recv completion ${w.wrId}, expected ${posted?.wrId}`)
              continue
            }
            if (!RECV_STATUSES.has(w.status)) problems.push(`recv status ${wcStatusName(w.status)}`)
            if ((w.status === WcStatus.REM_INV_REQ_ERR) !== (recvDone - 1 === invalidatedRecv)) {
              problems.push(
                `RECV ${w.wrId} completed ${wcStatusName(w.status)}; the open one refused: ${invalidatedRecv}`
              )
            }
            if (w.status !== WcStatus.SUCCESS) {
              if (w.status !== WcStatus.WR_FLUSH_ERR) roundErrors.push(wcStatusName(w.status))
              continue
            }
            const e = expected.shift()
            if (e === undefined) {
              problems.push(`RECV ${w.wrId} completed SUCCESS but no message was accepted for it`)
              continue
            }
            const withImm = (w.wcFlags & WcFlags.WITH_IMM) !== 0
            if (e.kind === "send") {
              const slot = at.recv + posted.slot * 1024
              const landed = Buffer.concat([
                arena.subarray(slot, slot + 256),
                arena.subarray(slot + 272, slot + 784)
              ]).subarray(0, e.bytes.length)
              if (w.opcode !== WcOpcode.RECV || w.byteLen !== e.bytes.length || !landed.equals(e.bytes)) {
                problems.push(`RECV ${w.wrId}: opcode ${w.opcode} ${w.byteLen} bytes, expected ${e.bytes.length}`)
              }
              verifiedRecvs++
              if (withImm !== (e.imm !== undefined) || (e.imm !== undefined && w.immData !== e.imm)) {
                problems.push(`RECV ${w.wrId}: immediate ${withImm} ${w.immData}, expected ${e.imm}`)
              }
            } else if (
              w.opcode !== WcOpcode.RECV_RDMA_WITH_IMM ||
              !withImm ||
              w.immData !== e.imm ||
              w.byteLen !== e.byteLen
            ) {
              problems.push(`RECV ${w.wrId}: WRITE_WITH_IMM completion ${JSON.stringify(w)} vs ${JSON.stringify(e)}`)
            } else {
              verifiedRecvs++
            }
          }
          if (got < 64) break
        }
      }

      // ---- Classification: which handler a datagram reached, and what it did. -------------------------------------
      const reached = new Map<string, number>()
      const outcomes = new Map<string, number>()
      const filtered = new Map<string, number>()
      const c = dev.counters
      const snap = () => ({
        state: qp.state,
        ePsn: sq.ePsn,
        acked: sq.acked,
        psnNext: sq.psnNext,
        rx: c.rxPackets,
        malformed: c.malformed,
        unknownQpn: c.unknownQpn,
        droppedState: c.droppedState,
        foreignSource: c.foreignSource,
        rnrNaksSent: c.rnrNaksSent,
        seqNaksSent: c.seqNaksSent,
        accessNaksSent: c.accessNaksSent,
        duplicates: c.duplicates,
        protocolErrors: c.protocolErrors,
        rnrRetries: c.rnrRetries,
        txPackets: c.txPackets
      })
      type Snap = ReturnType<typeof snap>
      let writesApplied = 0

      const classify = (d: Sent | undefined, s0: Snap, s1: Snap) => {
        const delta = (k: keyof Snap) => (s1[k] as number) - (s0[k] as number)
        if (delta("rx") !== 1) return tally(filtered, "lost in the kernel")
        if (delta("malformed") > 0) return tally(filtered, "malformed")
        if (delta("unknownQpn") > 0) return tally(filtered, "unknown QPN")
        if (delta("foreignSource") > 0) return tally(filtered, "foreign source QPN")
        if (delta("droppedState") > 0) return tally(filtered, "QP not ready (ERR)")
        if (d === undefined) return tally(filtered, "short")
        const toErr = s0.state !== QpState.ERR && s1.state === QpState.ERR
        const count = (handler: string, outcome: string) => {
          tally(reached, handler)
          tally(outcomes, `${handler}: ${outcome}`)
        }
        if (d.op === Op.SEND || d.op === Op.WRITE || d.op === Op.READ_REQ) {
          const psn = unwrapPsn(d.psn, s0.ePsn)
          if (psn < s0.ePsn) {
            if (delta("duplicates") === 0 || s1.ePsn !== s0.ePsn) {
              problems.push(`a request ${s0.ePsn - psn} PSNs behind the expected one was not taken for a duplicate`)
            }
            if (d.op === Op.READ_REQ) {
              return count("duplicate READ (re-executed)", delta("txPackets") > 0 ? "answered again" : "ignored")
            }
            return count("duplicate SEND/WRITE (re-acknowledged)", "not delivered again")
          }
          if (psn > s0.ePsn) {
            if (s1.ePsn !== s0.ePsn) problems.push(`a request ${psn - s0.ePsn} PSNs ahead was accepted`)
            return count("PSN ahead (sequence NAK)", delta("seqNaksSent") > 0 ? "NAKed" : "already NAKed")
          }
          const handler = d.op === Op.SEND ? "receiveSend" : d.op === Op.WRITE ? "receiveWrite" : "executeRead"
          const accepted = s1.ePsn > s0.ePsn
          const first = (d.flags & Flag.FIRST) !== 0
          const inSequence =
            d.op === Op.SEND
              ? first
                ? ibSequence === "none"
                : ibSequence === "send"
              : d.op === Op.WRITE
                ? first
                  ? ibSequence === "none"
                  : ibSequence === "write"
                : ibSequence === "none"
          if (!inSequence) {
            outOfSequence++
            if (accepted || !toErr || delta("protocolErrors") === 0) {
              problems.push(`a ${handler} request out of IB's opcode sequence (in ${ibSequence}) was not refused`)
            }
            if (sendOpen) invalidatedRecv = recvDone
            return count(handler, "out of opcode sequence: invalid-request NAK, QP to ERR")
          }
          if (accepted) {
            if (d.op === Op.SEND) sendOpen = (d.flags & Flag.LAST) === 0
            ibSequence =
              (d.flags & Flag.LAST) !== 0 || d.op === Op.READ_REQ ? "none" : d.op === Op.SEND ? "send" : "write"
            if (d.op === Op.SEND) {
              if ((d.flags & Flag.FIRST) !== 0) accum = []
              accum.push(Buffer.from(d.payload))
              if ((d.flags & Flag.LAST) !== 0) {
                expected.push({
                  kind: "send",
                  bytes: Buffer.concat(accum),
                  imm: (d.flags & Flag.IMM) !== 0 ? d.imm : undefined
                })
              }
            } else if (d.op === Op.WRITE) {
              const target = [mr.rw, mr.wo].find((m) => m.rkey === d.rkey)
              if (target !== undefined && d.payload.length > 0) {
                d.payload.copy(shadow, arenaOffsetOf(target) + (d.raddr - target.addr) + d.offset)
                writesApplied++
              }
              if ((d.flags & Flag.IMM) !== 0 && (d.flags & Flag.LAST) !== 0) {
                expected.push({ kind: "writeImm", imm: d.imm, byteLen: d.msgLen })
              }
            }
            return count(handler, "accepted")
          }
          if (delta("rnrNaksSent") > 0) return count(handler, "RNR NAK")
          if (delta("accessNaksSent") > 0) return count(handler, "access NAK, QP to ERR")
          if (toErr) return count(handler, "QP to ERR (local length/protection)")
          if (delta("protocolErrors") > 0) return count(handler, "invalid-request NAK")
          problems.push(`a ${handler} request at the expected PSN was neither accepted nor refused`)
          return count(handler, "neither accepted nor refused")
        }
        if (d.op === Op.ACK) {
          if (s1.acked > s0.acked) return count("onAck", "ACKed PSN advanced")
          return count("onAck", delta("protocolErrors") > 0 ? "ACK past the sent PSNs: counted" : "stale")
        }
        if (d.op === Op.NAK) {
          if (toErr) return count("onNak", "oldest WR failed, QP to ERR")
          if (delta("rnrRetries") > 0) return count("onNak", "RNR wait")
          if (s1.acked > s0.acked || delta("txPackets") > 0) return count("onNak", "went back N")
          return count("onNak", "stale or bogus: ignored")
        }
        if (d.op === Op.READ_RESP) {
          const psn = unwrapPsn(d.psn, s0.acked + 1)
          const read = [...reads.values()].find(
            (r) => psn >= r.first && psn < r.first + r.npkts && r.first + r.npkts - 1 > s0.acked
          )
          if (toErr) return count("onReadResp", "scatter refused: LOC_PROT_ERR, QP to ERR")
          if (delta("duplicates") > 0) return count("onReadResp", "out of order: dropped")
          if (delta("protocolErrors") > 0) return count("onReadResp", "not a READ's PSN: counted")
          if (read === undefined) return count("onReadResp", "outside every outstanding READ")
          read.next = psn - read.first + 1
          return count("onReadResp", "scattered")
        }
        return tally(filtered, `op ${d.op}`)
      }

      // ---- Datagram builders. ------------------------------------------------------------------------------------
      const build = (
        op: number,
        flags: number,
        psn: number,
        fields: Partial<Omit<Sent, "op" | "flags" | "psn">> & { ack?: number } = {}
      ) => {
        const payload = fields.payload ?? Buffer.alloc(0)
        const d = Buffer.alloc(HDR + payload.length)
        payload.copy(d, HDR)
        writeHeader(
          d,
          op,
          flags,
          fields.syndrome ?? 0,
          qp.qpNum,
          PEER_QPN,
          psn,
          fields.ack ?? 0,
          fields.imm ?? 0,
          fields.rkey ?? 0,
          fields.msgLen ?? payload.length,
          fields.raddr ?? 0,
          fields.offset ?? 0,
          payload.length
        )
        return d
      }
      const randomBytes = (n: number) => {
        const b = Buffer.alloc(n)
        for (let i = 0; i < n; i++) b[i] = rnd.int(256)
        return b
      }
      /** A piggybacked ACK for the QP's requester, now and then. */
      const piggyback = () =>
        rnd.chance(0.3)
          ? { flag: Flag.ACK_VALID, ack: sq.acked + rnd.int(Math.max(1, sq.psnNext - sq.acked + 1)) }
          : { flag: 0, ack: 0 }
      /** The expected PSN, or near it now and then. */
      const requestPsn = () => (rnd.chance(0.88) ? sq.ePsn : sq.ePsn + rnd.int(7) - 3)

      const mutate = (d: Buffer): Buffer => {
        const n = 1 + rnd.int(2)
        const out = d
        let resize = false
        for (let k = 0; k < n; k++) {
          switch (rnd.int(15)) {
            case 0:
              out[Off.op] = rnd.int(8)
              break
            case 1:
              out[Off.flags] = (out[Off.flags] as number) ^ (1 << rnd.int(6))
              break
            case 2:
              out.writeUInt32LE((out.readUInt32LE(Off.psn) + rnd.int(9) - 4) & 0xffffff, Off.psn)
              break
            case 3:
              out.writeUInt32LE(rnd.int(2 ** 32), Off.imm)
              break
            case 4:
              out.writeUInt32LE(
                rnd.chance(0.5)
                  ? rnd.pick(remoteTargets).rkey
                  : (rnd.pick(remoteTargets).rkey ^ (1 << rnd.int(32))) >>> 0,
                Off.rkey
              )
              break
            case 5:
              out.writeUInt32LE(
                (rnd.chance(0.5) ? out.readUInt32LE(Off.msgLen) + rnd.int(3) - 1 : rnd.int(20_000)) >>> 0,
                Off.msgLen
              )
              break
            case 6: {
              const target = rnd.pick(remoteTargets)
              const choices = [
                target.addr - 1,
                target.addr + target.length - rnd.int(64),
                target.addr + rnd.int(target.length),
                rnd.int(2 ** 40),
                2 ** 53,
                -4096
              ]
              out.writeDoubleLE(rnd.pick(choices), Off.raddr)
              break
            }
            case 7:
              out.writeUInt32LE(rnd.chance(0.5) ? rnd.int(2048) : rnd.int(2 ** 32), Off.offset)
              break
            case 8:
              for (let i = HDR; i < out.length; i++) out[i] = rnd.int(256)
              break
            case 9:
              out[Off.syndrome] = rnd.int(6)
              break
            case 10:
              out.writeUInt32LE((sq.acked + rnd.int(2 ** 24)) & 0xffffff, Off.ack)
              out[Off.flags] = (out[Off.flags] as number) | Flag.ACK_VALID
              break
            case 11:
              // A datagram longer or shorter than its header says: done last, the fields above stay in place.
              resize = true
              break
            case 12:
              out.writeUInt16LE(rnd.int(MTU + 1), Off.payloadLen)
              break
            case 13:
              // Now and then a datagram the device must drop before the QP: another source or destination QPN or
              // another version.
              if (rnd.chance(0.6)) out[Off.version] = rnd.int(4)
              else out.writeUInt32LE(rnd.int(2 ** 24), rnd.chance(0.5) ? Off.srcQpn : Off.dstQpn)
              break
            default:
              out.writeUInt32LE(rnd.int(2 ** 24), Off.psn)
          }
        }
        if (!resize) return out
        return rnd.chance(0.5)
          ? out.subarray(0, rnd.int(out.length))
          : Buffer.concat([out, randomBytes(1 + rnd.int(16))])
      }

      /**
       * Where a remote access of `len` bytes starts: inside the region, often flush with its end; one time in 20 just
       * past its end or just before its start (by 1..16 bytes).
       */
      const remoteAddress = (target: MemoryRegion, len: number): number => {
        const r = rnd.int(100)
        if (r < 3) return target.addr + target.length - len + 1 + rnd.int(16)
        if (r < 5) return target.addr - 1 - rnd.int(16)
        if (r < 25) return target.addr + target.length - len
        return target.addr + rnd.int(target.length - len + 1)
      }

      /** A SEND or WRITE of `len` bytes as its packets (FIRST … LAST, the immediate on the last), each built when sent. */
      const message = (
        op: number,
        len: number,
        imm: number | undefined,
        target: { readonly rkey?: number; readonly raddr?: number }
      ): Array<() => Buffer> => {
        const n = Math.max(1, Math.ceil(len / MTU))
        return Array.from({ length: n }, (_, k) => () => {
          const p = piggyback()
          let flags = p.flag
          if (k === 0) flags |= Flag.FIRST
          if (k === n - 1) flags |= Flag.LAST | Flag.ACK_REQ | (imm !== undefined ? Flag.IMM : 0)
          return build(op, flags, requestPsn(), {
            payload: randomBytes(Math.min(MTU, len - k * MTU)),
            msgLen: len,
            offset: k * MTU,
            imm: imm ?? 0,
            ...target,
            ack: p.ack
          })
        })
      }
      /** The next datagrams to send: a whole message's packets, or one ACK, NAK or READ response. */
      const nextDatagrams = (): Array<() => Buffer> => {
        const kind = rnd.int(100)
        if (kind < 30) {
          // A SEND of 0..900 bytes: more than the 768 a RECV holds now and then.
          const len = rnd.chance(0.04) ? 769 + rnd.int(131) : rnd.int(769)
          return message(Op.SEND, len, rnd.chance(0.3) ? rnd.int(2 ** 32) : undefined, {})
        }
        if (kind < 52) {
          const target = targetFor(Op.WRITE)
          const len = rnd.int(900)
          const raddr = remoteAddress(target, len)
          return message(Op.WRITE, len, rnd.chance(0.15) ? rnd.int(2 ** 32) : undefined, { rkey: target.rkey, raddr })
        }
        if (kind < 64) {
          const target = targetFor(Op.READ_REQ)
          const len = rnd.int(1000)
          const raddr = remoteAddress(target, len)
          return [
            () => {
              const p = piggyback()
              // Now and then an old PSN: a duplicate READ is executed again.
              const psn = rnd.chance(0.15) ? sq.ePsn - 1 - rnd.int(8) : requestPsn()
              return build(Op.READ_REQ, Flag.FIRST | Flag.LAST | Flag.ACK_REQ | p.flag, psn, {
                msgLen: len,
                rkey: target.rkey,
                raddr,
                ack: p.ack
              })
            }
          ]
        }
        if (kind < 68) {
          return [() => build(rnd.chance(0.5) ? Op.SEND : Op.WRITE, Flag.FIRST | Flag.LAST, sq.ePsn - 1 - rnd.int(16))]
        }
        if (kind < 78) {
          return [
            () =>
              build(Op.ACK, Flag.ACK_VALID, 0, {
                ack: rnd.chance(0.9) ? sq.acked + rnd.int(Math.max(1, sq.psnNext - sq.acked + 1)) : rnd.int(2 ** 24)
              })
          ]
        }
        if (kind < 86) {
          return [
            () => {
              const psn = sq.acked + 1 + rnd.int(Math.max(1, sq.psnNext - sq.acked))
              const syndrome = rnd.pick([1, 1, 1, 1, 2, 2, 2, 2, 3, 4])
              return build(Op.NAK, Flag.ACK_VALID, psn, {
                syndrome,
                ack: psn - 1,
                imm: rnd.chance(0.9) ? 1 + rnd.int(12) : rnd.int(32)
              })
            }
          ]
        }
        return [
          () => {
            const open = [...reads.values()].filter((r) => r.first + r.npkts - 1 > sq.acked)
            const read = open.length > 0 ? rnd.pick(open) : undefined
            if (read === undefined) {
              return build(Op.READ_RESP, Flag.FIRST | Flag.LAST, sq.acked + 1 + rnd.int(4), {
                payload: randomBytes(rnd.int(MTU)),
                msgLen: MTU
              })
            }
            const k = rnd.chance(0.8) ? read.next : rnd.int(read.npkts + 1)
            const plen = Math.max(0, Math.min(MTU, read.msgLen - k * MTU))
            let flags = 0
            if (k === 0) flags |= Flag.FIRST
            if (k === read.npkts - 1) flags |= Flag.LAST
            return build(Op.READ_RESP, flags, read.first + k, {
              payload: randomBytes(plen),
              msgLen: read.msgLen,
              offset: k * MTU
            })
          }
        ]
      }

      // ---- One datagram at a time: send, wait until the device has taken it. -------------------------------------
      const port = dev.port
      const deliver = (d: Buffer) =>
        Effect.async<void>((resume) => {
          const target = c.rxPackets + 1
          const deadline = performance.now() + 2000
          sock.send(d, port, "127.0.0.1")
          const check = () => {
            if (c.rxPackets >= target || performance.now() > deadline) resume(Effect.void)
            else setImmediate(check)
          }
          setImmediate(check)
        })

      // ---- Rounds: connect, fuzz until ERR or ROUND_DATAGRAMS, check, RESET. -------------------------------------
      const params: Rc.RcParams = {
        ...Rc.defaultParams,
        pathMtu: Mtu.MTU_256,
        timeout: 14,
        retryCnt: 7,
        rnrRetry: 3,
        minRnrTimer: 1
      }
      const endStates = new Map<string, number>()
      const started = performance.now()
      let datagrams = 0
      let rounds = 0
      let wrapped = 0
      while (datagrams < MAX_DATAGRAMS && performance.now() - started < MAX_MS) {
        rounds++
        // A quarter of the rounds start both PSN spaces just below 0xFFFFFF: the fuzz crosses the wrap.
        starved = rnd.chance(0.2)
        const nearWrap = rnd.chance(0.25)
        const sqPsn = nearWrap ? 0xffffff - rnd.int(64) : rnd.int(0x1000000)
        const rqPsn = nearWrap ? 0xffffff - rnd.int(64) : rnd.int(0x1000000)
        yield* Rc.connect(qp, sqPsn, { gid: peerGid, qpNum: PEER_QPN, psn: rqPsn }, params)
        const eventsAtStart = events.length
        reads = new Map()
        sendPosted = []
        sendDone = 0
        recvPosted = []
        recvDone = 0
        invalidatedRecv = -1
        expected = []
        accum = []
        ibSequence = "none"
        sendOpen = false
        roundErrors = []
        let inRound = 0
        postWork()
        while (inRound < ROUND_DATAGRAMS && qp.state === QpState.RTS) {
          for (const make of nextDatagrams()) {
            const d0 = make()
            const d = rnd.chance(0.25) ? mutate(d0) : d0
            const s0 = snap()
            yield* deliver(d)
            const s1 = snap()
            classify(decode(d), s0, s1)
            datagrams++
            inRound++
            pollCompletions()
            if (c.handlerErrors > 0) problems.push(`a handler threw (datagram ${datagrams}, op ${d[Off.op]})`)
            if (qp.state !== QpState.RTS && qp.state !== QpState.ERR) problems.push(`QP in state ${qp.state}`)
            if (qp.state !== QpState.RTS) break
          }
          postWork()
        }
        if (sq.ePsn > 0xffffff || sq.psnNext > 0xffffff) wrapped++
        // A QP in ERR drops what still comes.
        if (qp.state === QpState.ERR) {
          const before = snap()
          yield* deliver(build(Op.SEND, Flag.FIRST | Flag.LAST | Flag.ACK_REQ, sq.ePsn, { payload: randomBytes(8) }))
          const after = snap()
          if (after.droppedState !== before.droppedState + 1 || after.txPackets !== before.txPackets) {
            problems.push(`round ${rounds}: a SEND to the QP in ERR was not dropped silently`)
          }
        }
        pollCompletions()
        const state = qp.state
        tally(endStates, state === QpState.ERR ? "ERR" : state === QpState.RTS ? "RTS" : `state ${state}`)
        const accessEvent = events
          .slice(eventsAtStart)
          .some(
            (e) =>
              (e.eventType === EventType.QP_ACCESS_ERR || e.eventType === EventType.QP_REQ_ERR) && e.qpNum === qp.qpNum
          )
        if (state === QpState.ERR) {
          if (sendDone !== sendPosted.length || recvDone !== recvPosted.length) {
            problems.push(
              `round ${rounds}: in ERR ${sendPosted.length - sendDone} sends, ${recvPosted.length - recvDone} recvs never completed`
            )
          }
          if (roundErrors.length === 0 && !accessEvent)
            problems.push(`round ${rounds}: ERR without an error completion, QP_ACCESS_ERR or QP_REQ_ERR`)
        } else if (state === QpState.RTS) {
          if (roundErrors.length > 0) problems.push(`round ${rounds}: error completions ${roundErrors} but QP in RTS`)
        } else {
          problems.push(`round ${rounds}: QP ended in state ${state}`)
        }
        const bad = memoryViolations()
        if (bad > 0) problems.push(`round ${rounds}: ${bad} bytes changed outside accepted WRITEs and posted buffers`)
        if (problems.length > 0) break
        yield* qp.modifyQp({ qpState: QpState.RESET }, M.STATE)
        // Let what the QP sent before the reset arrive, so that it is not taken for the next round's.
        yield* Effect.promise(() => new Promise<void>((r) => setTimeout(r, 2)))
      }
      const elapsed = performance.now() - started

      const table = (m: Map<string, number>) =>
        [...m.entries()]
          .sort(([x], [y]) => x.localeCompare(y))
          .map(([k, v]) => `  ${k.padEnd(58)} ${v}`)
          .join("\n")
      console.log(
        [
          `fuzz seed 0x${seed.toString(16)}: ${datagrams} datagrams in ${rounds} rounds (${wrapped} crossed PSN 0xFFFFFF) in ${elapsed.toFixed(0)} ms`,
          "reached (handler):",
          table(reached),
          "outcomes:",
          table(outcomes),
          "dropped before the QP:",
          table(filtered),
          "completions:",
          table(statuses),
          "rounds ended in:",
          table(endStates),
          `RECVs verified byte for byte: ${verifiedRecvs}; accepted WRITE packets applied to the shadow: ${writesApplied}`,
          `requests refused out of IB's opcode sequence (invalid-request NAK, QP to ERR): ${outOfSequence}`,
          `from the QP to the peer: ${JSON.stringify(fromQp)}; device counters: ${JSON.stringify(c)}`
        ].join("\n")
      )

      expect(problems).toEqual([])
      expect(c.handlerErrors).toBe(0)
      for (const handler of [
        "receiveSend",
        "receiveWrite",
        "executeRead",
        "duplicate READ (re-executed)",
        "duplicate SEND/WRITE (re-acknowledged)",
        "PSN ahead (sequence NAK)",
        "onAck",
        "onNak",
        "onReadResp"
      ]) {
        expect(reached.get(handler) ?? 0, handler).toBeGreaterThan(0)
      }
      for (const outcome of [
        "receiveSend: accepted",
        "receiveSend: RNR NAK",
        "receiveSend: QP to ERR (local length/protection)",
        "receiveSend: out of opcode sequence: invalid-request NAK, QP to ERR",
        "receiveWrite: accepted",
        "receiveWrite: out of opcode sequence: invalid-request NAK, QP to ERR",
        "receiveWrite: access NAK, QP to ERR",
        "executeRead: accepted",
        "executeRead: access NAK, QP to ERR",
        "duplicate READ (re-executed): answered again",
        "onAck: ACKed PSN advanced",
        "onNak: went back N",
        "onNak: RNR wait",
        "onNak: oldest WR failed, QP to ERR",
        "onReadResp: scattered"
      ]) {
        expect(outcomes.get(outcome) ?? 0, outcome).toBeGreaterThan(0)
      }
      expect(verifiedRecvs).toBeGreaterThan(0)
      expect(writesApplied).toBeGreaterThan(0)
      expect(endStates.get("ERR") ?? 0).toBeGreaterThan(0)
      expect(wrapped).toBeGreaterThan(0)
      expect(memoryViolations()).toBe(0)
    })
  )
})
