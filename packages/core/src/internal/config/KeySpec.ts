/**
 * The declaration of a configuration key and what is derived from it: the check of a JSON value against the key's
 * type, and the Effect `Config` that reads the key with its validation, default and description.
 */
import { Config, ConfigError, Either } from "effect"

/** The JSON type a key takes. */
export type KeyKind = "int" | "bool" | "string" | "strings" | "json"

/**
 * One configuration key: its type, default, description and (for integers) the values it accepts. `RpcConfig.keys`
 * of `@tent/rpc` and `RailHealth.keys` of `@tent/health` declare theirs in the same shape (structurally).
 */
export interface KeySpec {
  readonly kind: KeyKind
  readonly default: number | boolean | string | ReadonlyArray<string>
  readonly description: string
  /** For `int`: accepted values, as a predicate and the message that names them. */
  readonly valid?: { readonly check: (n: number) => boolean; readonly message: string }
}

/** A `ConfigError` naming the key (its `/`-separated path). */
export const invalid = (key: string, message: string): ConfigError.ConfigError =>
  ConfigError.InvalidData(key.split("/"), message)

/** Checks one JSON value against its key's type; returns the string form `ConfigProvider.fromMap` carries. */
export const fromJsonValue = (
  key: string,
  spec: KeySpec,
  value: unknown
): Either.Either<string, ConfigError.ConfigError> => {
  switch (spec.kind) {
    case "int":
      return typeof value === "number" && Number.isInteger(value)
        ? Either.right(String(value))
        : Either.left(invalid(key, `Expected an integer, got ${JSON.stringify(value)}`))
    case "bool":
      return typeof value === "boolean"
        ? Either.right(String(value))
        : Either.left(invalid(key, `Expected true or false, got ${JSON.stringify(value)}`))
    case "string":
      return typeof value === "string"
        ? Either.right(value)
        : Either.left(invalid(key, `Expected a string, got ${JSON.stringify(value)}`))
    case "strings":
      return Array.isArray(value) && value.every((s) => typeof s === "string" && !s.includes(","))
        ? Either.right(value.join(","))
        : Either.left(invalid(key, `Expected an array of names, got ${JSON.stringify(value)}`))
    case "json":
      return Either.right(JSON.stringify(value))
  }
}

/**
 * The `Config` readers of a key table, by kind. A key is read by its whole path as one name, so the provider must
 * use `/` as its path delimiter (the engine's does).
 */
export const readers = <K extends string>(table: Readonly<Record<K, KeySpec>>) => {
  const described = <A>(key: K, config: Config.Config<A>, fallback: A): Config.Config<A> =>
    config.pipe(Config.withDefault(fallback), Config.withDescription(table[key].description))
  return {
    int: (key: K): Config.Config<number> => {
      const valid = table[key].valid
      const base = Config.integer(key)
      const checked =
        valid === undefined ? base : base.pipe(Config.validate({ message: valid.message, validation: valid.check }))
      return described(key, checked, table[key].default as number)
    },
    bool: (key: K): Config.Config<boolean> => described(key, Config.boolean(key), table[key].default as boolean),
    string: (key: K): Config.Config<string> => described(key, Config.string(key), table[key].default as string),
    /** A `json` key: its JSON text (the environment's or the file's value re-serialized), parsed by the caller. */
    json: (key: K): Config.Config<string> => described(key, Config.string(key), JSON.stringify(table[key].default)),
    strings: (key: K): Config.Config<ReadonlyArray<string>> =>
      described(key, Config.array(Config.string(), key), table[key].default as ReadonlyArray<string>)
  }
}
