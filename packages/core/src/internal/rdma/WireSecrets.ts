/**
 * What an endpoint's QPs start from that a host forging the peer's address must not guess: random initial PSNs (one
 * per data QP, one for the notify QP) and a 64-bit token every SoftVerbs datagram to its QPs must carry
 * (`SoftVerbs.setQpToken`; a real NIC ignores it: its fabric isolates). Sent in the bootstrap descriptor; used only
 * with a peer that sent its own, so a TENT peer (and an engine that predates them) keeps PSN 0 and no token.
 */
import type { BootstrapDesc } from "@tent/rpc"
import { type QueuePair, Rc, type RdmaError, SoftVerbs } from "@tent/verbs"
import { Effect } from "effect"

/** The PSNs and tokens both sides agreed on for one connection. */
export interface Agreed {
  /** Per data QP: this side's initial send PSN and the peer's. */
  readonly data: ReadonlyArray<{ readonly mine: number; readonly theirs: number }>
  readonly notify: { readonly mine: number; readonly theirs: number }
  readonly tokens: SoftVerbs.QpToken
}

/** One endpoint's secrets. */
export class WireSecrets {
  private readonly psns: Array<number> = []
  private readonly notifyPsn = Rc.randomPsn()
  private readonly token = SoftVerbs.randomToken()

  /** A data QP was created: its PSN. */
  addQp(): void {
    this.psns.push(Rc.randomPsn())
  }

  /** The descriptor's fields. */
  get desc(): Pick<BootstrapDesc, "qp_psn" | "notify_psn" | "qp_token"> {
    return { qp_psn: this.psns, notify_psn: this.notifyPsn, qp_token: String(this.token) }
  }

  /** What to connect with, given the peer's descriptor; a string says why it cannot be agreed on. */
  agree(peer: BootstrapDesc): Agreed | string {
    const theirs = peer.qp_psn
    if (theirs !== undefined && theirs.length !== this.psns.length) {
      return `qp_psn has ${theirs.length} entries for ${this.psns.length} data QPs`
    }
    return {
      data: this.psns.map((p, i) =>
        theirs === undefined ? { mine: 0, theirs: 0 } : { mine: p, theirs: theirs[i] ?? 0 }
      ),
      notify:
        peer.notify_psn === undefined ? { mine: 0, theirs: 0 } : { mine: this.notifyPsn, theirs: peer.notify_psn },
      tokens:
        peer.qp_token === undefined ? { local: 0n, remote: 0n } : { local: this.token, remote: BigInt(peer.qp_token) }
    }
  }
}

/** Sets `qp`'s token (SoftVerbs; kept across RESET, so always set: 0n clears) and connects it from `psn` to `remote`. */
export const connectQp = (
  qp: QueuePair,
  psn: number,
  remote: Rc.RcPeer,
  tokens: SoftVerbs.QpToken,
  params: Rc.RcParams
): Effect.Effect<void, RdmaError> =>
  Effect.zipRight(SoftVerbs.setQpToken(qp, tokens), Rc.connect(qp, psn, remote, params))
