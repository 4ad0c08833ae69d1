import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { program } from "../demo/readme.js"

describe("README program", () => {
  it.live("sends a transfer with a notification and reads it on the other side", () =>
    Effect.gen(function* () {
      const result = yield* program.pipe(Effect.timeout("30 seconds"))
      expect(result).toEqual({ note: { name: "done", msg: "batch 1" }, data: "hello, rdma" })
    })
  )

  it("is the program the README shows", () => {
    const source = readFileSync(fileURLToPath(new URL("../demo/readme.ts", import.meta.url)), "utf8")
    const readme = readFileSync(fileURLToPath(new URL("../README.md", import.meta.url)), "utf8")
    expect(readme).toContain(source.replace('"../src/index.js"', '"@tent/core"').trim())
  })
})
