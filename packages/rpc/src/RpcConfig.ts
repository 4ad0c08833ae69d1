/**
 * The control plane's settings (the `rpc/*` keys of the engine's JSON config): timeouts in milliseconds (-1 is TENT's
 * 30 s) and byte limits, read with Effect `Config`.
 *
 * @since 0.1.0
 */
import { Config, ConfigProvider, Context, Layer } from "effect"

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
const bytes = (description: string): KeySpec => ({
  kind: "int",
  default: 16 * 1024 * 1024,
  description,
  valid: { check: (n) => n > 0, message: "must be a positive number of bytes" }
})

/**
 * The keys this module reads, by their path in the engine's JSON config; `EngineConfig.keys` includes them.
 *
 * @since 0.1.0
 */
export const keys = {
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
  }
} as const satisfies Record<string, KeySpec>

/**
 * A key of {@link keys} without its `rpc/` prefix, as in {@link defaults} and {@link layer}.
 *
 * @since 0.1.0
 */
export type KeyName = { [K in keyof typeof keys]: K extends `rpc/${infer N}` ? N : never }[keyof typeof keys]

/**
 * The defaults of {@link keys}, keyed as in the engine's JSON config under `rpc`.
 *
 * @since 0.1.0
 */
export const defaults: { readonly [N in KeyName]: number } = Object.fromEntries(
  Object.entries(keys).map(([key, spec]) => [key.slice("rpc/".length), spec.default])
) as { readonly [N in KeyName]: number }

/**
 * -1 → {@link LIBRARY_DEFAULT_TIMEOUT_MS}; anything else as it is.
 *
 * @since 0.1.0
 */
export const resolveTimeout = (ms: number): number => (ms === -1 ? LIBRARY_DEFAULT_TIMEOUT_MS : ms)

/** The raw value of a key under `rpc`, with the validation, default and description of its entry in {@link keys}. */
const read = (name: KeyName): Config.Config<number> => {
  const spec: KeySpec = keys[`rpc/${name}`]
  return Config.integer(name).pipe(
    Config.validate({ message: spec.valid.message, validation: spec.valid.check }),
    Config.withDefault(spec.default),
    Config.withDescription(spec.description)
  )
}

/**
 * The settings read with Effect `Config`, nested under `rpc`: `{"rpc": {"notify_timeout_ms": 500}}` in a JSON
 * config, or `RPC_NOTIFY_TIMEOUT_MS=500` with {@link layerFromEnv}. A value of the wrong type fails with a
 * `ConfigError` that names the key.
 *
 * @since 0.1.0
 */
export const config: Config.Config<RpcSettings> = Config.all({
  requestTimeoutMs: Config.map(read("request_timeout_ms"), resolveTimeout),
  bootstrapTimeoutMs: Config.map(read("bootstrap_timeout_ms"), resolveTimeout),
  notifyTimeoutMs: Config.map(read("notify_timeout_ms"), resolveTimeout),
  connectTimeoutMs: Config.map(read("connect_timeout_ms"), resolveTimeout),
  maxNotifyBytes: read("max_notify_bytes"),
  maxDataBytes: read("max_data_bytes"),
  probeTimeoutMs: read("probe_timeout_ms")
}).pipe(Config.nested("rpc"))

/**
 * The control-plane settings as a service.
 *
 * @since 0.1.0
 */
export class RpcConfig extends Context.Tag("@tent/rpc/RpcConfig")<RpcConfig, RpcSettings>() {}

/**
 * Settings given in code, as raw config values (-1 allowed); unspecified keys take {@link defaults}.
 *
 * @since 0.1.0
 */
export const layer = (values: Partial<Record<KeyName, number>> = {}): Layer.Layer<RpcConfig> => {
  const v = { ...defaults, ...values }
  return Layer.succeed(RpcConfig, {
    requestTimeoutMs: resolveTimeout(v.request_timeout_ms),
    bootstrapTimeoutMs: resolveTimeout(v.bootstrap_timeout_ms),
    notifyTimeoutMs: resolveTimeout(v.notify_timeout_ms),
    connectTimeoutMs: resolveTimeout(v.connect_timeout_ms),
    maxNotifyBytes: v.max_notify_bytes,
    maxDataBytes: v.max_data_bytes,
    probeTimeoutMs: v.probe_timeout_ms
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
