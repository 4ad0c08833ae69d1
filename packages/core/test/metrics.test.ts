/**
 * The engine's Effect metrics (`Metrics`): docs/metrics.md's table is the catalogue, and the counters move with what
 * happens between two engines in this process over real SoftVerbs devices and the real control plane on 127.0.0.1.
 * Metrics live in the process-wide registry, so every check reads a counter's change across its scenario, taken
 * from the registry's snapshot (as an exporter reads it) by name and exact label set.
 */
import { readFileSync } from "node:fs"
import { createServer } from "node:net"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, type Notification, notificationText, RpcAgent, RpcConfig } from "@tent/rpc"
import { Effect, Metric } from "effect"
import { Dedup, Metrics, NotificationRouting } from "../src/index.js"
import { engine, rdmaOnly, receive, series, tcpOnly, until } from "./fixtures/policies.js"

/** The sum of the registry's series of `name` whose labels are exactly `labels`. */
const value = (name: string, labels: Readonly<Record<string, string>> = {}): number => {
  const keys = Object.keys(labels)
  let total = 0
  for (const pair of Metric.unsafeSnapshot()) {
    const key = pair.metricKey
    if (key.name !== name || key.tags.length !== keys.length) continue
    if (!key.tags.every((t) => labels[t.key] === t.value)) continue
    const state = pair.metricState as { readonly count?: number | bigint }
    total += Number(state.count ?? 0)
  }
  return total
}

/** Reads `series` now; `delta()` is then each one's change since. */
const watch = <K extends string>(series: Readonly<Record<K, readonly [string, Readonly<Record<string, string>>?]>>) => {
  const read = () => {
    const out = {} as Record<K, number>
    for (const k of Object.keys(series) as Array<K>) {
      const [name, labels] = series[k]
      out[k] = value(name, labels)
    }
    return out
  }
  const before = read()
  return {
    delta: () => {
      const now = read()
      const out = {} as Record<K, number>
      for (const k of Object.keys(series) as Array<K>) out[k] = now[k] - before[k]
      return out
    }
  }
}

const names = (ns: ReadonlyArray<Notification>) => ns.map((n) => notificationText(n).name)

/** The rows of the first Markdown table after the heading `heading`: cells trimmed, header and rule dropped. */
const tableUnder = (markdown: string, heading: string): Array<Array<string>> => {
  const lines = markdown.split("\n")
  const start = lines.indexOf(heading)
  expect(start, `heading "${heading}" in docs/metrics.md`).toBeGreaterThanOrEqual(0)
  let i = start + 1
  while (i < lines.length && !(lines[i] as string).startsWith("|")) i++
  const rows: Array<Array<string>> = []
  for (; i < lines.length && (lines[i] as string).startsWith("|"); i++) {
    rows.push(
      (lines[i] as string)
        .slice(1, -1)
        .split("|")
        .map((c) => c.trim())
    )
  }
  return rows.slice(2)
}

/** `` `a`, `b` `` → ["a", "b"]. */
const codes = (cell: string): Array<string> => Array.from(cell.matchAll(/`([^`]+)`/g), (m) => m[1] as string)

describe("Metrics", () => {
  it("the catalogue in docs/metrics.md is allMetrics: name, type, labels, optional labels and meaning, in order", () => {
    const doc = readFileSync(fileURLToPath(new URL("../../../docs/metrics.md", import.meta.url)), "utf8")
    const table = tableUnder(doc, "## The catalogue").map(([name, type, labels, optional, meaning]) => ({
      name: codes(name as string)[0],
      type,
      labels: codes(labels as string),
      optionalLabels: codes(optional as string),
      help: meaning
    }))
    expect(table).toEqual(Metrics.allMetrics.map((m) => ({ ...m })))
    // and the catalog follows the naming rules the exporter relies on
    for (const m of Metrics.allMetrics) {
      expect(m.name).toMatch(/^tent_[a-z0-9_]+$/)
      if (m.type === "counter") expect(m.name).toMatch(/_total$/)
      else expect(m.name).not.toMatch(/_total$/)
    }
    expect(new Set(Metrics.allMetrics.map((m) => m.name)).size).toBe(Metrics.allMetrics.length)
  })

  it.scopedLive("RDMA notifications move sent{rdma} and received{rdma} by exactly the number sent", () =>
    Effect.gen(function* () {
      const rx = yield* engine(rdmaOnly)
      const tx = yield* engine(rdmaOnly)
      const w = watch({
        sent: ["tent_notifications_sent_total", { transport: "rdma" }],
        received: ["tent_notifications_received_total", { transport: "rdma" }],
        failed: ["tent_notifications_failed_total", { transport: "rdma" }],
        fallbacks: ["tent_fallbacks_total", { from: "rdma", to: "tcp" }]
      })
      const total = 137
      for (let i = 0; i < total; i++)
        yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification(`m${i}`, "x"))
      const got = yield* receive(rx.engine, total)
      expect(got.length).toBe(total)
      expect(w.delta()).toEqual({ sent: total, received: total, failed: 0, fallbacks: 0 })
      // the engine's own counters agree
      expect(tx.diag.counters.rdma?.sent).toBe(total)
      expect(rx.diag.counters.rdma?.received).toBe(total)
    })
  )

  it.scopedLive("a malformed frame on the notify QP moves frames_rejected_total{reason} and is not received", () =>
    Effect.gen(function* () {
      // The sender's framing writes a raw TENT frame whose name_len overruns the payload: the receiver's decoder
      // rejects it (NotifyWire `NameTooLong`), counts it and reposts the slot.
      const broken: Dedup.DedupShape = {
        ...Dedup.legacy,
        encode: (buf, offset, n) => {
          if (notificationText(n).name !== "bad") return Dedup.legacy.encode(buf, offset, n, undefined, 0)
          buf.writeUInt32LE(1000, offset)
          buf.writeUInt32LE(0, offset + 4)
          return 8
        }
      }
      const rx = yield* engine(rdmaOnly)
      const tx = yield* engine(rdmaOnly, series({ dedup: broken }))
      const w = watch({
        rejected: ["tent_frames_rejected_total", { reason: "name_too_long" }],
        received: ["tent_notifications_received_total", { transport: "rdma" }],
        sent: ["tent_notifications_sent_total", { transport: "rdma" }]
      })
      for (const name of ["ok0", "bad", "bad", "ok1", "bad"]) {
        yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification(name, "x"))
      }
      expect(names(yield* receive(rx.engine, 2))).toEqual(["ok0", "ok1"])
      expect(yield* until(() => w.delta().rejected >= 3)).toBe(true)
      expect(w.delta()).toEqual({ rejected: 3, received: 2, sent: 5 })
      expect(rx.diag.counters.rdma?.malformed).toBe(3)
    })
  )

  it.scopedLive("a copy under the Dedup series moves duplicates_dropped_total and is delivered once", () =>
    Effect.gen(function* () {
      // A stamped notification sent twice with its first stamp, as the resend sends a copy: the receiver's window
      // drops the second. (Over the TCP transport's Notify, which carries the caller's stamp as given.)
      const rx = yield* engine(tcpOnly, series({ dedup: Dedup.makeSeries() }))
      const tx = yield* engine(tcpOnly)
      const stamp = Dedup.makeSeries().stamp(1) as Dedup.Stamp
      const w = watch({
        duplicates: ["tent_duplicates_dropped_total"],
        received: ["tent_notifications_received_total", { transport: "tcp" }],
        sent: ["tent_notifications_sent_total", { transport: "tcp" }]
      })
      const n = { ...makeNotification("once", "x"), stamp }
      yield* tx.engine.sendNotification(rx.engine.segmentName, n)
      yield* tx.engine.sendNotification(rx.engine.segmentName, n)
      yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification("after", "x"))
      expect(names(yield* receive(rx.engine, 2))).toEqual(["once", "after"])
      expect(w.delta()).toEqual({ duplicates: 1, received: 2, sent: 3 })
      expect(rx.diag.counters.dedup?.duplicates).toBe(1)
    })
  )

  it.scopedLive(
    "a disabled notify channel under RpcFallback: failed{rdma}, fallbacks{rdma→tcp}, sent and received{tcp}",
    () =>
      Effect.gen(function* () {
        const fallback = series({ routing: NotificationRouting.rpcFallback })
        const rx = yield* engine({}, fallback)
        const tx = yield* engine({}, fallback)
        yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification("before", "x"))
        expect(names(yield* receive(rx.engine, 1))).toEqual(["before"])
        const w = watch({
          disables: ["tent_notify_qp_disables_total"],
          failedRdma: ["tent_notifications_failed_total", { transport: "rdma" }],
          fallbacks: ["tent_fallbacks_total", { from: "rdma", to: "tcp" }],
          sentRdma: ["tent_notifications_sent_total", { transport: "rdma" }],
          sentTcp: ["tent_notifications_sent_total", { transport: "tcp" }],
          receivedTcp: ["tent_notifications_received_total", { transport: "tcp" }]
        })
        // TENT's `notify_connected_ = false` on the sender's channel: the RDMA send fails, the routing falls back
        expect(yield* tx.diag.disableNotify(rx.engine.segmentName)).toBe(1)
        for (let i = 0; i < 4; i++)
          yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification(`f${i}`, "x"))
        expect(names(yield* receive(rx.engine, 4))).toEqual(["f0", "f1", "f2", "f3"])
        expect(w.delta()).toEqual({
          disables: 1,
          failedRdma: 4,
          fallbacks: 4,
          sentRdma: 0,
          sentTcp: 4,
          receivedTcp: 4
        })
      })
  )

  it.scopedLive("an endpoint retired through Diagnostics moves endpoint_retirements_total{cause=reset} once", () =>
    Effect.gen(function* () {
      const rx = yield* engine(rdmaOnly)
      const tx = yield* engine(rdmaOnly)
      yield* tx.engine.sendNotification(rx.engine.segmentName, makeNotification("up", "x"))
      const [ep] = yield* tx.diag.endpoints
      expect(ep?.status).toBe("READY")
      const w = watch({
        reset: ["tent_endpoint_retirements_total", { cause: "reset" }],
        dataError: ["tent_endpoint_retirements_total", { cause: "data_error" }]
      })
      expect(yield* tx.diag.retire(ep?.localNic as string, ep?.peerNicPath as string)).toBe(true)
      // retiring it again finds it gone from the store: nothing more is counted
      expect(yield* tx.diag.retire(ep?.localNic as string, ep?.peerNicPath as string)).toBe(false)
      expect(w.delta()).toEqual({ reset: 1, dataError: 0 })
    })
  )

  it.scopedLive("control-plane calls: latency by method and outcome, a refused call counted by reason", () =>
    Effect.gen(function* () {
      const rx = yield* engine(rdmaOnly)
      const agent = yield* RpcAgent.make.pipe(Effect.provide(RpcConfig.layer({})))
      // A port nothing listens on: bound, then closed.
      const closed = yield* Effect.promise(
        () =>
          new Promise<number>((resolve) => {
            const server = createServer().listen(0, "127.0.0.1", () => {
              const { port } = server.address() as { port: number }
              server.close(() => resolve(port))
            })
          })
      )
      const w = watch({
        ok: ["tent_rpc_call_duration_seconds", { method: "Probe", outcome: "ok" }],
        failedTime: ["tent_rpc_call_duration_seconds", { method: "Probe", outcome: "transport_failure" }],
        refused: ["tent_rpc_call_failures_total", { method: "Probe", reason: "Refused" }]
      })
      yield* agent.probe(rx.engine.address)
      yield* agent.probe(rx.engine.address)
      const failure = yield* Effect.flip(agent.probe(`127.0.0.1:${closed}`))
      expect(failure.reason).toBe("Refused")
      expect(w.delta()).toEqual({ ok: 2, failedTime: 1, refused: 1 })
    })
  )

  it("the peer label: off by default; on, a series per peer beside the unlabelled one", () => {
    expect(Metrics.peerLabels()).toBe(false)
    const plain = watch({ all: ["tent_fallbacks_total", { from: "tcp", to: "rpc" }] })
    const peerA = watch({ a: ["tent_fallbacks_total", { from: "tcp", to: "rpc", peer: "peer-a" }] })
    Metrics.fallback("tcp", "rpc").update(1, "peer-a")
    expect([plain.delta().all, peerA.delta().a]).toEqual([1, 0])
    Metrics.setPeerLabels(true)
    try {
      Metrics.fallback("tcp", "rpc").update(1, "peer-a")
    } finally {
      Metrics.setPeerLabels(false)
    }
    expect([plain.delta().all, peerA.delta().a]).toEqual([1, 1])
  })
})
