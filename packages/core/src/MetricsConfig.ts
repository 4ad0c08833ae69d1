/**
 * The metrics export's configuration: TENT's `metrics/*` keys (`tent/metrics/config_loader.h`), declared as every
 * package of the engine declares its keys, and read from the same sources as the engine's — the `--config` file
 * (`transfer-engine.json`, nested `{"metrics": {...}}` or flat `"metrics/enabled"`), `MC_TENT_CONF`, and the
 * environment, where TENT's own names (`TENT_METRICS_ENABLED`, `TENT_METRICS_HTTP_PORT`, `TENT_METRICS_HTTP_HOST`)
 * and the constant-case key names (`METRICS_HTTP_PORT`, …) both work. As everywhere in the engine, the environment
 * wins over the file, and a value of the wrong type or out of range fails at start naming the key.
 *
 * Two defaults differ from TENT's on purpose: the export is off unless asked for (`tent serve --metrics-port`, or
 * `metrics/enabled`), and it binds 127.0.0.1, not every interface.
 *
 * @since 0.1.0
 */
import { Config, type ConfigError, Effect, Either } from "effect"
import { invalid, type KeySpec, readers } from "./internal/config/KeySpec.js"
import { type ConfigSource, make } from "./internal/config/provider.js"

export type {
  /**
   * Where the configuration comes from: the parsed `transfer-engine.json` (or an object in code), a path to one, and
   * the environment variables to read (none unless given); the same as `EngineConfig.ConfigSource`.
   *
   * @since 0.1.0
   */
  ConfigSource
}

/**
 * The keys of the metrics export, with their defaults.
 *
 * @since 0.1.0
 */
export const keys = {
  "metrics/enabled": {
    kind: "bool",
    default: false,
    description:
      "serve the engine's metrics in the Prometheus text format at http://metrics/http_host:http_port/metrics"
  },
  "metrics/http_port": {
    kind: "int",
    default: 9100,
    description: "port of the metrics endpoint (TENT's 9100)",
    valid: { check: (n) => n >= 1 && n <= 65535, message: "must be a port number in 1..65535" }
  },
  "metrics/http_host": {
    kind: "string",
    default: "127.0.0.1",
    description: "interface the metrics endpoint binds (TENT binds 0.0.0.0; this engine 127.0.0.1 unless told)"
  },
  "metrics/peer_labels": {
    kind: "bool",
    default: false,
    description: "add a peer label to the per-peer metrics (one time series per peer)"
  }
} as const satisfies Record<string, KeySpec>

/**
 * A key of {@link keys}.
 *
 * @since 0.1.0
 */
export type Key = keyof typeof keys

/**
 * TENT's environment variables for these keys (`config_keys::ENV_METRICS_*`) and the key each sets.
 *
 * @since 0.1.0
 */
export const env: Readonly<Record<string, Key>> = {
  TENT_METRICS_ENABLED: "metrics/enabled",
  TENT_METRICS_HTTP_PORT: "metrics/http_port",
  TENT_METRICS_HTTP_HOST: "metrics/http_host"
}

/**
 * The metrics export's settings.
 *
 * @since 0.1.0
 */
export interface MetricsSettings {
  /** `metrics/enabled`: whether the endpoint is served. */
  readonly enabled: boolean
  /** `metrics/http_port`. */
  readonly httpPort: number
  /** `metrics/http_host`. */
  readonly httpHost: string
  /** `metrics/peer_labels`. */
  readonly peerLabels: boolean
}

/**
 * The defaults of {@link keys}.
 *
 * @since 0.1.0
 */
export const defaults: MetricsSettings = {
  enabled: keys["metrics/enabled"].default,
  httpPort: keys["metrics/http_port"].default,
  httpHost: keys["metrics/http_host"].default,
  peerLabels: keys["metrics/peer_labels"].default
}

const read = readers(keys)

/**
 * {@link MetricsSettings} read from the current `ConfigProvider` (one whose path delimiter is `/`, as the engine's);
 * a wrong value fails naming its key. An empty host is refused: it would bind every interface.
 *
 * @since 0.1.0
 */
export const config: Config.Config<MetricsSettings> = Config.all({
  enabled: read.bool("metrics/enabled"),
  httpPort: read.int("metrics/http_port"),
  httpHost: read
    .string("metrics/http_host")
    .pipe(
      Config.mapOrFail((s) =>
        s.trim() === ""
          ? Either.left(
              invalid("metrics/http_host", "must name an interface (127.0.0.1 by default; 0.0.0.0 for every interface)")
            )
          : Either.right(s)
      )
    ),
  peerLabels: read.bool("metrics/peer_labels")
})

/**
 * Reads {@link MetricsSettings} from a configuration source (the engine's: `--config` file, `MC_TENT_CONF`, the
 * environment with TENT's `TENT_METRICS_*` names and the constant-case key names); fails with a `ConfigError` naming
 * the key on a wrong value.
 *
 * @since 0.1.0
 */
export const load = (source: ConfigSource = {}): Effect.Effect<MetricsSettings, ConfigError.ConfigError> =>
  Effect.flatMap(make(keys, env, source), (provider) => Effect.withConfigProvider(config, provider))
