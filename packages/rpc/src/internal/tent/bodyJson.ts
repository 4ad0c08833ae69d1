/**
 * Reading and writing TENT's JSON bodies field by field, as nlohmann/json's `from_json` reads them (`j.at(field)`:
 * a missing key is an error, extra keys are ignored) and `dump()` writes them; the error of a body TENT's parser
 * would refuse. Shared by `tent/Bodies.ts` and `tent/SegmentDesc.ts`, which export {@link TentBodyError}.
 *
 * The readers throw a private `Fail` that only {@link guard} catches, so a decoder reads as a list of fields.
 */
import { Data, Either } from "effect"
import type { JsonValue } from "./NlohmannJson.js"
import * as NlohmannJson from "./NlohmannJson.js"

/**
 * A body that is not what TENT's parser would accept, naming the body and the field (`""` for the whole body).
 *
 * @since 0.2.0
 */
export class TentBodyError extends Data.TaggedError("TentBodyError")<{
  readonly body: "Notify" | "BootstrapDesc" | "SegmentDesc" | "XferDataDesc"
  readonly field: string
  readonly reason: "Malformed" | "Missing" | "WrongType" | "OutOfRange" | "NotUtf8"
  readonly message: string
}> {}

export type BodyName = TentBodyError["body"]
export type Obj = { readonly [key: string]: JsonValue | undefined }

export const bodyError = (body: BodyName, field: string, reason: TentBodyError["reason"], message: string) =>
  new TentBodyError({ body, field, reason, message })

/** Thrown only by these readers and caught by {@link guard}, at the boundary of each decoder. */
class Fail {
  constructor(readonly error: TentBodyError) {}
}

export const fail = (body: BodyName, field: string, reason: TentBodyError["reason"], message: string): never => {
  throw new Fail(bodyError(body, field, reason, message))
}

export const guard = <A>(f: () => A): Either.Either<A, TentBodyError> => {
  try {
    return Either.right(f())
  } catch (e) {
    if (e instanceof Fail) return Either.left(e.error)
    throw e
  }
}

const UTF8 = new TextDecoder("utf-8", { fatal: true })

export const parseObject = (body: BodyName, bytes: Uint8Array): Obj => {
  let text = ""
  try {
    text = UTF8.decode(bytes)
  } catch {
    fail(body, "", "NotUtf8", "body is not UTF-8 (nlohmann's parser refuses it)")
  }
  const v = NlohmannJson.parse(text)
  if (v instanceof NlohmannJson.JsonSyntaxError) fail(body, "", "Malformed", `${v.message} at ${v.offset}`)
  return asObject(body, "", v as JsonValue)
}

const isObject = (v: JsonValue | undefined): v is Obj => v !== null && typeof v === "object" && !Array.isArray(v)

export const asObject = (body: BodyName, field: string, v: JsonValue | undefined): Obj => {
  if (!isObject(v)) return fail(body, field, "WrongType", `${field || "body"} must be an object`)
  return v
}

export const at = (body: BodyName, o: Obj, key: string, path: string): JsonValue => {
  const v = Object.hasOwn(o, key) ? o[key] : undefined
  if (v === undefined) return fail(body, path, "Missing", `missing key "${path}" (nlohmann j.at throws out_of_range)`)
  return v
}

export const str = (body: BodyName, v: JsonValue, path: string): string =>
  typeof v === "string" ? v : fail(body, path, "WrongType", `${path} must be a string`)

export const int = (body: BodyName, v: JsonValue, path: string, max: number): number => {
  if (typeof v !== "number" || !Number.isInteger(v)) return fail(body, path, "WrongType", `${path} must be an integer`)
  if (v < 0 || v > max) return fail(body, path, "OutOfRange", `${path} = ${v} is outside 0..${max}`)
  return v
}

export const u64 = (body: BodyName, v: JsonValue, path: string): bigint => {
  if (typeof v === "bigint") {
    if (v < 0n || v > 0xffffffffffffffffn) return fail(body, path, "OutOfRange", `${path} is outside the u64 range`)
    return v
  }
  return BigInt(int(body, v, path, Number.MAX_SAFE_INTEGER))
}

export const bool = (body: BodyName, v: JsonValue, path: string): boolean =>
  typeof v === "boolean" ? v : fail(body, path, "WrongType", `${path} must be a boolean`)

export const arr = (body: BodyName, v: JsonValue, path: string): ReadonlyArray<JsonValue> =>
  Array.isArray(v) ? v : fail(body, path, "WrongType", `${path} must be an array`)

export const u64Json = (n: bigint): JsonValue => (n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n)

export const dump = (body: BodyName, v: JsonValue): Either.Either<Buffer, TentBodyError> =>
  NlohmannJson.isDumpable(v)
    ? Either.right(Buffer.from(NlohmannJson.stringify(v), "utf8"))
    : Either.left(bodyError(body, "", "NotUtf8", "a string has a lone surrogate (nlohmann's dump throws 316)"))
