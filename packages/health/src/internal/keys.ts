/**
 * The integer configuration keys of this package (`RailHealth.keys`, `PeerHealth.keys`): their shape, which
 * `EngineConfig.KeySpec` of `@tent/core` merges structurally, and the `Config` that reads one.
 */
import { Config } from "effect"

/** One integer key: its default, description and the values it accepts. */
export interface KeySpec {
  readonly kind: "int"
  readonly default: number
  readonly description: string
  /** Accepted values, as a predicate and the message that names them. */
  readonly valid: { readonly check: (n: number) => boolean; readonly message: string }
}

/** Accepts 1 and above. */
export const positive = { check: (n: number) => n >= 1, message: "must be a positive integer" }

/**
 * The `Config` of the key at `path` (`"a/b/name"`): nested under `a` and `b` (nested JSON, or the flat key from a
 * provider whose path delimiter is `/`), with the spec's validation, default and description.
 */
export const read = (path: string, spec: KeySpec): Config.Config<number> => {
  const [name, ...outer] = path.split("/").reverse()
  const value = Config.integer(name).pipe(
    Config.validate({ message: spec.valid.message, validation: spec.valid.check }),
    Config.withDefault(spec.default),
    Config.withDescription(spec.description)
  )
  return outer.reduce((c, segment) => Config.nested(c, segment), value)
}
