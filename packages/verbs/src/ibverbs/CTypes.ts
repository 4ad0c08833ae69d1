/**
 * The C scalar names and helpers the verbs layouts are written with (x86-64/aarch64 LP64).
 *
 * @internal
 */
import koffi, { type TypeObject } from "koffi"

/** C scalar type names as koffi spells them. */
export const u8 = "uint8_t"
export const u16 = "uint16_t"
export const u32 = "uint32_t"
export const u64 = "uint64_t"
export const int = "int"
export const ptr = "void *"

/** `pthread_mutex_t` / `pthread_cond_t` on glibc LP64: opaque, 8-aligned. */
export const opaqueBytes = (n: number) => [8, koffi.array(u8, n)] as [number, TypeObject]

/** Members of pointer type, one per name (a function table). */
export const pointers = (names: ReadonlyArray<string>): Record<string, string> =>
  Object.fromEntries(names.map((name) => [name, ptr]))
