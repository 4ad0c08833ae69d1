/**
 * The body of `tent serve` (loaded when the command runs).
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import { EngineConfig, MetricsConfig, MetricsExport } from "@tent/core"
import { notificationText, RpcConfig } from "@tent/rpc"
import { Console, Effect, Layer, Option, Stream } from "effect"
import { configSource, makeEngine } from "../../Node.js"
import type { ServeOptions } from "../../Options.js"
import { failWith, UsageFailure } from "../../Render.js"

const text = (b: Uint8Array) => new TextDecoder("utf-8", { fatal: false }).decode(b)

/** The metrics export of these options: `--metrics-port N` turns it on at port N; otherwise the `metrics/*` keys. */
const metricsSettings = (o: ServeOptions) =>
  Effect.flatMap(MetricsConfig.load(configSource(o)), (settings) =>
    Option.match(o.metricsPort, {
      onNone: () => Effect.succeed(settings),
      onSome: (port) =>
        Number.isInteger(port) && port >= 1 && port <= 65535
          ? Effect.succeed({ ...settings, enabled: true, httpPort: port })
          : Effect.fail(new UsageFailure(`--metrics-port must be a port number in 1..65535, got ${port}`))
    })
  )

/** The start line's word on the control plane's authentication: said loudly when there is none. */
const authLine = (o: ServeOptions) =>
  Effect.map(
    Effect.flatMap(EngineConfig.provider(configSource(o)), (p) => Effect.withConfigProvider(RpcConfig.config, p)),
    (rpc) =>
      rpc.secret === undefined
        ? {
            auth: false,
            text:
              "WARNING: the control plane is UNAUTHENTICATED (as TENT's): whoever reaches this port can read and write " +
              "the segment; set TENT_RPC_SECRET or rpc/auth_secret_file on every engine (see SECURITY.md)"
          }
        : { auth: true, text: "control plane authenticated (shared secret)" }
  )

export const run = (o: ServeOptions) =>
  Effect.scoped(
    Effect.gen(function* () {
      if (o.segmentSize <= 0) return yield* Effect.fail(new Error("--segment-size must be positive"))
      // The export first: a port it cannot bind stops the command before any node starts.
      const metrics = yield* metricsSettings(o)
      yield* Layer.build(MetricsExport.layer(metrics))
      const auth = yield* authLine(o)
      const engine = yield* makeEngine(o)
      const segment = yield* engine.registerSegment(Buffer.alloc(o.segmentSize))
      const exported = metrics.enabled ? MetricsExport.url(metrics) : undefined
      const ready = {
        segment: engine.segmentName,
        address: engine.address,
        addr: segment.addr,
        size: segment.length,
        ...(exported === undefined ? {} : { metrics: exported }),
        auth: auth.auth
      }
      yield* Console.log(
        o.json
          ? JSON.stringify({ event: "listening", ...ready })
          : `listening on ${engine.address}: segment ${engine.segmentName}, ${segment.length} bytes at ${segment.addr}${exported === undefined ? "" : `, metrics at ${exported}`} (Ctrl-C stops)\n${auth.text}`
      )
      yield* Stream.runForEach(engine.notifications, (n) =>
        Effect.suspend(() => {
          const sha = o.digest ? createHash("sha256").update(segment.buffer).digest("hex") : undefined
          if (o.json) {
            const { name, msg } = notificationText(n)
            return Console.log(JSON.stringify(sha === undefined ? { name, msg } : { name, msg, sha256: sha }))
          }
          return Console.log(`${text(n.name)}: ${text(n.msg)}${sha === undefined ? "" : `  (segment sha256 ${sha})`}`)
        })
      )
    })
  ).pipe(failWith("serve"))
