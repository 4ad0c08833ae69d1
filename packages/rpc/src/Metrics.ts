/**
 * `Metrics` of the control plane, and the few helpers every `Metrics` module of tent defines its metrics with (the
 * health and core packages import them from here: rpc is the package all of them depend on).
 *
 * A metric is an Effect `Metric` in the global registry, so `Metric.value`, `Metric.snapshot` and any exporter read
 * it. Its label sets are bounded and resolved once: a {@link Family} hands out a {@link Series} per label set
 * ({@link Family.child}) holding the registry's hook for it, and code increments that with a plain synchronous
 * `series.update(1)` — no Effect, no tag array, no registry lookup per increment. (`Metric.tagged` followed by
 * `unsafeUpdate` would cost a new tag array, and so a registry lookup with key hashing, on every call: Effect 3.22's
 * hook cache is keyed by the tag array's identity.) A peer label is added only while {@link setPeerLabels} is on (off
 * by default: it is one series per peer; `@tent/core`'s `Metrics` exposes the switch).
 *
 * Names as exported. Counters are created `incremental: true` and already end in `_total`. As read in
 * `@effect/opentelemetry` 0.64.1 (`internal/metrics.ts`): an incremental Effect counter becomes a monotonic
 * OpenTelemetry `Sum` (instrument type `COUNTER`) named as the Effect metric, unchanged; its unit is the value of a
 * label named `unit` or `time_unit` if there is one, else `"1"` (no tent metric has such a label); a non-incremental
 * counter becomes an up-down counter, i.e. a Prometheus gauge (none is used). In `@opentelemetry/exporter-prometheus`
 * 0.223.0 (`PrometheusSerializer`): `_total` is appended to a monotonic sum only when its name does not already end
 * in `_total`, and the unit is written as a `# UNIT` line, never appended to the name. So `tent_x_total` is scraped as
 * `tent_x_total`; a histogram `tent_x_seconds` as `tent_x_seconds_bucket{le=…}`, `tent_x_seconds_sum` and
 * `tent_x_seconds_count`.
 *
 * @since 0.1.0
 */
import {
  Cause,
  type Effect,
  Exit,
  Metric,
  MetricBoundaries,
  type MetricHook,
  MetricKey,
  type MetricKeyType,
  MetricLabel,
  Option
} from "effect"
import { TransportFailure } from "./Errors.js"
import { REJECT_REASONS } from "./internal/auth.js"

/**
 * One metric as documented and exported: what the README's metrics table lists.
 *
 * @since 0.1.0
 */
export interface CatalogEntry {
  /** The exported name (`tent_*`). */
  readonly name: string
  readonly type: "counter" | "histogram" | "gauge"
  /** Labels every series has. */
  readonly labels: ReadonlyArray<string>
  /** Labels added only while switched on (`peer`: {@link setPeerLabels}). */
  readonly optionalLabels: ReadonlyArray<string>
  readonly help: string
}

let peerLabelsOn = false

/**
 * Adds (or stops adding) a `peer` label to the metrics whose catalog entry lists it as optional. Off by default:
 * one series per peer. Synchronous: it applies from the next increment (earlier series stay as they are).
 *
 * @since 0.1.0
 */
export const setPeerLabels = (on: boolean): void => {
  peerLabelsOn = on
}

/**
 * Whether the `peer` label is on.
 *
 * @since 0.1.0
 */
export const peerLabels = (): boolean => peerLabelsOn

/**
 * Peers with series of their own per label set; beyond it, a peer is counted as `peer="other"`.
 *
 * @since 0.1.0
 */
export const MAX_PEER_SERIES = 1024

/**
 * Bucket bounds, in seconds, of the latency histograms (a send-slot wait, a control-plane call): 100 µs to 60 s in a
 * 1–2.5–5 series, so the exported bounds read as plain decimals.
 *
 * @since 0.1.0
 */
export const latencyBoundaries: MetricBoundaries.MetricBoundaries = MetricBoundaries.fromIterable([
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60
])

type Hook = MetricHook.MetricHook<number, unknown>
type Key = MetricKey.MetricKey<MetricKeyType.MetricKeyType<number, unknown>>

/**
 * A label set resolved to its hook, with its per-peer children made on first use (only while peer labels are on).
 *
 * @since 0.1.0
 */
export class Series {
  private peers: Map<string, Hook> | undefined
  constructor(
    private readonly key: Key,
    private readonly labels: ReadonlyArray<MetricLabel.MetricLabel>,
    /** The hook of this label set: `update(n)` adds n (counter) or records n (histogram). */
    readonly hook: Hook,
    private readonly peerable: boolean
  ) {}

  /**
   * Adds (records) `n`, in the series of `peer` when peer labels are on and the metric takes one.
   *
   * @since 0.1.0
   */
  update(n: number, peer?: string): void {
    if (peerLabelsOn && this.peerable && peer !== undefined) this.forPeer(peer).update(n)
    else this.hook.update(n)
  }

  /**
   * The hook of `peer`'s series, made on first use; once `MAX_PEER_SERIES` peers have one, further peers share `other`.
   *
   * @internal
   */
  private forPeer(peer: string): Hook {
    if (this.peers === undefined) this.peers = new Map()
    let hook = this.peers.get(peer)
    if (hook === undefined) {
      const value = this.peers.size < MAX_PEER_SERIES ? peer : "other"
      hook = this.peers.get(value)
      if (hook === undefined) {
        hook = Metric.globalMetricRegistry.get(
          MetricKey.taggedWithLabels(this.key, [...this.labels, MetricLabel.make("peer", value)])
        )
      }
      if (value === peer) this.peers.set(peer, hook)
    }
    return hook
  }
}

/**
 * A metric with a fixed set of labels: its `Metric` (read it with `Metric.value(family.metric.pipe(Metric.tagged(…)))`
 * or the registry's snapshot), its catalog entry, and its series by label values.
 *
 * @since 0.1.0
 */
export class Family<L extends string, M> {
  /**
   * The metric's catalog entry: name, type, labels and help, as the metrics catalog lists it.
   *
   * @since 0.1.0
   */
  readonly entry: CatalogEntry
  private readonly children = new Map<string, Series>()
  constructor(
    private readonly key: Key,
    /** The Effect metric (all label sets). */
    readonly metric: M,
    type: CatalogEntry["type"],
    readonly labels: ReadonlyArray<L>,
    help: string,
    private readonly peerable: boolean
  ) {
    this.entry = { name: key.name, type, labels, optionalLabels: peerable ? ["peer"] : [], help }
  }

  /**
   * The series of these label values (in {@link labels}' order), made once and kept: call it where the metric is
   * defined or cache the result, not per increment on a hot path.
   *
   * @since 0.1.0
   */
  child(...values: ReadonlyArray<string>): Series {
    if (values.length !== this.labels.length) {
      throw new Error(`${this.key.name}: ${this.labels.length} label values expected, got ${values.length}`)
    }
    const id = values.join("\u0000")
    let series = this.children.get(id)
    if (series === undefined) {
      const tags = values.map((v, i) => MetricLabel.make(this.labels[i] as string, v))
      const key = tags.length === 0 ? this.key : MetricKey.taggedWithLabels(this.key, tags)
      series = new Series(this.key, tags, Metric.globalMetricRegistry.get(key), this.peerable)
      this.children.set(id, series)
    }
    return series
  }
}

/**
 * A monotonic counter (`name` ends in `_total`). `peer`: takes the optional peer label.
 *
 * @since 0.1.0
 */
export const counter = <L extends string = never>(
  name: string,
  help: string,
  labels: ReadonlyArray<L> = [],
  options?: { readonly peer?: boolean }
): Family<L, Metric.Metric.Counter<number>> => {
  const key = MetricKey.counter(name, { incremental: true, description: help })
  return new Family(key, Metric.fromMetricKey(key), "counter", labels, help, options?.peer === true)
}

/**
 * A histogram over `boundaries` (seconds, bytes: the unit in the name).
 *
 * @since 0.1.0
 */
export const histogram = <L extends string = never>(
  name: string,
  help: string,
  boundaries: MetricBoundaries.MetricBoundaries,
  labels: ReadonlyArray<L> = [],
  options?: { readonly peer?: boolean }
): Family<L, Metric.Metric.Histogram<number>> => {
  const key = MetricKey.histogram(name, boundaries, help)
  return new Family(key, Metric.fromMetricKey(key), "histogram", labels, help, options?.peer === true)
}

/**
 * The control-plane methods (the RPC group's tags), bounded: a call to anything else is counted as `other`.
 *
 * @since 0.1.0
 */
export const METHODS = ["Bootstrap", "Notify", "GetSegmentDesc", "Probe", "SendData", "RecvData"] as const

/**
 * `TransportFailure.reason`s.
 *
 * @since 0.1.0
 */
export const FAILURE_REASONS = ["Refused", "Closed", "Timeout", "Protocol"] as const

/**
 * Control-plane calls by method and outcome, from the call to its reply or failure (the connect included).
 *
 * @since 0.1.0
 */
export const callDuration = histogram(
  "tent_rpc_call_duration_seconds",
  "control-plane calls made by this engine, seconds from the call to its reply or failure (connecting included)",
  latencyBoundaries,
  ["method", "outcome"]
)

/**
 * Control-plane calls that failed at transport level, by method and `TransportFailure.reason`.
 *
 * @since 0.1.0
 */
export const callFailures = counter(
  "tent_rpc_call_failures_total",
  "control-plane calls that failed at transport level (no reply), by TransportFailure reason",
  ["method", "reason"],
  { peer: true }
)

/** One method's series, resolved on its first call. */
interface MethodSeries {
  readonly ok: Series
  readonly error: Series
  readonly transportFailure: Series
  readonly failures: Readonly<Record<TransportFailure["reason"], Series>>
}

const methodSeries = new Map<string, MethodSeries>()
const seriesOf = (tag: string): MethodSeries => {
  let m = methodSeries.get(tag)
  if (m === undefined) {
    const method = (METHODS as ReadonlyArray<string>).includes(tag) ? tag : "other"
    m = methodSeries.get(method)
    if (m === undefined) {
      m = {
        ok: callDuration.child(method, "ok"),
        error: callDuration.child(method, "error"),
        transportFailure: callDuration.child(method, "transport_failure"),
        failures: {
          Refused: callFailures.child(method, "Refused"),
          Closed: callFailures.child(method, "Closed"),
          Timeout: callFailures.child(method, "Timeout"),
          Protocol: callFailures.child(method, "Protocol")
        }
      }
      methodSeries.set(method, m)
    }
    methodSeries.set(tag, m)
  }
  return m
}
// Every method's series made now, at 0, so a fresh engine's first scrape has both families (a label set has no
// series, and the exporter writes no family, until it is made).
for (const method of METHODS) seriesOf(method)

/**
 * Observes one control-plane call that ended with `result` (an `Exit`): its duration since `start`
 * (`performance.now()`), by outcome — `ok`, `error` (the peer's typed reply error), `transport_failure` — and a
 * transport failure by reason.
 *
 * @since 0.1.0
 */
export const observeCall = (
  method: string,
  address: string,
  start: number,
  result: Effect.Effect<unknown, unknown>
) => {
  if (!Exit.isExit(result)) return
  const m = seriesOf(method)
  const seconds = (performance.now() - start) / 1000
  if (Exit.isSuccess(result)) return m.ok.update(seconds)
  const failure = Cause.failureOption(result.cause)
  if (Option.isSome(failure) && failure.value instanceof TransportFailure) {
    m.transportFailure.update(seconds)
    m.failures[failure.value.reason].update(1, address)
  } else m.error.update(seconds)
}

/**
 * Control-plane connections this engine's server closed before serving anything, by reason: `auth_required` (no
 * handshake), `auth_failed` (a wrong proof), `not_allowed` (outside `rpc/allow_cidrs`), `max_connections`,
 * `tent_wire` (TENT's unauthenticated wire while a secret is set).
 *
 * @since 0.3.0
 */
export const rejectedConnections = counter(
  "tent_rpc_rejected_connections_total",
  "control-plane connections closed before anything was served, by reason",
  ["reason"]
)
// every reason's series made now, at 0 (a scrape shows the family before the first refusal)
for (const reason of REJECT_REASONS) rejectedConnections.child(reason)

/**
 * This package's metrics.
 *
 * @since 0.1.0
 */
export const catalog: ReadonlyArray<CatalogEntry> = [callDuration.entry, callFailures.entry, rejectedConnections.entry]
