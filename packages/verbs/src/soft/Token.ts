/**
 * The per-QP token of SoftVerbs. A QP whose consumer set a token drops (and counts, `badToken`) every datagram that
 * does not carry it, before the datagram can complete a work request, touch memory or move the QP's state; the QP
 * writes its peer's token into every datagram it sends. With no token (0, the default) nothing is checked.
 *
 * What it models: a key the receiving QP checks on every packet, as a Q_Key (UD) or a P_Key (every IB packet) is
 * checked, together with the isolation a real fabric gives (a host on it cannot inject packets with another host's
 * source address and a QP's numbers). What it does not: it is not a MAC, and the wire is not encrypted, so a host that
 * can read the traffic can read the token and forge packets with it; it binds no packet's content.
 */
import { randomBytes } from "node:crypto"
import { Effect } from "effect"
import { Errno } from "../Constants.js"
import { RdmaError } from "../Errors.js"
import type { QueuePair } from "../Verbs.js"
import { SoftQp } from "./SoftQp.js"

/** The tokens of one QP: what it requires on what it receives, and what it presents on what it sends. */
export interface QpToken {
  /** The token every datagram for this QP must carry; `0n` (the default): nothing is checked. */
  readonly local: bigint
  /** The token every datagram this QP sends carries: the peer QP's `local` token (`0n` when the peer checks none). */
  readonly remote: bigint
}

/** The largest token: tokens are 64-bit. */
export const TOKEN_MAX = (1n << 64n) - 1n

/** A random non-zero 64-bit token from the system's CSPRNG. */
export const randomToken = (): bigint => {
  const token = randomBytes(8).readBigUInt64LE(0)
  return token === 0n ? 1n : token
}

const bad = (qp: QueuePair, field: string, value: unknown) =>
  new RdmaError({
    op: "soft_set_qp_token",
    errno: Errno.EINVAL,
    message: `QP ${qp.qpNum}: token.${field} must be a bigint in 0..2^64-1, got ${String(value)}`
  })

/**
 * Sets a QP's tokens. True when the QP is a SoftVerbs QP (the tokens apply from its next datagram on), false for
 * another provider's QP, which is left as it is (a real NIC's isolation is its fabric's). A value that is not a
 * 64-bit bigint, or a destroyed QP, fails `RdmaError` EINVAL and changes nothing.
 */
export const setQpToken = (qp: QueuePair, token: QpToken): Effect.Effect<boolean, RdmaError> =>
  Effect.suspend(() => {
    if (!(qp instanceof SoftQp)) return Effect.succeed(false)
    for (const field of ["local", "remote"] as const) {
      const value: unknown = token[field]
      if (typeof value !== "bigint" || value < 0n || value > TOKEN_MAX) return Effect.fail(bad(qp, field, value))
    }
    if (qp.destroyed) {
      return Effect.fail(
        new RdmaError({ op: "soft_set_qp_token", errno: Errno.EINVAL, message: `QP ${qp.qpNum} is destroyed` })
      )
    }
    qp.tokenCheck = token.local !== 0n
    qp.rxTokenLo = Number(token.local & 0xffffffffn)
    qp.rxTokenHi = Number(token.local >> 32n)
    qp.txTokenLo = Number(token.remote & 0xffffffffn)
    qp.txTokenHi = Number(token.remote >> 32n)
    return Effect.succeed(true)
  })
