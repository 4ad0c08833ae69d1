/**
 * A segment descriptor as TENT stores it in a central registry: the value of key `mooncake/tent/<name>`, TENT's
 * `SegmentDesc` JSON (`segment.h`'s `to_json`/`from_json`), written and read with the codec of `tent/SegmentDesc.ts`
 * (nlohmann's bytes: sorted keys, compact; `j.at` for every field TENT's structs list).
 *
 * What TENT's RDMA path needs of ours: `detail.topology`, whose `nics` name our devices (a NIC's id is its index there,
 * and a peer names the remote NIC by that id), buffers' `rkey` indexed by NIC id, and `rdma_server_name` when the
 * descriptor has one (the server part of the NIC paths a peer builds, `segment.h:189-193`). Reading a TENT record, a
 * device's rkey is the one at its NIC id in the topology: TENT lists only its enabled devices under `devices` but
 * keeps a zero-filled rkey slot for every NIC (`buffers.cpp:145-159`, `rdma_transport.cpp:636-649`). A record
 * without a usable topology (ours before it was written, or one TENT's `Topology::parse` would refuse) pairs rkeys
 * with devices by position.
 */
import { readFileSync } from "node:fs"
import { Either } from "effect"
import type { BufferDesc, SegmentDesc } from "../Models.js"
import * as Tent from "../tent/SegmentDesc.js"
import * as Topology from "./tent/topology.js"

/** Reads a stored value as TENT's `from_json` would, every field of the record. */
export const decodeRecord = (value: string): Either.Either<Tent.SegmentDesc, string> =>
  Either.mapLeft(Tent.decodeSegmentDesc(Buffer.from(value, "utf8")), (e) => e.message)

const safe = (n: bigint, what: string): number | string =>
  n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : `${what} ${n} is beyond 2^53 - 1`

/**
 * The NIC id of each of `devices`: its index among the topology's NICs, or its own position when the record has no
 * usable topology or the topology does not name it.
 */
const nicIds = (topology: string | undefined, devices: ReadonlyArray<Tent.DeviceDesc>): ReadonlyArray<number> => {
  const names = topology === undefined ? undefined : Topology.nicNames(topology)
  return devices.map((d, position) => {
    const id = names === undefined ? -1 : names.indexOf(d.name)
    return id < 0 ? position : id
  })
}

/** Reads a stored value; `Left` carries why it is not a memory segment's descriptor. */
export const decode = (value: string): Either.Either<SegmentDesc, string> =>
  Either.flatMap(decodeRecord(value), (s): Either.Either<SegmentDesc, string> => {
    if (s.type !== "memory") return Either.left(`segment type "${s.type}" is not a memory segment`)
    const ids = nicIds(s.detail.topology, s.detail.devices)
    const buffers: Array<BufferDesc> = []
    for (const [k, b] of s.detail.buffers.entries()) {
      const addr = safe(b.addr, `detail.buffers[${k}].addr`)
      const length = safe(b.length, `detail.buffers[${k}].length`)
      if (typeof addr === "string") return Either.left(addr)
      if (typeof length === "string") return Either.left(length)
      // A buffer with no key at all (not registered with RDMA) keeps none; a missing slot reads as TENT's zero.
      const rkey = b.rkey.length === 0 ? [] : ids.map((id) => b.rkey[id] ?? 0)
      buffers.push({ addr, length, rkey, transports: b.transports.map(Tent.transportTypeName) })
    }
    return Either.right({
      name: s.name,
      rpc_server_addr: s.rpc_server_addr,
      ...(s.rdma_server_name === undefined || s.rdma_server_name === ""
        ? {}
        : { rdma_server_name: s.rdma_server_name }),
      devices: s.detail.devices.map((d) => ({ name: d.name, lid: d.lid, gid: d.gid })),
      buffers
    })
  })

/**
 * The record TENT would store for `desc`, as a memory segment of machine `machineId`: its devices are the topology's
 * NICs in order, so `rkey[i]` (the key on `devices[i]`) is already the key of NIC id `i`.
 */
export const toRecord = (desc: SegmentDesc, machineId: string): Tent.SegmentDesc => ({
  name: desc.name,
  type: "memory",
  machine_id: machineId,
  rpc_server_addr: desc.rpc_server_addr,
  ...(desc.rdma_server_name === undefined ? {} : { rdma_server_name: desc.rdma_server_name }),
  detail: {
    device_attrs: {},
    buffers: desc.buffers.map((b) => ({
      addr: BigInt(b.addr),
      length: BigInt(b.length),
      location: Topology.WILDCARD,
      transports: (b.transports ?? ["rdma", "tcp"]).map(Tent.transportTypeOf),
      regions: [],
      transport_attrs: [],
      rkey: b.rkey,
      shm_path: "",
      mnnvl_handle: "",
      internal: false
    })),
    devices: desc.devices.map((d) => ({ name: d.name, lid: d.lid, gid: d.gid, transport_attrs: [] })),
    topology: Topology.ofDevices(desc.devices.map((d) => d.name)),
    transport_attrs: []
  }
})

const wellFormed = (s: string): string => Buffer.from(s, "utf8").toString("utf8")

/**
 * The JSON text TENT would store for `desc`, as a memory segment of machine `machineId` (see {@link toRecord}). A
 * string with a lone surrogate has no UTF-8 form (nlohmann's `dump` throws on it): it is written with U+FFFD there.
 */
export const encode = (desc: SegmentDesc, machineId: string): string => {
  const bytes = Tent.encodeSegmentDesc(toRecord(desc, machineId))
  if (Either.isRight(bytes)) return bytes.right.toString("utf8")
  const fixed: SegmentDesc = {
    ...desc,
    name: wellFormed(desc.name),
    rpc_server_addr: wellFormed(desc.rpc_server_addr),
    ...(desc.rdma_server_name === undefined ? {} : { rdma_server_name: wellFormed(desc.rdma_server_name) }),
    devices: desc.devices.map((d) => ({ ...d, name: wellFormed(d.name), gid: wellFormed(d.gid) }))
  }
  return Either.getOrThrow(Tent.encodeSegmentDesc(toRecord(fixed, wellFormed(machineId)))).toString("utf8")
}

const readIdentity = (path: string): string => {
  try {
    return readFileSync(path, "utf8").replace(/\n$/, "")
  } catch {
    return ""
  }
}

let machineId: string | undefined

/**
 * This host's id as TENT's `getMachineID` builds it (`<boot_id>:<machine-id>`, either alone, or a random
 * `undefined_machine_…`): TENT compares it to tell a peer on the same host.
 */
export const localMachineId = (): string => {
  if (machineId !== undefined) return machineId
  const boot = readIdentity("/proc/sys/kernel/random/boot_id")
  const machine = readIdentity("/etc/machine-id")
  let id = boot !== "" && machine !== "" ? `${boot}:${machine}` : boot !== "" ? boot : machine
  if (id === "") {
    id = "undefined_machine_"
    for (let i = 0; i < 16; i++) id += String.fromCharCode(97 + Math.floor(Math.random() * 26))
  }
  machineId = id
  return id
}
