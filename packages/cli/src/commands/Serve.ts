/**
 * `tent serve`: one engine node (control plane, RDMA devices, a registered segment of `--segment-size` bytes) until
 * interrupted; prints its address, then each received notification as a line (`--json`: JSON lines). With
 * `--metrics-port N` (or TENT's `metrics/*` keys: `metrics/enabled`, `TENT_METRICS_ENABLED`, ...) it also serves the
 * engine's metrics in the Prometheus text format at `http://127.0.0.1:N/metrics`.
 * The body (`run/Serve.ts`) is loaded when the command runs, and the metrics exporter only when the export is on.
 *
 * @since 0.1.0
 */
import { Command, Options } from "@effect/cli"
import { nodeOptions } from "../Options.js"
import { lazy } from "../Render.js"

export const options = {
  ...nodeOptions,
  segmentSize: Options.integer("segment-size").pipe(
    Options.withDescription("bytes of memory to register as this node's segment (peers WRITE/READ it)"),
    Options.withDefault(1 << 20)
  ),
  digest: Options.boolean("digest").pipe(
    Options.withDescription("with each notification, print the SHA-256 of the whole segment (to check a transfer)")
  ),
  json: Options.boolean("json").pipe(Options.withDescription("print JSON lines instead of text")),
  metricsPort: Options.integer("metrics-port").pipe(
    Options.withDescription(
      "serve the engine's metrics (Prometheus text format) at http://127.0.0.1:N/metrics; turns the export on and overrides metrics/http_port (without it: the config's metrics/enabled, metrics/http_port, metrics/http_host, or TENT_METRICS_ENABLED, TENT_METRICS_HTTP_PORT, TENT_METRICS_HTTP_HOST)"
    ),
    Options.optional
  )
}

/** What `tent serve`'s arguments parse to. */
export type ServeOptions = Command.Command.ParseConfig<typeof options>

export const command = Command.make(
  "serve",
  options,
  lazy(
    "serve",
    () => import("./run/Serve.js"),
    (m, o: ServeOptions) => m.run(o)
  )
).pipe(
  Command.withDescription(
    "Run one engine node (control plane, soft NICs, a registered segment) until interrupted; print each received notification as a line; with --metrics-port N, serve its metrics for Prometheus at http://127.0.0.1:N/metrics."
  )
)
