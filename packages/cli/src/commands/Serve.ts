/**
 * `tent serve`: one engine node (control plane, RDMA devices, a registered segment of `--segment-size` bytes) until
 * interrupted; prints its address, then each received notification as a line (`--json`: JSON lines). With
 * `--metrics-port N` (or TENT's `metrics/*` keys: `metrics/enabled`, `TENT_METRICS_ENABLED`, ...) it also serves the
 * engine's metrics in the Prometheus text format at `http://127.0.0.1:N/metrics`.
 * The body (`run/Serve.ts`) is loaded when the command runs, and the metrics exporter only when the export is on.
 *
 * @since 0.1.0
 */
import { Command } from "@effect/cli"
import { type ServeOptions, serveOptions } from "../Options.js"
import { lazy } from "../Render.js"

/**
 * The `tent serve` command; its options are `Options.serveOptions`.
 *
 * @since 0.1.0
 */
export const command = Command.make(
  "serve",
  serveOptions,
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
