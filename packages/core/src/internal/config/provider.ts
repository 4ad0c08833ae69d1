/**
 * The engine's `ConfigProvider`: TENT's `transfer-engine.json` (nested objects or flat `"a/b"` keys), replaced by
 * `MC_TENT_CONF` when set, with environment variables over it. JSON values are type-checked per key here, since
 * `ConfigProvider.fromMap` carries only strings.
 */
import { readFileSync } from "node:fs"
import { type ConfigError, ConfigProvider, Effect, Either } from "effect"
import { fromJsonValue, invalid, type KeySpec } from "./KeySpec.js"

/**
 * A legacy variable's value checked against its key's type and accepted values, or a `ConfigError` on the key whose
 * message names the variable (`MC_MTU=1000: must be 512, 1024, 2048 or 4096`). Lists are trimmed and empty items
 * dropped, as TENT's `setArrayConfig` does.
 */
const legacyValue = (
  name: string,
  key: string,
  spec: KeySpec | undefined,
  raw: string
): Either.Either<string, ConfigError.ConfigError> => {
  const bad = (why: string) => Either.left(invalid(key, `${name}=${JSON.stringify(raw)} (sets ${key}): ${why}`))
  const v = raw.trim()
  switch (spec?.kind) {
    case "int": {
      if (!/^-?\d+$/.test(v)) return bad("expected an integer")
      const n = Number(v)
      return spec.valid === undefined || spec.valid.check(n) ? Either.right(v) : bad(spec.valid.message)
    }
    case "bool":
      return /^(true|false|yes|no|on|off|1|0)$/i.test(v) ? Either.right(v.toLowerCase()) : bad("expected true or false")
    case "strings":
      return Either.right(
        raw
          .split(",")
          .map((item) => item.trim())
          .filter((item) => item !== "")
          .join(",")
      )
    default:
      return Either.right(raw)
  }
}

/** Where the configuration comes from. */
export interface ConfigSource {
  /** The parsed `transfer-engine.json` (or an object in code). */
  readonly json?: unknown
  /** A path to a `transfer-engine.json`. */
  readonly file?: string
  /** Environment variables (default: none; pass `process.env` to read the real ones). */
  readonly env?: Readonly<Record<string, string | undefined>>
}

/** The constant-case environment variable of a key: `rpc/notify_timeout_ms` → `RPC_NOTIFY_TIMEOUT_MS`. */
export const envName = (key: string): string => key.replace(/[/.-]/g, "_").toUpperCase()

/** Flattens a JSON config (nested objects and `"a/b"` keys) to `key → JSON value` for the keys of `table`. */
export const flatten = (
  table: Readonly<Record<string, KeySpec>>,
  json: unknown,
  prefix = "",
  out = new Map<string, unknown>()
): Map<string, unknown> => {
  if (json === null || typeof json !== "object" || Array.isArray(json)) return out
  for (const [k, v] of Object.entries(json as Record<string, unknown>)) {
    const path = prefix === "" ? k : `${prefix}/${k}`
    if (path in table) out.set(path, v)
    else if (v !== null && typeof v === "object" && !Array.isArray(v)) flatten(table, v, path, out)
  }
  return out
}

const readJson = (what: string, text: string): Either.Either<unknown, ConfigError.ConfigError> =>
  Either.try({
    try: () => JSON.parse(text) as unknown,
    catch: (e) => invalid(what, `not valid JSON: ${(e as Error).message}`)
  })

const readText = (what: string, path: string): Either.Either<string, ConfigError.ConfigError> =>
  Either.try({
    try: () => readFileSync(path, "utf8"),
    catch: (e) => invalid(what, `cannot read ${path}: ${(e as Error).message}`)
  })

/** The JSON of a source: its file, or `json`, replaced by `MC_TENT_CONF` (a path or inline JSON) when set. */
const sourceJson = (
  source: ConfigSource,
  env: Readonly<Record<string, string | undefined>>
): Either.Either<unknown, ConfigError.ConfigError> => {
  let json: Either.Either<unknown, ConfigError.ConfigError> = Either.right(source.json ?? {})
  if (source.file !== undefined) {
    json = Either.flatMap(readText("config_file", source.file), (text) => readJson("config_file", text))
  }
  const conf = env.MC_TENT_CONF
  if (Either.isLeft(json) || conf === undefined || conf === "") return json
  const trimmed = conf.trim()
  const text = trimmed.startsWith("{") ? Either.right(trimmed) : readText("MC_TENT_CONF", trimmed)
  return Either.flatMap(text, (t) => readJson("MC_TENT_CONF", t))
}

/**
 * Builds the `ConfigProvider` of a source for the keys of `table`: JSON values type-checked per key, `legacyEnv`
 * variables and then each key's {@link envName} over the file; each `ignoredEnv` variable that is set is logged as a
 * warning naming it. Fails with a `ConfigError` naming the key on a value of the wrong type (naming the variable too
 * for a legacy one), or when the file or `MC_TENT_CONF` does not parse.
 */
export const make = (
  table: Readonly<Record<string, KeySpec>>,
  legacyEnv: Readonly<Record<string, string>>,
  source: ConfigSource,
  ignoredEnv: Readonly<Record<string, string>> = {}
): Effect.Effect<ConfigProvider.ConfigProvider, ConfigError.ConfigError> =>
  Effect.suspend(() => {
    const env = source.env ?? {}
    const json = sourceJson(source, env)
    if (Either.isLeft(json)) return Effect.fail(json.left)
    const map = new Map<string, string>()
    for (const [key, value] of flatten(table, json.right)) {
      const s = fromJsonValue(key, table[key] as KeySpec, value)
      if (Either.isLeft(s)) return Effect.fail(s.left)
      map.set(key, s.right)
    }
    for (const [name, key] of Object.entries(legacyEnv)) {
      const v = env[name]
      if (v === undefined || v === "") continue
      const checked = legacyValue(name, key, table[key], v)
      if (Either.isLeft(checked)) return Effect.fail(checked.left)
      map.set(key, checked.right)
    }
    for (const key of Object.keys(table)) {
      const v = env[envName(key)]
      if (v !== undefined && v !== "") map.set(key, v)
    }
    const ignored = Object.entries(ignoredEnv).filter(([name]) => (env[name] ?? "") !== "")
    return Effect.as(
      Effect.forEach(ignored, ([name, key]) =>
        Effect.logWarning(`${name} is accepted and ignored: TENT maps it to ${key}, which this engine does not have`)
      ),
      ConfigProvider.fromMap(map, { pathDelim: "/", seqDelim: "," })
    )
  })
