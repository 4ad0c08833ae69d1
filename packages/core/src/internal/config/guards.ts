/**
 * The bounds on what peers can make this engine hold (the hostile-peer guards): the endpoints it accepts — per peer
 * segment, and in bytes for all peers together — and the notifications queued for its consumers. Read from the
 * ambient `ConfigProvider` by the RDMA transport and the delivery point; a wrong value fails at start naming its key.
 */
import * as Os from "node:os"
import { Config } from "effect"
import { engineKeys } from "./engineKeys.js"
import { readers } from "./KeySpec.js"

const read = readers(engineKeys)

/** The bounds on accepted endpoints. */
export interface EndpointBounds {
  /** `transports/rdma/max_endpoints_per_peer`. */
  readonly perPeer: number
  /** `transports/rdma/max_accepted_bytes`, its -1 resolved to half the host's memory. */
  readonly acceptedBytes: number
}

/** `max_accepted_bytes` -1: half the host's memory (an attacker may not make the engine pin more than that). */
export const autoAcceptedBytes = (): number => Math.floor(Os.totalmem() / 2)

/** {@link EndpointBounds} from the current `ConfigProvider`. */
export const endpointBoundsConfig: Config.Config<EndpointBounds> = Config.all({
  perPeer: read.int("transports/rdma/max_endpoints_per_peer"),
  acceptedBytes: read.int("transports/rdma/max_accepted_bytes")
}).pipe(Config.map((b) => (b.acceptedBytes === -1 ? { ...b, acceptedBytes: autoAcceptedBytes() } : b)))

/** `notification/max_queued_bytes` from the current `ConfigProvider`. */
export const maxQueuedBytesConfig: Config.Config<number> = read.int("notification/max_queued_bytes")
