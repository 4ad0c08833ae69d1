/**
 * GIDs as verbs tools print them: eight groups of four hex digits, `0000:0000:0000:0000:0000:ffff:7f00:0001`; and
 * TENT's automatic choice of a port's GID (`selectGidIndex`, `autoSelectGid`).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { GidType } from "./Constants.js"
import { RdmaError } from "./Errors.js"
import type { DeviceContext, Gid, GidEntry } from "./Verbs.js"

/**
 * Formats a 16-byte GID as eight colon-separated groups of four hex digits.
 *
 * @since 0.1.0
 */
export const gidToString = (gid: Gid): string => {
  const groups: Array<string> = []
  for (let i = 0; i < 16; i += 2) {
    groups.push((((gid[i] ?? 0) << 8) | (gid[i + 1] ?? 0)).toString(16).padStart(4, "0"))
  }
  return groups.join(":")
}

/**
 * Parses the format of {@link gidToString}; returns `undefined` for anything else.
 *
 * @since 0.1.0
 */
export const gidFromString = (text: string): Gid | undefined => {
  const groups = text.split(":")
  if (groups.length !== 8) return undefined
  const gid = new Uint8Array(16)
  for (let i = 0; i < 8; i++) {
    const group = groups[i] as string
    if (!/^[0-9a-fA-F]{1,4}$/.test(group)) return undefined
    const v = Number.parseInt(group, 16)
    gid[2 * i] = v >> 8
    gid[2 * i + 1] = v & 0xff
  }
  return gid
}

/**
 * Whether a GID is IPv4-mapped (`::ffff:a.b.c.d`) or an IPv4-encoded multicast address (`ff0e::ffff:a.b.c.d`), as
 * the kernel's `ipv6_addr_v4mapped` and TENT's copy of it decide.
 *
 * @since 0.2.0
 */
export const isIpv4Mapped = (gid: Gid): boolean => {
  const mappedTail = gid[8] === 0 && gid[9] === 0 && gid[10] === 0xff && gid[11] === 0xff
  if (!mappedTail) return false
  const zeroHead = [0, 1, 2, 3, 4, 5, 6, 7].every((i) => gid[i] === 0)
  const multicastHead = gid[0] === 0xff && gid[1] === 0x0e && [2, 3, 4, 5, 6, 7].every((i) => gid[i] === 0)
  return zeroHead || multicastHead
}

/**
 * Whether a network device name is one TENT takes for an overlay network: `flannel*`, `cni*`, `calico*`, `vxlan*`,
 * `docker*` or `tunl0`.
 *
 * @since 0.2.0
 */
export const isOverlayDevice = (ndev: string): boolean =>
  ["flannel", "cni", "calico", "vxlan", "docker"].some((p) => ndev.startsWith(p)) || ndev === "tunl0"

/**
 * Whether an IPv4-mapped GID is in a range TENT takes for an overlay network: 10.0.0.0/8, 172.16.0.0/12 or
 * 100.64.0.0/10.
 *
 * @since 0.2.0
 */
export const isOverlayIpv4 = (gid: Gid): boolean => {
  if (!isIpv4Mapped(gid)) return false
  const a = gid[12] ?? 0
  const b = gid[13] ?? 0
  return a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 100 && b >= 64 && b <= 127)
}

/**
 * How {@link selectGidIndex} chose: a RoCE v2 (IPv4-mapped) or IB GID on a network device that is no overlay, one on
 * an overlay device or address, one on no network device, or, failing all of those, the first non-zero GID.
 *
 * @since 0.2.0
 */
export type GidChoice = "Network" | "Overlay" | "NoNetwork" | "FirstNonZero"

/**
 * TENT's automatic GID choice (`transports/rdma/device/gid_index` -1) over one port's table, entries in index order,
 * `undefined` for a slot that could not be read. Scanning in order: the first RoCE v2 IPv4-mapped or IB GID whose
 * network device is set and is no overlay (by name or by address) wins at once; otherwise the first such GID on an
 * overlay, then the first such GID on no network device, then the first non-zero GID of any type. `undefined` when
 * the table has no non-zero GID.
 *
 * @since 0.2.0
 */
export const selectGidIndex = (
  entries: ReadonlyArray<GidEntry | undefined>
): { readonly index: number; readonly choice: GidChoice } | undefined => {
  let overlay = -1
  let noNetwork = -1
  let firstNonZero = -1
  for (const entry of entries) {
    if (entry === undefined) continue
    if (firstNonZero < 0 && entry.gid.some((b) => b !== 0)) firstNonZero = entry.index
    const mapped = isIpv4Mapped(entry.gid)
    if (!((mapped && entry.gidType === GidType.ROCE_V2) || entry.gidType === GidType.IB)) continue
    const hasNdev = entry.ndev !== ""
    const isOverlay = hasNdev && (isOverlayDevice(entry.ndev) || isOverlayIpv4(entry.gid))
    if (hasNdev && !isOverlay) return { index: entry.index, choice: "Network" }
    if (hasNdev) {
      if (overlay < 0) overlay = entry.index
    } else if (noNetwork < 0) {
      noNetwork = entry.index
    }
  }
  if (overlay >= 0) return { index: overlay, choice: "Overlay" }
  if (noNetwork >= 0) return { index: noNetwork, choice: "NoNetwork" }
  if (firstNonZero >= 0) return { index: firstNonZero, choice: "FirstNonZero" }
  return undefined
}

/**
 * Reads the GID table of `port` (its length from `ibv_query_port`; an unreadable slot is skipped, as TENT skips it)
 * and applies {@link selectGidIndex}. Fails with `RdmaError` ENODATA when the table has no non-zero GID.
 *
 * @since 0.2.0
 */
export const autoSelectGid = (
  ctx: DeviceContext,
  port: number
): Effect.Effect<{ readonly entry: GidEntry; readonly choice: GidChoice }, RdmaError> =>
  Effect.gen(function* () {
    const { gidTblLen } = yield* ctx.queryPort(port)
    const entries: Array<GidEntry | undefined> = []
    for (let i = 0; i < gidTblLen; i++) {
      entries.push(yield* Effect.orElseSucceed(ctx.queryGidEntry(port, i), () => undefined))
    }
    const picked = selectGidIndex(entries)
    const entry = picked === undefined ? undefined : entries[picked.index]
    if (picked === undefined || entry === undefined) {
      return yield* new RdmaError({
        op: "ibv_query_gid_ex",
        errno: 61,
        message: `no usable GID on ${ctx.device.name} port ${port}: all ${gidTblLen} entries are empty`
      })
    }
    return { entry, choice: picked.choice }
  })
