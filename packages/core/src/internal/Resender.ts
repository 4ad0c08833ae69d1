/**
 * The engine's resend fiber: takes the notify channels that retirement or a disable handed to the `ResendQueue`, in
 * order, and runs the `Resend` seam's `onRetire` for each with the paths a resend can take — a given NIC pair, the
 * TCP transport, the control plane's `Notify`. It lives in the engine's scope; under the legacy seam nothing is ever
 * queued (no pending table).
 */
import { DescriptorCache } from "@tent/rpc"
import { Effect, Queue, type Scope } from "effect"
import { Resend, type ResendPaths } from "../Resend.js"
import { EngineReceipts } from "./Ledger.js"
import { RdmaTransport } from "./rdma/RdmaTransport.js"
import { EngineAgent, ResendQueue } from "./Services.js"
import { notifyRpc, TcpTransport } from "./TcpTransport.js"

/** Forks the resend fiber in the scope. */
export const start: Effect.Effect<
  void,
  never,
  | Scope.Scope
  | Resend
  | ResendQueue
  | RdmaTransport
  | TcpTransport
  | EngineAgent
  | DescriptorCache.DescriptorCache
  | EngineReceipts
> = Effect.gen(function* () {
  const receipts = yield* EngineReceipts
  const resend = yield* Resend
  const queue = yield* ResendQueue
  const rdma = yield* RdmaTransport
  const tcp = yield* TcpTransport
  const agent = yield* EngineAgent
  const cache = yield* DescriptorCache.DescriptorCache
  const unavailable = (what: string) => Effect.fail(new Error(`${what} is not installed`))
  const paths: ResendPaths = {
    nicPairs: (segment) =>
      Effect.map(cache.get(segment), (desc) =>
        (rdma?.devices ?? []).flatMap((d) => desc.devices.map((r) => ({ localNic: d.name, peerNic: r.name })))
      ),
    viaNicPair: (localNic, peerNic, segment, n, stamp) => {
      const device = rdma?.devices.find((d) => d.name === localNic)
      return rdma === undefined || device === undefined
        ? unavailable(`device ${localNic}`)
        : rdma.sendVia(device, segment, peerNic, n, stamp)
    },
    viaTcp: (segment, n) => (tcp === undefined ? unavailable("the TCP transport") : tcp.sendNotification(segment, n)),
    viaControlPlane: (segment, n) => notifyRpc(agent, cache, segment, n),
    giveUp: (segment, p, reason) => receipts.reportGiveUp(segment, p.notification, p.stamp, reason)
  }
  yield* Effect.forkScoped(
    Effect.forever(Effect.flatMap(Queue.take(queue), (channel) => resend.onRetire(channel, paths)))
  )
})
