/**
 * The control plane's settings (the `rpc/*` keys of the engine's JSON config): timeouts in milliseconds (-1 is TENT's
 * 30 s) and byte limits, read with Effect `Config`.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import { Config, ConfigError, ConfigProvider, Context, Either, Layer, Option, Redacted } from "effect"
import { allowList, MIN_SECRET_BYTES } from "./internal/auth.js"

/**
 * What -1 (the default of every `rpc/*_timeout_ms`) means: the 30 s of TENT's RPC library, as `main` has today.
 *
 * @since 0.1.0
 */
export const LIBRARY_DEFAULT_TIMEOUT_MS = 30_000

/**
 * The control-plane settings, in milliseconds and bytes; timeouts are already resolved (-1 → 30 000).
 *
 * @since 0.1.0
 */
export interface RpcSettings {
  /** `rpc/request_timeout_ms`: `GetSegmentDesc`, `Probe`. */
  readonly requestTimeoutMs: number
  /** `rpc/bootstrap_timeout_ms`: `Bootstrap`. */
  readonly bootstrapTimeoutMs: number
  /** `rpc/notify_timeout_ms`: `Notify`. */
  readonly notifyTimeoutMs: number
  /** `rpc/connect_timeout_ms`: establishing the connection to a peer. */
  readonly connectTimeoutMs: number
  /** `rpc/max_notify_bytes`: the largest `Notify` (name + message bytes) sent or accepted. */
  readonly maxNotifyBytes: number
  /** `rpc/max_data_bytes`: the largest `SendData` / `RecvData` sent or served (absent → 16 MiB). */
  readonly maxDataBytes?: number | undefined
  /** `rpc/probe_timeout_ms`: the prober's `Probe` calls (RFC PR 4; absent → 2000). */
  readonly probeTimeoutMs?: number | undefined
  /**
   * The control plane's shared secret (`TENT_RPC_SECRET` in the config or the process's environment, or the file
   * `rpc/auth_secret_file` names); absent: no authentication, as TENT. Never printed.
   */
  readonly secret?: Redacted.Redacted<string> | undefined
  /** `rpc/allow_cidrs`: the addresses a connection may come from; absent or empty: any. */
  readonly allowCidrs?: ReadonlyArray<string> | undefined
  /** `rpc/max_connections`: connections a server holds at once (absent → 1024). */
  readonly maxConnections?: number | undefined
  /** `rpc/max_inflight`: requests of one connection being handled at once (absent → 1024). */
  readonly maxInflight?: number | undefined
  /** `rpc/max_unread_reply_bytes`: reply bytes a connection may leave unread before it is read no more (16 MiB). */
  readonly maxUnreadReplyBytes?: number | undefined
}

/**
 * One configuration key, in the shape every package of the engine declares its keys in (`EngineConfig.KeySpec` of
 * `@tent/core` merges them): its JSON type, default, description and the values it accepts.
 *
 * @since 0.1.0
 */
export interface KeySpec {
  readonly kind: "int"
  readonly default: number
  readonly description: string
  /** Accepted values, as a predicate and the message that names them. */
  readonly valid: { readonly check: (n: number) => boolean; readonly message: string }
}

/**
 * A configuration key whose value is a string (`kind` `"string"`) or a list of them (`"strings"`), in the shape of
 * `EngineConfig.KeySpec` of `@tent/core`.
 *
 * @since 0.3.0
 */
export interface TextKeySpec {
  readonly kind: "string" | "strings"
  readonly default: string | ReadonlyArray<string>
  readonly description: string
}

const timeoutMs = {
  check: (n: number) => n === -1 || n > 0,
  message: "must be -1 (the library default, 30 s) or a positive number of milliseconds"
}
const timeout = (what: string): KeySpec => ({
  kind: "int",
  default: -1,
  description: `per-call timeout of ${what} in ms; -1 = library default (30 s)`,
  valid: timeoutMs
})
const bytes = (description: string, value = 16 * 1024 * 1024): KeySpec => ({
  kind: "int",
  default: value,
  description,
  valid: { check: (n) => n > 0, message: "must be a positive number of bytes" }
})
const count = (description: string, value: number): KeySpec => ({
  kind: "int",
  default: value,
  description,
  valid: { check: (n) => n > 0, message: "must be a positive integer" }
})

/**
 * The integer keys this module reads (timeouts, limits).
 *
 * @since 0.3.0
 */
export const intKeys = {
  "rpc/request_timeout_ms": timeout("GetSegmentDesc and Probe"),
  "rpc/bootstrap_timeout_ms": timeout("Bootstrap"),
  "rpc/notify_timeout_ms": timeout("Notify"),
  "rpc/connect_timeout_ms": timeout("connecting to a peer"),
  "rpc/max_notify_bytes": bytes("largest Notify (name + message bytes) sent or accepted"),
  "rpc/max_data_bytes": bytes("largest SendData / RecvData sent or served"),
  "rpc/probe_timeout_ms": {
    kind: "int",
    default: 2000,
    description: "timeout of the Probe calls PeerHealth's prober makes to peers marked unreachable (RFC PR 4)",
    valid: { check: (n) => n > 0, message: "must be a positive number of milliseconds" }
  },
  "rpc/max_connections": count("connections a control-plane server holds at once; more are closed and counted", 1024),
  "rpc/max_inflight": count(
    "requests of one connection handled at once; beyond it the connection is not read until one is answered",
    1024
  ),
  "rpc/max_unread_reply_bytes": bytes(
    "reply bytes a connection may leave unread; beyond it the connection is not read until its peer reads",
    16 * 1024 * 1024
  )
} as const satisfies Record<string, KeySpec>

/**
 * The string keys this module reads: the control plane's authentication and allow-list.
 *
 * @since 0.3.0
 */
export const textKeys = {
  "rpc/auth_secret_file": {
    kind: "string",
    default: "",
    description:
      "file holding the control plane's shared secret (≥ 16 bytes; TENT_RPC_SECRET gives it directly); empty and no " +
      "TENT_RPC_SECRET: no authentication, as TENT"
  },
  "rpc/allow_cidrs": {
    kind: "strings",
    default: [],
    description: "addresses or CIDRs a control-plane connection may come from; empty: any"
  }
} as const satisfies Record<string, TextKeySpec>

/**
 * The keys this module reads, by their path in the engine's JSON config; `EngineConfig.keys` includes them.
 *
 * @since 0.1.0
 */
export const keys = { ...intKeys, ...textKeys }

/**
 * A key of {@link keys} without its `rpc/` prefix, as in {@link defaults} and {@link layer}.
 *
 * @since 0.1.0
 */
export type KeyName = { [K in keyof typeof intKeys]: K extends `rpc/${infer N}` ? N : never }[keyof typeof intKeys]

/**
 * The defaults of {@link keys}, keyed as in the engine's JSON config under `rpc`.
 *
 * @since 0.1.0
 */
export const defaults: { readonly [N in KeyName]: number } = Object.fromEntries(
  Object.entries(intKeys).map(([key, spec]) => [key.slice("rpc/".length), spec.default])
) as { readonly [N in KeyName]: number }

/**
 * -1 → {@link LIBRARY_DEFAULT_TIMEOUT_MS}; anything else as it is.
 *
 * @since 0.1.0
 */
export const resolveTimeout = (ms: number): number => (ms === -1 ? LIBRARY_DEFAULT_TIMEOUT_MS : ms)

/** The raw value of a key under `rpc`, with the validation, default and description of its entry in {@link keys}. */
const read = (name: KeyName): Config.Config<number> => {
  const spec: KeySpec = intKeys[`rpc/${name}`]
  return Config.integer(name).pipe(
    Config.validate({ message: spec.valid.message, validation: spec.valid.check }),
    Config.withDefault(spec.default),
    Config.withDescription(spec.description)
  )
}

/** The `rpc/*` integer keys. */
const limitsConfig = Config.all({
  requestTimeoutMs: Config.map(read("request_timeout_ms"), resolveTimeout),
  bootstrapTimeoutMs: Config.map(read("bootstrap_timeout_ms"), resolveTimeout),
  notifyTimeoutMs: Config.map(read("notify_timeout_ms"), resolveTimeout),
  connectTimeoutMs: Config.map(read("connect_timeout_ms"), resolveTimeout),
  maxNotifyBytes: read("max_notify_bytes"),
  maxDataBytes: read("max_data_bytes"),
  probeTimeoutMs: read("probe_timeout_ms"),
  maxConnections: read("max_connections"),
  maxInflight: read("max_inflight"),
  maxUnreadReplyBytes: read("max_unread_reply_bytes")
}).pipe(Config.nested("rpc"))

/** Reads the secret file (when one is named) and checks the secret and the allow-list, naming the key at fault. */
const resolveAuth = (raw: {
  readonly secret: Option.Option<Redacted.Redacted<string>>
  readonly file: string
  readonly allowCidrs: string
  readonly limits: RpcSettings
}): Either.Either<RpcSettings, ConfigError.ConfigError> => {
  const allowCidrs = raw.allowCidrs.split(",").filter((s) => s.trim() !== "")
  try {
    allowList(allowCidrs)
  } catch (e) {
    return Either.left(ConfigError.InvalidData(["rpc", "allow_cidrs"], (e as Error).message))
  }
  // the config's own TENT_RPC_SECRET, else the process's (as the Redis password is read)
  const envSecret = process.env.TENT_RPC_SECRET
  let secret = Option.getOrElse(raw.secret, () =>
    envSecret === undefined || envSecret === "" ? undefined : Redacted.make(envSecret)
  )
  let from = "TENT_RPC_SECRET"
  if (secret === undefined && raw.file !== "") {
    from = "rpc/auth_secret_file"
    try {
      secret = Redacted.make(Fs.readFileSync(raw.file, "utf8").trim())
    } catch (e) {
      const why = (e as NodeJS.ErrnoException).code ?? (e as Error).message
      return Either.left(ConfigError.InvalidData(["rpc", "auth_secret_file"], `cannot read ${raw.file} (${why})`))
    }
  }
  if (secret !== undefined && Buffer.byteLength(Redacted.value(secret)) < MIN_SECRET_BYTES) {
    const path = from === "TENT_RPC_SECRET" ? ["TENT_RPC_SECRET"] : ["rpc", "auth_secret_file"]
    return Either.left(
      ConfigError.InvalidData(path, `the secret must be at least ${MIN_SECRET_BYTES} bytes (e.g. openssl rand -hex 32)`)
    )
  }
  return Either.right({ ...raw.limits, secret, allowCidrs })
}

/**
 * The settings read with Effect `Config`, nested under `rpc`: `{"rpc": {"notify_timeout_ms": 500}}` in a JSON
 * config, or `RPC_NOTIFY_TIMEOUT_MS=500` with {@link layerFromEnv}. A value of the wrong type fails with a
 * `ConfigError` that names the key. The shared secret: `TENT_RPC_SECRET` (from the provider, else the process's
 * environment) or the file `rpc/auth_secret_file` names, at least 16 bytes; `rpc/allow_cidrs` checked as addresses.
 *
 * @since 0.1.0
 */
export const config: Config.Config<RpcSettings> = Config.all({
  secret: Config.option(Config.redacted("TENT_RPC_SECRET")),
  file: Config.string("auth_secret_file").pipe(Config.withDefault(""), Config.nested("rpc")),
  allowCidrs: Config.string("allow_cidrs").pipe(Config.withDefault(""), Config.nested("rpc")),
  limits: limitsConfig
}).pipe(Config.mapOrFail(resolveAuth))

/**
 * The control-plane settings as a service.
 *
 * @since 0.1.0
 */
export class RpcConfig extends Context.Tag("@tent/rpc/RpcConfig")<RpcConfig, RpcSettings>() {}

/**
 * Settings given in code, as raw config values (-1 allowed); unspecified keys take {@link defaults}. `auth`: the
 * control plane's shared secret (at least 16 bytes; absent: no authentication) and allow-list.
 *
 * @since 0.1.0
 */
export const layer = (
  values: Partial<Record<KeyName, number>> = {},
  auth: { readonly secret?: string | undefined; readonly allowCidrs?: ReadonlyArray<string> | undefined } = {}
): Layer.Layer<RpcConfig> => {
  const v = { ...defaults, ...values }
  return Layer.succeed(RpcConfig, {
    requestTimeoutMs: resolveTimeout(v.request_timeout_ms),
    bootstrapTimeoutMs: resolveTimeout(v.bootstrap_timeout_ms),
    notifyTimeoutMs: resolveTimeout(v.notify_timeout_ms),
    connectTimeoutMs: resolveTimeout(v.connect_timeout_ms),
    maxNotifyBytes: v.max_notify_bytes,
    maxDataBytes: v.max_data_bytes,
    probeTimeoutMs: v.probe_timeout_ms,
    maxConnections: v.max_connections,
    maxInflight: v.max_inflight,
    maxUnreadReplyBytes: v.max_unread_reply_bytes,
    secret: auth.secret === undefined ? undefined : Redacted.make(auth.secret),
    allowCidrs: auth.allowCidrs
  })
}

/**
 * Settings read from the current `ConfigProvider` (fails at start, naming the key, on a bad value).
 *
 * @since 0.1.0
 */
export const layerConfig: Layer.Layer<RpcConfig, import("effect/ConfigError").ConfigError> = Layer.effect(
  RpcConfig,
  config
)

/**
 * Settings read from the engine's JSON config object (the `rpc` key of it).
 *
 * @since 0.1.0
 */
export const layerFromJson = (json: unknown): Layer.Layer<RpcConfig, import("effect/ConfigError").ConfigError> =>
  layerConfig.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromJson(json))))

/**
 * Settings read from environment variables: `RPC_NOTIFY_TIMEOUT_MS`, `RPC_CONNECT_TIMEOUT_MS`, …
 *
 * @since 0.1.0
 */
export const layerFromEnv: Layer.Layer<RpcConfig, import("effect/ConfigError").ConfigError> = layerConfig.pipe(
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromEnv().pipe(ConfigProvider.constantCase)))
)
