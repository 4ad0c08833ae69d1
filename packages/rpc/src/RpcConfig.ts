import { Config, ConfigProvider, Context, Layer } from "effect"

/** What -1 (the default of every `rpc/*_timeout_ms`) means: the 30 s of TENT's RPC library, as `main` has today. */
export const LIBRARY_DEFAULT_TIMEOUT_MS = 30_000

/** The control-plane settings, in milliseconds and bytes; timeouts are already resolved (-1 → 30 000). */
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
}

/** The defaults, keyed as in the engine's JSON config under `rpc`. */
export const defaults = {
  request_timeout_ms: -1,
  bootstrap_timeout_ms: -1,
  notify_timeout_ms: -1,
  connect_timeout_ms: -1,
  max_notify_bytes: 16 * 1024 * 1024,
  max_data_bytes: 16 * 1024 * 1024
} as const

/** -1 → {@link LIBRARY_DEFAULT_TIMEOUT_MS}; anything else as it is. */
export const resolveTimeout = (ms: number): number => (ms === -1 ? LIBRARY_DEFAULT_TIMEOUT_MS : ms)

const timeout = (key: keyof typeof defaults, what: string) =>
  Config.integer(key).pipe(
    Config.validate({
      message: "must be -1 (the library default, 30 s) or a positive number of milliseconds",
      validation: (n) => n === -1 || n > 0
    }),
    Config.withDefault(defaults[key]),
    Config.withDescription(`per-call timeout of ${what} in ms; -1 = library default (30 s)`),
    Config.map(resolveTimeout)
  )

/**
 * The settings read with Effect `Config`, nested under `rpc`: `{"rpc": {"notify_timeout_ms": 500}}` in a JSON
 * config, or `RPC_NOTIFY_TIMEOUT_MS=500` with {@link layerFromEnv}. A value of the wrong type fails with a
 * `ConfigError` that names the key.
 */
export const config: Config.Config<RpcSettings> = Config.all({
  requestTimeoutMs: timeout("request_timeout_ms", "GetSegmentDesc and Probe"),
  bootstrapTimeoutMs: timeout("bootstrap_timeout_ms", "Bootstrap"),
  notifyTimeoutMs: timeout("notify_timeout_ms", "Notify"),
  connectTimeoutMs: timeout("connect_timeout_ms", "connecting to a peer"),
  maxNotifyBytes: Config.integer("max_notify_bytes").pipe(
    Config.validate({ message: "must be a positive number of bytes", validation: (n) => n > 0 }),
    Config.withDefault(defaults.max_notify_bytes),
    Config.withDescription("largest Notify (name + message bytes) sent or accepted")
  ),
  maxDataBytes: Config.integer("max_data_bytes").pipe(
    Config.validate({ message: "must be a positive number of bytes", validation: (n) => n > 0 }),
    Config.withDefault(defaults.max_data_bytes),
    Config.withDescription("largest SendData / RecvData sent or served")
  )
}).pipe(Config.nested("rpc"))

/** The control-plane settings as a service. */
export class RpcConfig extends Context.Tag("@tent/rpc/RpcConfig")<RpcConfig, RpcSettings>() {}

/** Settings given in code, as raw config values (-1 allowed); unspecified keys take {@link defaults}. */
export const layer = (values: Partial<Record<keyof typeof defaults, number>> = {}): Layer.Layer<RpcConfig> => {
  const v = { ...defaults, ...values }
  return Layer.succeed(RpcConfig, {
    requestTimeoutMs: resolveTimeout(v.request_timeout_ms),
    bootstrapTimeoutMs: resolveTimeout(v.bootstrap_timeout_ms),
    notifyTimeoutMs: resolveTimeout(v.notify_timeout_ms),
    connectTimeoutMs: resolveTimeout(v.connect_timeout_ms),
    maxNotifyBytes: v.max_notify_bytes,
    maxDataBytes: v.max_data_bytes
  })
}

/** Settings read from the current `ConfigProvider` (fails at start, naming the key, on a bad value). */
export const layerConfig: Layer.Layer<RpcConfig, import("effect/ConfigError").ConfigError> = Layer.effect(
  RpcConfig,
  config
)

/** Settings read from the engine's JSON config object (the `rpc` key of it). */
export const layerFromJson = (json: unknown): Layer.Layer<RpcConfig, import("effect/ConfigError").ConfigError> =>
  layerConfig.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromJson(json))))

/** Settings read from environment variables: `RPC_NOTIFY_TIMEOUT_MS`, `RPC_CONNECT_TIMEOUT_MS`, … */
export const layerFromEnv: Layer.Layer<RpcConfig, import("effect/ConfigError").ConfigError> = layerConfig.pipe(
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromEnv().pipe(ConfigProvider.constantCase)))
)
