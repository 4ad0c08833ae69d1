/**
 * TENT's `SegmentDesc` (`include/tent/runtime/segment.h`, Mooncake 3b5a594): the `GetSegmentDesc` response and the
 * value TENT stores under `mooncake/tent/<segment>` in a central registry. Its types, and its encoder and decoder as
 * TENT's nlohmann/json `to_json` + `dump()` and `from_json` write and read it (sorted keys, compact; `j.at` for each
 * required field, extra keys ignored). {@link Bodies} re-exports all of it.
 *
 * @since 0.2.0
 */
import type { Either } from "effect"
import {
  arr,
  asObject,
  at,
  bool,
  dump,
  fail,
  guard,
  int,
  parseObject,
  str,
  type TentBodyError,
  u64,
  u64Json
} from "../internal/tent/bodyJson.js"
import type { JsonValue } from "../internal/tent/NlohmannJson.js"

/**
 * TENT's `enum TransportType` (`include/tent/common/types.h:46-62`), the key of the `transport_attrs` maps.
 *
 * @since 0.2.0
 */
export enum TransportType {
  UNSPEC = 0,
  RDMA = 1,
  MNNVL = 2,
  SHM = 3,
  NVLINK = 4,
  GDS = 5,
  IOURING = 6,
  TCP = 7,
  AscendDirect = 8,
  SUNRISE_LINK = 9,
  TPU = 10,
  UB = 11,
  MPCOMM = 12
}

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

/**
 * The name TENT's `transportTypeName` gives a {@link TransportType} number (`"unknown"` for one it does not know).
 *
 * @since 0.2.0
 */
export const transportTypeName = (n: number): string => transportNames[n] ?? "unknown"

/**
 * The {@link TransportType} number of a transport's name (`UNSPEC`, 0, for a name TENT does not know).
 *
 * @since 0.2.0
 */
export const transportTypeOf = (name: string): TransportType =>
  Math.max(transportNames.indexOf(name as (typeof transportNames)[number]), 0)

/**
 * A `std::unordered_map<int-like, std::string>`: nlohmann writes a map whose key is not a string as an array of
 * `[key, value]` pairs (checked with the vendored json.h: `{RDMA: "a"}` dumps as `[[1,"a"]]`). Order is the
 * `unordered_map`'s, i.e. unspecified.
 *
 * @since 0.2.0
 */
export type IntKeyedAttrs = ReadonlyArray<readonly [number, string]>

/**
 * `Region` (`segment.h:57-63`).
 *
 * @since 0.2.0
 */
export interface Region {
  readonly size: bigint
  readonly location: string
}

/**
 * `BufferDesc` as serialised (`segment.h:65-87`): `ref_count` and `lkey` are not in the JSON.
 *
 * @since 0.2.0
 */
export interface BufferDesc {
  readonly addr: bigint
  readonly length: bigint
  readonly location: string
  readonly transports: ReadonlyArray<number>
  readonly regions: ReadonlyArray<Region>
  readonly transport_attrs: IntKeyedAttrs
  readonly rkey: ReadonlyArray<number>
  readonly shm_path: string
  readonly mnnvl_handle: string
  readonly internal: boolean
}

/**
 * `DeviceDesc` (`segment.h:45-55`).
 *
 * @since 0.2.0
 */
export interface DeviceDesc {
  readonly name: string
  readonly lid: number
  readonly gid: string
  readonly transport_attrs: IntKeyedAttrs
}

/**
 * `FileBufferDesc` (`segment.h:89-96`).
 *
 * @since 0.2.0
 */
export interface FileBufferDesc {
  readonly path: string
  readonly length: bigint
  readonly offset: bigint
}

/**
 * `MemorySegmentDesc` as its `to_json` writes it (`segment.h:124-130`): `topology` is a string holding
 * `Topology::toString()`, itself JSON dumped with indent 4 (`src/runtime/topology.cpp:50-80`), kept opaque here.
 * `from_json` (`segment.h:132-143`) requires `device_attrs`, `buffers`, `devices`; `topology` and `transport_attrs`
 * are optional.
 *
 * @since 0.2.0
 */
export interface MemorySegmentDetail {
  readonly device_attrs: Readonly<Record<string, string>>
  readonly buffers: ReadonlyArray<BufferDesc>
  readonly devices: ReadonlyArray<DeviceDesc>
  readonly topology?: string
  readonly transport_attrs?: IntKeyedAttrs
}

/**
 * `FileSegmentDesc` (`segment.h:145-150`).
 *
 * @since 0.2.0
 */
export interface FileSegmentDetail {
  readonly buffers: ReadonlyArray<FileBufferDesc>
}

/**
 * `SegmentDesc` (`segment.h:168-224`), the `GetSegmentDesc` response: `type` is `"memory"` or `"file"` and selects
 * the `detail`; `rdma_server_name` is written only when non-empty.
 *
 * @since 0.2.0
 */
export type SegmentDesc =
  | {
      readonly name: string
      readonly type: "memory"
      readonly machine_id: string
      readonly rpc_server_addr: string
      readonly rdma_server_name?: string
      readonly detail: MemorySegmentDetail
    }
  | {
      readonly name: string
      readonly type: "file"
      readonly machine_id: string
      readonly rpc_server_addr: string
      readonly rdma_server_name?: string
      readonly detail: FileSegmentDetail
    }

const attrsJson = (a: IntKeyedAttrs): JsonValue => a.map(([k, v]) => [k, v])

const bufferJson = (b: BufferDesc): JsonValue => ({
  addr: u64Json(b.addr),
  length: u64Json(b.length),
  location: b.location,
  transports: b.transports,
  regions: b.regions.map((r) => ({ size: u64Json(r.size), location: r.location })),
  transport_attrs: attrsJson(b.transport_attrs),
  rkey: b.rkey,
  shm_path: b.shm_path,
  mnnvl_handle: b.mnnvl_handle,
  internal: b.internal
})

/**
 * Encodes a `SegmentDesc` as TENT's `to_json` + `dump()` would (sorted keys; `transport_attrs` order as given).
 *
 * @since 0.2.0
 */
export const encodeSegmentDesc = (s: SegmentDesc): Either.Either<Buffer, TentBodyError> => {
  const detail: JsonValue =
    s.type === "memory"
      ? {
          device_attrs: s.detail.device_attrs,
          buffers: s.detail.buffers.map(bufferJson),
          devices: s.detail.devices.map((d) => ({
            name: d.name,
            lid: d.lid,
            gid: d.gid,
            transport_attrs: attrsJson(d.transport_attrs)
          })),
          // TENT's to_json always writes both; an absent value is written as TENT's empty one.
          topology: s.detail.topology ?? "",
          transport_attrs: attrsJson(s.detail.transport_attrs ?? [])
        }
      : {
          buffers: s.detail.buffers.map((b) => ({
            path: b.path,
            length: u64Json(b.length),
            offset: u64Json(b.offset)
          }))
        }
  return dump("SegmentDesc", {
    name: s.name,
    type: s.type,
    machine_id: s.machine_id,
    rpc_server_addr: s.rpc_server_addr,
    rdma_server_name: s.rdma_server_name === undefined || s.rdma_server_name === "" ? undefined : s.rdma_server_name,
    detail
  })
}

const S = "SegmentDesc" as const

const attrs = (v: JsonValue, path: string): IntKeyedAttrs =>
  arr(S, v, path).map((pair, k) => {
    const p = arr(S, pair, `${path}[${k}]`)
    if (p.length !== 2) fail(S, `${path}[${k}]`, "WrongType", `${path}[${k}] must be a [key, value] pair`)
    return [int(S, p[0] as JsonValue, `${path}[${k}][0]`, 0x7fffffff), str(S, p[1] as JsonValue, `${path}[${k}][1]`)]
  })

const buffer = (v: JsonValue, path: string): BufferDesc => {
  const o = asObject(S, path, v)
  const f = (k: string) => at(S, o, k, `${path}.${k}`)
  return {
    addr: u64(S, f("addr"), `${path}.addr`),
    length: u64(S, f("length"), `${path}.length`),
    location: str(S, f("location"), `${path}.location`),
    transports: arr(S, f("transports"), `${path}.transports`).map((t, k) =>
      int(S, t, `${path}.transports[${k}]`, 0x7fffffff)
    ),
    regions: arr(S, f("regions"), `${path}.regions`).map((r, k) => {
      const p = `${path}.regions[${k}]`
      const ro = asObject(S, p, r)
      return {
        size: u64(S, at(S, ro, "size", `${p}.size`), `${p}.size`),
        location: str(S, at(S, ro, "location", `${p}.location`), `${p}.location`)
      }
    }),
    transport_attrs: attrs(f("transport_attrs"), `${path}.transport_attrs`),
    rkey: arr(S, f("rkey"), `${path}.rkey`).map((x, k) => int(S, x, `${path}.rkey[${k}]`, 0xffffffff)),
    shm_path: str(S, f("shm_path"), `${path}.shm_path`),
    mnnvl_handle: str(S, f("mnnvl_handle"), `${path}.mnnvl_handle`),
    internal: bool(S, f("internal"), `${path}.internal`)
  }
}

const device = (v: JsonValue, path: string): DeviceDesc => {
  const o = asObject(S, path, v)
  return {
    name: str(S, at(S, o, "name", `${path}.name`), `${path}.name`),
    lid: int(S, at(S, o, "lid", `${path}.lid`), `${path}.lid`, 0xffff),
    gid: str(S, at(S, o, "gid", `${path}.gid`), `${path}.gid`),
    transport_attrs: attrs(at(S, o, "transport_attrs", `${path}.transport_attrs`), `${path}.transport_attrs`)
  }
}

/**
 * Decodes a `GetSegmentDesc` response as TENT's `from_json` does (`segment.h:211-224`, `132-143`, and the
 * `NLOHMANN_DEFINE_TYPE_INTRUSIVE` lists of `BufferDesc`, `DeviceDesc`, `Region`, `FileBufferDesc`).
 *
 * @since 0.2.0
 */
export const decodeSegmentDesc = (bytes: Uint8Array): Either.Either<SegmentDesc, TentBodyError> =>
  guard((): SegmentDesc => {
    const o = parseObject(S, bytes)
    const name = str(S, at(S, o, "name", "name"), "name")
    const typeRaw = str(S, at(S, o, "type", "type"), "type")
    const type: "memory" | "file" =
      typeRaw === "memory" || typeRaw === "file"
        ? typeRaw
        : fail(S, "type", "OutOfRange", `unknown segment type: ${typeRaw}`)
    const machine_id = str(S, at(S, o, "machine_id", "machine_id"), "machine_id")
    const rpc_server_addr = str(S, at(S, o, "rpc_server_addr", "rpc_server_addr"), "rpc_server_addr")
    const rdmaRaw = o.rdma_server_name
    const rdma = rdmaRaw === undefined ? {} : { rdma_server_name: str(S, rdmaRaw, "rdma_server_name") }
    const d = asObject(S, "detail", at(S, o, "detail", "detail"))
    if (type === "file") {
      return {
        name,
        type,
        machine_id,
        rpc_server_addr,
        ...rdma,
        detail: {
          buffers: arr(S, at(S, d, "buffers", "detail.buffers"), "detail.buffers").map((b, k) => {
            const p = `detail.buffers[${k}]`
            const bo = asObject(S, p, b)
            return {
              path: str(S, at(S, bo, "path", `${p}.path`), `${p}.path`),
              length: u64(S, at(S, bo, "length", `${p}.length`), `${p}.length`),
              offset: u64(S, at(S, bo, "offset", `${p}.offset`), `${p}.offset`)
            }
          })
        }
      }
    }
    const devAttrs = asObject(S, "detail.device_attrs", at(S, d, "device_attrs", "detail.device_attrs"))
    const device_attrs: Record<string, string> = {}
    for (const [k, v] of Object.entries(devAttrs)) device_attrs[k] = str(S, v as JsonValue, `detail.device_attrs.${k}`)
    const topology = d.topology === undefined ? {} : { topology: str(S, d.topology, "detail.topology") }
    const ta =
      d.transport_attrs === undefined ? {} : { transport_attrs: attrs(d.transport_attrs, "detail.transport_attrs") }
    return {
      name,
      type,
      machine_id,
      rpc_server_addr,
      ...rdma,
      detail: {
        device_attrs,
        buffers: arr(S, at(S, d, "buffers", "detail.buffers"), "detail.buffers").map((b, k) =>
          buffer(b, `detail.buffers[${k}]`)
        ),
        devices: arr(S, at(S, d, "devices", "detail.devices"), "detail.devices").map((x, k) =>
          device(x, `detail.devices[${k}]`)
        ),
        ...topology,
        ...ta
      }
    }
  })
