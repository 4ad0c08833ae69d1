/**
 * `tent send --mooncake` and `tent transfer --mooncake`: the peer is a Mooncake TENT node, reached on its own
 * control plane (yalantinglibs coro_rpc, `CoroRpcAgent::process`) with TENT's TCP-transport calls: `Notify` with
 * TENT's JSON body, `SendData` / `RecvData` into the buffer its `GetSegmentDesc` names. No engine starts here: TENT's
 * TCP transport is these calls, and TENT's RDMA bootstrap is not spoken (see the rpc README's table).
 *
 * @since 0.2.0
 */
import { createHash } from "node:crypto"
import { Bodies, CoroRpc, parseAddress, TentClient } from "@tent/rpc"
import { Console, Effect, Option } from "effect"
import type { SendOptions, TransferOptions } from "../../Options.js"
import { CliFailure, failWith, UsageFailure } from "../../Render.js"
import { pattern } from "./pattern.js"

/** Connects to the TENT node at `peer` (`host:port`); closed with the scope. */
const connect = (peer: string) =>
  Effect.gen(function* () {
    const at = parseAddress(peer)
    if (at === undefined) {
      return yield* Effect.fail(
        new UsageFailure(
          `${JSON.stringify(peer)} is not a host:port: with --mooncake PEER is the TENT node's rpc_server_addr (its segment name under p2p, for example 10.0.0.7:15012)`
        )
      )
    }
    return yield* TentClient.make({ host: at.host, port: at.port, requestTimeout: "30 seconds" }).pipe(
      Effect.mapError(
        (e) => new CliFailure(`${peer}: ${e.message}; check: is a TENT node listening there (rpc_server_port)?`)
      )
    )
  })

/** A TENT call's failure as one line that says what to check. */
const explain = (peer: string, what: string) => (e: { readonly message: string }) =>
  new CliFailure(`${what} to ${peer} failed: ${e.message}; check: is PEER a Mooncake TENT node's rpc_server_addr?`)

/**
 * `tent send --mooncake PEER NAME MSG`: one `Notify`. TENT runs its notify callback before it replies, so the reply
 * says the node took the notification; TENT gives no receipt beyond that and drops it if no callback is registered.
 *
 * @since 0.2.0
 */
export const send = (o: SendOptions) =>
  Effect.scoped(
    Effect.gen(function* () {
      const tent = yield* connect(o.peer)
      const t0 = performance.now()
      yield* tent.notify(o.name, o.msg).pipe(Effect.mapError(explain(o.peer, "Notify")))
      yield* Console.log(
        `sent ${o.name} to ${o.peer} (Mooncake TENT, Notify over its control plane) in ${(performance.now() - t0).toFixed(1)} ms: the node's notify callback ran; TENT confirms nothing further`
      )
    })
  ).pipe(failWith("send", o.peer))

/**
 * `tent transfer --mooncake PEER --bytes N`: `SendData` of the pattern into the node's first buffer at `--offset`,
 * read back with `RecvData` under `--verify`, then the `--notify` notification.
 *
 * @since 0.2.0
 */
export const transfer = (o: TransferOptions) =>
  Effect.scoped(
    Effect.gen(function* () {
      if (o.bytes <= 0) return yield* Effect.fail(new CliFailure("--bytes must be positive"))
      const tent = yield* connect(o.peer)
      const desc = yield* tent.getSegmentDesc().pipe(Effect.mapError(explain(o.peer, "GetSegmentDesc")))
      const target = desc.type === "memory" ? desc.detail.buffers[0] : undefined
      if (target === undefined) {
        return yield* Effect.fail(new CliFailure(`segment ${desc.name} at ${o.peer} has no registered memory buffer`))
      }
      if (o.offset < 0 || BigInt(o.offset + o.bytes) > target.length) {
        return yield* Effect.fail(
          new CliFailure(
            `[${o.offset}, +${o.bytes}) does not fit the ${target.length}-byte buffer of ${o.peer}; check: --offset, --bytes`
          )
        )
      }
      const addr = target.addr + BigInt(o.offset)
      const data = pattern(o.bytes, o.seed)
      const t0 = performance.now()
      const reply = yield* tent
        .call(CoroRpc.TentFuncId.SendData, Bodies.encodeXferData({ peerMemAddr: addr, length: BigInt(o.bytes) }, data))
        .pipe(Effect.mapError(explain(o.peer, "SendData")))
      // TENT's `sendData`: an empty reply is OK, anything else is its error text
      if (reply.length > 0) return yield* Effect.fail(new CliFailure(`SendData to ${o.peer}: ${reply.toString()}`))
      const ms = performance.now() - t0
      if (o.verify) {
        const back = yield* tent
          .call(CoroRpc.TentFuncId.RecvData, Bodies.encodeXferData({ peerMemAddr: addr, length: BigInt(o.bytes) }))
          .pipe(Effect.mapError(explain(o.peer, "RecvData")))
        if (!back.equals(data)) {
          return yield* Effect.fail(
            new CliFailure(
              back.length === o.bytes
                ? `read back ${o.bytes} bytes from ${o.peer} and they differ from what was written`
                : `RecvData from ${o.peer}: ${back.toString().slice(0, 200)}`
            )
          )
        }
      }
      if (Option.isSome(o.notify)) {
        yield* tent.notify(o.notify.value.name, o.notify.value.msg).pipe(Effect.mapError(explain(o.peer, "Notify")))
      }
      const sha = createHash("sha256").update(data).digest("hex")
      yield* Console.log(
        `wrote ${o.bytes} bytes to ${o.peer} (Mooncake TENT, SendData) at ${addr} in ${ms.toFixed(1)} ms, sha256 ${sha}${o.verify ? ", read back equal" : ""}${Option.isSome(o.notify) ? `, then notified ${o.notify.value.name}` : ""}`
      )
    })
  ).pipe(failWith("transfer", o.peer))
