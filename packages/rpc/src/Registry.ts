import { Context, Effect, Layer } from "effect"
import { InvalidEntry, type TransportFailure } from "./Errors.js"
import type { SegmentDesc } from "./Models.js"
import { RpcAgent } from "./RpcAgent.js"

/** Resolves a segment name to its descriptor. */
export interface RegistryShape {
  /**
   * `peer`: the name is the peer's `host:port` and a lookup asks that peer, so a refetch after a failed call goes to
   * the same address. `central`: a store that can hand out a new `rpc_server_addr` for the same name.
   */
  readonly kind: "peer" | "central"
  readonly getSegmentDesc: (name: string) => Effect.Effect<SegmentDesc, InvalidEntry | TransportFailure>
}

/** The segment registry of this engine. */
export class Registry extends Context.Tag("@tent/rpc/Registry")<Registry, RegistryShape>() {}

/** The peer registry (TENT's `p2p`, the default): `GetSegmentDesc` sent to the address the name spells. */
export const makePeer: Effect.Effect<RegistryShape, never, RpcAgent> = Effect.map(RpcAgent, (agent) => ({
  kind: "peer" as const,
  getSegmentDesc: (name: string) => agent.getSegmentDesc(name)
}))

/** The peer registry as a Layer. */
export const layerPeer: Layer.Layer<Registry, never, RpcAgent> = Layer.effect(Registry, makePeer)

/** A central registry held in memory: `put` may move a segment to a new address (for tests and single hosts). */
export interface MemoryRegistry extends RegistryShape {
  readonly put: (desc: SegmentDesc) => Effect.Effect<void>
  readonly remove: (name: string) => Effect.Effect<void>
  /** How many lookups were made, per name. */
  readonly lookups: (name: string) => number
}

/** Builds a {@link MemoryRegistry} (kind `central`). */
export const makeMemory = (initial: Iterable<SegmentDesc> = []): MemoryRegistry => {
  const entries = new Map<string, SegmentDesc>()
  const counts = new Map<string, number>()
  for (const d of initial) entries.set(d.name, d)
  return {
    kind: "central",
    getSegmentDesc: (name) =>
      Effect.suspend(() => {
        counts.set(name, (counts.get(name) ?? 0) + 1)
        const d = entries.get(name)
        return d === undefined
          ? Effect.fail(new InvalidEntry({ segment: name, message: `no segment named "${name}"` }))
          : Effect.succeed(d)
      }),
    put: (desc) => Effect.sync(() => void entries.set(desc.name, desc)),
    remove: (name) => Effect.sync(() => void entries.delete(name)),
    lookups: (name) => counts.get(name) ?? 0
  }
}
