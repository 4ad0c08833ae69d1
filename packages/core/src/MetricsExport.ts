/**
 * The metrics export: every metric in Effect's global metric registry — the engine's `tent_*` metrics
 * (`Metrics.allMetrics`) and any other the process defines — served in the Prometheus text format at
 * `http://metrics/http_host:metrics/http_port/metrics`, through the maintained exporters: `@effect/opentelemetry`'s
 * metric producer (the registry read at each scrape) under OpenTelemetry's `PrometheusExporter`.
 *
 * {@link layer} is scoped: the HTTP server is listening when the Layer is built and closed with its scope. A port it
 * cannot bind fails the Layer at start with a {@link MetricsExportError} naming `metrics/http_port`. The exporters
 * are loaded when an enabled export starts (a dynamic `import()`), so a process that never exports, or imports
 * `@tent/core` without starting one, does not load them. `metrics/peer_labels` is applied
 * (`Metrics.setPeerLabels`) when the Layer is built, enabled or not.
 *
 * @since 0.1.0
 */
import { type ConfigError, Effect, Layer, Schema } from "effect"
import * as Metrics from "./Metrics.js"
import { type ConfigSource, load, type MetricsSettings } from "./MetricsConfig.js"

/**
 * The metrics endpoint could not be served: its port is taken, its host is not an interface of this machine, …
 *
 * @since 0.1.0
 */
export class MetricsExportError extends Schema.TaggedError<MetricsExportError>()("MetricsExportError", {
  reason: Schema.Literal("AddressInUse", "Listen", "Unavailable"),
  /** The key to change: `metrics/http_port` or `metrics/http_host`. */
  key: Schema.String,
  host: Schema.String,
  port: Schema.Number,
  message: Schema.String
}) {}

/**
 * The URL the endpoint of `settings` serves.
 *
 * @since 0.1.0
 */
export const url = (settings: Pick<MetricsSettings, "httpHost" | "httpPort">): string =>
  `http://${settings.httpHost.includes(":") ? `[${settings.httpHost}]` : settings.httpHost}:${settings.httpPort}/metrics`

const listenError = (settings: MetricsSettings, e: unknown): MetricsExportError => {
  const code = (e as { code?: unknown } | null)?.code
  const where = `${settings.httpHost}:${settings.httpPort}`
  const base = { host: settings.httpHost, port: settings.httpPort }
  if (code === "EADDRINUSE")
    return new MetricsExportError({
      ...base,
      reason: "AddressInUse",
      key: "metrics/http_port",
      message: `cannot serve metrics on ${where}: the port is in use; check: choose another metrics/http_port (TENT_METRICS_HTTP_PORT, tent serve --metrics-port)`
    })
  const hostAtFault = code === "EADDRNOTAVAIL" || code === "ENOTFOUND" || code === "EAI_AGAIN"
  return new MetricsExportError({
    ...base,
    reason: "Listen",
    key: hostAtFault ? "metrics/http_host" : "metrics/http_port",
    message: `cannot serve metrics on ${where}: ${e instanceof Error ? e.message : String(e)}; check: ${
      hostAtFault
        ? "metrics/http_host must be an address of this machine (TENT_METRICS_HTTP_HOST)"
        : "metrics/http_port (TENT_METRICS_HTTP_PORT, tent serve --metrics-port)"
    }`
  })
}

/**
 * OpenTelemetry's exporter is a CommonJS module: Node's `import()` gives its exports by name, a bundle (the `tent`
 * command's) as `default` only.
 */
const prometheusExporter = async (): Promise<typeof import("@opentelemetry/exporter-prometheus")> => {
  const m: typeof import("@opentelemetry/exporter-prometheus") & { readonly default?: unknown } = await import(
    "@opentelemetry/exporter-prometheus"
  )
  return typeof m.PrometheusExporter === "function" ? m : (m.default as typeof m)
}

const loadExporters = (settings: MetricsSettings) =>
  Effect.tryPromise({
    try: () =>
      Promise.all([
        prometheusExporter(),
        import("@effect/opentelemetry/Metrics"),
        import("@effect/opentelemetry/Resource")
      ]),
    catch: (e) =>
      new MetricsExportError({
        reason: "Unavailable",
        key: "metrics/enabled",
        host: settings.httpHost,
        port: settings.httpPort,
        message: `cannot load the metrics exporter: ${e instanceof Error ? e.message : String(e)}`
      })
  })

/** Serves the registry at {@link url} until the scope closes; fails with {@link MetricsExportError} when it cannot. */
const serve = (settings: MetricsSettings) =>
  Effect.gen(function* () {
    const [{ PrometheusExporter }, OtelMetrics, OtelResource] = yield* loadExporters(settings)
    const exporter = new PrometheusExporter({
      host: settings.httpHost,
      port: settings.httpPort,
      preventServerStart: true,
      // One label set per series, as the engine defines it (no `otel_scope_*` labels on every sample).
      withoutScopeInfo: true
    })
    const producer = yield* Effect.provide(OtelMetrics.makeProducer, OtelResource.layer({ serviceName: "tent" }))
    // Registered with the exporter; released by shutting the exporter down, which closes its server.
    yield* OtelMetrics.registerProducer(producer, () => exporter)
    yield* Effect.tryPromise({ try: () => exporter.startServer(), catch: (e) => listenError(settings, e) })
  })

/**
 * The export of `settings`: when `enabled`, the Prometheus endpoint listening from the Layer's build to the end of
 * its scope; otherwise nothing (no server, no exporter loaded). Applies `peerLabels` either way.
 *
 * @since 0.1.0
 */
export const layer = (settings: MetricsSettings): Layer.Layer<never, MetricsExportError> =>
  Layer.scopedDiscard(
    Effect.zipRight(
      Effect.sync(() => Metrics.setPeerLabels(settings.peerLabels)),
      settings.enabled ? serve(settings) : Effect.void
    )
  )

/**
 * {@link layer} with the settings of a configuration source (`MetricsConfig.load`: the `--config` file,
 * `MC_TENT_CONF`, `TENT_METRICS_*` and the constant-case key names); a wrong value fails naming its key.
 *
 * @since 0.1.0
 */
export const layerConfig = (
  source: ConfigSource = {}
): Layer.Layer<never, MetricsExportError | ConfigError.ConfigError> =>
  Layer.unwrapEffect(Effect.map(load(source), layer))
