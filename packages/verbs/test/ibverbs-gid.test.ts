/**
 * GID auto-selection (`transports/rdma/device/gid_index` -1), TENT's rule (`context.cpp` `getBestGidIndex`): over the
 * C double of libibverbs with a scripted GID table and a sysfs of the test's own (`gid_attrs/ndevs`, `gid_attrs/types`),
 * through `_ibv_query_gid_ex` and, on a double built without it (rdma-core before v32), through `ibv_query_gid` and
 * sysfs types. Each table puts something else at index 0, so the former rule (-1 read as 0) is the negative control.
 */
import { mkdirSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, type Layer } from "effect"
import { GidType } from "../src/Constants.js"
import { autoSelectGid, gidFromString, selectGidIndex } from "../src/Gid.js"
import * as Ibverbs from "../src/Ibverbs.js"
import { type GidEntry, Verbs } from "../src/Verbs.js"
import { bindFake, buildFake, type Fake } from "./fixtures/ibverbs/fake.js"
import { makeBuildDir, missingToolchain, requireHeaders } from "./fixtures/ibverbs/toolchain.js"

const gid = (text: string) => gidFromString(text) ?? Uint8Array.of()

/** A GID table row: the GID, its `ibv_gid_type`, its sysfs ndev ("" = none). */
type Row = readonly [text: string, type: GidType, ndev: string]

const linkLocal = "fe80:0000:0000:0000:0202:c9ff:fea1:b2c9"
const v4 = (a: number, b: number, c: number, d: number) =>
  `0000:0000:0000:0000:0000:ffff:${((a << 8) | b).toString(16).padStart(4, "0")}:${((c << 8) | d).toString(16).padStart(4, "0")}`

/** A RoCE port as a host with a flannel overlay shows it; the answer TENT gives is 6, index 0 is a RoCE v1 GID. */
const roceHost: ReadonlyArray<Row> = [
  [linkLocal, GidType.ROCE_V1, "eth0"], // 0: first non-zero, not a candidate (RoCE v1)
  [linkLocal, GidType.ROCE_V2, "eth0"], // 1: RoCE v2 but not IPv4-mapped
  [v4(192, 168, 1, 5), GidType.ROCE_V1, "eth0"], // 2: IPv4-mapped but RoCE v1
  [v4(10, 1, 2, 3), GidType.ROCE_V2, "eth0"], // 3: overlay by address (10/8)
  [v4(192, 168, 1, 7), GidType.ROCE_V2, ""], // 4: no network device
  [v4(192, 168, 1, 8), GidType.ROCE_V2, "flannel.1"], // 5: overlay by device
  [v4(192, 168, 1, 5), GidType.ROCE_V2, "eth0"], // 6: RoCE v2, IPv4-mapped, on eth0: chosen
  [v4(192, 168, 1, 9), GidType.ROCE_V2, "eth1"] // 7: also good, but later
]

const entries = (rows: ReadonlyArray<Row | undefined>): Array<GidEntry | undefined> =>
  rows.map((r, index) => (r === undefined ? undefined : { index, gid: gid(r[0]), gidType: r[1], ndev: r[2] }))

describe("selectGidIndex (TENT's getBestGidIndex)", () => {
  const cases: ReadonlyArray<readonly [string, ReadonlyArray<Row | undefined>, number | undefined, string?]> = [
    ["RoCE v2 IPv4-mapped on a plain netdev wins", roceHost, 6, "Network"],
    ["without it: the first overlay (by address)", roceHost.slice(0, 6), 3, "Overlay"],
    ["overlay by device name", [roceHost[0], undefined, roceHost[5], roceHost[4]], 2, "Overlay"],
    [
      "without overlays: the first with no netdev",
      [roceHost[0], roceHost[1], roceHost[2], roceHost[4]],
      3,
      "NoNetwork"
    ],
    ["no candidate: the first non-zero GID", [undefined, roceHost[1], roceHost[2]], 1, "FirstNonZero"],
    ["IB GIDs count whatever their bytes", [roceHost[2], [linkLocal, GidType.IB, "ib0"]], 1, "Network"],
    ["nothing non-zero: none", [undefined, ["0000:0000:0000:0000:0000:0000:0000:0000", GidType.ROCE_V2, ""]], undefined]
  ]
  for (const [name, rows, index, choice] of cases) {
    it(name, () => {
      const picked = selectGidIndex(entries(rows))
      expect(picked?.index).toBe(index)
      if (choice !== undefined) expect(picked?.choice).toBe(choice)
    })
  }
  it("172.16/12 and 100.64/10 are overlay ranges too; 172.32 and 100.128 are not", () => {
    const at = (a: number, b: number) => selectGidIndex(entries([[v4(a, b, 0, 1), GidType.ROCE_V2, "eth0"]]))?.choice
    expect([at(172, 16), at(172, 31), at(100, 64), at(100, 127)]).toEqual(["Overlay", "Overlay", "Overlay", "Overlay"])
    expect([at(172, 32), at(100, 128), at(192, 168)]).toEqual(["Network", "Network", "Network"])
  })
})

const skip = missingToolchain !== undefined && !requireHeaders
if (skip) console.log(`[ibverbs-gid] skipped: ${missingToolchain} (TENT_REQUIRE_VERBS_HEADERS unset)`)

describe.skipIf(skip)("autoSelectGid over the C double", () => {
  let build: ReturnType<typeof makeBuildDir>
  let fake: Fake
  let old: Fake
  let sysfs: string
  let verbs: Layer.Layer<Verbs>
  let oldVerbs: Layer.Layer<Verbs>

  beforeAll(() => {
    expect(missingToolchain, "TENT_REQUIRE_VERBS_HEADERS=1 but the toolchain is missing").toBeUndefined()
    build = makeBuildDir()
    sysfs = join(build.dir, "sys")
    const so = buildFake(build.dir, "fake-ibverbs")
    fake = bindFake(so)
    verbs = Ibverbs.layer({ library: so, sysfs })
    const oldSo = buildFake(build.dir, "fake-ibverbs-no-gid-ex", ["FAKE_WITHOUT_QUERY_GID_EX"])
    old = bindFake(oldSo)
    oldVerbs = Ibverbs.layer({ library: oldSo, sysfs })
  })
  afterEach(() => {
    fake?.setGid(-1, null, 0)
    old?.setGid(-1, null, 0)
    rmSync(sysfs, { recursive: true, force: true })
  })
  afterAll(() => build?.remove())

  /** Scripts `rows` into the double and the sysfs (`ndevs`, and `types` as the kernel names them). */
  const script = (f: Fake, rows: ReadonlyArray<Row>) => {
    const attrs = join(sysfs, "class/infiniband/fake0/ports/1/gid_attrs")
    mkdirSync(join(attrs, "ndevs"), { recursive: true })
    mkdirSync(join(attrs, "types"), { recursive: true })
    rows.forEach(([text, type, ndev], i) => {
      expect(f.setGid(i, gid(text), type)).toBe(0)
      if (ndev !== "") writeFileSync(join(attrs, "ndevs", String(i)), `${ndev}\n`)
      writeFileSync(join(attrs, "types", String(i)), type === GidType.ROCE_V2 ? "RoCE v2\n" : "IB/RoCE v1\n")
    })
  }

  const pick = Effect.gen(function* () {
    const ctx = yield* Effect.flatMap(Verbs, (v) => v.openDevice("fake0"))
    const picked = yield* autoSelectGid(ctx, 1)
    return { picked, atZero: yield* Effect.orElseSucceed(ctx.queryGidEntry(1, 0), () => undefined) }
  })

  it.scopedLive(
    "through _ibv_query_gid_ex: index 6 (RoCE v2, IPv4-mapped, eth0); index 0 (the former rule) is RoCE v1",
    () =>
      Effect.gen(function* () {
        script(fake, roceHost)
        const before = fake.count("query_gid_ex")
        const { picked, atZero } = yield* pick
        expect(fake.count("query_gid_ex") - before).toBeGreaterThanOrEqual(16)
        expect(picked.entry).toMatchObject({ index: 6, gidType: GidType.ROCE_V2, ndev: "eth0" })
        expect(Buffer.from(picked.entry.gid).toString("hex")).toBe("00000000000000000000ffffc0a80105")
        expect(picked.choice).toBe("Network")
        // Negative control: what -1 read as 0 used.
        expect(atZero).toMatchObject({ index: 0, gidType: GidType.ROCE_V1, ndev: "eth0" })
        expect(picked.entry.index).not.toBe(atZero?.index)
      }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("empty slots are skipped; an overlay-only table picks its first overlay GID", () =>
    Effect.gen(function* () {
      script(fake, roceHost.slice(0, 6))
      fake.setGid(-1, null, 0)
      for (const i of [1, 3, 5]) {
        const [text, type] = roceHost[i] as Row
        fake.setGid(i, gid(text), type)
      }
      const { picked } = yield* pick
      expect(picked).toMatchObject({ entry: { index: 3, ndev: "eth0" }, choice: "Overlay" })
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("an all-empty table fails with ENODATA naming the device and port", () =>
    Effect.gen(function* () {
      fake.setGid(15, new Uint8Array(16), GidType.ROCE_V2)
      const e = yield* Effect.flip(pick)
      expect(e).toMatchObject({ _tag: "RdmaError", errno: 61 })
      expect(e.message).toContain("fake0 port 1")
    }).pipe(Effect.provide(verbs))
  )

  it.scopedLive("without _ibv_query_gid_ex (rdma-core < v32): types from sysfs gid_attrs/types, same choice", () =>
    Effect.gen(function* () {
      script(old, roceHost)
      const { picked, atZero } = yield* pick
      expect(picked).toMatchObject({ entry: { index: 6, gidType: GidType.ROCE_V2, ndev: "eth0" }, choice: "Network" })
      expect(atZero?.gidType).toBe(GidType.ROCE_V1)
    }).pipe(Effect.provide(oldVerbs))
  )

  it.scopedLive("the unscripted double (fe80 GIDs, not IPv4-mapped) still picks 0, its first non-zero GID", () =>
    Effect.gen(function* () {
      const { picked } = yield* pick
      expect(picked).toMatchObject({ entry: { index: 0 }, choice: "FirstNonZero" })
    }).pipe(Effect.provide(verbs))
  )
})
