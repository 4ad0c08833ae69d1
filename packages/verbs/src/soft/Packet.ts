/**
 * The SoftVerbs wire format: one RC packet per UDP datagram, a fixed 56-byte little-endian header and up to one path
 * MTU of payload. The format is private to SoftVerbs; its semantics (PSNs, ACK/NAK, RNR, go-back-N) are InfiniBand's.
 *
 * ```
 *  0 u8  version (2)        1 u8  op            2 u8  flags         3 u8  syndrome (NAK kind)
 *  4 u32 destination QPN    8 u32 source QPN   12 u32 PSN (24 bits) 16 u32 ACK PSN (24 bits, if ACK_VALID)
 * 20 u32 immediate / RNR timer                 24 u32 rkey          28 u32 message length
 * 32 f64 remote address (message base)         40 u32 payload offset in the message
 * 44 u16 payload length    46 u16 reserved     48 u32 token, low half   52 u32 token, high half
 * 56 payload
 * ```
 *
 * The token (version 2; version 1 had no token and a 48-byte header) is the 64-bit value the destination QP requires
 * on every datagram when its consumer set one (`SoftVerbs.setQpToken`); 0 when the sender has none to present.
 */

/** Header bytes before the payload. */
export const HDR = 56
/** Wire version. */
export const VERSION = 2
/** PSNs are 24 bits. */
export const PSN_MASK = 0xffffff

/** Packet operations. */
export const Op = {
  SEND: 1,
  WRITE: 2,
  READ_REQ: 3,
  READ_RESP: 4,
  ACK: 5,
  NAK: 6
} as const
/** The highest valid op. */
export const OP_MAX = 6

/** Header flags. */
export const Flag = {
  FIRST: 1,
  LAST: 2,
  IMM: 4,
  ACK_REQ: 8,
  ACK_VALID: 16,
  SOLICITED: 32
} as const

/** NAK syndromes. */
export const Nak = {
  /** PSN sequence error: the responder expected another PSN (in the packet's PSN field). */
  SEQ: 1,
  /** Receiver not ready: no RECV posted; the RNR timer is in the immediate field. */
  RNR: 2,
  /** Remote access error: rkey, bounds or access flags. */
  ACCESS: 3,
  /** Invalid request: a SEND longer than the RECV, a malformed message. */
  INVALID: 4
} as const

/** Field offsets. */
export const Off = {
  version: 0,
  op: 1,
  flags: 2,
  syndrome: 3,
  dstQpn: 4,
  srcQpn: 8,
  psn: 12,
  ack: 16,
  imm: 20,
  rkey: 24,
  msgLen: 28,
  raddr: 32,
  offset: 40,
  payloadLen: 44,
  tokenLo: 48,
  tokenHi: 52
} as const

/**
 * Reconstructs the full PSN counter of a 24-bit wire PSN as the value closest to `reference` (PSNs are compared within
 * half the PSN space, as IB does).
 */
export const unwrapPsn = (wire: number, reference: number): number => {
  const delta = ((wire - (reference & PSN_MASK) + 0x800000) & PSN_MASK) - 0x800000
  return reference + delta
}

/**
 * Writes a header into `buf` at 0; the payload, if any, must already be at `HDR`. `tokenLo`/`tokenHi` are the two
 * 32-bit halves of the token the destination QP requires (0 when it requires none).
 */
export const writeHeader = (
  buf: Buffer,
  op: number,
  flags: number,
  syndrome: number,
  dstQpn: number,
  srcQpn: number,
  psn: number,
  ack: number,
  imm: number,
  rkey: number,
  msgLen: number,
  raddr: number,
  offset: number,
  payloadLen: number,
  tokenLo = 0,
  tokenHi = 0
): void => {
  buf[0] = VERSION
  buf[1] = op
  buf[2] = flags
  buf[3] = syndrome
  buf.writeUInt32LE(dstQpn >>> 0, 4)
  buf.writeUInt32LE(srcQpn >>> 0, 8)
  buf.writeUInt32LE(psn & PSN_MASK, 12)
  buf.writeUInt32LE(ack & PSN_MASK, 16)
  buf.writeUInt32LE(imm >>> 0, 20)
  buf.writeUInt32LE(rkey >>> 0, 24)
  buf.writeUInt32LE(msgLen >>> 0, 28)
  buf.writeDoubleLE(raddr, 32)
  buf.writeUInt32LE(offset >>> 0, 40)
  buf.writeUInt16LE(payloadLen, 44)
  buf.writeUInt16LE(0, 46)
  buf.writeUInt32LE(tokenLo >>> 0, 48)
  buf.writeUInt32LE(tokenHi >>> 0, 52)
}

/**
 * Checks the framing of a received datagram; returns `undefined` when it is well formed, or why it is not (a key of
 * the device's malformed counters).
 */
export const validate = (msg: Buffer): "short" | "version" | "op" | "length" | undefined => {
  if (msg.length < HDR) return "short"
  if (msg[0] !== VERSION) return "version"
  const op = msg[1] as number
  if (op < 1 || op > OP_MAX) return "op"
  const payloadLen = msg.readUInt16LE(44)
  if (HDR + payloadLen !== msg.length) return "length"
  const msgLen = msg.readUInt32LE(28)
  const offset = msg.readUInt32LE(40)
  if ((op === Op.SEND || op === Op.WRITE || op === Op.READ_RESP) && offset + payloadLen > msgLen) return "length"
  const raddr = msg.readDoubleLE(32)
  if (!Number.isSafeInteger(raddr) || raddr < 0) return "length"
  return undefined
}
