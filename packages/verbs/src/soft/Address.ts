/**
 * How a SoftVerbs port exposes its address: as GID 0, the way a RoCE v2 port exposes its IPv4 address as an
 * IPv4-mapped GID (`::ffff:a.b.c.d`). RoCE always uses UDP port 4791; a SoftVerbs device has a port of its own, so
 * the two bytes before the `ffff` carry it. A peer that reads GID 0 and puts it in `ah_attr.grh.dgid` reaches the QP.
 */
import type { Gid } from "../Verbs.js"

/** The GID of a SoftVerbs device bound at `host:port` (IPv4). */
export const softGid = (host: string, port: number): Gid => {
  const gid = new Uint8Array(16)
  gid[8] = (port >> 8) & 0xff
  gid[9] = port & 0xff
  gid[10] = 0xff
  gid[11] = 0xff
  const parts = host.split(".").map((p) => Number.parseInt(p, 10))
  for (let i = 0; i < 4; i++) gid[12 + i] = parts[i] ?? 0
  return gid
}

/** The UDP address a SoftVerbs GID names, or undefined when the GID is not one. */
export const softAddressOfGid = (
  gid: Gid | undefined
): { readonly host: string; readonly port: number } | undefined => {
  if (gid === undefined || gid.length !== 16) return undefined
  for (let i = 0; i < 8; i++) if (gid[i] !== 0) return undefined
  if (gid[10] !== 0xff || gid[11] !== 0xff) return undefined
  const port = ((gid[8] as number) << 8) | (gid[9] as number)
  if (port === 0) return undefined
  return { host: `${gid[12]}.${gid[13]}.${gid[14]}.${gid[15]}`, port }
}
