/**
 * Typed errors rendered for a person: one line that says what failed, towards which peer or path, and what to
 * check. Every command ends with {@link failWith} so a failure prints that line on stderr and exits non-zero.
 *
 * @since 0.1.0
 */
import { Cause, Console, Effect } from "effect"

/**
 * A failure that is already a sentence for a person (what failed, where, what to check).
 *
 * @since 0.1.0
 */
export class CliFailure extends Error {
  /**
   * The tag `describe` and `failWith` tell it by.
   *
   * @since 0.1.0
   */
  readonly _tag = "CliFailure"
}

const field = (e: unknown, k: string): string | undefined => {
  const v = (e as Record<string, unknown> | null)?.[k]
  return typeof v === "string" ? v : typeof v === "number" ? String(v) : undefined
}

/**
 * A usage error found when the command ran (a peer that cannot be an address): exit 2, as a bad argument.
 *
 * @since 0.1.0
 */
export class UsageFailure extends Error {
  /**
   * The tag `describe` and `failWith` tell it by (`failWith` exits 2 on it).
   *
   * @since 0.1.0
   */
  readonly _tag = "UsageFailure"
}

/**
 * One line for a typed error (or any thrown value) of the engine's layers; `peer` is the segment addressed.
 *
 * @example
 * ```ts
 * import { Render } from "@tent/cli"
 *
 * const line = Render.describe({ _tag: "TransportFailure", reason: "Refused", message: "connect ECONNREFUSED" }, "10.0.0.2:12001")
 * assert.ok(line.startsWith("control plane to 10.0.0.2:12001 failed (Refused): connect ECONNREFUSED; check:"))
 * ```
 *
 * @since 0.1.0
 */
export const describe = (error: unknown, peer?: string): string => {
  const tag = field(error, "_tag")
  const msg = field(error, "message") ?? String(error)
  const to = peer === undefined ? "" : ` (peer ${peer})`
  switch (tag) {
    case "CliFailure":
    case "UsageFailure":
      return msg
    case "TransportFailure": {
      const address = field(error, "address") ?? peer ?? "?"
      const reason = field(error, "reason")
      const check =
        reason === "Refused"
          ? "is `tent serve` running there, and is that its host:port?"
          : reason === "Timeout"
            ? "the peer accepted the connection but did not answer: is it stopped (SIGSTOP) or overloaded? rpc/*_timeout_ms bound the wait"
            : reason === "Closed"
              ? "the peer closed the connection: did it exit?"
              : "is the peer a tent engine of the same version?"
      return `control plane to ${address} failed (${reason}): ${msg}; check: ${check}`
    }
    case "BootstrapRejected":
      return `peer refused the RDMA connection${to}: ${msg}; check: both sides use the same transports/rdma/num_lanes and have their devices up`
    case "InvalidEntry":
      return `segment ${field(error, "segment") ?? peer ?? "?"} is not known there: ${msg}; check: the segment name is the peer's host:port`
    case "DeviceNotFound": {
      const reason = field(error, "reason")
      const available = (error as { available?: ReadonlyArray<string> }).available ?? []
      return `no usable RDMA device${reason === undefined ? "" : ` (${reason})`}: ${msg}${available.length > 0 ? `; present: ${available.join(", ")}` : ""}`
    }
    case "RdmaError":
      return `verbs call ${field(error, "op")} failed (errno ${field(error, "errno")})${to}: ${msg}`
    case "EndpointUnavailable":
      return `the notify QP to ${field(error, "peerNicPath") ?? peer ?? "?"} is not usable: ${msg}; check: is the peer's RDMA transport enabled, did the endpoint retire?`
    case "NotificationTooLarge":
      return `${msg}${to}; check: a notification (name + message) fits one 64 KiB notify slot`
    case "NotificationNotSupported":
      return `no installed transport carries notifications${to}: ${msg}; check: transports/rdma/enable and transports/tcp/enable`
    case "SegmentNotFound":
      return `unknown segment ${field(error, "segment")}: ${msg}`
    case "InvalidRequest":
      return `the transfer cannot be carried out as given${to}: ${msg}`
    case "BatchNotFound":
      return `unknown batch ${field(error, "batchId")}`
    case "ServerError":
      return `cannot start the control plane on ${field(error, "host")}:${field(error, "port")}: ${msg}; check: is the port free (rpc_server_port)?`
    case "ConfigError":
    case "InvalidData":
    case "MissingData":
    case "SourceUnavailable":
    case "Unsupported":
    case "And":
    case "Or":
      return `bad configuration: ${String(error).replace(/^\(?(Invalid|Missing) data at /, "$1 value at ")}; check: --config file and the environment variables (constant-case key names)`
    default:
      return `${tag === undefined ? "" : `${tag}: `}${msg}${to}`
  }
}

/**
 * Prints the cause's first failure (or defect) as one line on stderr, sets a non-zero exit code, and stops.
 *
 * @since 0.1.0
 */
export const failWith =
  (command: string, peer?: string) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A | undefined, never, R> =>
    Effect.catchAllCause(self, (cause) => {
      if (Cause.isInterruptedOnly(cause)) return Effect.interrupt
      const failure = Cause.failureOption(cause)
      const error = failure._tag === "Some" ? failure.value : Cause.squash(cause)
      return Effect.as(
        Effect.zipRight(
          Console.error(`tent ${command}: ${describe(error, peer)}`),
          Effect.sync(() => {
            process.exitCode = (error as { _tag?: unknown } | null)?._tag === "UsageFailure" ? 2 : 1
          })
        ),
        undefined
      )
    })

/**
 * A command's handler whose body lives in a module loaded only when the command runs, so that parsing, `--help` and
 * `--version` load no engine, and `tent send` never loads the probe or the bench. A module that cannot be loaded is
 * the command's one line and a non-zero exit, as any other failure.
 *
 * @since 0.1.0
 */
export const lazy =
  <M, O, R>(
    command: string,
    load: () => Promise<M>,
    body: (module: M, options: O) => Effect.Effect<unknown, never, R>
  ) =>
  (options: O): Effect.Effect<unknown, never, R> =>
    Effect.flatMap(
      Effect.tryPromise({
        try: load,
        catch: (e) =>
          new CliFailure(`cannot load the ${command} command: ${e instanceof Error ? e.message : String(e)}`)
      }).pipe(failWith(command)),
      (m) => (m === undefined ? Effect.void : body(m, options))
    )
