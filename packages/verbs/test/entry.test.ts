import { spawnSync } from "node:child_process"
import { describe, expect, it } from "vitest"
import { fixture } from "./fixtures/child.js"
import { entryArgs, tsxArgs } from "./fixtures/entry.js"

/** Runs `args` (Node's, then the entry's) and reads the one JSON line the entry prints. */
const run = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = process.env) => {
  const r = spawnSync(process.execPath, args, { encoding: "utf8", env, timeout: 60_000 })
  expect(r.status, r.stderr).toBe(0)
  return JSON.parse(r.stdout) as { url: string; beside: string; koffi: boolean }
}

describe("a child's entry, bundled (entry.ts)", () => {
  it("runs from a bundle, and sees its own source's import.meta.url and koffi as through tsx", () => {
    const file = fixture("entry-here.ts")
    const args = entryArgs(file)
    // a bundle, not tsx's loader (a build that failed would fall back to it and only be slower)
    expect(args).toHaveLength(1)
    expect(args[0]).toMatch(/\/tent-entries\/\d+\/packages\/verbs\/test\/fixtures\/entry-here\.ts\.mjs$/)
    expect(entryArgs(file)).toBe(args) // once per process
    const bundled = run(args)
    const throughTsx = run(tsxArgs(file))
    expect(bundled).toEqual(throughTsx)
    expect(bundled.beside).toBe(fixture("child.ts"))
    expect(bundled.koffi).toBe(true)
  })
})
