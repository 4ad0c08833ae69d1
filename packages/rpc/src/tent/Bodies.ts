/**
 * The request and response bodies (coro_rpc attachments) of TENT's control-plane calls, encoded as TENT's
 * nlohmann/json writes them (sorted keys, compact; see {@link NlohmannJson}) and decoded as its `from_json` reads
 * them: `j.at(field)` for each required field (missing → error), extra keys ignored.
 *
 * Our own additions (`notify_proto`, `notify_incarnation` on `BootstrapDesc`) are optional keys: absent when unset,
 * so a TENT peer sees exactly TENT's bytes, and ignored by TENT's parsers when present (nlohmann's
 * `NLOHMANN_DEFINE_TYPE_INTRUSIVE` reads only the fields it names).
 *
 * Integer fields are checked more strictly than nlohmann does: nlohmann's `get<uintN_t>` casts any number or
 * boolean without a range check (json.h `get_arithmetic_value`); here a value must be an integer in the field's range.
 *
 * @since 0.2.0
 */
import { Data, Either } from "effect"
import type { JsonValue } from "./NlohmannJson.js"
import * as NlohmannJson from "./NlohmannJson.js"

/**
 * A body that is not what TENT's parser would accept, naming the body and the field (`""` for the whole body).
 *
 * @since 0.2.0
 */
export class TentBodyError extends Data.TaggedError("TentBodyError")<{
  readonly body: "Notify" | "BootstrapDesc" | "SegmentDesc" | "XferDataDesc"
  readonly field: string
  readonly reason: "Malformed" | "Missing" | "WrongType" | "OutOfRange" | "NotUtf8"
  readonly message: string
}> {}

type BodyName = TentBodyError["body"]
type Obj = { readonly [key: string]: JsonValue | undefined }

const bodyError = (body: BodyName, field: string, reason: TentBodyError["reason"], message: string) =>
  new TentBodyError({ body, field, reason, message })

/** Thrown only inside this module's decoders and caught at their boundary. */
class Fail {
  constructor(readonly error: TentBodyError) {}
}

const fail = (body: BodyName, field: string, reason: TentBodyError["reason"], message: string): never => {
  throw new Fail(bodyError(body, field, reason, message))
}

const guard = <A>(f: () => A): Either.Either<A, TentBodyError> => {
  try {
    return Either.right(f())
  } catch (e) {
    if (e instanceof Fail) return Either.left(e.error)
    throw e
  }
}

const UTF8 = new TextDecoder("utf-8", { fatal: true })

const parseObject = (body: BodyName, bytes: Uint8Array): Obj => {
  let text = ""
  try {
    text = UTF8.decode(bytes)
  } catch {
    fail(body, "", "NotUtf8", "body is not UTF-8 (nlohmann's parser refuses it)")
  }
  const v = NlohmannJson.parse(text)
  if (v instanceof NlohmannJson.JsonSyntaxError) fail(body, "", "Malformed", `${v.message} at ${v.offset}`)
  return asObject(body, "", v as JsonValue)
}

const isObject = (v: JsonValue | undefined): v is Obj => v !== null && typeof v === "object" && !Array.isArray(v)

const asObject = (body: BodyName, field: string, v: JsonValue | undefined): Obj => {
  if (!isObject(v)) return fail(body, field, "WrongType", `${field || "body"} must be an object`)
  return v
}

const at = (body: BodyName, o: Obj, key: string, path: string): JsonValue => {
  const v = Object.hasOwn(o, key) ? o[key] : undefined
  if (v === undefined) return fail(body, path, "Missing", `missing key "${path}" (nlohmann j.at throws out_of_range)`)
  return v
}

const str = (body: BodyName, v: JsonValue, path: string): string =>
  typeof v === "string" ? v : fail(body, path, "WrongType", `${path} must be a string`)

const int = (body: BodyName, v: JsonValue, path: string, max: number): number => {
  if (typeof v !== "number" || !Number.isInteger(v)) return fail(body, path, "WrongType", `${path} must be an integer`)
  if (v < 0 || v > max) return fail(body, path, "OutOfRange", `${path} = ${v} is outside 0..${max}`)
  return v
}

const u64 = (body: BodyName, v: JsonValue, path: string): bigint => {
  if (typeof v === "bigint") {
    if (v < 0n || v > 0xffffffffffffffffn) return fail(body, path, "OutOfRange", `${path} is outside the u64 range`)
    return v
  }
  return BigInt(int(body, v, path, Number.MAX_SAFE_INTEGER))
}

const bool = (body: BodyName, v: JsonValue, path: string): boolean =>
  typeof v === "boolean" ? v : fail(body, path, "WrongType", `${path} must be a boolean`)

const arr = (body: BodyName, v: JsonValue, path: string): ReadonlyArray<JsonValue> =>
  Array.isArray(v) ? v : fail(body, path, "WrongType", `${path} must be an array`)

const u64Json = (n: bigint): JsonValue => (n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n)

const dump = (body: BodyName, v: JsonValue): Either.Either<Buffer, TentBodyError> =>
  NlohmannJson.isDumpable(v)
    ? Either.right(Buffer.from(NlohmannJson.stringify(v), "utf8"))
    : Either.left(bodyError(body, "", "NotUtf8", "a string has a lone surrogate (nlohmann's dump throws 316)"))

// ---------------------------------------------------------------------------------------------------------------
// Notify

/**
 * TENT's `Notification` as the `Notify` call carries it: JSON `{"msg","name"}` (`to_json`/`from_json`,
 * `control_plane.cpp:113-120`). `msg` is a JSON string, not base64: it must be valid UTF-8 text (nlohmann's strict
 * `dump()` throws on anything else), so binary messages cannot ride TENT's TCP notification path.
 *
 * @since 0.2.0
 */
export interface TentNotification {
  readonly name: string
  readonly msg: string
}

/**
 * Encodes a notification as TENT's `ControlClient::notify` does (`control_plane.cpp:122-128`): for name "a" and msg
 * "b", `{"msg":"b","name":"a"}`.
 *
 * @since 0.2.0
 */
export const encodeNotify = (n: TentNotification): Either.Either<Buffer, TentBodyError> =>
  dump("Notify", { name: n.name, msg: n.msg })

/**
 * Decodes a `Notify` body as TENT's `onNotify` does (`control_plane.cpp:450-476`): `name` and `msg` are required
 * strings, other keys are ignored.
 *
 * @since 0.2.0
 */
export const decodeNotify = (bytes: Uint8Array): Either.Either<TentNotification, TentBodyError> =>
  guard(() => {
    const o = parseObject("Notify", bytes)
    return {
      name: str("Notify", at("Notify", o, "name", "name"), "name"),
      msg: str("Notify", at("Notify", o, "msg", "msg"), "msg")
    }
  })

// ---------------------------------------------------------------------------------------------------------------
// BootstrapDesc

/**
 * TENT's `BootstrapDesc` (`include/tent/runtime/control_plane.h:44-58`), the `BootstrapRdma` request and response,
 * plus our optional RFC fields.
 *
 * @since 0.2.0
 */
export interface BootstrapDesc {
  /** Sender's `"<server>@<nic>"`. */
  readonly local_nic_path: string
  /** Target's `"<server>@<nic>"`. */
  readonly peer_nic_path: string
  /** Data QP numbers (u32), paired positionally. */
  readonly qp_num: ReadonlyArray<number>
  /** u16. */
  readonly local_lid: number
  /** 16 bytes as `%02x` joined by `:`. */
  readonly local_gid: string
  /** Error text; empty on success. */
  readonly reply_msg: string
  /** Notify QP number (u32); 0 = notifications not supported. */
  readonly notify_qp_num: number
  /** Our extension: notification protocol version offered; absent for TENT peers. */
  readonly notify_proto?: number
  /** Our extension: the sender's incarnation (restart counter); absent for TENT peers. */
  readonly notify_incarnation?: bigint
}

/**
 * A `BootstrapDesc` with TENT's defaults (`local_lid = 0`, `notify_qp_num = 0`, empty strings and list).
 *
 * @since 0.2.0
 */
export const emptyBootstrapDesc: BootstrapDesc = {
  local_nic_path: "",
  peer_nic_path: "",
  qp_num: [],
  local_lid: 0,
  local_gid: "",
  reply_msg: "",
  notify_qp_num: 0
}

/**
 * Encodes a `BootstrapDesc` as TENT's `json j = desc; j.dump()` (`control_plane.cpp:64-65, 389-390`): seven keys in
 * sorted order, ours added only when set.
 *
 * @since 0.2.0
 */
export const encodeBootstrapDesc = (d: BootstrapDesc): Either.Either<Buffer, TentBodyError> =>
  dump("BootstrapDesc", {
    local_nic_path: d.local_nic_path,
    peer_nic_path: d.peer_nic_path,
    qp_num: d.qp_num,
    local_lid: d.local_lid,
    local_gid: d.local_gid,
    reply_msg: d.reply_msg,
    notify_qp_num: d.notify_qp_num,
    notify_proto: d.notify_proto,
    notify_incarnation: d.notify_incarnation === undefined ? undefined : u64Json(d.notify_incarnation)
  })

/**
 * Decodes a `BootstrapDesc` with `j.at` semantics for TENT's seven fields (`NLOHMANN_DEFINE_TYPE_INTRUSIVE`,
 * `control_plane.h:55-57`); `notify_proto` and `notify_incarnation` are read when present.
 *
 * @since 0.2.0
 */
export const decodeBootstrapDesc = (bytes: Uint8Array): Either.Either<BootstrapDesc, TentBodyError> =>
  guard(() => {
    const B = "BootstrapDesc" as const
    const o = parseObject(B, bytes)
    const d: {
      -readonly [K in keyof BootstrapDesc]: BootstrapDesc[K]
    } = {
      local_nic_path: str(B, at(B, o, "local_nic_path", "local_nic_path"), "local_nic_path"),
      peer_nic_path: str(B, at(B, o, "peer_nic_path", "peer_nic_path"), "peer_nic_path"),
      qp_num: arr(B, at(B, o, "qp_num", "qp_num"), "qp_num").map((v, k) => int(B, v, `qp_num[${k}]`, 0xffffffff)),
      local_lid: int(B, at(B, o, "local_lid", "local_lid"), "local_lid", 0xffff),
      local_gid: str(B, at(B, o, "local_gid", "local_gid"), "local_gid"),
      reply_msg: str(B, at(B, o, "reply_msg", "reply_msg"), "reply_msg"),
      notify_qp_num: int(B, at(B, o, "notify_qp_num", "notify_qp_num"), "notify_qp_num", 0xffffffff)
    }
    const proto = o.notify_proto
    if (proto !== undefined) d.notify_proto = int(B, proto, "notify_proto", 0xffffffff)
    const inc = o.notify_incarnation
    if (inc !== undefined) d.notify_incarnation = u64(B, inc, "notify_incarnation")
    return d
  })

// ---------------------------------------------------------------------------------------------------------------
// SegmentDesc

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

// ---------------------------------------------------------------------------------------------------------------
// SendData / RecvData

/**
 * Bytes of `XferDataDesc` (`control_plane.h:60-63`): `{u64 peer_mem_addr, u64 length}`, both little-endian
 * (`htole64`, `control_plane.cpp:76-80, 101-103`; read back with `le64toh`, 399-402, 423-426).
 *
 * @since 0.2.0
 */
export const XFER_DATA_DESC_BYTES = 16

/**
 * The `SendData`/`RecvData` request header.
 *
 * @since 0.2.0
 */
export interface XferDataDesc {
  readonly peerMemAddr: bigint
  readonly length: bigint
}

/**
 * Encodes a `SendData` request (header then `data`) or, with no data, a `RecvData` request (header only).
 *
 * @since 0.2.0
 */
export const encodeXferData = (desc: XferDataDesc, data?: Uint8Array): Buffer => {
  const b = Buffer.alloc(XFER_DATA_DESC_BYTES + (data?.length ?? 0))
  b.writeBigUInt64LE(BigInt.asUintN(64, desc.peerMemAddr), 0)
  b.writeBigUInt64LE(BigInt.asUintN(64, desc.length), 8)
  if (data !== undefined) b.set(data, XFER_DATA_DESC_BYTES)
  return b
}

/**
 * Decodes a `SendData`/`RecvData` request: the header and the bytes after it. Fails as TENT's handlers answer
 * (`control_plane.cpp:395-408, 419-422`): shorter than 16 bytes → "request too short"; for `SendData`
 * (`withData`), fewer data bytes than `length` → "invalid request size".
 *
 * @since 0.2.0
 */
export const decodeXferData = (
  bytes: Uint8Array,
  withData: boolean
): Either.Either<{ readonly desc: XferDataDesc; readonly data: Uint8Array }, TentBodyError> => {
  if (bytes.length < XFER_DATA_DESC_BYTES) {
    return Either.left(bodyError("XferDataDesc", "", "Malformed", "request too short"))
  }
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const desc = { peerMemAddr: b.readBigUInt64LE(0), length: b.readBigUInt64LE(8) }
  if (withData && BigInt(bytes.length - XFER_DATA_DESC_BYTES) < desc.length) {
    return Either.left(bodyError("XferDataDesc", "length", "OutOfRange", "invalid request size"))
  }
  const data = withData
    ? b.subarray(XFER_DATA_DESC_BYTES, XFER_DATA_DESC_BYTES + Number(desc.length))
    : b.subarray(16, 16)
  return Either.right({ desc, data })
}
