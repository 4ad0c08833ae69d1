/**
 * The control plane's authentication: a shared secret proven in both directions by a challenge–response before any
 * request is served, so the secret never crosses the wire; and the allow-list of source addresses.
 *
 * ```
 * client → server  Hello      [u8 version 1][32 client nonce][name: UTF-8, the rest, ≤ 256 bytes]
 * server → client  Challenge  [32 server nonce][32 server proof]
 * client → server  Proof      [32 client proof]
 * proof = HMAC-SHA256(secret, label ‖ client nonce ‖ server nonce ‖ name), label "tent-rpc-auth/1 server\0" or
 *         "tent-rpc-auth/1 client\0"
 * ```
 *
 * Frames of kinds {@link AuthKind}, id 0, in the lean framing. The client sends nothing else until the server has
 * proven itself, the server serves nothing until the client has. `name` is the client's segment name (its
 * control-plane address): once proven, it is the connection's identity, handed to every handler as the `x-tent-peer`
 * header. The two labels keep one side's proof from being replayed as the other's; fresh nonces on both sides keep an
 * old exchange from being replayed at all. What this does not do: encrypt, or authenticate each later frame (a host on
 * the path can read the traffic and inject into an authenticated connection); and with one secret for the cluster,
 * any holder of it can claim any name.
 */
import * as Crypto from "node:crypto"
import * as Net from "node:net"

/** Frame kinds of the handshake (after the lean wire's 1–7). */
export const AuthKind = {
  Hello: 8,
  Challenge: 9,
  Proof: 10
} as const

/** The header that carries a proven peer's name to the handlers (`Server.PEER_HEADER`). */
export const PEER_HEADER = "x-tent-peer"

/** How long a connection may take to prove itself before it is closed (and counted `auth_required`). */
export const AUTH_TIMEOUT_MS = 10_000

/** The handshake's version byte. */
export const AUTH_VERSION = 1
export const NONCE_BYTES = 32
export const MAC_BYTES = 32
/** The longest name a `Hello` may carry. */
export const MAX_NAME_BYTES = 256
/** Shortest secret accepted (bytes of its UTF-8 form). */
export const MIN_SECRET_BYTES = 16

const SERVER_LABEL = Buffer.from("tent-rpc-auth/1 server\0")
const CLIENT_LABEL = Buffer.from("tent-rpc-auth/1 client\0")

/** Why a connection was refused before anything was served; each is a label of `tent_rpc_rejected_connections_total`. */
export const REJECT_REASONS = ["auth_required", "auth_failed", "not_allowed", "max_connections", "tent_wire"] as const
export type RejectReason = (typeof REJECT_REASONS)[number]

/** The proof of `side` for one exchange. */
export const proof = (
  secret: Uint8Array,
  side: "server" | "client",
  clientNonce: Uint8Array,
  serverNonce: Uint8Array,
  name: Uint8Array
): Buffer =>
  Crypto.createHmac("sha256", secret)
    .update(side === "server" ? SERVER_LABEL : CLIENT_LABEL)
    .update(clientNonce)
    .update(serverNonce)
    .update(name)
    .digest()

/** Whether `got[start, start + 32)` is `want`, in constant time. */
export const sameProof = (want: Buffer, got: Buffer, start: number, end: number): boolean =>
  end - start === MAC_BYTES && Crypto.timingSafeEqual(want, got.subarray(start, end))

export const nonce = (): Buffer => Crypto.randomBytes(NONCE_BYTES)

/** What the server holds between a `Hello` and its `Proof`. */
export interface Pending {
  readonly expect: Buffer
  readonly name: string
}

/**
 * The server's answer to a `Hello` body `[start, end)`: the challenge's body and what to expect back, or why the
 * hello is refused.
 */
export const answerHello = (
  secret: Uint8Array,
  buf: Buffer,
  start: number,
  end: number
): { readonly challenge: Buffer; readonly pending: Pending } | string => {
  if (end - start < 1 + NONCE_BYTES) return "a Hello shorter than its nonce"
  if (buf[start] !== AUTH_VERSION) return `a Hello of version ${buf[start]} (this server speaks ${AUTH_VERSION})`
  const nameBytes = buf.subarray(start + 1 + NONCE_BYTES, end)
  if (nameBytes.length > MAX_NAME_BYTES) return `a Hello name of ${nameBytes.length} bytes (at most ${MAX_NAME_BYTES})`
  const name = nameBytes.toString("utf8")
  if (!Buffer.from(name, "utf8").equals(nameBytes)) return "a Hello name that is not UTF-8"
  const clientNonce = Buffer.from(buf.subarray(start + 1, start + 1 + NONCE_BYTES))
  const serverNonce = nonce()
  const challenge = Buffer.concat([serverNonce, proof(secret, "server", clientNonce, serverNonce, nameBytes)])
  return { challenge, pending: { expect: proof(secret, "client", clientNonce, serverNonce, nameBytes), name } }
}

/** The client's side: its `Hello` body, and how it checks the challenge and makes its proof. */
export class ClientHandshake {
  readonly clientNonce = nonce()
  readonly nameBytes: Buffer

  constructor(
    private readonly secret: Uint8Array,
    name: string
  ) {
    const bytes = Buffer.from(name, "utf8")
    this.nameBytes = bytes.length > MAX_NAME_BYTES ? bytes.subarray(0, 0) : bytes
  }

  hello(): Buffer {
    return Buffer.concat([Buffer.of(AUTH_VERSION), this.clientNonce, this.nameBytes])
  }

  /** The `Proof` body for a `Challenge` body `[start, end)`, or undefined when the server did not prove the secret. */
  answer(buf: Buffer, start: number, end: number): Buffer | undefined {
    if (end - start !== NONCE_BYTES + MAC_BYTES) return undefined
    const serverNonce = Buffer.from(buf.subarray(start, start + NONCE_BYTES))
    const want = proof(this.secret, "server", this.clientNonce, serverNonce, this.nameBytes)
    if (!sameProof(want, buf, start + NONCE_BYTES, end)) return undefined
    return proof(this.secret, "client", this.clientNonce, serverNonce, this.nameBytes)
  }
}

/**
 * The allow-list: CIDRs (`10.0.0.0/8`, `fd00::/8`) or single addresses. An IPv4 peer seen as `::ffff:a.b.c.d` is
 * checked as `a.b.c.d`. Throws with a message naming the entry that does not parse.
 */
export const allowList = (entries: ReadonlyArray<string>): ((address: string | undefined) => boolean) | undefined => {
  const list = entries.map((e) => e.trim()).filter((e) => e !== "")
  if (list.length === 0) return undefined
  const blocks = new Net.BlockList()
  for (const entry of list) {
    const [addr, bits, extra] = entry.split("/")
    const family = Net.isIPv4(addr ?? "") ? "ipv4" : Net.isIPv6(addr ?? "") ? "ipv6" : undefined
    if (family === undefined || extra !== undefined) throw new Error(`"${entry}" is not an address or a CIDR`)
    if (bits === undefined) {
      blocks.addAddress(addr as string, family)
      continue
    }
    const prefix = Number(bits)
    if (!/^\d+$/.test(bits) || prefix > (family === "ipv4" ? 32 : 128)) {
      throw new Error(`"${entry}": the prefix length must be 0–${family === "ipv4" ? 32 : 128}`)
    }
    blocks.addSubnet(addr as string, prefix, family)
  }
  return (address) => {
    if (address === undefined) return false
    const mapped = address.startsWith("::ffff:") && Net.isIPv4(address.slice(7)) ? address.slice(7) : address
    return blocks.check(mapped, Net.isIPv4(mapped) ? "ipv4" : "ipv6")
  }
}
