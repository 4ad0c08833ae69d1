/**
 * The engine's internal services, each provided by a scoped Layer in `TransferEngine.layer`'s composition: who this
 * engine is on the control plane, the agent it calls peers through, and the queue of notify channels that went away
 * with sends pending.
 */
import type { RpcAgent } from "@tent/rpc"
import { Context, type Queue } from "effect"
import type { RetiringChannel } from "../Resend.js"

/** This engine's control-plane address and segment name (under the peer registry: the same `host:port`). */
export interface IdentityShape {
  readonly address: string
  readonly segmentName: string
}

/** Who this engine is. */
export class EngineIdentity extends Context.Tag("@tent/core/internal/EngineIdentity")<
  EngineIdentity,
  IdentityShape
>() {}

/** The agent every control-plane call of the engine goes through: the plain agent as the `PeerHealth` seam decorates it. */
export class EngineAgent extends Context.Tag("@tent/core/internal/EngineAgent")<
  EngineAgent,
  RpcAgent.RpcAgentShape
>() {}

/** Channels handed over by retirement or disable, consumed by the engine's resend fiber. */
export class ResendQueue extends Context.Tag("@tent/core/internal/ResendQueue")<
  ResendQueue,
  Queue.Queue<RetiringChannel>
>() {}
