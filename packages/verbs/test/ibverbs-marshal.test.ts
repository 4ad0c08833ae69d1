/**
 * The Ibverbs provider end to end against an ABI-compatible C double of libibverbs (fixtures/ibverbs/fake-ibverbs.c),
 * built with gcc against the real `<infiniband/verbs.h>` and loaded through the provider's configurable library path.
 * The double decodes what it is handed through the header's own structs and logs it as JSON; these tests compare that
 * with what TypeScript posted, field for field and, for the memory behind each SGE, byte for byte.
 */
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Fiber, type Layer, Stream } from "effect"
import koffi from "koffi"
import {
  AccessFlags,
  Errno,
  EventType,
  Mtu,
  PortState,
  QpAttrMask,
  QpState,
  QpType,
  SendFlags,
  WcFlags,
  WcOpcode,
  WcStatus,
  WrOpcode
} from "../src/Constants.js"
import * as Ibverbs from "../src/Ibverbs.js"
import {
  type CompletionQueue,
  type DeviceContext,
  type MemoryRegion,
  type QueuePair,
  type RecvWr,
  type SendWr,
  Verbs,
  WorkCompletion
} from "../src/Verbs.js"
import { bindFake, buildFake, type Fake } from "./fixtures/ibverbs/fake.js"
import { makeBuildDir, missingToolchain, requireHeaders } from "./fixtures/ibverbs/toolchain.js"

const skip = missingToolchain !== undefined && !requireHeaders
if (skip) console.log(`[ibverbs-marshal] skipped: ${missingToolchain} (TENT_REQUIRE_VERBS_HEADERS unset)`)

describe.skipIf(skip)("Ibverbs against the C double of libibverbs", () => {
  let build: ReturnType<typeof makeBuildDir>
  let so: string
  let fake: Fake
  let verbs: Layer.Layer<Verbs>

  beforeAll(() => {
    expect(missingToolchain, "TENT_REQUIRE_VERBS_HEADERS=1 but the toolchain is missing").toBeUndefined()
    build = makeBuildDir()
    so = buildFake(build.dir, "fake-ibverbs")
    fake = bindFake(so)
    verbs = Ibverbs.layer({ library: so })
  })
  afterAll(() => build?.remove())

  const takeLog = () => fake.takeLog()

  const counts = (...names: ReadonlyArray<string>) => Object.fromEntries(names.map((n) => [n, fake.count(n)]))

  /** A device with a PD, a CQ, an MR over `size` bytes and an RC QP moved to RTS; the log is cleared afterwards. */
  const fixture = (size = 4096) =>
    Effect.gen(function* () {
      const v = yield* Verbs
      const ctx = yield* v.openDevice("fake0")
      const pd = yield* ctx.allocPd
      const cq = yield* ctx.createCq(16)
      const cqIndex = fake.lastCq() // the double numbers CQs in creation order; completions are pushed by number
      const buffer = Buffer.alloc(size)
      for (let i = 0; i < size; i++) buffer[i] = (i * 7 + 3) & 0xff
      const mr = yield* pd.regMr(buffer, AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ)
      const qp = yield* pd.createQp({
        sendCq: cq,
        recvCq: cq,
        cap: { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 2, maxRecvSge: 2, maxInlineData: 0 },
        qpType: QpType.RC
      })
      yield* toRts(qp)
      takeLog()
      return { ctx, pd, cq, cqIndex, mr, qp }
    })

  const toRts = (qp: QueuePair) =>
    Effect.gen(function* () {
      yield* qp.modifyQp(
        { qpState: QpState.INIT, pkeyIndex: 0, portNum: 1, qpAccessFlags: 7 },
        QpAttrMask.STATE | QpAttrMask.PKEY_INDEX | QpAttrMask.PORT | QpAttrMask.ACCESS_FLAGS
      )
      yield* qp.modifyQp(
        {
          qpState: QpState.RTR,
          pathMtu: Mtu.MTU_1024,
          destQpNum: 0x200,
          rqPsn: 0,
          ahAttr: { isGlobal: 1, portNum: 1, grh: { dgid: new Uint8Array(16), sgidIndex: 0, hopLimit: 1 } }
        },
        QpAttrMask.STATE | QpAttrMask.AV | QpAttrMask.PATH_MTU | QpAttrMask.DEST_QPN | QpAttrMask.RQ_PSN
      )
      yield* qp.modifyQp({ qpState: QpState.RTS, sqPsn: 0 }, QpAttrMask.STATE | QpAttrMask.SQ_PSN)
    })

  const expectSge = (seen: unknown, mr: MemoryRegion, offset: number, length: number) => {
    expect(seen).toEqual({
      addr: String(mr.addr + offset),
      length,
      lkey: mr.lkey,
      data: mr.buffer.subarray(offset, offset + Math.min(length, 64)).toString("hex")
    })
  }

  it.scopedLive("getDeviceList names each device and its node GUID (network order)", () =>
    Effect.gen(function* () {
      fake.setDevices(2, 0)
      const before = fake.count("free_list")
      const devices = yield* Effect.flatMap(Verbs, (v) => v.getDeviceList)
      fake.setDevices(1, 0)
      expect(devices).toEqual([
        { name: "fake0", guid: "0002c90300a1b2c0" },
        { name: "fake1", guid: "0002c90300a1b2c1" }
      ])
      expect(fake.count("free_list")).toBe(before + 1)
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive(
    "a NULL device list (this host: errno ENOSYS) is DeviceNotFound naming ENOSYS, and is never freed",
    () =>
      Effect.gen(function* () {
        fake.setDevices(0, Errno.ENOSYS)
        const before = fake.count("free_list")
        const v = yield* Verbs
        const listed = yield* Effect.flip(v.getDeviceList)
        const opened = yield* Effect.flip(v.openDevice("fake0"))
        fake.setDevices(1, 0)
        expect(listed._tag).toBe("DeviceNotFound")
        expect(listed.message).toContain("ENOSYS")
        expect(listed.reason).toBe("NoDevices")
        expect(listed.available).toEqual([])
        expect(opened._tag).toBe("DeviceNotFound")
        // The double aborts the process on ibv_free_device_list(NULL), as the real one crashes: reaching here is the proof.
        expect(fake.count("free_list")).toBe(before)
      }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("an absent named device is DeviceNotFound listing the devices that are present", () =>
    Effect.gen(function* () {
      fake.setDevices(2, 0)
      const e = yield* Effect.flip(Effect.flatMap(Verbs, (v) => v.openDevice("mlx5_0")))
      fake.setDevices(1, 0)
      expect(e._tag).toBe("DeviceNotFound")
      if (e._tag !== "DeviceNotFound") return
      expect(e.device).toBe("mlx5_0")
      expect(e.reason).toBe("Absent")
      expect(e.available).toEqual(["fake0", "fake1"])
      expect(e.message).toContain('"mlx5_0" not found; present: fake0, fake1')
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("a library that cannot be loaded is DeviceNotFound naming the packages to install", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(Effect.flatMap(Verbs, (v) => v.getDeviceList))
      expect(e.message).toContain(join(build.dir, "absent.so"))
      expect(e._tag === "DeviceNotFound" && e.reason).toBe("LibraryMissing")
      expect(e.message).toContain("libibverbs1")
      expect(e.message).toContain("rdma-core")
    }).pipe(Effect.provide(Ibverbs.layer({ library: join(build.dir, "absent.so") })))
  )

  it.scopedLive(
    "queryPort calls verbs_context.query_port with sizeof(ibv_port_attr), else the exported compat call",
    () =>
      Effect.gen(function* () {
        const v = yield* Verbs
        const before = counts("query_port_ext", "query_port_compat")
        const port = yield* Effect.scoped(Effect.flatMap(v.openDevice("fake0"), (ctx) => ctx.queryPort(1)))
        expect(port).toEqual({
          state: PortState.ACTIVE,
          maxMtu: Mtu.MTU_4096,
          activeMtu: Mtu.MTU_1024,
          gidTblLen: 16,
          lid: 0x1234,
          linkLayer: 2,
          activeSpeed: 32,
          activeWidth: 2
        })
        expect(fake.count("query_port_ext")).toBe(before.query_port_ext + 1)
        expect(fake.count("query_port_len")).toBe(52)

        fake.setExtendedQueryPort(0)
        const compat = yield* Effect.scoped(Effect.flatMap(v.openDevice("fake0"), (ctx) => ctx.queryPort(1)))
        fake.setExtendedQueryPort(1)
        expect(compat.state).toBe(PortState.DOWN) // the double's compat call marks its answer
        expect(compat.lid).toBe(0x1234)
        expect(fake.count("query_port_compat")).toBe(before.query_port_compat + 1)

        const bad = yield* Effect.flip(Effect.scoped(Effect.flatMap(v.openDevice("fake0"), (ctx) => ctx.queryPort(2))))
        expect(bad).toMatchObject({ _tag: "RdmaError", op: "ibv_query_port", errno: Errno.EINVAL })
      }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("queryGid returns the 16 bytes C wrote; a bad index is RdmaError with errno", () =>
    Effect.gen(function* () {
      const ctx: DeviceContext = yield* Effect.flatMap(Verbs, (v) => v.openDevice("fake0"))
      const gid = yield* ctx.queryGid(1, 1)
      expect(Buffer.from(gid).toString("hex")).toBe("fe800000000000000000ffff0a000002")
      const e = yield* Effect.flip(ctx.queryGid(1, 5))
      expect(e).toMatchObject({ op: "ibv_query_gid", errno: Errno.EINVAL })
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("regMr registers the Buffer's own address; access bits 20–29 go through ibv_reg_mr_iova2", () =>
    Effect.gen(function* () {
      const ctx = yield* Effect.flatMap(Verbs, (v) => v.openDevice("fake0"))
      const pd = yield* ctx.allocPd
      takeLog()
      const buffer = Buffer.alloc(8192)
      const mr = yield* pd.regMr(buffer, AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_READ)
      const relaxed = yield* pd.regMr(buffer.subarray(100, 200), AccessFlags.LOCAL_WRITE | AccessFlags.RELAXED_ORDERING)
      const [plain, iova2] = takeLog()
      expect(mr.addr).toBe(Number(koffi.address(buffer)))
      expect(plain).toEqual({
        kind: "reg_mr",
        addr: String(mr.addr),
        length: 8192,
        iova: String(mr.addr),
        access: 5,
        lkey: mr.lkey,
        rkey: mr.rkey
      })
      expect(relaxed.addr).toBe(mr.addr + 100)
      expect(iova2).toEqual({
        kind: "reg_mr_iova2",
        addr: String(mr.addr + 100),
        length: 100,
        iova: String(mr.addr + 100),
        access: 1 | (1 << 20),
        lkey: relaxed.lkey,
        rkey: relaxed.rkey
      })
      const e = yield* Effect.flip(pd.regMr(buffer, AccessFlags.REMOTE_WRITE))
      expect(e).toMatchObject({ op: "ibv_reg_mr", errno: Errno.EINVAL })
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("createQp writes ibv_qp_init_attr as C reads it, and reads back the granted caps", () =>
    Effect.gen(function* () {
      const ctx = yield* Effect.flatMap(Verbs, (v) => v.openDevice("fake0"))
      const pd = yield* ctx.allocPd
      const sendCq = yield* ctx.createCq(8)
      const recvCq = yield* ctx.createCq(8)
      expect(sendCq.cqe).toBe(15) // the double rounds up like mlx5; the provider reports what C granted
      takeLog()
      const qp = yield* pd.createQp({
        sendCq,
        recvCq,
        cap: { maxSendWr: 7, maxRecvWr: 9, maxSendSge: 3, maxRecvSge: 1, maxInlineData: 16 },
        qpType: QpType.RC,
        sqSigAll: true
      })
      expect(takeLog()).toEqual([
        {
          kind: "create_qp",
          qp_type: QpType.RC,
          sq_sig_all: 1,
          max_send_wr: 7,
          max_recv_wr: 9,
          max_send_sge: 3,
          max_recv_sge: 1,
          max_inline_data: 16,
          same_cq: 0,
          has_srq: 0
        }
      ])
      expect(qp.qpNum).toBeGreaterThanOrEqual(0x100)
      expect(qp.state).toBe(QpState.RESET)
      const q = yield* qp.queryQp(0)
      expect(q.cap).toEqual({ maxSendWr: 7, maxRecvWr: 9, maxSendSge: 3, maxRecvSge: 1, maxInlineData: 64 })
      const e = yield* Effect.flip(
        pd.createQp({ sendCq, recvCq, cap: { ...q.cap, maxSendWr: 0 } as never, qpType: QpType.RC })
      )
      expect(e).toMatchObject({ op: "ibv_create_qp", errno: Errno.EINVAL })
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("modifyQp writes ibv_qp_attr members C reads by name; an illegal transition is EINVAL", () =>
    Effect.gen(function* () {
      const { qp } = yield* fixture()
      const dgid = Uint8Array.from({ length: 16 }, (_, i) => 0xa0 + i)
      const e = yield* Effect.flip(qp.modifyQp({ qpState: QpState.RTR }, QpAttrMask.STATE))
      expect(e).toMatchObject({ _tag: "RdmaError", op: "ibv_modify_qp", errno: Errno.EINVAL })
      expect(e.message).toContain("RTS → RTR")
      takeLog()
      yield* qp.modifyQp({ qpState: QpState.RESET }, QpAttrMask.STATE)
      yield* qp.modifyQp(
        { qpState: QpState.INIT, pkeyIndex: 3, portNum: 1, qpAccessFlags: 6 },
        QpAttrMask.STATE | QpAttrMask.PKEY_INDEX | QpAttrMask.PORT | QpAttrMask.ACCESS_FLAGS
      )
      const rtr = {
        qpState: QpState.RTR,
        pathMtu: Mtu.MTU_4096,
        destQpNum: 0xabcdef,
        rqPsn: 0x123456,
        maxDestRdAtomic: 4,
        minRnrTimer: 12,
        ahAttr: {
          dlid: 0x4321,
          sl: 3,
          srcPathBits: 1,
          isGlobal: 1,
          portNum: 1,
          grh: { dgid, flowLabel: 0xfffff, sgidIndex: 3, hopLimit: 64, trafficClass: 0x88 }
        }
      }
      const rtrMask =
        QpAttrMask.STATE |
        QpAttrMask.AV |
        QpAttrMask.PATH_MTU |
        QpAttrMask.DEST_QPN |
        QpAttrMask.RQ_PSN |
        QpAttrMask.MAX_DEST_RD_ATOMIC |
        QpAttrMask.MIN_RNR_TIMER
      yield* qp.modifyQp(rtr, rtrMask)
      yield* qp.modifyQp(
        { qpState: QpState.RTS, sqPsn: 0x654321, timeout: 14, retryCnt: 7, rnrRetry: 6, maxRdAtomic: 2 },
        QpAttrMask.STATE | QpAttrMask.SQ_PSN | QpAttrMask.TIMEOUT | QpAttrMask.RETRY_CNT | QpAttrMask.RNR_RETRY
      )
      const [reset, init, seenRtr, rts] = takeLog()
      expect(reset).toMatchObject({ kind: "modify_qp", qp: qp.qpNum, mask: QpAttrMask.STATE, qp_state: 0 })
      expect(init).toMatchObject({ qp_state: 1, pkey_index: 3, port_num: 1, qp_access_flags: 6 })
      expect(seenRtr).toEqual({
        kind: "modify_qp",
        qp: qp.qpNum,
        mask: rtrMask,
        qp_state: QpState.RTR,
        path_mtu: Mtu.MTU_4096,
        qkey: 0,
        rq_psn: 0x123456,
        sq_psn: 0,
        dest_qp_num: 0xabcdef,
        qp_access_flags: 0,
        pkey_index: 0,
        max_rd_atomic: 0,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        port_num: 0,
        timeout: 0,
        retry_cnt: 0,
        rnr_retry: 0,
        ah: {
          dlid: 0x4321,
          sl: 3,
          src_path_bits: 1,
          is_global: 1,
          port_num: 1,
          flow_label: 0xfffff,
          sgid_index: 3,
          hop_limit: 64,
          traffic_class: 0x88,
          dgid: Buffer.from(dgid).toString("hex")
        }
      })
      expect(rts).toMatchObject({
        qp_state: 3,
        sq_psn: 0x654321,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 6,
        max_rd_atomic: 2
      })
      expect(qp.state).toBe(QpState.RTS) // read from ibv_qp.state, which libibverbs (and the double) updates
      const q = yield* qp.queryQp(0)
      expect(q).toMatchObject({ qpState: QpState.RTS, sqPsn: 0x654321, timeout: 14, retryCnt: 7, rnrRetry: 6 })
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("postSend: the chain C walks is the chain TypeScript posted, with the bytes behind every SGE", () =>
    Effect.gen(function* () {
      const { qp, mr } = yield* fixture()
      const write: SendWr = {
        wrId: Number.MAX_SAFE_INTEGER,
        sgList: [{ addr: mr.addr + 16, length: 100, lkey: mr.lkey }],
        opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
        sendFlags: SendFlags.SIGNALED | SendFlags.SOLICITED,
        immData: 0xdeadbeef,
        remoteAddr: 2 ** 47 - 4096,
        rkey: 0xfedcba98
      }
      const send: SendWr = {
        wrId: 2 ** 32 + 1,
        sgList: [
          { addr: mr.addr + 1000, length: 7, lkey: mr.lkey },
          { addr: mr.addr + 3000, length: 1096, lkey: mr.lkey }
        ],
        opcode: WrOpcode.SEND,
        sendFlags: SendFlags.SIGNALED
      }
      const read: SendWr = {
        wrId: 0,
        sgList: [
          { addr: mr.addr, length: 8, lkey: mr.lkey },
          { addr: 0, length: 0, lkey: 0 }
        ],
        numSge: 1,
        opcode: WrOpcode.RDMA_READ,
        sendFlags: 0,
        remoteAddr: 0x1234_5678_9abc,
        rkey: 1
      }
      write.next = send
      send.next = read
      expect(qp.postSend(write)).toBe(0)
      expect(qp.badSendWr).toBeNull()
      const seen = takeLog()
      expect(seen.map(({ sge: _, ...wr }) => wr)).toEqual([
        {
          kind: "send",
          qp: qp.qpNum,
          wr_id: String(Number.MAX_SAFE_INTEGER),
          opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
          send_flags: 6,
          num_sge: 1,
          imm_data: 0xdeadbeef,
          imm_bytes: "deadbeef",
          remote_addr: String(2 ** 47 - 4096),
          rkey: 0xfedcba98
        },
        {
          kind: "send",
          qp: qp.qpNum,
          wr_id: String(2 ** 32 + 1),
          opcode: WrOpcode.SEND,
          send_flags: 2,
          num_sge: 2,
          imm_data: 0,
          imm_bytes: "00000000",
          remote_addr: "0",
          rkey: 0
        },
        {
          kind: "send",
          qp: qp.qpNum,
          wr_id: "0",
          opcode: WrOpcode.RDMA_READ,
          send_flags: 0,
          num_sge: 1,
          imm_data: 0,
          imm_bytes: "00000000",
          remote_addr: String(0x1234_5678_9abc),
          rkey: 1
        }
      ])
      const sges = seen.map((r) => r.sge as Array<unknown>)
      expect(sges.map((s) => s.length)).toEqual([1, 2, 1])
      expectSge(sges[0]?.[0], mr, 16, 100)
      expectSge(sges[1]?.[0], mr, 1000, 7)
      expectSge(sges[1]?.[1], mr, 3000, 1096)
      expectSge(sges[2]?.[0], mr, 0, 8)

      // The slots are reused: a second, single-WR post leaves nothing of the first chain behind.
      write.next = null
      write.immData = 1
      expect(qp.postSend(write)).toBe(0)
      const again = takeLog()
      expect(again).toHaveLength(1)
      expect(again[0]).toMatchObject({ imm_data: 1, imm_bytes: "00000001", wr_id: String(Number.MAX_SAFE_INTEGER) })
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("postRecv: wr_id and SGEs as C sees them", () =>
    Effect.gen(function* () {
      const { qp, mr } = yield* fixture()
      const second: RecvWr = { wrId: 22, sgList: [{ addr: mr.addr + 2048, length: 2048, lkey: mr.lkey }] }
      const first: RecvWr = {
        wrId: 2 ** 50 + 3,
        next: second,
        sgList: [
          { addr: mr.addr, length: 64, lkey: mr.lkey },
          { addr: mr.addr + 64, length: 1984, lkey: mr.lkey }
        ]
      }
      expect(qp.postRecv(first)).toBe(0)
      const seen = takeLog()
      expect(seen.map(({ sge: _, ...wr }) => wr)).toEqual([
        { kind: "recv", qp: qp.qpNum, wr_id: String(2 ** 50 + 3), num_sge: 2 },
        { kind: "recv", qp: qp.qpNum, wr_id: "22", num_sge: 1 }
      ])
      const sges = seen.map((r) => r.sge as Array<unknown>)
      expectSge(sges[0]?.[0], mr, 0, 64)
      expectSge(sges[0]?.[1], mr, 64, 1984)
      expectSge(sges[1]?.[0], mr, 2048, 2048)
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive(
    "a shared receive queue: ibv_create_srq with its sizes, RECVs through ops.post_srq_recv, a QP made with it, the limit armed, destroyed",
    () =>
      Effect.gen(function* () {
        const { pd, cq, mr } = yield* fixture()
        const createSrq = pd.createSrq
        if (createSrq === undefined) return yield* Effect.dieMessage("Ibverbs has no createSrq")
        const srq = yield* createSrq({ maxWr: 8, maxSge: 2 })
        expect(takeLog()).toEqual([{ kind: "create_srq", max_wr: 8, max_sge: 2 }])
        expect(fake.count("srq")).toBe(1)
        const second: RecvWr = { wrId: 9, sgList: [{ addr: mr.addr + 1024, length: 512, lkey: mr.lkey }] }
        const first: RecvWr = {
          wrId: 2 ** 40 + 1,
          next: second,
          sgList: [
            { addr: mr.addr, length: 64, lkey: mr.lkey },
            { addr: mr.addr + 64, length: 960, lkey: mr.lkey }
          ]
        }
        expect(srq.postRecv(first)).toBe(0)
        const seen = takeLog()
        expect(seen.map(({ sge: _, ...wr }) => wr)).toEqual([
          { kind: "srq_recv", wr_id: String(2 ** 40 + 1), num_sge: 2 },
          { kind: "srq_recv", wr_id: "9", num_sge: 1 }
        ])
        const sges = seen.map((r) => r.sge as Array<unknown>)
        expectSge(sges[0]?.[0], mr, 0, 64)
        expectSge(sges[0]?.[1], mr, 64, 960)
        expectSge(sges[1]?.[0], mr, 1024, 512)
        // A WR with more SGEs than the SRQ's max_sge is refused before C sees it.
        const three = { wrId: 1, sgList: [0, 1, 2].map((i) => ({ addr: mr.addr + i, length: 1, lkey: mr.lkey })) }
        expect(srq.postRecv(three)).toBe(Errno.EINVAL)
        expect(srq.badRecvWr).toBe(three)
        expect(takeLog()).toEqual([])
        const cap = { maxSendWr: 4, maxRecvWr: 1, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 }
        const qp = yield* pd.createQp({ sendCq: cq, recvCq: cq, cap, qpType: QpType.RC, srq })
        expect(takeLog()[0]).toMatchObject({ kind: "create_qp", has_srq: 1 })
        // An SRQ not made by this provider is refused with EINVAL, before C sees it.
        const foreign = yield* Effect.either(
          pd.createQp({ sendCq: cq, recvCq: cq, cap, qpType: QpType.RC, srq: { ...srq } })
        )
        expect(foreign._tag === "Left" && foreign.left.errno).toBe(Errno.EINVAL)
        yield* srq.armLimit(3)
        expect(takeLog()).toEqual([{ kind: "modify_srq", mask: fake.enumValue("IBV_SRQ_LIMIT"), srq_limit: 3 }])
        const qpsDestroyed = fake.count("destroy_qp")
        yield* qp.destroy
        yield* srq.destroy
        expect(fake.count("destroy_qp")).toBe(qpsDestroyed + 1)
        expect(takeLog()).toEqual([{ kind: "destroy_srq" }])
        expect(fake.count("srq")).toBe(0)
        expect(srq.postRecv(second)).toBe(Errno.EINVAL)
      }).pipe(Effect.provide(verbs))
  )

  it.scopedLive(
    "a 0-byte RDMA_WRITE_WITH_IMM and a RECV with no SGE marshal as verbs reads them; its completion reads back",
    () =>
      Effect.gen(function* () {
        const { cq, cqIndex, qp } = yield* fixture()
        // The constants are the header's.
        expect(WrOpcode.RDMA_WRITE_WITH_IMM).toBe(fake.enumValue("IBV_WR_RDMA_WRITE_WITH_IMM"))
        expect(SendFlags.SIGNALED).toBe(fake.enumValue("IBV_SEND_SIGNALED"))
        expect(WcOpcode.RECV_RDMA_WITH_IMM).toBe(fake.enumValue("IBV_WC_RECV_RDMA_WITH_IMM"))
        expect(WcOpcode.RDMA_WRITE).toBe(fake.enumValue("IBV_WC_RDMA_WRITE"))
        expect(WcFlags.WITH_IMM).toBe(fake.enumValue("IBV_WC_WITH_IMM"))

        expect(qp.postRecv({ wrId: 5, sgList: [], numSge: 0 })).toBe(0)
        expect(qp.postRecv({ wrId: 6, sgList: [] })).toBe(0) // numSge defaults to the list's length: 0
        expect(takeLog()).toEqual([
          { kind: "recv", qp: qp.qpNum, wr_id: "5", num_sge: 0, sge: [] },
          { kind: "recv", qp: qp.qpNum, wr_id: "6", num_sge: 0, sge: [] }
        ])

        const notify: SendWr = {
          wrId: 7,
          sgList: [],
          numSge: 0,
          opcode: WrOpcode.RDMA_WRITE_WITH_IMM,
          sendFlags: SendFlags.SIGNALED,
          immData: 0x80010203, // top bit set: an unsigned 32-bit immediate
          remoteAddr: 2 ** 40 + 8,
          rkey: 0x89abcdef
        }
        expect(qp.postSend(notify)).toBe(0)
        expect(takeLog()).toEqual([
          {
            kind: "send",
            qp: qp.qpNum,
            wr_id: "7",
            opcode: fake.enumValue("IBV_WR_RDMA_WRITE_WITH_IMM"),
            send_flags: fake.enumValue("IBV_SEND_SIGNALED"),
            num_sge: 0,
            imm_data: 0x80010203,
            imm_bytes: "80010203", // network order in the WR (imm_data is __be32)
            remote_addr: String(2 ** 40 + 8),
            rkey: 0x89abcdef,
            sge: []
          }
        ])

        // The responder's completion: RECV_RDMA_WITH_IMM, no bytes, the immediate back in host order.
        fake.cqPush(
          cqIndex,
          5,
          WcStatus.SUCCESS,
          fake.enumValue("IBV_WC_RECV_RDMA_WITH_IMM"),
          0,
          0,
          0x80010203,
          qp.qpNum,
          0x200,
          fake.enumValue("IBV_WC_WITH_IMM"),
          0,
          0,
          0,
          0
        )
        const wc = WorkCompletion.array(2)
        expect(cq.pollCq(2, wc)).toBe(1)
        expect(wc[0]).toMatchObject({
          wrId: 5,
          status: WcStatus.SUCCESS,
          opcode: WcOpcode.RECV_RDMA_WITH_IMM,
          byteLen: 0,
          immData: 0x80010203,
          qpNum: qp.qpNum,
          srcQp: 0x200,
          wcFlags: WcFlags.WITH_IMM
        })
      }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("a failed post returns C's errno and bad_wr maps back to the very WR object C rejected", () =>
    Effect.gen(function* () {
      const { qp, mr } = yield* fixture()
      const sge = [{ addr: mr.addr, length: 8, lkey: mr.lkey }]
      const c: SendWr = { wrId: 3, sgList: sge, opcode: WrOpcode.SEND, sendFlags: 0 }
      const b: SendWr = { wrId: 2, next: c, sgList: sge, opcode: WrOpcode.SEND, sendFlags: 0 }
      const a: SendWr = { wrId: 1, next: b, sgList: sge, opcode: WrOpcode.SEND, sendFlags: 0 }
      fake.qpFailPost(qp.qpNum, 0, 1, Errno.ENOMEM)
      expect(qp.postSend(a)).toBe(Errno.ENOMEM)
      expect(qp.badSendWr).toBe(b)
      expect(takeLog().map((r) => r.wr_id)).toEqual(["1"])

      const r2: RecvWr = { wrId: 8, sgList: sge }
      const r1: RecvWr = { wrId: 7, next: r2, sgList: sge }
      fake.qpFailPost(qp.qpNum, 1, 0, Errno.EINVAL)
      expect(qp.postRecv(r1)).toBe(Errno.EINVAL)
      expect(qp.badRecvWr).toBe(r1)
      expect(takeLog()).toEqual([])

      // The double, like a provider, rejects sends outside RTS at the first WR.
      yield* qp.modifyQp({ qpState: QpState.ERR }, QpAttrMask.STATE)
      expect(qp.postSend(a)).toBe(Errno.EINVAL)
      expect(qp.badSendWr).toBe(a)
      expect(takeLog().filter((r) => r.kind === "send")).toEqual([])
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive(
    "what the preallocated chain cannot hold is refused locally: too many WRs (ENOMEM), too many SGEs (EINVAL)",
    () =>
      Effect.gen(function* () {
        const { qp, mr } = yield* fixture() // max_send_wr 4, max_send_sge 2
        const sge = { addr: mr.addr, length: 4, lkey: mr.lkey }
        const wrs: Array<SendWr> = Array.from({ length: 6 }, (_, i) => ({
          wrId: i,
          sgList: [sge],
          opcode: WrOpcode.SEND,
          sendFlags: 0
        }))
        wrs.forEach((wr, i) => {
          wr.next = wrs[i + 1] ?? null
        })
        expect(qp.postSend(wrs[0] as SendWr)).toBe(Errno.ENOMEM)
        expect(qp.badSendWr).toBe(wrs[4])
        expect(takeLog().map((r) => r.wr_id)).toEqual(["0", "1", "2", "3"])

        const wide: SendWr = { wrId: 9, sgList: [sge, sge, sge], opcode: WrOpcode.SEND, sendFlags: 0 }
        const ok: SendWr = { wrId: 8, next: wide, sgList: [sge], opcode: WrOpcode.SEND, sendFlags: 0 }
        expect(qp.postSend(ok)).toBe(Errno.EINVAL)
        expect(qp.badSendWr).toBe(wide)
        expect(takeLog().map((r) => r.wr_id)).toEqual(["8"])
      }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("pollCq reads every ibv_wc field C wrote, into the caller's objects, in batches of n", () =>
    Effect.gen(function* () {
      const { cq, cqIndex, qp } = yield* fixture()
      fake.cqPush(
        cqIndex,
        Number.MAX_SAFE_INTEGER,
        WcStatus.SUCCESS,
        WcOpcode.RECV_RDMA_WITH_IMM,
        0,
        4096,
        0xdeadbeef,
        qp.qpNum,
        0x77,
        WcFlags.WITH_IMM | WcFlags.GRH,
        0xffff,
        0x1234,
        15,
        0x7f
      )
      fake.cqPush(cqIndex, 2, WcStatus.REM_ACCESS_ERR, WcOpcode.RDMA_WRITE, 0x51, 0, 0, qp.qpNum, 0, 0, 0, 0, 0, 0)
      fake.cqPush(cqIndex, 3, WcStatus.WR_FLUSH_ERR, WcOpcode.SEND, 0, 0, 0, qp.qpNum, 0, 0, 0, 0, 0, 0)
      const wc = WorkCompletion.array(4)
      const kept = wc[0]
      expect(cq.pollCq(2, wc)).toBe(2)
      expect(fake.count("poll_last_n")).toBe(2)
      expect(wc[0]).toBe(kept)
      expect({ ...wc[0] }).toEqual({
        wrId: Number.MAX_SAFE_INTEGER,
        status: WcStatus.SUCCESS,
        opcode: WcOpcode.RECV_RDMA_WITH_IMM,
        vendorErr: 0,
        byteLen: 4096,
        immData: 0xdeadbeef,
        qpNum: qp.qpNum,
        srcQp: 0x77,
        wcFlags: WcFlags.WITH_IMM | WcFlags.GRH,
        pkeyIndex: 0xffff,
        slid: 0x1234,
        sl: 15,
        dlidPathBits: 0x7f
      })
      expect(wc[1]).toMatchObject({
        wrId: 2,
        status: WcStatus.REM_ACCESS_ERR,
        opcode: WcOpcode.RDMA_WRITE,
        vendorErr: 0x51
      })
      expect(cq.pollCq(4, wc)).toBe(1)
      expect(wc[0]).toMatchObject({ wrId: 3, status: WcStatus.WR_FLUSH_ERR, opcode: WcOpcode.SEND, immData: 0 })
      expect(cq.pollCq(4, wc)).toBe(0)
      fake.cqFailPoll(cqIndex, Errno.EIO)
      expect(cq.pollCq(4, wc)).toBe(-Errno.EIO)
      fake.cqFailPoll(cqIndex, 0)
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("setNotify: the listener runs once per armed completion event, and every event is acknowledged", () =>
    Effect.gen(function* () {
      const { cq, cqIndex, qp } = yield* fixture()
      const before = counts("get_cq_event", "ack_cq_events", "req_notify", "req_notify_solicited")
      let calls = 0
      cq.setNotify(() => calls++)
      expect(cq.reqNotifyCq()).toBe(0)
      fake.cqPush(cqIndex, 1, 0, WcOpcode.SEND, 0, 0, 0, qp.qpNum, 0, 0, 0, 0, 0, 0)
      yield* waitUntil(() => calls === 1)
      fake.cqPush(cqIndex, 2, 0, WcOpcode.SEND, 0, 0, 0, qp.qpNum, 0, 0, 0, 0, 0, 0) // not armed: no event
      expect(cq.reqNotifyCq(true)).toBe(0)
      fake.cqPush(cqIndex, 3, 0, WcOpcode.SEND, 0, 0, 0, qp.qpNum, 0, 0, 0, 0, 0, 0)
      yield* waitUntil(() => calls === 2)
      yield* Effect.sleep("20 millis")
      expect(calls).toBe(2)
      cq.setNotify(null)
      expect(cq.pollCq(8, WorkCompletion.array(8))).toBe(3)
      expect(fake.count("get_cq_event") - before.get_cq_event).toBe(2)
      expect(fake.count("ack_cq_events") - before.ack_cq_events).toBe(2)
      expect(fake.count("req_notify_solicited") - before.req_notify_solicited).toBe(1)
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive(
    "awaitNotify sleeps until a completion event; returns at once when one is queued, which pollCq still returns",
    () =>
      Effect.gen(function* () {
        const { cq, cqIndex, qp } = yield* fixture()
        const waiting = yield* Effect.fork(cq.awaitNotify)
        yield* Effect.sleep("20 millis")
        expect(yield* Fiber.poll(waiting)).toEqual(expect.objectContaining({ _tag: "None" }))
        fake.cqPush(cqIndex, 41, 0, WcOpcode.RECV, 0, 10, 0, qp.qpNum, 0, 0, 0, 0, 0, 0)
        yield* Fiber.join(waiting).pipe(Effect.timeout("2 seconds"))

        fake.cqPush(cqIndex, 42, 0, WcOpcode.RECV, 0, 11, 0, qp.qpNum, 0, 0, 0, 0, 0, 0)
        yield* cq.awaitNotify.pipe(Effect.timeout("2 seconds")) // 41 and 42 are queued: no sleep
        const wc = WorkCompletion.array(4)
        expect(cq.pollCq(4, wc)).toBe(2)
        expect(wc.slice(0, 2).map((w) => [w.wrId, w.byteLen])).toEqual([
          [41, 10],
          [42, 11]
        ])
      }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("asyncEvents: a QP event carries the QP number, a port event the port, a CQ event the CQ", () =>
    Effect.gen(function* () {
      const { ctx, cq, cqIndex, qp } = yield* fixture()
      const before = fake.count("ack_async")
      const events = yield* Effect.fork(Stream.runCollect(Stream.take(ctx.asyncEvents, 3)))
      yield* Effect.sleep("20 millis")
      expect(fake.raiseAsync(EventType.QP_FATAL, qp.qpNum)).toBe(0)
      expect(fake.raiseAsync(EventType.PORT_ERR, 1)).toBe(0)
      expect(fake.raiseAsync(EventType.CQ_ERR, cqIndex)).toBe(0)
      const got = Chunk.toReadonlyArray(yield* Fiber.join(events).pipe(Effect.timeout("2 seconds")))
      expect(got.map(({ cq: _, ...e }) => e)).toEqual([
        { eventType: EventType.QP_FATAL, qpNum: qp.qpNum, detail: `QP_FATAL on QP ${qp.qpNum}` },
        { eventType: EventType.PORT_ERR, portNum: 1, detail: "PORT_ERR on port 1" },
        { eventType: EventType.CQ_ERR, detail: "CQ_ERR" }
      ])
      expect(got[2]?.cq).toBe(cq)
      expect(fake.count("ack_async") - before).toBe(3)
    }).pipe(Effect.provide(verbs))
  )

  it.live("closing the scope destroys every QP, CQ, channel, MR and PD and closes the device", () =>
    Effect.gen(function* () {
      const names = ["open", "close", "pd", "dealloc_pd", "mr", "dereg_mr", "cq", "destroy_cq", "qp", "destroy_qp"]
      const before = counts(...names, "channel", "destroy_channel")
      const cq: CompletionQueue = yield* Effect.scoped(
        Effect.gen(function* () {
          const f = yield* fixture()
          yield* Effect.scoped(f.ctx.createCq(4)) // an inner scope releases on its own
          return f.cq
        })
      )
      const delta = Object.fromEntries(
        Object.entries(counts(...names, "channel", "destroy_channel")).map(([k, v]) => [k, v - (before[k] ?? 0)])
      )
      expect(delta).toEqual({
        open: 1,
        close: 1,
        pd: 1,
        dealloc_pd: 1,
        mr: 1,
        dereg_mr: 1,
        cq: 2,
        destroy_cq: 2,
        qp: 1,
        destroy_qp: 1,
        channel: 2,
        destroy_channel: 2
      })
      // A closed CQ's awaitNotify returns instead of hanging.
      const exit = yield* Effect.exit(cq.awaitNotify.pipe(Effect.timeout("1 second")))
      expect(Exit.isSuccess(exit)).toBe(true)
    }).pipe(Effect.provide(verbs))
  )
})

const waitUntil = (cond: () => boolean) =>
  Effect.gen(function* () {
    for (let i = 0; i < 200 && !cond(); i++) yield* Effect.sleep("5 millis")
    expect(cond()).toBe(true)
  })
