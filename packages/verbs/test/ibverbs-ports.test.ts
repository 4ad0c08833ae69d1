/**
 * Ibverbs beyond RoCE port 1, against the C double of libibverbs (fixtures/ibverbs/fake-ibverbs.c): a QP on the port
 * it is given, native InfiniBand addressed by LID without a GRH, RoCE by GID with the GID index and traffic class,
 * requests clamped to what `ibv_query_device`/`ibv_query_port` report, and a libibverbs that predates
 * `ibv_reg_mr_iova2`. The double refuses what a NIC refuses (a RoCE address vector without a GRH, a port the device
 * lacks, depths past the device's limits), so a rule missing on this side shows as the errno a NIC would return.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, type Layer } from "effect"
import { AccessFlags, Errno, LinkLayer, Mtu, PortState, QpAttrMask, QpState, QpType } from "../src/Constants.js"
import * as Ibverbs from "../src/Ibverbs.js"
import * as Rc from "../src/Rc.js"
import { type DeviceContext, type QpCap, Verbs } from "../src/Verbs.js"
import { bindFake, buildFake, type Fake } from "./fixtures/ibverbs/fake.js"
import { makeBuildDir, missingToolchain, requireHeaders } from "./fixtures/ibverbs/toolchain.js"

const skip = missingToolchain !== undefined && !requireHeaders
if (skip) console.log(`[ibverbs-ports] skipped: ${missingToolchain} (TENT_REQUIRE_VERBS_HEADERS unset)`)

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex")
const peerGid = Uint8Array.from({ length: 16 }, (_, i) => 0xc0 + i)

describe.skipIf(skip)("Ibverbs on more than RoCE port 1", () => {
  let build: ReturnType<typeof makeBuildDir>
  let fake: Fake
  let verbs: Layer.Layer<Verbs>
  let oldSo: string
  let old: Fake

  beforeAll(() => {
    expect(missingToolchain, "TENT_REQUIRE_VERBS_HEADERS=1 but the toolchain is missing").toBeUndefined()
    build = makeBuildDir()
    const so = buildFake(build.dir, "fake-ibverbs")
    fake = bindFake(so)
    verbs = Ibverbs.layer({ library: so })
    oldSo = buildFake(build.dir, "fake-ibverbs-no-iova2", ["FAKE_WITHOUT_REG_MR_IOVA2"])
    old = bindFake(oldSo)
  })
  afterEach(() => {
    fake?.setPort(0, 0, 0, 0, 0)
    fake?.setDeviceLimits(0, 0, 0, 0, 0, 0)
  })
  afterAll(() => build?.remove())

  /** A device, a PD, a CQ and an RC QP in RESET with `cap`; the double's log is cleared afterwards. */
  const qpOn = (cap: QpCap = { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 }) =>
    Effect.gen(function* () {
      const ctx: DeviceContext = yield* Effect.flatMap(Verbs, (v) => v.openDevice("fake0"))
      const pd = yield* ctx.allocPd
      const cq = yield* ctx.createCq(16)
      const qp = yield* pd.createQp({ sendCq: cq, recvCq: cq, cap, qpType: QpType.RC })
      fake.takeLog()
      return { ctx, pd, cq, qp }
    })

  const modifies = () => fake.takeLog().filter((r) => r.kind === "modify_qp")

  it.scopedLive("queryDevice reads ibv_device_attr as C wrote it; phys_port_cnt counts the ports", () =>
    Effect.gen(function* () {
      fake.setPort(3, PortState.ACTIVE, LinkLayer.INFINIBAND, 0x33, Mtu.MTU_4096)
      fake.setDeviceLimits(64, 2, 128, 4, 2, 32)
      const { ctx } = yield* qpOn()
      expect(ctx.queryDevice).toBeDefined()
      const attr = yield* ctx.queryDevice ?? Effect.die("Ibverbs has queryDevice")
      expect(attr).toEqual({
        maxQp: 64,
        maxQpWr: 64,
        maxSge: 2,
        maxCq: 64,
        maxCqe: 128,
        maxMrSize: 2 ** 64,
        maxQpRdAtom: 4,
        maxQpInitRdAtom: 2,
        physPortCnt: 3,
        maxSrqWr: 64
      })
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive(
    "a QP on port 2 (InfiniBand): INIT and the address vector name port 2; the peer is addressed by LID, no GRH",
    () =>
      Effect.gen(function* () {
        // Port 1 is RoCE: an address vector that named it would need a GRH, and the double (as the kernel) refuses one
        // without.
        fake.setPort(2, PortState.ACTIVE, LinkLayer.INFINIBAND, 0x17, Mtu.MTU_2048)
        const { ctx, qp } = yield* qpOn()
        const limits = yield* Rc.queryLimits(ctx, 2)
        expect(limits.portNum).toBe(2)
        expect(limits.port).toMatchObject({ linkLayer: LinkLayer.INFINIBAND, lid: 0x17, activeMtu: Mtu.MTU_2048 })
        const params = Rc.clampParams({ ...Rc.defaultParams, serviceLevel: 5, trafficClass: 106 }, limits)
        expect(params).toMatchObject({ portNum: 2, linkLayer: LinkLayer.INFINIBAND, pathMtu: Mtu.MTU_2048 })
        yield* Rc.connect(qp, 0x111, { gid: peerGid, lid: 0x2a, qpNum: 0x300, psn: 0x222 }, params)
        const [init, rtr, rts] = modifies()
        expect(init).toMatchObject({ qp_state: QpState.INIT, port_num: 2, pkey_index: 0 })
        expect(rtr).toMatchObject({ qp_state: QpState.RTR, path_mtu: Mtu.MTU_2048, dest_qp_num: 0x300, rq_psn: 0x222 })
        expect(rtr?.ah).toEqual({
          dlid: 0x2a,
          sl: 5,
          src_path_bits: 0,
          is_global: 0,
          port_num: 2,
          flow_label: 0,
          sgid_index: 0,
          hop_limit: 0,
          traffic_class: 0,
          dgid: "00".repeat(16)
        })
        expect(rts).toMatchObject({ qp_state: QpState.RTS, sq_psn: 0x111 })
        expect(qp.state).toBe(QpState.RTS)
      }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("on RoCE the address vector is a GRH: the peer's GID, this side's GID index and traffic class", () =>
    Effect.gen(function* () {
      fake.setPort(2, PortState.ACTIVE, LinkLayer.ETHERNET, 0, Mtu.MTU_4096)
      const { ctx, qp } = yield* qpOn()
      const limits = yield* Rc.queryLimits(ctx, 2)
      const params = Rc.clampParams(
        { ...Rc.defaultParams, sgidIndex: 3, trafficClass: 106, hopLimit: 16, flowLabel: 0x12345, serviceLevel: 2 },
        limits
      )
      yield* Rc.connect(qp, 1, { gid: peerGid, qpNum: 0x301, psn: 2 }, params)
      const [init, rtr] = modifies()
      expect(init).toMatchObject({ qp_state: QpState.INIT, port_num: 2 })
      expect(rtr?.ah).toEqual({
        dlid: 0,
        sl: 2,
        src_path_bits: 0,
        is_global: 1,
        port_num: 2,
        flow_label: 0x12345,
        sgid_index: 3,
        hop_limit: 16,
        traffic_class: 106,
        dgid: hex(peerGid)
      })
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("InfiniBand with a peer LID of 0 is refused here, naming the cause, and the QP stays in INIT", () =>
    Effect.gen(function* () {
      fake.setPort(1, PortState.ACTIVE, LinkLayer.INFINIBAND, 0x17, Mtu.MTU_4096)
      const { ctx, qp } = yield* qpOn()
      const params = Rc.clampParams(Rc.defaultParams, yield* Rc.queryLimits(ctx, 1))
      const e = yield* Effect.flip(Rc.connect(qp, 1, { gid: peerGid, qpNum: 0x302, psn: 2 }, params))
      expect(e).toMatchObject({ _tag: "RdmaError", op: "ibv_modify_qp", errno: Errno.EINVAL })
      expect(e.message).toContain("port 1 is InfiniBand")
      expect(e.message).toContain("LID 0")
      expect(modifies().map((r) => r.qp_state)).toEqual([QpState.INIT])
      expect(qp.state).toBe(QpState.INIT)
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("a port the device lacks: queryLimits fails EINVAL saying which ports there are", () =>
    Effect.gen(function* () {
      fake.setPort(2, PortState.ACTIVE, LinkLayer.ETHERNET, 0, Mtu.MTU_4096)
      const { ctx } = yield* qpOn()
      const e = yield* Effect.flip(Rc.queryLimits(ctx, 3))
      expect(e).toMatchObject({ _tag: "RdmaError", op: "ibv_query_port", errno: Errno.EINVAL })
      expect(e.message).toBe("ibv_query_port: fake0 has ports 1..2, not 3")
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive(
    "a device with small limits: queue depths, SGEs, CQ size and READ depths are clamped, inline steps down",
    () =>
      Effect.gen(function* () {
        fake.setDeviceLimits(64, 2, 128, 4, 2, 32)
        const { ctx, pd } = yield* qpOn()
        const limits = yield* Rc.queryLimits(ctx, 1)
        expect(limits.device).toMatchObject({ maxQpWr: 64, maxSge: 2, maxCqe: 128, maxQpRdAtom: 4, maxQpInitRdAtom: 2 })

        // What TENT asks for by default; the device refuses it as asked, and accepts it clamped.
        expect(yield* Effect.flip(ctx.createCq(4096))).toMatchObject({ op: "ibv_create_cq", errno: Errno.EINVAL })
        const cq = yield* ctx.createCq(Rc.clampCqe(4096, limits))
        expect(cq.cqe).toBeGreaterThanOrEqual(128)
        const init = {
          sendCq: cq,
          recvCq: cq,
          qpType: QpType.RC,
          cap: { maxSendWr: 256, maxRecvWr: 256, maxSendSge: 4, maxRecvSge: 4, maxInlineData: 64 }
        }
        expect(yield* Effect.flip(pd.createQp(init))).toMatchObject({ op: "ibv_create_qp", errno: Errno.EINVAL })
        fake.takeLog()
        const qp = yield* Rc.createQp(pd, init, limits)
        const creates = fake.takeLog().filter((r) => r.kind === "create_qp")
        expect(
          creates.map((c) => [c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data])
        ).toEqual([
          [64, 64, 2, 2, 64], // no query reports the inline limit: the device's EINVAL does
          [64, 64, 2, 2, 32]
        ])
        expect((yield* qp.queryQp(0)).cap).toEqual({
          maxSendWr: 64,
          maxRecvWr: 64,
          maxSendSge: 2,
          maxRecvSge: 2,
          maxInlineData: 32
        })

        const peer = { gid: peerGid, qpNum: 0x303, psn: 2 }
        const refused = yield* Effect.flip(Rc.connect(qp, 1, peer, Rc.defaultParams))
        expect(refused).toMatchObject({ op: "ibv_modify_qp", errno: Errno.EINVAL })
        expect(refused.message).toContain("INIT → RTR")
        yield* qp.modifyQp({ qpState: QpState.RESET }, QpAttrMask.STATE)
        fake.takeLog()
        const params = Rc.clampParams(Rc.defaultParams, limits)
        expect(params).toMatchObject({ maxRdAtomic: 2, maxDestRdAtomic: 4, pathMtu: Mtu.MTU_1024 })
        yield* Rc.connect(qp, 1, peer, params)
        const [, rtr, rts] = modifies()
        expect(rtr).toMatchObject({ qp_state: QpState.RTR, max_dest_rd_atomic: 4, path_mtu: Mtu.MTU_1024 })
        expect(rts).toMatchObject({ qp_state: QpState.RTS, max_rd_atomic: 2 })
        expect(qp.state).toBe(QpState.RTS)
      }).pipe(Effect.provide(verbs))
  )

  it.scopedLive(
    "a libibverbs without ibv_reg_mr_iova2 loads; relaxed ordering falls back to ibv_reg_mr without the optional bits",
    () =>
      Effect.gen(function* () {
        const v = yield* Verbs
        expect(yield* v.getDeviceList).toEqual([{ name: "fake0", guid: "0002c90300a1b2c0" }])
        const ctx = yield* v.openDevice("fake0")
        const pd = yield* ctx.allocPd
        old.takeLog()
        const buffer = Buffer.alloc(4096)
        const plain = yield* pd.regMr(buffer, AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_READ)
        const relaxed = yield* pd.regMr(buffer, AccessFlags.LOCAL_WRITE | AccessFlags.RELAXED_ORDERING)
        expect(old.takeLog().map((r) => [r.kind, r.access])).toEqual([
          ["reg_mr", AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_READ],
          ["reg_mr", AccessFlags.LOCAL_WRITE]
        ])
        expect(plain.access).toBe(AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_READ)
        expect(relaxed.access).toBe(AccessFlags.LOCAL_WRITE)
        expect(old.count("reg_mr_iova2")).toBe(0)
      }).pipe(Effect.provide(Ibverbs.layer({ library: oldSo })))
  )

  it.scopedLive("a library that lacks a verb every libibverbs has is refused at load, naming the verb", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(Effect.flatMap(Verbs, (v) => v.getDeviceList))
      expect(e).toMatchObject({ _tag: "DeviceNotFound", reason: "LibraryMissing" })
      expect(e.message).toContain('"libc.so.6" is not a usable libibverbs')
      expect(e.message).toContain("ibv_get_device_list")
      expect(e.message).toContain("libibverbs1")
    }).pipe(Effect.provide(Ibverbs.layer({ library: "libc.so.6" })))
  )
})
