/**
 * JSON as TENT's nlohmann/json 3.12.0 reads and writes it, so that a body we send is byte for byte the body a TENT
 * peer would have sent. Two things `JSON.parse`/`JSON.stringify` do not give: integers beyond 2^53 (TENT's `uint64_t`
 * buffer addresses and lengths) survive as `bigint`, and objects are written with their keys sorted (nlohmann's
 * `json` stores objects in a `std::map`, json.h:3533-3534) in compact form (`dump()`, json.h:21405). Strings are
 * escaped as `dump_escaped` does (json.h:19203-19296): `\b \t \n \f \r \" \\`, other control characters as
 * lowercase `\u00xx`, everything else (including `/`, DEL and non-ASCII) raw. Plain synchronous code.
 *
 * @since 0.2.0
 */

/**
 * A JSON value: integers outside the safe range are `bigint`, every other number a `number`.
 *
 * @since 0.2.0
 */
export type JsonValue =
  | null
  | boolean
  | number
  | bigint
  | string
  | ReadonlyArray<JsonValue>
  | { readonly [key: string]: JsonValue | undefined }

/**
 * Why a text was not JSON, with the byte offset where the parser gave up.
 *
 * @since 0.2.0
 */
export class JsonSyntaxError {
  readonly _tag = "JsonSyntaxError"
  constructor(
    readonly offset: number,
    readonly message: string
  ) {}
}

const MAX_DEPTH = 64

/**
 * Parses JSON text; integers that do not fit a double exactly become `bigint`. Returns a {@link JsonSyntaxError}
 * (never throws) for malformed text, trailing garbage or nesting deeper than 64.
 *
 * @since 0.2.0
 */
export const parse = (text: string): JsonValue | JsonSyntaxError => {
  let i = 0
  const fail = (message: string): JsonSyntaxError => new JsonSyntaxError(i, message)
  const ws = (): void => {
    while (i < text.length) {
      const c = text.charCodeAt(i)
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++
      else break
    }
  }
  const value = (depth: number): JsonValue | JsonSyntaxError => {
    if (depth > MAX_DEPTH) return fail("nesting too deep")
    ws()
    const c = text[i]
    if (c === "{") {
      i++
      const out: Record<string, JsonValue> = {}
      ws()
      if (text[i] === "}") {
        i++
        return out
      }
      for (;;) {
        ws()
        if (text[i] !== '"') return fail("expected a key")
        const key = str()
        if (key instanceof JsonSyntaxError) return key
        ws()
        if (text[i] !== ":") return fail("expected ':'")
        i++
        const v = value(depth + 1)
        if (v instanceof JsonSyntaxError) return v
        // nlohmann keeps the last of duplicate keys; so does this.
        Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true })
        ws()
        if (text[i] === ",") {
          i++
          continue
        }
        if (text[i] === "}") {
          i++
          return out
        }
        return fail("expected ',' or '}'")
      }
    }
    if (c === "[") {
      i++
      const out: Array<JsonValue> = []
      ws()
      if (text[i] === "]") {
        i++
        return out
      }
      for (;;) {
        const v = value(depth + 1)
        if (v instanceof JsonSyntaxError) return v
        out.push(v)
        ws()
        if (text[i] === ",") {
          i++
          continue
        }
        if (text[i] === "]") {
          i++
          return out
        }
        return fail("expected ',' or ']'")
      }
    }
    if (c === '"') return str()
    if (text.startsWith("true", i)) {
      i += 4
      return true
    }
    if (text.startsWith("false", i)) {
      i += 5
      return false
    }
    if (text.startsWith("null", i)) {
      i += 4
      return null
    }
    return num()
  }
  const num = (): JsonValue | JsonSyntaxError => {
    const m = /^-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400))
    if (m === null) return fail("unexpected character")
    i += m[0].length
    if (m[1] === undefined && m[2] === undefined) {
      const n = Number(m[0])
      return Number.isSafeInteger(n) ? n : BigInt(m[0])
    }
    return Number(m[0])
  }
  const str = (): string | JsonSyntaxError => {
    i++ // opening quote
    let out = ""
    let start = i
    for (;;) {
      if (i >= text.length) return fail("unterminated string")
      const c = text.charCodeAt(i)
      if (c === 0x22) {
        out += text.slice(start, i)
        i++
        return out
      }
      if (c < 0x20) return fail("control character in string")
      if (c !== 0x5c) {
        i++
        continue
      }
      out += text.slice(start, i)
      const e = text[i + 1]
      i += 2
      switch (e) {
        case '"':
          out += '"'
          break
        case "\\":
          out += "\\"
          break
        case "/":
          out += "/"
          break
        case "b":
          out += "\b"
          break
        case "f":
          out += "\f"
          break
        case "n":
          out += "\n"
          break
        case "r":
          out += "\r"
          break
        case "t":
          out += "\t"
          break
        case "u": {
          const hex = text.slice(i, i + 4)
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) return fail("bad \\u escape")
          out += String.fromCharCode(Number.parseInt(hex, 16))
          i += 4
          break
        }
        default:
          return fail("bad escape")
      }
      start = i
    }
  }
  const v = value(0)
  if (v instanceof JsonSyntaxError) return v
  ws()
  if (i !== text.length) return fail("trailing characters")
  // A lone surrogate (from a \ud800 escape) is not UTF-8 text: nlohmann's parser refuses it.
  if (!wellFormed(v)) return new JsonSyntaxError(0, "lone surrogate in a string")
  return v
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/**
 * Whether a string is well-formed UTF-16 (no lone surrogate), so that it has a UTF-8 form.
 *
 * @since 0.2.0
 */
export const isWellFormed = (s: string): boolean => !LONE_SURROGATE.test(s)

const wellFormed = (v: JsonValue): boolean => {
  if (typeof v === "string") return isWellFormed(v)
  if (Array.isArray(v)) return v.every(wellFormed)
  if (v !== null && typeof v === "object") {
    for (const [k, x] of Object.entries(v)) if (!isWellFormed(k) || (x !== undefined && !wellFormed(x))) return false
  }
  return true
}

const escapeString = (s: string): string => {
  // JSON.stringify escapes exactly as nlohmann's dump_escaped for well-formed strings: the two-letter escapes
  // \b \t \n \f \r, `"` and `\`, and other code points below 0x20 as lowercase \u00xx; nothing else.
  return JSON.stringify(s)
}

/**
 * Writes a value as nlohmann's `dump()` does: compact, object keys in byte order, keys whose value is `undefined`
 * left out. Strings must be well formed (no lone surrogates); check with {@link isDumpable} first where the input is
 * untrusted.
 *
 * @since 0.2.0
 */
export const stringify = (v: JsonValue): string => {
  if (v === null) return "null"
  switch (typeof v) {
    case "boolean":
      return v ? "true" : "false"
    case "number":
      return Number.isFinite(v) ? String(v) : "null"
    case "bigint":
      return v.toString()
    case "string":
      return escapeString(v)
  }
  if (Array.isArray(v)) return `[${v.map(stringify).join(",")}]`
  const obj = v as { readonly [key: string]: JsonValue | undefined }
  const keys = Object.keys(obj)
    .filter((k) => obj[k] !== undefined)
    .sort(compareBytes)
  return `{${keys.map((k) => `${escapeString(k)}:${stringify(obj[k] as JsonValue)}`).join(",")}}`
}

/** std::map<std::string> order: bytewise on UTF-8, which for well-formed strings is code point order. */
const compareBytes = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b))

/**
 * Whether nlohmann could dump this value: every string is well-formed Unicode (a lone surrogate has no UTF-8 form,
 * and nlohmann's strict `dump()` throws `type_error.316` on invalid UTF-8, json.h:19319-19326).
 *
 * @since 0.2.0
 */
export const isDumpable = (v: JsonValue): boolean => wellFormed(v)
