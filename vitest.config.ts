import { availableParallelism } from "node:os"
import { defineConfig } from "vitest/config"

/**
 * Two test files at a time at least. vitest's default (one fewer than the cores) runs them one at a time on a 2-core
 * machine, and most files spend their time waiting on the rules' own times (a freeze, a timeout, a retry budget) in
 * child processes: the suite took 668 s so, 383 and 399 s with two (docs/testing.md).
 */
const workers = Math.max(2, availableParallelism() - 1)

// vitest 3.2 deprecates `vitest.workspace.ts`; the same per-package projects live here under `test.projects`.
export default defineConfig({
  test: {
    projects: ["packages/*"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    maxWorkers: workers,
    minWorkers: workers
  }
})
