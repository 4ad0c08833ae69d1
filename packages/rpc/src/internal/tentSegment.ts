/**
 * A segment descriptor as TENT stores it in a central registry (`segment.h`'s `to_json`/`from_json`): the value of
 * key `mooncake/tent/<name>`, a JSON object `{name, type, machine_id, rpc_server_addr, detail: {device_attrs,
 * buffers, devices, transport_attrs}}`. TENT reads every field its `NLOHMANN_DEFINE_TYPE_INTRUSIVE` structs list, so
 * we write all of them (the ones this engine has no use for empty); maps keyed by an enum or an int are JSON arrays
 * of `[key, value]` pairs there, and transports are `TransportType` numbers. Reading is lenient: what this engine
 * does not use may be absent, and unknown fields are ignored.
 */
import { readFileSync } from "node:fs"
import { Either, ParseResult, Schema } from "effect"
import { SafeUint, type SegmentDesc, U32 } from "../Models.js"

/** TENT's `TransportType` numbers (types.h) and their names (`transportTypeName`). */
const transportNames = [
  "unspec",
  "rdma",
  "mnnvl",
  "shm",
  "nvlink",
  "gds",
  "io_uring",
  "tcp",
  "ascend",
  "sunrise_link",
  "tpu",
  "ub",
  "mpcomm"
] as const

const transportName = (n: number | string): string => (typeof n === "string" ? n : (transportNames[n] ?? "unknown"))
const transportNumber = (name: string): number => {
  const i = transportNames.indexOf(name as (typeof transportNames)[number])
  return Math.max(i, 0)
}

const StoredDevice = Schema.Struct({
  name: Schema.String,
  lid: Schema.optionalWith(Schema.Number, { default: () => 0 }),
  gid: Schema.optionalWith(Schema.String, { default: () => "" })
})

const StoredBuffer = Schema.Struct({
  addr: SafeUint,
  length: SafeUint,
  rkey: Schema.optionalWith(Schema.Array(U32), { default: () => [] }),
  transports: Schema.optional(Schema.Array(Schema.Union(Schema.Number, Schema.String)))
})

const StoredSegment = Schema.Struct({
  name: Schema.String,
  type: Schema.optionalWith(Schema.String, { default: () => "memory" }),
  rpc_server_addr: Schema.String,
  detail: Schema.Struct({
    devices: Schema.Array(StoredDevice),
    buffers: Schema.Array(StoredBuffer)
  })
})

const decodeStored = Schema.decodeUnknownEither(Schema.parseJson(StoredSegment))

/** Reads a stored value; `Left` carries why it is not a memory segment's descriptor. */
export const decode = (value: string): Either.Either<SegmentDesc, string> =>
  Either.flatMap(
    Either.mapLeft(decodeStored(value), (e) => ParseResult.TreeFormatter.formatErrorSync(e)),
    (s): Either.Either<SegmentDesc, string> =>
      s.type !== "memory"
        ? Either.left(`segment type "${s.type}" is not a memory segment`)
        : Either.right({
            name: s.name,
            rpc_server_addr: s.rpc_server_addr,
            devices: s.detail.devices.map((d) => ({ name: d.name, lid: d.lid, gid: d.gid })),
            buffers: s.detail.buffers.map((b) =>
              b.transports === undefined
                ? { addr: b.addr, length: b.length, rkey: b.rkey }
                : { addr: b.addr, length: b.length, rkey: b.rkey, transports: b.transports.map(transportName) }
            )
          })
  )

/** The JSON text TENT would store for `desc`, as a memory segment of machine `machineId`. */
export const encode = (desc: SegmentDesc, machineId: string): string =>
  JSON.stringify({
    name: desc.name,
    type: "memory",
    machine_id: machineId,
    rpc_server_addr: desc.rpc_server_addr,
    detail: {
      device_attrs: {},
      buffers: desc.buffers.map((b) => ({
        addr: b.addr,
        length: b.length,
        location: "*",
        transports: (b.transports ?? ["rdma", "tcp"]).map(transportNumber),
        regions: [],
        transport_attrs: [],
        rkey: b.rkey,
        shm_path: "",
        mnnvl_handle: "",
        internal: false
      })),
      devices: desc.devices.map((d) => ({ name: d.name, lid: d.lid, gid: d.gid, transport_attrs: [] })),
      transport_attrs: []
    }
  })

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
