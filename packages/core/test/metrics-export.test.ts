/**
 * The metrics export's keys (TENT's `metrics/*`, its `TENT_METRICS_*` environment names) and `MetricsExport.layer`
 * in this process: the endpoint serves the registry while its scope is open and is closed with it, a port in use
 * fails the Layer at start naming `metrics/http_port`, a disabled export listens nowhere, `metrics/peer_labels`
 * reaches `Metrics.setPeerLabels`. The scrape of a real `tent serve` from another process is the cli's
 * `metrics-export.test.ts`.
 */
import { createServer, type Server } from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { freePort } from "@tent/rpc/testing/redis"
import { Effect, Exit, Layer, Metric, Scope } from "effect"
import { Metrics, MetricsConfig, MetricsExport } from "../src/index.js"

/** A listener holding a port (a port in use). */
const hold = (): Promise<Server> =>
  new Promise((resolve, reject) => {
    const s = createServer()
    s.once("error", reject)
    s.listen(0, "127.0.0.1", () => resolve(s))
  })

const get = (url: string) =>
  Effect.tryPromise(async () => {
    const r = await fetch(url, { signal: AbortSignal.timeout(10_000) })
    return { status: r.status, type: r.headers.get("content-type"), body: await r.text() }
  })

const settings = (over: Partial<MetricsConfig.MetricsSettings>): MetricsConfig.MetricsSettings => ({
  ...MetricsConfig.defaults,
  ...over
})

describe("MetricsConfig", () => {
  it.effect("defaults: off, TENT's port 9100, 127.0.0.1, no peer label", () =>
    Effect.gen(function* () {
      expect(yield* MetricsConfig.load({})).toEqual({
        enabled: false,
        httpPort: 9100,
        httpHost: "127.0.0.1",
        peerLabels: false
      })
    })
  )

  it.effect("reads the file (nested or flat), TENT's TENT_METRICS_* names and the constant-case key names", () =>
    Effect.gen(function* () {
      const file = yield* MetricsConfig.load({
        json: { metrics: { enabled: true, http_port: 9200 }, "metrics/peer_labels": true }
      })
      expect(file).toEqual({ enabled: true, httpPort: 9200, httpHost: "127.0.0.1", peerLabels: true })
      const tent = yield* MetricsConfig.load({
        env: { TENT_METRICS_ENABLED: "true", TENT_METRICS_HTTP_PORT: "9300", TENT_METRICS_HTTP_HOST: "::1" }
      })
      expect(tent).toMatchObject({ enabled: true, httpPort: 9300, httpHost: "::1" })
      const constant = yield* MetricsConfig.load({ env: { METRICS_HTTP_PORT: "9400", METRICS_PEER_LABELS: "true" } })
      expect(constant).toMatchObject({ enabled: false, httpPort: 9400, peerLabels: true })
      // As for every key of the engine, the environment wins over the file.
      const both = yield* MetricsConfig.load({
        json: { metrics: { http_port: 9200 } },
        env: { TENT_METRICS_HTTP_PORT: "9500" }
      })
      expect(both.httpPort).toBe(9500)
    })
  )

  it.effect("a wrong value fails at start naming the key", () =>
    Effect.gen(function* () {
      const range = String(yield* Effect.flip(MetricsConfig.load({ env: { TENT_METRICS_HTTP_PORT: "70000" } })))
      expect(range).toContain("http_port")
      expect(range).toContain(MetricsConfig.keys["metrics/http_port"].valid.message)
      const zero = String(yield* Effect.flip(MetricsConfig.load({ json: { metrics: { http_port: 0 } } })))
      expect(zero).toContain("http_port")
      const type = String(yield* Effect.flip(MetricsConfig.load({ json: { metrics: { enabled: "yes" } } })))
      expect(type).toContain("enabled")
      expect(type).toContain("Expected true or false")
      const env = String(yield* Effect.flip(MetricsConfig.load({ env: { TENT_METRICS_ENABLED: "maybe" } })))
      expect(env).toContain("enabled")
      const host = String(yield* Effect.flip(MetricsConfig.load({ json: { metrics: { http_host: " " } } })))
      expect(host).toContain("http_host")
    })
  )
})

describe("MetricsExport.layer", () => {
  it.live("serves the registry in the Prometheus text format while its scope is open, and closes with it", () =>
    Effect.gen(function* () {
      const port = yield* Effect.promise(freePort)
      const counter = Metric.counter("tent_export_test_total", { incremental: true, description: "a test counter" })
      yield* Metric.increment(Metric.tagged(counter, "case", "open"))
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(MetricsExport.layer(settings({ enabled: true, httpPort: port })), scope)
      const url = MetricsExport.url({ httpHost: "127.0.0.1", httpPort: port })
      expect(url).toBe(`http://127.0.0.1:${port}/metrics`)
      const first = yield* get(url)
      expect(first.status).toBe(200)
      expect(first.type).toContain("text/plain")
      expect(first.body).toContain("# HELP tent_export_test_total a test counter")
      expect(first.body).toContain("# TYPE tent_export_test_total counter")
      expect(first.body).toContain('tent_export_test_total{case="open"} 1')
      // Each scrape reads the registry as it is then.
      yield* Metric.incrementBy(Metric.tagged(counter, "case", "open"), 2)
      expect((yield* get(url)).body).toContain('tent_export_test_total{case="open"} 3')
      expect((yield* get(url.replace("/metrics", "/other"))).status).toBe(404)
      yield* Scope.close(scope, Exit.void)
      const after = yield* Effect.either(get(url))
      expect(after._tag).toBe("Left")
    })
  )

  it.live("a port in use fails the Layer at start with MetricsExportError naming metrics/http_port", () =>
    Effect.gen(function* () {
      const taken = yield* Effect.acquireRelease(Effect.promise(hold), (s) =>
        Effect.promise(() => new Promise<void>((r) => s.close(() => r())))
      )
      const port = (taken.address() as { port: number }).port
      const error = yield* Effect.flip(Layer.build(MetricsExport.layer(settings({ enabled: true, httpPort: port }))))
      expect(error).toBeInstanceOf(MetricsExport.MetricsExportError)
      expect(error).toMatchObject({
        _tag: "MetricsExportError",
        reason: "AddressInUse",
        key: "metrics/http_port",
        port
      })
      expect(error.message).toContain(`127.0.0.1:${port}`)
      expect(error.message).toContain("metrics/http_port")
    }).pipe(Effect.scoped)
  )

  it.live("disabled (the default): nothing listens on the port", () =>
    Effect.gen(function* () {
      const port = yield* Effect.promise(freePort)
      yield* Layer.build(MetricsExport.layer(settings({ enabled: false, httpPort: port })))
      const r = yield* Effect.either(get(`http://127.0.0.1:${port}/metrics`))
      expect(r._tag).toBe("Left")
    }).pipe(Effect.scoped)
  )

  it.live("metrics/peer_labels reaches Metrics.setPeerLabels when the Layer is built", () =>
    Effect.gen(function* () {
      expect(Metrics.peerLabels()).toBe(false)
      yield* Layer.build(MetricsExport.layer(settings({ peerLabels: true })))
      expect(Metrics.peerLabels()).toBe(true)
      yield* Layer.build(MetricsExport.layer(settings({ peerLabels: false })))
      expect(Metrics.peerLabels()).toBe(false)
    }).pipe(Effect.scoped)
  )
})
