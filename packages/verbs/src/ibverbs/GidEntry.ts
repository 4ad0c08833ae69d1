/**
 * One GID table entry with what GID auto-selection weighs: its type from `_ibv_query_gid_ex` (or, on an rdma-core
 * older than v32 that lacks it, from sysfs `gid_attrs/types/<index>`) and the network device the kernel bound it to
 * (sysfs `gid_attrs/ndevs/<index>`, read as TENT reads it).
 *
 * @internal
 */
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { Effect } from "effect"
import { GidType, LinkLayer } from "../Constants.js"
import { RdmaError } from "../Errors.js"
import type { Gid, GidEntry } from "../Verbs.js"
import { addressOf, stableBuffer } from "./Codec.js"
import { errnoOf, errnoText, type Library } from "./Library.js"

/** `sizeof(struct ibv_gid_entry)`: gid[16], gid_index, port_num, gid_type, ndev_ifindex. */
const ENTRY_SIZE = 32
const GID_TYPE_OFFSET = 24
const ENODATA = 61

const rdmaError = (op: string, errno: number, what: string) =>
  new RdmaError({ op, errno, message: `${op} ${what}failed: ${errnoText(errno)}` })

/** The first line of a sysfs file, or "" when it cannot be read. */
const sysfsLine = (path: string): string => {
  try {
    return (readFileSync(path, "utf8").split("\n")[0] ?? "").trim()
  } catch {
    return ""
  }
}

/** What the entry lookup needs from an opened device. */
export interface GidSource {
  readonly lib: Library
  readonly ctx: number
  readonly device: string
  /** The sysfs mount point (`/sys`; tests point it at a directory of their own). */
  readonly sysfs: string
  readonly queryGid: (port: number, index: number) => Effect.Effect<Gid, RdmaError>
  readonly linkLayer: (port: number) => Effect.Effect<number, RdmaError>
}

const entryBuf = stableBuffer(ENTRY_SIZE)

const isZero = (gid: Gid): boolean => gid.every((b) => b === 0)

/** `ibv_query_gid_ex(ctx, port, index, &entry, 0)` plus the entry's ndev; an empty slot is ENODATA. */
export const queryGidEntry = (src: GidSource, port: number, index: number): Effect.Effect<GidEntry, RdmaError> =>
  Effect.suspend(() => {
    const attrs = join(src.sysfs, "class/infiniband", src.device, "ports", String(port), "gid_attrs")
    const ndev = () => sysfsLine(join(attrs, "ndevs", String(index)))
    const queryEx = src.lib.optional.queryGidEx()
    if (queryEx !== undefined) {
      entryBuf.fill(0)
      const rc = queryEx(src.ctx, port, index, addressOf(entryBuf), 0, ENTRY_SIZE)
      if (rc !== 0) {
        return Effect.fail(rdmaError("ibv_query_gid_ex", errnoOf(rc), `of port ${port} index ${index} `))
      }
      const gid = new Uint8Array(entryBuf.subarray(0, 16))
      const gidType = entryBuf.readUInt32LE(GID_TYPE_OFFSET) as GidEntry["gidType"]
      return Effect.succeed({ index, gid, gidType, ndev: ndev() })
    }
    // rdma-core before v32: the GID from ibv_query_gid, its type from sysfs as rdma-core itself reads it there.
    return Effect.gen(function* () {
      const gid = yield* src.queryGid(port, index)
      if (isZero(gid)) {
        return yield* Effect.fail(rdmaError("ibv_query_gid", ENODATA, `of port ${port} index ${index} (empty) `))
      }
      const type = sysfsLine(join(attrs, "types", String(index)))
      const gidType =
        type === "RoCE v2"
          ? GidType.ROCE_V2
          : (yield* src.linkLayer(port)) === LinkLayer.INFINIBAND
            ? GidType.IB
            : GidType.ROCE_V1
      return { index, gid, gidType, ndev: ndev() }
    })
  })
