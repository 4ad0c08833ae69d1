/**
 * The record a central registry holds under `mooncake/tent/<segment>`, as TENT writes and reads it (Mooncake 3b5a594,
 * `segment.h:45-224`, `topology.cpp:50-80`). Fixtures in `test/tent/fixtures/`, both laid out by Python's `json`
 * (sorted keys; the topology with `indent=4`), a serialiser independent of ours:
 * - `segment-desc.registry.json`: a record as TENT's serialiser lays it out for a node whose second NIC (`mlx5_1`,
 *   NIC id 1) is disabled: `devices` lists only the enabled ones, each buffer's `rkey` keeps a zero slot for it
 *   (`buffers.cpp:145-159`, `rdma_transport.cpp:636-649`), and it has a `rdma_server_name`. Built by hand from the
 *   field lists, not printed by a TENT build.
 * - `segment-desc.ours.json`: what we must write for a two-device descriptor.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import * as Topology from "../src/internal/tent/topology.js"
import * as TentSegment from "../src/internal/tentSegment.js"
import type { SegmentDesc } from "../src/Models.js"
import type * as Tent from "../src/tent/SegmentDesc.js"

const fixture = (name: string) => Fs.readFileSync(Path.join(import.meta.dirname, "tent", "fixtures", name), "utf8")
const tentRecord = fixture("segment-desc.registry.json")

const right = <A, E>(e: Either.Either<A, E>): A => {
  if (Either.isLeft(e)) throw new Error(`expected Right, got ${String(e.left)}`)
  return e.right
}

/** The fixture with the value at `path` replaced (its numbers are all below 2^53, so JSON.parse keeps them). */
const withField = (path: ReadonlyArray<string | number>, value: unknown): string => {
  const j = JSON.parse(tentRecord)
  let o = j
  for (const k of path.slice(0, -1)) o = o[k]
  o[path[path.length - 1] as string | number] = value
  return JSON.stringify(j)
}

type Memory = Extract<Tent.SegmentDesc, { type: "memory" }>
const memory = (s: Tent.SegmentDesc): Memory => {
  if (s.type !== "memory") throw new Error("not a memory segment")
  return s
}

const topologyText = JSON.parse(tentRecord).detail.topology as string

/**
 * Every field of TENT's serialiser (`SegmentDesc`, `MemorySegmentDesc`, `BufferDesc`, `DeviceDesc` to_json): where it
 * is in the record, what it must read as, and another value that must read differently (or fail), so each test can
 * fail. `model`: the field as the engine's `SegmentDesc` keeps it, for the fields it keeps.
 */
const fields: ReadonlyArray<{
  readonly field: string
  readonly path: ReadonlyArray<string | number>
  readonly read: (s: Tent.SegmentDesc) => unknown
  readonly expected: unknown
  readonly other: unknown
  readonly model?: { readonly read: (d: SegmentDesc) => unknown; readonly expected: unknown }
}> = [
  {
    field: "name",
    path: ["name"],
    read: (s) => s.name,
    expected: "tent-a",
    other: "tent-b",
    model: { read: (d) => d.name, expected: "tent-a" }
  },
  { field: "type", path: ["type"], read: (s) => s.type, expected: "memory", other: "file" },
  {
    field: "machine_id",
    path: ["machine_id"],
    read: (s) => s.machine_id,
    expected: "5f0c7a52-1d1e-4c55-9b7e-0d8f2f3e6a11:0a1b2c3d4e5f",
    other: "x"
  },
  {
    field: "rpc_server_addr",
    path: ["rpc_server_addr"],
    read: (s) => s.rpc_server_addr,
    expected: "10.0.0.2:12345",
    other: "10.0.0.9:1",
    model: { read: (d) => d.rpc_server_addr, expected: "10.0.0.2:12345" }
  },
  {
    field: "rdma_server_name",
    path: ["rdma_server_name"],
    read: (s) => s.rdma_server_name,
    expected: "10.0.1.2:12346",
    other: "10.0.1.9:1",
    model: { read: (d) => d.rdma_server_name, expected: "10.0.1.2:12346" }
  },
  {
    field: "detail.device_attrs",
    path: ["detail", "device_attrs"],
    read: (s) => memory(s).detail.device_attrs,
    expected: { pcie: "gen5" },
    other: {}
  },
  {
    field: "detail.topology",
    path: ["detail", "topology"],
    read: (s) => memory(s).detail.topology,
    expected: topologyText,
    other: "{}"
  },
  {
    field: "detail.transport_attrs",
    path: ["detail", "transport_attrs"],
    read: (s) => memory(s).detail.transport_attrs,
    expected: [[7, "tcp-attr"]],
    other: []
  },
  {
    field: "buffer.addr",
    path: ["detail", "buffers", 0, "addr"],
    read: (s) => memory(s).detail.buffers[0]?.addr,
    expected: 139637976727552n,
    other: 8,
    model: { read: (d) => d.buffers[0]?.addr, expected: 139637976727552 }
  },
  {
    field: "buffer.length",
    path: ["detail", "buffers", 0, "length"],
    read: (s) => memory(s).detail.buffers[0]?.length,
    expected: 1073741824n,
    other: 1,
    model: { read: (d) => d.buffers[0]?.length, expected: 1073741824 }
  },
  {
    field: "buffer.location",
    path: ["detail", "buffers", 0, "location"],
    read: (s) => memory(s).detail.buffers[0]?.location,
    expected: "cpu:0",
    other: "cuda:0"
  },
  {
    field: "buffer.transports",
    path: ["detail", "buffers", 0, "transports"],
    read: (s) => memory(s).detail.buffers[0]?.transports,
    expected: [1, 3, 7],
    other: [7],
    model: { read: (d) => d.buffers[0]?.transports, expected: ["rdma", "shm", "tcp"] }
  },
  {
    field: "buffer.regions",
    path: ["detail", "buffers", 0, "regions"],
    read: (s) => memory(s).detail.buffers[0]?.regions,
    expected: [{ size: 1073741824n, location: "cpu:0" }],
    other: []
  },
  {
    field: "buffer.transport_attrs",
    path: ["detail", "buffers", 0, "transport_attrs"],
    read: (s) => memory(s).detail.buffers[0]?.transport_attrs,
    expected: [[3, "shm-attr"]],
    other: []
  },
  {
    field: "buffer.rkey",
    path: ["detail", "buffers", 0, "rkey"],
    read: (s) => memory(s).detail.buffers[0]?.rkey,
    expected: [4369, 0, 13107],
    other: [1, 2, 3],
    // by NIC id: mlx5_0 is NIC 0, mlx5_2 is NIC 2
    model: { read: (d) => d.buffers[0]?.rkey, expected: [4369, 13107] }
  },
  {
    field: "buffer.shm_path",
    path: ["detail", "buffers", 0, "shm_path"],
    read: (s) => memory(s).detail.buffers[0]?.shm_path,
    expected: "/dev/shm/tent-a",
    other: ""
  },
  {
    field: "buffer.mnnvl_handle",
    path: ["detail", "buffers", 0, "mnnvl_handle"],
    read: (s) => memory(s).detail.buffers[0]?.mnnvl_handle,
    expected: "mh",
    other: ""
  },
  {
    field: "buffer.internal",
    path: ["detail", "buffers", 1, "internal"],
    read: (s) => memory(s).detail.buffers[1]?.internal,
    expected: true,
    other: false
  },
  {
    field: "device.name",
    path: ["detail", "devices", 1, "name"],
    read: (s) => memory(s).detail.devices[1]?.name,
    expected: "mlx5_2",
    other: "mlx5_9",
    model: { read: (d) => d.devices[1]?.name, expected: "mlx5_2" }
  },
  {
    field: "device.lid",
    path: ["detail", "devices", 1, "lid"],
    read: (s) => memory(s).detail.devices[1]?.lid,
    expected: 7,
    other: 8,
    model: { read: (d) => d.devices[1]?.lid, expected: 7 }
  },
  {
    field: "device.gid",
    path: ["detail", "devices", 1, "gid"],
    read: (s) => memory(s).detail.devices[1]?.gid,
    expected: "fe:80:00:00:00:00:00:00:02:00:00:00:00:00:00:03",
    other: "fe:80::9",
    model: { read: (d) => d.devices[1]?.gid, expected: "fe:80:00:00:00:00:00:00:02:00:00:00:00:00:00:03" }
  },
  {
    field: "device.transport_attrs",
    path: ["detail", "devices", 1, "transport_attrs"],
    read: (s) => memory(s).detail.devices[1]?.transport_attrs,
    expected: [[1, "r"]],
    other: []
  }
]

describe("registry record written by TENT", () => {
  it.each(fields)("reads $field", ({ path, read, expected, other, model }) => {
    const record = right(TentSegment.decodeRecord(tentRecord))
    expect(read(record)).toEqual(expected)
    if (model !== undefined) expect(model.read(right(TentSegment.decode(tentRecord)))).toEqual(model.expected)
    // the same record with another value there: read differently, or refused
    const changed = TentSegment.decodeRecord(withField(path, other))
    if (Either.isRight(changed)) expect(read(changed.right)).not.toEqual(expected)
    if (model !== undefined) {
      const changedModel = TentSegment.decode(withField(path, other))
      if (Either.isRight(changedModel)) expect(model.read(changedModel.right)).not.toEqual(model.expected)
    }
  })

  it("gives each device its rkey by NIC id, across a disabled NIC's zero slot (legacy positional pairing does not)", () => {
    const desc = right(TentSegment.decode(tentRecord))
    expect(desc.devices.map((d) => d.name)).toEqual(["mlx5_0", "mlx5_2"])
    expect(desc.buffers.map((b) => b.rkey)).toEqual([[4369, 13107], []])
    // negative control: pairing by position gives mlx5_2 the disabled mlx5_1's zero
    const positional = JSON.parse(tentRecord).detail.buffers[0].rkey.slice(0, 2)
    expect(positional).toEqual([4369, 0])
    expect(desc.buffers[0]?.rkey).not.toEqual(positional)
  })

  it("a record without a topology, or one TENT's Topology::parse refuses, pairs rkeys by position", () => {
    for (const topology of [undefined, "not json", '{"nics":{"name":1}}']) {
      const j = JSON.parse(tentRecord)
      if (topology === undefined) delete j.detail.topology
      else j.detail.topology = topology
      j.detail.buffers[0].rkey = [5, 6]
      expect(right(TentSegment.decode(JSON.stringify(j))).buffers[0]?.rkey, String(topology)).toEqual([5, 6])
    }
  })

  it("a device whose NIC id is past the end of a buffer's rkey reads TENT's zero", () => {
    const desc = right(TentSegment.decode(withField(["detail", "buffers", 0, "rkey"], [4369])))
    expect(desc.buffers[0]?.rkey).toEqual([4369, 0])
  })

  it("refuses a file segment and a field TENT's from_json requires", () => {
    expect(Either.isLeft(TentSegment.decode(withField(["type"], "file")))).toBe(true)
    const j = JSON.parse(tentRecord)
    delete j.detail.buffers[0].shm_path
    const missing = TentSegment.decode(JSON.stringify(j))
    expect(Either.isLeft(missing) && missing.left).toContain("detail.buffers[0].shm_path")
  })
})

describe("registry record we write", () => {
  const desc: SegmentDesc = {
    name: "prefill-0",
    rpc_server_addr: "127.0.0.1:17001",
    rdma_server_name: "10.0.1.1:17002",
    devices: [
      { name: "mlx0", lid: 0, gid: "g0" },
      { name: "mlx1", lid: 3, gid: "g1" }
    ],
    buffers: [{ addr: 0x7f00_0000_1000, length: 65536, rkey: [17, 42], transports: ["rdma", "tcp"] }]
  }

  it("is byte for byte what nlohmann would dump: sorted keys, compact, the topology with indent 4", () => {
    expect(TentSegment.encode(desc, "m")).toBe(fixture("segment-desc.ours.json"))
  })

  it("carries a topology naming our devices as NIC ids 0..n-1, all preferred by the wildcard memory entry", () => {
    const record = memory(right(TentSegment.decodeRecord(TentSegment.encode(desc, "m"))))
    const topology = record.detail.topology as string
    expect(Topology.nicNames(topology)).toEqual(["mlx0", "mlx1"])
    const mems = JSON.parse(topology).mems
    expect(mems).toEqual([
      {
        name: "*",
        pci_bus_id: "",
        type: Topology.MEM_UNKNOWN,
        numa_node: -1,
        device_list: { rank0: [0, 1], rank1: [], rank2: [] }
      }
    ])
    // every buffer is at the wildcard location, so a TENT peer's route lookup lands on that entry
    expect(record.detail.buffers.map((b) => b.location)).toEqual(["*"])
    // rkey[NIC id of device i] is device i's key
    for (const [i, d] of desc.devices.entries()) {
      expect(record.detail.buffers[0]?.rkey[Topology.nicNames(topology)?.indexOf(d.name) ?? -1]).toBe(
        desc.buffers[0]?.rkey[i]
      )
    }
  })

  it("writes rdma_server_name only when it has one, and reads back what it wrote", () => {
    expect(right(TentSegment.decode(TentSegment.encode(desc, "m")))).toEqual(desc)
    const { rdma_server_name: _, ...plain } = desc
    const text = TentSegment.encode(plain, "m")
    expect(text).not.toContain("rdma_server_name")
    expect(right(TentSegment.decode(text))).toEqual(plain)
  })

  it("without devices writes TENT's empty topology", () => {
    const record = memory(right(TentSegment.decodeRecord(TentSegment.encode({ ...desc, devices: [] }, "m"))))
    expect(record.detail.topology).toBe('{\n    "mems": [],\n    "nics": []\n}')
  })

  it("dumpIndented agrees with nlohmann's dump(4) on the fixture's topology", () => {
    expect(Topology.dumpIndented(JSON.parse(topologyText))).toBe(topologyText)
  })
})
