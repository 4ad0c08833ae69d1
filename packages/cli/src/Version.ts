/**
 * The version `tent --version` prints: `@tent/cli`'s `package.json` is its one source (read from there when this
 * runs from `src/` or `dist/`; the bundle of `pnpm build` has it inlined as `TENT_VERSION`).
 *
 * @since 0.1.0
 */
import { readFileSync } from "node:fs"

declare const TENT_VERSION: string | undefined

/**
 * `@tent/cli`'s version.
 *
 * @since 0.1.0
 */
export const version: string =
  typeof TENT_VERSION === "string"
    ? TENT_VERSION
    : (JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }).version
