/**
 * The engine's RDMA endpoint over the Ibverbs provider and the C double of libibverbs: the port it opens is
 * `transports/rdma/device/port`, the descriptor carries that port's LID (`local_lid`), the data and notify QPs reach the
 * peer by LID on InfiniBand and by GRH with `gid_index` and `traffic_class` on RoCE, at `service_level`, and the data
 * QPs' depths and READ depths are clamped to the device.
 */

import { mkdirSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { BootstrapDesc } from "@tent/rpc"
import { GidType, Ibverbs, LinkLayer, Mtu, PortState, QpState } from "@tent/verbs"
import { bindFake, buildFake, type Fake } from "@tent/verbs/testing/ibverbs"
import { makeBuildDir, missingToolchain } from "@tent/verbs/testing/toolchain"
import { Effect, Exit, Schema, Scope } from "effect"
import { openDevices } from "../src/internal/rdma/RdmaContext.js"
import { RdmaEndpoint } from "../src/internal/rdma/RdmaEndpoint.js"
import { makeHost, settings } from "./fixtures/endpoints.js"
import { testConfig } from "./fixtures/engine.js"

const merge = (a: unknown, b: unknown): unknown => {
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") return b
  const out: Record<string, unknown> = { ...(a as Record<string, unknown>) }
  for (const [k, v] of Object.entries(b as Record<string, unknown>)) out[k] = merge(out[k], v)
  return out
}

const skip = missingToolchain !== undefined
if (skip) console.log(`[ibverbs-engine] skipped: ${missingToolchain}`)

const peerGid = "fe:80:00:00:00:00:00:00:00:02:c9:03:00:a1:b2:c9"

describe.skipIf(skip)("the RDMA endpoint over Ibverbs beyond RoCE port 1", () => {
  let build: ReturnType<typeof makeBuildDir>
  let so: string
  let fake: Fake
  beforeAll(() => {
    build = makeBuildDir()
    so = buildFake(build.dir, "fake-ibverbs")
    fake = bindFake(so)
  })
  afterEach(() => {
    fake?.setPort(0, 0, 0, 0, 0)
    fake?.setDeviceLimits(0, 0, 0, 0, 0, 0)
    fake?.setGid(-1, null, 0)
    if (build !== undefined) rmSync(join(build.dir, "sys"), { recursive: true, force: true })
  })
  afterAll(() => build?.remove())

  const endpointOn = (json: unknown) =>
    Effect.gen(function* () {
      const engine = yield* settings(merge(testConfig, json))
      const verbs = yield* Ibverbs.make({ library: so, sysfs: join(build.dir, "sys") })
      const [device] = yield* openDevices(verbs, engine, ["fake0"])
      const scope = yield* Scope.make()
      yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
      const host = makeHost(engine, yield* Effect.clock, scope)
      if (device === undefined) return yield* Effect.dieMessage("openDevices opened no device")
      const ep = new RdmaEndpoint(host, device, "peer@fake0", "peer")
      yield* ep.construct
      return ep
    })

  const peer = (ep: RdmaEndpoint, fields: Record<string, unknown>) =>
    Schema.decodeUnknownSync(BootstrapDesc)({
      local_nic_path: "peer@fake0",
      peer_nic_path: ep.localNicPath,
      qp_num: [0x501, 0x502],
      local_gid: peerGid,
      notify_qp_num: 0x509,
      ...fields
    })

  it.scoped(
    "InfiniBand on port 2: local_lid is port 2's LID; every QP on port 2, by the peer's LID, no GRH, at service_level",
    () =>
      Effect.gen(function* () {
        fake.setPort(2, PortState.ACTIVE, LinkLayer.INFINIBAND, 0x17, Mtu.MTU_4096)
        fake.setDeviceLimits(512, 2, 1024, 4, 2, 32)
        fake.takeLog()
        const ep = yield* endpointOn({
          transports: {
            rdma: {
              device: { port: 2, max_cqe: 4096 },
              endpoint: { max_qp_wr: 1024, max_sge: 4, max_inline_bytes: 64, service_level: 3, traffic_class: 106 }
            }
          }
        })
        const built = fake.takeLog()
        // The notify QP is taken to INIT at construct, before any peer is known: on port 2 too.
        expect(built.filter((r) => r.kind === "modify_qp").map((m) => [m.qp_state, m.port_num])).toEqual([
          [QpState.INIT, 2]
        ])
        const creates = built.filter((r) => r.kind === "create_qp")
        expect(creates.filter((c) => c.max_send_wr === 512).map((c) => [c.max_send_sge, c.max_inline_data])).toEqual([
          [2, 64],
          [2, 32],
          [2, 64],
          [2, 32]
        ])
        expect(ep.laneDepth).toBe(512)
        const desc = ep.localDesc("peer@fake0")
        expect(desc.local_lid).toBe(0x17)
        yield* ep.accept(peer(ep, { local_lid: 0x2a }))
        const mods = fake.takeLog().filter((r) => r.kind === "modify_qp")
        const rtrs = mods.filter((m) => m.qp_state === QpState.RTR)
        expect(rtrs).toHaveLength(3)
        for (const r of rtrs) {
          expect(r.ah).toMatchObject({ is_global: 0, dlid: 0x2a, sl: 3, port_num: 2 })
        }
        expect(mods.filter((m) => m.qp_state === QpState.INIT).map((m) => m.port_num)).toEqual([2, 2, 2])
        expect(rtrs.slice(0, 2).map((r) => r.max_dest_rd_atomic)).toEqual([4, 4])
        expect(mods.filter((m) => m.qp_state === QpState.RTS).map((m) => m.max_rd_atomic)).toEqual([2, 2, 1])
        expect(ep.status).toBe("READY")
        expect(ep.connected).toBe(true)
      })
  )

  it.scoped("RoCE: GRH with gid_index and traffic_class; a peer descriptor without local_lid still decodes (0)", () =>
    Effect.gen(function* () {
      const ep = yield* endpointOn({
        transports: { rdma: { device: { gid_index: 1 }, endpoint: { traffic_class: 106, service_level: 3 } } }
      })
      expect(ep.localDesc("peer@fake0").local_lid).toBe(0x1234)
      fake.takeLog()
      const older = peer(ep, {})
      expect(older.local_lid).toBe(0)
      yield* ep.accept(older)
      const rtrs = fake.takeLog().filter((r) => r.kind === "modify_qp" && r.qp_state === QpState.RTR)
      expect(rtrs).toHaveLength(3)
      for (const r of rtrs) {
        expect(r.ah).toMatchObject({ is_global: 1, sgid_index: 1, traffic_class: 106, sl: 3, port_num: 1 })
      }
    })
  )

  it.scoped("InfiniBand and a peer that sent no LID: the bootstrap fails naming LID 0, the endpoint is retired", () =>
    Effect.gen(function* () {
      fake.setPort(1, PortState.ACTIVE, LinkLayer.INFINIBAND, 0x17, Mtu.MTU_4096)
      const ep = yield* endpointOn({})
      const e = yield* Effect.flip(ep.accept(peer(ep, {})))
      expect(e.message).toContain("LID 0")
      expect(ep.status).toBe("DESTROYING")
    })
  )

  it.scoped("a gid_index past the port's GID table fails at open naming the key", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(endpointOn({ transports: { rdma: { device: { gid_index: 16 } } } }))
      expect(e.message).toContain(
        "transports/rdma/device/gid_index 16 is past the GID table of fake0 port 1 (16 entries)"
      )
    })
  )

  it.scoped("a device whose max_qp_wr cannot hold the notify window: construct fails saying so", () =>
    Effect.gen(function* () {
      fake.setDeviceLimits(128, 4, 65536, 16, 16, 64)
      const e = yield* Effect.flip(endpointOn({ transports: { rdma: { endpoint: { max_qp_wr: 64 } } } }))
      expect(e.message).toBe(
        "the notify QP needs 256 work requests each way (transports/rdma/notify/slots); fake0 allows max_qp_wr 128"
      )
    })
  )

  /** A RoCE port's GIDs: 0 RoCE v1 link-local, 1 RoCE v2 10.1.2.3 (an overlay range), 2 RoCE v2 192.168.1.5; all eth0. */
  const scriptGids = () => {
    const ndevs = join(build.dir, "sys/class/infiniband/fake0/ports/1/gid_attrs/ndevs")
    mkdirSync(ndevs, { recursive: true })
    const rows: ReadonlyArray<readonly [ReadonlyArray<number>, number]> = [
      [[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x02, 0xc9, 0xff, 0xfe, 0xa1, 0xb2, 0xc9], GidType.ROCE_V1],
      [[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3], GidType.ROCE_V2],
      [[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 5], GidType.ROCE_V2]
    ]
    rows.forEach(([raw, type], i) => {
      fake.setGid(i, Uint8Array.from(raw), type)
      writeFileSync(join(ndevs, String(i)), "eth0\n")
    })
  }

  const rtrSgids = () =>
    fake
      .takeLog()
      .filter((r) => r.kind === "modify_qp" && r.qp_state === QpState.RTR)
      .map((r) => (r.ah as { sgid_index: number }).sgid_index)

  it.scoped(
    "gid_index -1 picks TENT's GID (RoCE v2, IPv4-mapped, non-overlay: 2): in the descriptor and every GRH",
    () =>
      Effect.gen(function* () {
        scriptGids()
        const ep = yield* endpointOn({ transports: { rdma: { device: { gid_index: -1 } } } })
        expect(ep.localDesc("peer@fake0").local_gid).toBe("00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:01:05")
        fake.takeLog()
        yield* ep.accept(peer(ep, {}))
        expect(rtrSgids()).toEqual([2, 2, 2])
      })
  )

  it.scoped(
    "beside it, gid_index 0 (what -1 used to mean) puts the RoCE v1 link-local GID on the wire: the fixture's index 0 is not what -1 picks",
    () =>
      Effect.gen(function* () {
        scriptGids()
        const ep = yield* endpointOn({ transports: { rdma: { device: { gid_index: 0 } } } })
        expect(ep.localDesc("peer@fake0").local_gid).toBe("fe:80:00:00:00:00:00:00:02:02:c9:ff:fe:a1:b2:c9")
        fake.takeLog()
        yield* ep.accept(peer(ep, {}))
        expect(rtrSgids()).toEqual([0, 0, 0])
      })
  )

  it.scoped('an explicit gid_index naming an empty slot fails at open, as TENT\'s "Uninitialized GID"', () =>
    Effect.gen(function* () {
      scriptGids()
      const e = yield* Effect.flip(endpointOn({ transports: { rdma: { device: { gid_index: 7 } } } }))
      expect(e.message).toBe("GID 7 of fake0 port 1 is empty (transports/rdma/device/gid_index)")
    })
  )
})
