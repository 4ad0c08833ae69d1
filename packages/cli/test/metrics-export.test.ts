/**
 * `tent serve --metrics-port N` as a real process, scraped over HTTP from this one: the Prometheus text parses, each
 * metric of `Metrics.allMetrics` that the exporter writes has the catalog's type and help, and after `tent send`
 * processes (real ones, over SoftVerbs on 127.0.0.1) notified it, `tent_notifications_received_total{transport="rdma"}`
 * moved by exactly the number sent. Without `--metrics-port` nothing listens; TENT's `TENT_METRICS_*` variables turn
 * the export on as well; a metrics port in use stops `tent serve` at start with one line naming `metrics/http_port`.
 */
import { Metrics } from "@tent/core"
import { freePort } from "@tent/rpc/testing/redis"
import { afterEach, describe, expect, it } from "vitest"
import { run, start, stopAll } from "./fixtures/cli.js"
import { type Family, parse, sampleValue } from "./fixtures/prometheus.js"

afterEach(stopAll)

const scrape = async (url: string): Promise<{ status: number; families: Map<string, Family>; text: string }> => {
  const r = await fetch(url, { signal: AbortSignal.timeout(20_000) })
  const text = await r.text()
  return { status: r.status, families: parse(text), text }
}

const listening = (line: string) => line.startsWith("{") && line.includes('"listening"')
/** How long a `tent serve` may take to start on a loaded machine (tsx compiles the command first). */
const START_MS = 150_000

/** Whether something answers HTTP at `url` (a refused connection: no). */
const answers = async (url: string): Promise<boolean> => {
  try {
    await fetch(url, { signal: AbortSignal.timeout(5000) })
    return true
  } catch {
    return false
  }
}

const RECEIVED = "tent_notifications_received_total"

describe("tent serve --metrics-port (scraped from another process)", () => {
  it("serves Metrics.allMetrics in the Prometheus text format; received{transport=rdma} moves by exactly what tent send sent", async () => {
    const port = await freePort()
    const serve = start(["serve", "--json", "--metrics-port", String(port)])
    const ready = JSON.parse(await serve.line(listening, START_MS)) as { address: string; metrics: string }
    expect(ready.metrics).toBe(`http://127.0.0.1:${port}/metrics`)

    const first = await scrape(ready.metrics)
    expect(first.status).toBe(200)
    // Every metric of the catalog the exporter wrote has the catalog's type and help. A label set no code path has
    // made has no series, and OpenTelemetry's exporter writes no family without a sample: the metrics modules make
    // every series whose label values are known at load (at 0); those labelled by NIC names wait for their first count.
    const written = Metrics.allMetrics.filter((m) => first.families.get(m.name)?.samples.length)
    for (const m of written) {
      const f = first.families.get(m.name) as Family
      expect(f.type, m.name).toBe(m.type)
      expect(f.help, m.name).toBe(m.help)
      for (const s of f.samples)
        for (const label of m.labels) expect(Object.keys(s.labels), `${m.name} ${JSON.stringify(s)}`).toContain(label)
    }
    const absent = Metrics.allMetrics.filter((m) => !first.families.get(m.name)?.samples.length).map((m) => m.name)
    console.info(
      `scrape before any notification: ${written.length} catalog metrics written, absent: ${absent.join(", ")}`
    )
    // Only the families labelled by NIC names have no series before a NIC pair is charged or resent over.
    expect(absent.sort()).toEqual([
      "tent_rail_errors_total",
      "tent_rail_pauses_total",
      "tent_resend_pair_attempts_total"
    ])
    const before = sampleValue(first.families, RECEIVED, { transport: "rdma" }) ?? 0

    const N = 3
    const sends = await Promise.all(
      Array.from({ length: N }, (_, k) => run(["send", ready.address, `metrics-${k}`, `m${k}`], 120_000))
    )
    for (const r of sends) expect(r.code, r.stderr).toBe(0)
    for (let k = 0; k < N; k++) await serve.line((l) => l.includes(`"metrics-${k}"`), 30_000)

    const second = await scrape(ready.metrics)
    expect(second.families.get(RECEIVED)?.type).toBe("counter")
    expect(sampleValue(second.families, RECEIVED, { transport: "rdma" })).toBe(before + N)
    // Nothing came over the other transports: the notify QP carried every one.
    expect(sampleValue(second.families, RECEIVED, { transport: "tcp" }) ?? 0).toBe(
      sampleValue(first.families, RECEIVED, { transport: "tcp" }) ?? 0
    )
  }, 400_000)

  it("without --metrics-port nothing listens; TENT_METRICS_ENABLED and TENT_METRICS_HTTP_PORT turn it on", async () => {
    const [off, on] = [await freePort(), await freePort()]
    const plain = start(["serve", "--json"], { TENT_METRICS_HTTP_PORT: String(off) })
    const byEnv = start(["serve", "--json"], { TENT_METRICS_ENABLED: "true", TENT_METRICS_HTTP_PORT: String(on) })
    const [a, b] = await Promise.all([plain.line(listening, START_MS), byEnv.line(listening, START_MS)])
    expect(JSON.parse(a)).not.toHaveProperty("metrics")
    expect(await answers(`http://127.0.0.1:${off}/metrics`)).toBe(false)
    expect(JSON.parse(b)).toMatchObject({ metrics: `http://127.0.0.1:${on}/metrics` })
    const scraped = await scrape(`http://127.0.0.1:${on}/metrics`)
    expect(scraped.status).toBe(200)
    expect(scraped.families.get("target_info")?.samples[0]?.labels.service_name).toBe("tent")
  }, 400_000)

  it("a metrics port in use stops tent serve at start: exit 1, one line naming metrics/http_port", async () => {
    const port = await freePort()
    const first = start(["serve", "--json", "--metrics-port", String(port)])
    await first.line(listening, START_MS)
    const second = await run(["serve", "--json", "--metrics-port", String(port)], 120_000)
    expect(second.code).toBe(1)
    expect(second.stdout).not.toContain("listening")
    const lines = second.stderr.trim().split("\n")
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(new RegExp(`^tent serve: .*127\\.0\\.0\\.1:${port}.*in use.*metrics/http_port`))
    const bad = await run(["serve", "--metrics-port", "70000"], 120_000)
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain("--metrics-port must be a port number in 1..65535")
  }, 400_000)
})
