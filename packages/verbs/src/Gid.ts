/**
 * GIDs as verbs tools print them: eight groups of four hex digits, `0000:0000:0000:0000:0000:ffff:7f00:0001`.
 *
 * @since 0.1.0
 */
import type { Gid } from "./Verbs.js"

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
