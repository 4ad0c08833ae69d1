/**
 * The probe's matrix as data: its arms, scenarios and entries (rows), the RFC's wording of each, what a row reports,
 * and the plans (`--quick` and the full-length one) with the engine configuration of the probe's nodes.
 *
 * @since 0.1.0
 */
import type { Figures } from "./Live.js"

/** An arm of the matrix: `legacy` is TENT `main` (`Series.legacy`); `series` is the RFC's Layers. */
export type Arm = "legacy" | "series"

/**
 * A row's scenario: the RFC's six, numbered as in its Motivation table, recovery, and the resend storm (the receiver's
 * notify QP forced to ERR after every 200 notifications: resends cross the next fault).
 */
export type Scenario = 1 | 2 | 3 | 4 | 5 | 6 | "recovery" | "storm" | "restart"

/**
 * How a frozen peer is frozen. `application`: its engine stops polling its CQs and its control-plane server stops
 * reading, while its SoftVerbs NICs run on — what `SIGSTOP` does to a process whose NIC is hardware or the kernel's
 * rxe (the NIC ACKs SENDs into the receives already posted, then RNR-NAKs; the kernel completes TCP handshakes),
 * which is what the RFC froze. `host`: a real `SIGSTOP` of the SoftVerbs process, which freezes its NIC too (no ACKs:
 * the sender's QP runs out its retry budget), a fault of its own.
 */
export type Freeze = "application" | "host"

/** One row of the matrix to run: a scenario, and for the frozen-peer ones how the peer is frozen. */
export interface Entry {
  readonly scenario: Scenario
  readonly freeze: Freeze | null
}

/** The scenarios whose peer is frozen. */
export const frozenScenarios: ReadonlyArray<Scenario> = [4, 5, 6, "recovery"]

/**
 * The matrix in order: the RFC's seven rows (frozen peers: the application freeze), the resend storm, then the
 * host-freeze rows.
 */
export const entries: ReadonlyArray<Entry> = [
  ...([1, 2, 3, 4, 5, 6, "recovery", "storm"] as const).map((scenario) => ({
    scenario,
    freeze: frozenScenarios.includes(scenario) ? ("application" as const) : null
  })),
  ...frozenScenarios.map((scenario) => ({ scenario, freeze: "host" as const })),
  { scenario: "restart", freeze: null }
]

/** An entry's name for `--only` and the live lines: `4`, …, `recovery`; the host-freeze rows `4-host`, …. */
export const entryName = (e: Entry): string => `${e.scenario}${e.freeze === "host" ? "-host" : ""}`

/** The RFC's wording of each scenario. */
export const titles: Record<Scenario, string> = {
  1: "Sender's notify channel disabled mid-stream",
  2: "Receiver's notify QP moved to ERR mid-stream",
  3: "Endpoint retired by a fiber other than the notify poller",
  4: "Frozen peer, no endpoint yet, sendNotification twice",
  5: "Frozen peer, submitTransfer",
  6: "Peer freezes mid-stream while the initiator sends",
  recovery: "Frozen peer resumes: time until a notification gets through",
  storm: "Resend storm: receiver's notify QP forced to ERR after every 200 notifications",
  restart: "Receiver killed mid-stream (SIGKILL) and restarted on the same address and segment name"
}

/** A row's title: the RFC's wording, and how the peer was frozen. */
export const title = (scenario: Scenario, freeze: Freeze | null): string =>
  freeze === null
    ? titles[scenario]
    : `${titles[scenario]} (${freeze === "application" ? "application frozen, NIC alive" : "host frozen: SIGSTOP, soft NIC too"})`

/** One row of the matrix (`--json` prints `rows` of these, without `note`). */
export interface Row extends RowResult {
  /** Copies the receiver's dedup window dropped (RFC PR 6; 0 under legacy). */
  readonly duplicatesDropped: number
  /** The initiator's notifications that fell back to a later transport, in all and by `from→to`. */
  readonly fallbacks: number
  readonly fallbacksVia: Readonly<Record<string, number>>
  /** Pending notifications of the initiator's retired channels resent (RFC PR 7), in all and by path. */
  readonly resent: number
  readonly resentVia: Figures["resentVia"]
  /** NIC-pair resends that went out, by `local NIC→peer NIC`. */
  readonly resentPairs: Readonly<Record<string, number>>
  /** Pending notifications the resend could not send. */
  readonly resendFailed: number
  /** The initiator's `Undelivered` events (delivery receipts), in all and by reason. */
  readonly undelivered: number
  readonly undeliveredBy: Readonly<Record<string, number>>
  /** Notifications the initiator's ledger still held without a receipt when the row ended. */
  readonly unreceipted: number
  /** Notifications the initiator's ledger sent over the control plane; notify channels it rebuilt. */
  readonly ledgerSent: number
  readonly rebuilt: number
  /**
   * Calls that returned ok and were neither received nor reported: `ok − received − undelivered` (at least 0). The
   * promise is 0: an ok call ends received or as an `Undelivered` event.
   */
  readonly silent: number
  /** Seconds from the start of the row's two processes to its end. */
  readonly elapsed: number
}

/** What a scenario itself reports; {@link runRow} adds the children's figures ({@link Row}). */
export interface RowResult {
  readonly scenario: Scenario
  /** How the peer was frozen (scenarios 4-6 and recovery); null for the others. */
  readonly freeze: Freeze | null
  readonly arm: Arm
  /** The notifications the scenario sends (its plan). */
  readonly sent: number
  /** What the sender attempted: calls that returned success, calls that failed, never attempted (the run stalled). */
  readonly ok: number
  readonly failed: number
  readonly notAttempted: number
  /** Sends posted on the sender's notify QP and not completed when the fault hit (-1: no fault, or not measured). */
  readonly inFlightAtFault: number
  /** Sends the sender had in flight on notify channels it retired or disabled: lost unless resent (RFC PR 7). */
  readonly closedInFlight: number
  /**
   * Scenario 6: the sender's notify sends that completed while the peer was frozen (its NIC ACKed them: > 0 only when
   * the NIC stayed alive); -1 elsewhere.
   */
  readonly completedWhileFrozen: number
  readonly received: number
  /** Whether the END marker arrived (stream scenarios; true elsewhere). */
  readonly end: boolean
  /** What the receiver dropped as "unknown QP". */
  readonly unknownQp: number
  readonly duplicates: number
  readonly seconds: ReadonlyArray<number>
  /** What else the probe saw, for a person. */
  readonly note: string
  /**
   * A row that counts by seq from its receivers' own logs (`restart`): its silent and undelivered figures, which
   * {@link runRow} then takes instead of the children's live figures.
   */
  readonly counted?: {
    readonly silent: number
    readonly undelivered: number
    readonly undeliveredBy: Readonly<Record<string, number>>
    readonly elapsed: number
  }
}

/** The timing of a run: what `--quick` scales. */
export interface Plan {
  readonly quick: boolean
  /** Notifications per kind (transfer-bound, standalone) in a stream scenario. */
  readonly count: number
  /** `rpc/{request,bootstrap,notify,connect}_timeout_ms`; -1 = the library default, 30 s. */
  readonly rpcTimeoutMs: number
  /** How long a peer stays frozen mid-stream (scenario 6) and before recovery. */
  readonly holdMs: number
  /** A stream that makes no progress this long is stopped (the sender is blocked for good). */
  readonly stallMs: number
  /** `workers/max_retry_count`: attempts of a transfer slice before its batch fails (TENT's 8 in both plans). */
  readonly maxRetry: number
  /** How long the receiver is given for the END marker and what is still in flight. */
  readonly graceMs: number
}

/** The real defaults: the library's 30 s control-plane timeout, the RFC's ~60 s freeze. */
export const fullPlan = (count: number): Plan => ({
  quick: false,
  count,
  rpcTimeoutMs: -1,
  maxRetry: 8,
  holdMs: 60_000,
  stallMs: 75_000,
  graceMs: 15_000
})

/** `--quick` divides the times the RFC's rows are made of (the control-plane timeouts and the freeze) by this. */
export const QUICK_FACTOR = 15

/** `--quick`: the control-plane timeouts and the freeze ÷ {@link QUICK_FACTOR}; counts and fixed times unchanged. */
export const quickPlan = (count: number): Plan => ({
  quick: true,
  count,
  rpcTimeoutMs: 30_000 / QUICK_FACTOR,
  maxRetry: 8,
  holdMs: 60_000 / QUICK_FACTOR,
  stallMs: 6000,
  graceMs: 3000
})

/** What `--quick` changes, as printed. */
export const quickFactors = `control-plane timeouts rpc/{request,bootstrap,notify,connect}_timeout_ms and the frozen-peer hold ÷${QUICK_FACTOR} (30 s → ${30 / QUICK_FACTOR} s, 60 s → ${60 / QUICK_FACTOR} s), so a row made of timeouts reads ×1/${QUICK_FACTOR} of its full-length value; counts unchanged (workers/max_retry_count 8, TCP 3 attempts); times the RFC fixes unchanged (the 1 s notify slot wait, the prober's 1 s interval and 2 s probe timeout, QP retry timers); the probe's own bounds: 6 s without progress = stalled, 3 s for END`

/** The effective control-plane timeout of a plan. */
export const rpcTimeout = (plan: Plan) => (plan.rpcTimeoutMs === -1 ? 30_000 : plan.rpcTimeoutMs)

/** The engine configuration of the probe's nodes. */
export const nodeConfig = (plan: Plan) => ({
  transports: {
    rdma: { num_lanes: 2, device: { num_cq_list: 1 }, workers: { num_workers: 2, max_retry_count: plan.maxRetry } }
  },
  ...(plan.rpcTimeoutMs === -1
    ? {}
    : {
        rpc: {
          request_timeout_ms: plan.rpcTimeoutMs,
          bootstrap_timeout_ms: plan.rpcTimeoutMs,
          notify_timeout_ms: plan.rpcTimeoutMs,
          connect_timeout_ms: plan.rpcTimeoutMs
        }
      })
})

/** Reports what a row is doing now (a phase of the live line). */
export type Report = (line: string) => void

/** Where a row reports while it runs: its phase, and its figures every `everyMs`. */
export interface Live {
  readonly report: Report
  readonly figures: (f: Figures) => void
  /** How often the figures are read from the children (a pipe shows a line a second: no need to read more). */
  readonly everyMs: number
}
