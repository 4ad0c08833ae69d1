/**
 * The request and response bodies (coro_rpc attachments) of TENT's control-plane calls, encoded as TENT's
 * nlohmann/json writes them (sorted keys, compact) and decoded as its `from_json` reads
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
import { Either } from "effect"
import {
  arr,
  at,
  bodyError,
  dump,
  guard,
  int,
  parseObject,
  str,
  type TentBodyError,
  u64,
  u64Json
} from "../internal/tent/bodyJson.js"
import { isWellFormed } from "../internal/tent/NlohmannJson.js"

export {
  /**
   * A body that is not what TENT's parser would accept, naming the body (`Notify`, `BootstrapDesc`, `SegmentDesc`,
   * `XferDataDesc`), the field (`""` for the whole body) and the `reason`: `Malformed` (not JSON, or too short),
   * `Missing` (a required key is absent), `WrongType`, `OutOfRange`, `NotUtf8`.
   *
   * @since 0.2.0
   */
  TentBodyError
} from "../internal/tent/bodyJson.js"
/**
 * TENT's `SegmentDesc`: its types, encoder and decoder.
 *
 * @since 0.2.0
 */
export * from "./SegmentDesc.js"

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
  // Two well-formed strings: `JSON.stringify` writes nlohmann's bytes (keys in sorted order as given, the same short
  // escapes, other control characters as lowercase `\u00xx`, everything else raw); else the exact writer refuses.
  isWellFormed(n.name) && isWellFormed(n.msg)
    ? Either.right(Buffer.from(JSON.stringify({ msg: n.msg, name: n.name }), "utf8"))
    : dump("Notify", { name: n.name, msg: n.msg })

/**
 * Decodes a `Notify` body as TENT's `onNotify` does (`control_plane.cpp:450-476`): `name` and `msg` are required
 * strings, other keys are ignored.
 *
 * @since 0.2.0
 */
export const decodeNotify = (bytes: Uint8Array): Either.Either<TentNotification, TentBodyError> => {
  const fast = quickNotify(bytes)
  return fast !== undefined ? Either.right(fast) : exactNotify(bytes)
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true })

/**
 * The common body, read with the platform's parser: valid UTF-8, an object whose `name` and `msg` are well-formed
 * strings. Anything else (where `JSON.parse` and nlohmann could differ: bad UTF-8, a lone surrogate escape, a wrong
 * type) is left to the exact reader, which also gives the typed error.
 */
const quickNotify = (bytes: Uint8Array): TentNotification | undefined => {
  try {
    const o: unknown = JSON.parse(strictUtf8.decode(bytes))
    if (typeof o !== "object" || o === null || Array.isArray(o)) return undefined
    const { name, msg } = o as { name?: unknown; msg?: unknown }
    if (typeof name !== "string" || typeof msg !== "string" || !isWellFormed(name) || !isWellFormed(msg)) {
      return undefined
    }
    return { name, msg }
  } catch {
    return undefined
  }
}

const exactNotify = (bytes: Uint8Array): Either.Either<TentNotification, TentBodyError> =>
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
    : b.subarray(XFER_DATA_DESC_BYTES, XFER_DATA_DESC_BYTES)
  return Either.right({ desc, data })
}
