/**
 * The seeds of the `rpc-frames` target, made by the real codecs: the real `RpcAgent` calls every RPC of the lean wire
 * (`Bootstrap`, `Notify` plain, stamped, with an epoch and as a failure notice, `GetSegmentDesc`, `Probe`, `SendData`,
 * `RecvData`) through a recording proxy in front of the victim, and the frames it wrote are split out of the stream;
 * TENT's coro_rpc requests come from `CoroRpc.encodeRequest` and the `Bodies` encoders.
 */
import * as Net from "node:net"
import { Bodies, makeNotification, RpcAgent, RpcConfig } from "@tent/rpc"
import { Effect, type Scope } from "effect"
import type { Range } from "./Regions.js"
import type { Corpus, Layout } from "./RpcInputs.js"
import * as Wire from "./Wire.js"

/** A TCP proxy on 127.0.0.1 to `port` that records what clients send; closed with the scope. */
const recordingProxy = (port: number): Effect.Effect<{ port: number; sent: Array<Buffer> }, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<{ port: number; sent: Array<Buffer>; server: Net.Server; sockets: Set<Net.Socket> }>((resume) => {
      const sent: Array<Buffer> = []
      const sockets = new Set<Net.Socket>()
      const server = Net.createServer((client) => {
        const upstream = Net.connect({ host: "127.0.0.1", port })
        sockets.add(client).add(upstream)
        client.on("data", (d: Buffer) => {
          sent.push(Buffer.from(d))
          upstream.write(d)
        })
        upstream.on("data", (d: Buffer) => client.write(d))
        const close = () => {
          client.destroy()
          upstream.destroy()
        }
        client.on("error", close).on("close", close)
        upstream.on("error", close).on("close", close)
      })
      server.listen({ host: "127.0.0.1", port: 0 }, () =>
        resume(Effect.succeed({ port: (server.address() as Net.AddressInfo).port, sent, server, sockets }))
      )
    }),
    (p) =>
      Effect.async<void>((resume) => {
        for (const s of p.sockets) s.destroy()
        p.server.close(() => resume(Effect.void))
      })
  )

/** A GID text for 127.0.0.1:9 (UDP discard) as SoftVerbs writes one: what a bootstrap seed names as its NIC. */
export const discardGid = "00:00:00:00:00:00:00:00:00:09:ff:ff:7f:00:00:01"

/**
 * Records what the real client sends for every RPC of the lean wire; returns the frames by RPC tag, and the range the
 * seed `SendData` wrote (the harness asked for it).
 */
export const captureLean = (
  victimPort: number,
  layout: Layout,
  lanes: number
): Effect.Effect<{ lean: Map<string, Array<Buffer>>; asked: Range }, unknown, Scope.Scope> =>
  Effect.gen(function* () {
    const proxy = yield* recordingProxy(victimPort)
    const address = `127.0.0.1:${proxy.port}`
    const agent = yield* Effect.provide(
      RpcAgent.make,
      RpcConfig.layer({ request_timeout_ms: 5000, bootstrap_timeout_ms: 5000, notify_timeout_ms: 5000 })
    )
    const n = makeNotification("fz-seed", "a notification the fuzz starts from")
    const ignore = <A, E>(e: Effect.Effect<A, E>) => Effect.ignore(e)
    yield* ignore(agent.probe(address))
    yield* ignore(agent.getSegmentDesc(address))
    yield* ignore(agent.notify(address, n))
    yield* ignore(agent.notify(address, { ...n, stamp: { session: 0x1234n, seq: 1n } }))
    yield* ignore(agent.notify(address, { ...n, stamp: { session: 0x1234n, seq: 2n, epoch: 7n } }))
    yield* ignore(agent.notify(address, { ...n, stamp: { session: 0x1234n, seq: 3n }, failure: "a failure notice" }))
    yield* ignore(agent.sendData(address, layout.target.addr, Buffer.alloc(64, 0x5a)))
    yield* ignore(agent.recvData(address, layout.target.addr, 64))
    yield* ignore(
      agent.bootstrap(address, {
        local_nic_path: "fz-seed:1@fz0",
        peer_nic_path: `${layout.segment}@${layout.device}`,
        qp_num: Array.from({ length: lanes }, (_, i) => 0x100 + i),
        local_lid: 0,
        local_gid: discardGid,
        reply_msg: "",
        notify_qp_num: 0x200,
        notify_proto: 3,
        notify_incarnation: "7",
        qp_psn: Array.from({ length: lanes }, (_, i) => 1000 + i),
        notify_psn: 2000,
        qp_token: "1234567890123"
      })
    )
    const stream = Buffer.concat(proxy.sent)
    const byIndex = new Map<number, string>(Object.entries(Wire.rpcIndex).map(([tag, i]) => [i, tag]))
    const lean = new Map<string, Array<Buffer>>()
    for (const f of Wire.scanLean(stream, layout.maxFrame).frames) {
      const tag = f.kind === Wire.Kind.Interrupt ? "Interrupt" : byIndex.get(stream[f.start + 5] as number)
      if (tag === undefined) continue
      const list = lean.get(tag) ?? []
      list.push(Buffer.from(stream.subarray(f.start - 4, f.end)))
      lean.set(tag, list)
    }
    if (!lean.has("Interrupt")) lean.set("Interrupt", [Wire.frame(Wire.Kind.Interrupt, 1)])
    return { lean, asked: { start: layout.target.addr, end: layout.target.addr + 64 } }
  })

/** TENT's requests for every func id, from its encoders. */
export const tentSeeds = (layout: Layout): Array<Buffer> => {
  const target = BigInt(layout.target.addr)
  const notify = Bodies.encodeNotify({ name: "fz-tent", msg: "a TENT notification" })
  const desc = Bodies.encodeBootstrapDesc({
    ...Bodies.emptyBootstrapDesc,
    local_nic_path: "fz-tent:1@fz0",
    peer_nic_path: `${layout.segment}@${layout.device}`,
    qp_num: [1, 2],
    local_gid: discardGid,
    notify_qp_num: 3
  })
  return [
    Wire.tentRequest(1, 1),
    Wire.tentRequest(1, 2, desc._tag === "Right" ? desc.right : undefined),
    Wire.tentRequest(1, 3, Bodies.encodeXferData({ peerMemAddr: target, length: 64n }, Buffer.alloc(64, 0x5a))),
    Wire.tentRequest(1, 4, Bodies.encodeXferData({ peerMemAddr: target, length: 64n })),
    Wire.tentRequest(1, 5, notify._tag === "Right" ? notify.right : undefined),
    Wire.tentRequest(1, 6),
    Wire.tentRequest(1, 7, Buffer.from("{}"))
  ]
}

/** Both wires' seeds. */
export const corpus = (lean: Map<string, Array<Buffer>>, layout: Layout): Corpus => ({ lean, tent: tentSeeds(layout) })
