/**
 * Every command's options and arguments as @effect/cli reads them, and what each command's parse to
 * (`DevicesOptions`, `SendOptions`, …). The command definitions (`commands/*.ts`) build their commands from these, and
 * the commands' bodies (`commands/run/*.ts`) take only the types, so a body and its command never import each other.
 * What the options every node command shares mean (device names, the configuration source) is in `NodeOptions.ts`,
 * which loads no parser: `tent send` and `tent devices` read their common forms without it (`Argv.ts`).
 *
 * @since 0.1.0
 */
import { Args, type Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import { Effect } from "effect"
import { arms, defaultSoftDevices, providers } from "./NodeOptions.js"

/**
 * Options every node command shares.
 *
 * @since 0.1.0
 */
export const nodeOptions = {
  config: Options.file("config", { exists: "yes" }).pipe(
    Options.withDescription(
      'TENT transfer-engine.json to read (nested or flat "a/b" keys); environment variables override it (MC_TENT_CONF, RPC_NOTIFY_TIMEOUT_MS, ...)'
    ),
    Options.optional
  ),
  provider: Options.choice("provider", providers).pipe(
    Options.withDescription("verbs provider: soft (SoftVerbs, UDP on 127.0.0.1) or ibverbs (the system libibverbs)"),
    Options.withDefault(providers[0])
  ),
  arm: Options.choice("arm", arms).pipe(
    Options.withDescription(
      "series = the RFC's Layers as built, selected by the config's keys (notification/rpc_fallback, ...); legacy = TENT main's behaviour"
    ),
    Options.withDefault(arms[0])
  ),
  softDevices: Options.text("soft-devices").pipe(
    Options.withDescription(
      `comma-separated SoftVerbs device names (default: TENT_SOFT_DEVICES or ${defaultSoftDevices.join(",")})`
    ),
    Options.optional
  ),
  host: Options.text("host").pipe(
    Options.withDescription(
      "interface the control plane binds (sets rpc_server_hostname; default 127.0.0.1); SoftVerbs devices bind it too unless --device-hosts says otherwise (an IPv4 address; else they bind 127.0.0.1)"
    ),
    Options.optional
  ),
  deviceHosts: Options.text("device-hosts").pipe(
    Options.withDescription(
      "NAME=IPv4,...: the address each SoftVerbs device binds (for example soft0=10.0.0.1,soft1=10.0.1.1: one rail per link); a device not named binds --host"
    ),
    Options.optional
  )
}

/**
 * `tent devices`'s options: the configuration file, the SoftVerbs device names, `--json`.
 *
 * @since 0.2.0
 */
export const devicesOptions = {
  config: nodeOptions.config,
  softDevices: nodeOptions.softDevices,
  json: Options.boolean("json").pipe(Options.withDescription("print one JSON object instead of text"))
}

/**
 * What `tent devices`'s arguments parse to.
 *
 * @since 0.2.0
 */
export type DevicesOptions = Command.Command.ParseConfig<typeof devicesOptions>

/**
 * The `PEER` argument of `tent send` and `tent transfer`: a `tent serve` address.
 *
 * @since 0.2.0
 */
export const peerArg = Args.text({ name: "PEER" }).pipe(
  Args.withDescription("the peer's segment name: the host:port `tent serve` printed (for example 127.0.0.1:12001)")
)

/**
 * `--mooncake`: PEER is a Mooncake TENT node, reached on its own control plane (coro_rpc) with TENT's TCP-transport
 * calls; no engine starts.
 *
 * @since 0.2.0
 */
export const mooncakeOption = Options.boolean("mooncake").pipe(
  Options.withDescription(
    "PEER is a Mooncake TENT node (its rpc_server_addr): speak TENT's own control plane (coro_rpc Notify, SendData, RecvData) instead of starting a node"
  )
)

/**
 * `tent send`'s options and its arguments `PEER NAME MSG`.
 *
 * @since 0.2.0
 */
export const sendOptions = {
  ...nodeOptions,
  peer: peerArg,
  mooncake: mooncakeOption,
  name: Args.text({ name: "NAME" }).pipe(Args.withDescription("the notification's name")),
  msg: Args.text({ name: "MSG" }).pipe(Args.withDescription("the notification's message"))
}

/**
 * What `tent send`'s arguments parse to.
 *
 * @since 0.2.0
 */
export type SendOptions = Command.Command.ParseConfig<typeof sendOptions>

/**
 * `--notify NAME=MSG` split at its first `=` (a message may hold more); anything else is a usage error that says so.
 *
 * @since 0.2.0
 */
export const notifyOption = (text: string) => {
  const at = text.indexOf("=")
  return at > 0
    ? Effect.succeed({ name: text.slice(0, at), msg: text.slice(at + 1) })
    : Effect.fail(
        ValidationError.invalidValue(
          HelpDoc.p(
            `--notify wants NAME=MSG, the notification's name and message joined by "=" (for example --notify done=req-7), got ${JSON.stringify(text)}`
          )
        )
      )
}

/**
 * `tent transfer`'s options and its argument `PEER`.
 *
 * @since 0.2.0
 */
export const transferOptions = {
  ...nodeOptions,
  peer: peerArg,
  mooncake: mooncakeOption,
  bytes: Options.integer("bytes").pipe(Options.withDescription("how many bytes to write")),
  offset: Options.integer("offset").pipe(
    Options.withDescription("where in the peer's first buffer to write"),
    Options.withDefault(0)
  ),
  seed: Options.integer("seed").pipe(Options.withDescription("seed of the byte pattern"), Options.withDefault(1)),
  notify: Options.text("notify").pipe(
    Options.withDescription(
      "NAME=MSG: a transfer-bound notification, sent once the batch completed (for example --notify done=req-7)"
    ),
    Options.mapEffect(notifyOption),
    Options.optional
  ),
  verify: Options.boolean("verify").pipe(
    Options.withDescription("READ the range back from the peer and compare it with what was written")
  )
}

/**
 * What `tent transfer`'s arguments parse to.
 *
 * @since 0.2.0
 */
export type TransferOptions = Command.Command.ParseConfig<typeof transferOptions>

/**
 * `tent recv`'s options: the node's, `--count`, `--timeout`, `--json`.
 *
 * @since 0.2.0
 */
export const recvOptions = {
  ...nodeOptions,
  count: Options.integer("count").pipe(
    Options.withDescription("notifications to wait for before exiting"),
    Options.withDefault(1)
  ),
  timeout: Options.float("timeout").pipe(
    Options.withDescription("seconds to wait for them at most"),
    Options.withDefault(60)
  ),
  json: Options.boolean("json").pipe(Options.withDescription("print JSON lines instead of text"))
}

/**
 * What `tent recv`'s options parse to.
 *
 * @since 0.2.0
 */
export type RecvOptions = Command.Command.ParseConfig<typeof recvOptions>

/**
 * `tent serve`'s options: the node's, `--segment-size`, `--digest`, `--json`, `--metrics-port`.
 *
 * @since 0.2.0
 */
export const serveOptions = {
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

/**
 * What `tent serve`'s arguments parse to.
 *
 * @since 0.2.0
 */
export type ServeOptions = Command.Command.ParseConfig<typeof serveOptions>

/**
 * `tent probe`'s options: `--arm`, `--quick`, `--json`, `--only`.
 *
 * @since 0.2.0
 */
export const probeOptions = {
  arm: Options.choice("arm", ["legacy", "series", "both"]).pipe(
    Options.withDescription(
      "legacy = TENT main (Series.legacy); series = the RFC's seven Layers (Series.all); both = the two arms alternating per scenario"
    ),
    Options.withDefault("both" as const)
  ),
  quick: Options.boolean("quick").pipe(
    Options.withDescription(
      "divide the control-plane timeouts (30 s -> 2 s) and the freeze (60 s -> 4 s) by 15, retry counts unchanged, so the matrix runs in minutes; what it changes is printed"
    )
  ),
  json: Options.boolean("json").pipe(
    Options.withDescription(
      'print {"rows":[{"scenario":1..6|"recovery"|"storm","freeze":"application"|"host"|null,"arm","sent","ok","failed","notAttempted","inFlightAtFault","closedInFlight","completedWhileFrozen","received","end","unknownQp","duplicates","seconds":[...]}]} on stdout'
    )
  ),
  only: Options.text("only").pipe(
    Options.withDescription(
      "comma-separated rows to run: 1-6, recovery, storm (the resend storm: the receiver's notify QP to ERR after every 200 notifications); the frozen peers 4, 5, 6 and recovery as the RFC froze them: the application stopped, its NIC alive), and 4-host, 5-host, 6-host, recovery-host (a SIGSTOP of the whole SoftVerbs process, NIC included); default all"
    ),
    Options.optional
  )
}

/**
 * What `tent probe`'s arguments parse to.
 *
 * @since 0.2.0
 */
export type ProbeOptions = Command.Command.ParseConfig<typeof probeOptions>

/**
 * `tent bench`'s argument (the suite) and options: `--scale`, `--quick`, `--json`.
 *
 * @since 0.2.0
 */
export const benchOptions = {
  suite: Args.choice([
    ["verbs", "verbs"],
    ["rpc", "rpc"],
    ["engine", "engine"],
    ["receipts", "receipts"],
    ["cli", "cli"],
    ["all", "all"]
  ] as const).pipe(
    Args.withDescription(
      "the suite to run (all = verbs, rpc, engine; cli measures the built command: run `pnpm build` first)"
    ),
    Args.withDefault("all" as const)
  ),
  scale: Options.boolean("scale").pipe(
    Options.withDescription(
      "with engine: only the scale suite (packages/core/bench/scale.ts): one-way latency and msgs/s from one engine to 1, 8, 64, 256 and 1000 peer engines (1000 with lazy slots only), 10 of 1000 frozen (application, host), memory per idle endpoint and connect time, with lazy and TENT notify slots"
    )
  ),
  quick: Options.boolean("quick").pipe(Options.withDescription("fewer iterations (about 30 s per suite)")),
  json: Options.boolean("json").pipe(
    Options.withDescription(
      'one JSON object per suite on stdout: {"suite","results":[{name,unit,value,better,floor,ratio}]}'
    )
  )
}

/**
 * What `tent bench`'s arguments parse to.
 *
 * @since 0.2.0
 */
export type BenchOptions = Command.Command.ParseConfig<typeof benchOptions>

/**
 * `tent soak`'s options: `--arm`, `--quick`, `--count`, `--rate`, `--seed`, `--json`.
 *
 * @since 0.2.0
 */
export const soakOptions = {
  arm: Options.choice("arm", ["legacy", "series", "both"]).pipe(
    Options.withDescription(
      "legacy = TENT main (Series.legacy); series = the configured series (Series.fromConfig); both = legacy then series, on the same schedule"
    ),
    Options.withDefault("both" as const)
  ),
  quick: Options.boolean("quick").pipe(
    Options.withDescription(
      "10,000 notifications at 250/s with faults of 1.5-3.5 s and the control-plane timeouts of tent probe --quick (2 s): at most 2 minutes per arm"
    )
  ),
  count: Options.integer("count").pipe(
    Options.withDescription("notifications per arm (default 100,000; --quick 10,000)"),
    Options.optional
  ),
  rate: Options.integer("rate").pipe(
    Options.withDescription("notifications per second the sender is paced at (default 500; --quick 250)"),
    Options.optional
  ),
  seed: Options.integer("seed").pipe(
    Options.withDescription("seed of the fault schedule (default: a new one, printed, so the run can be repeated)"),
    Options.optional
  ),
  json: Options.boolean("json").pipe(
    Options.withDescription(
      'print {"seed","count","rate","schedule":[…],"arms":[{"arm","total","quiet","windows":[…]}]} on stdout'
    )
  )
}

/**
 * What `tent soak`'s arguments parse to.
 *
 * @since 0.2.0
 */
export type SoakOptions = Command.Command.ParseConfig<typeof soakOptions>

/**
 * `tent fuzz`'s options: `--seed`, `--count`, `--target`, `--json`.
 *
 * @since 0.3.0
 */
export const fuzzOptions = {
  seed: Options.integer("seed").pipe(
    Options.withDescription("seed of the inputs (default: a new one, printed, so the run can be replayed)"),
    Options.optional
  ),
  count: Options.integer("count").pipe(
    Options.withDescription("inputs per target: frames, notify-slot SENDs, datagrams (default 1,000,000)"),
    Options.withDefault(1_000_000)
  ),
  target: Options.choice("target", ["all", "rpc-frames", "notify-slots", "softverbs"]).pipe(
    Options.withDescription(
      "the target to run: rpc-frames (the control-plane port: lean frames and coro_rpc), notify-slots (a real engine's notify-QP receive slots), softverbs (datagrams to a connected SoftVerbs QP from its peer's address); all = the three in turn"
    ),
    Options.withDefault("all" as const)
  ),
  json: Options.boolean("json").pipe(
    Options.withDescription(
      'print {"seed","count","targets":[{target,inputs,seconds,rate,connections,counters,memory,regions,client,violations}]} on stdout'
    )
  )
}

/**
 * What `tent fuzz`'s options parse to.
 *
 * @since 0.3.0
 */
export type FuzzOptions = Command.Command.ParseConfig<typeof fuzzOptions>
