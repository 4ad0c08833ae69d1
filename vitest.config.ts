import { defineConfig } from "vitest/config"

// vitest 3.2 deprecates `vitest.workspace.ts`; the same per-package projects live here under `test.projects`.
// vitest's default workers (one fewer than the cores) run the files one at a time on a 2-core machine. Two at a time
// took the suite from 668 s to 383-399 s but failed one timed bound in three runs (docs/testing.md), so it stays so.
export default defineConfig({
  test: {
    projects: ["packages/*"],
    testTimeout: 60_000,
    hookTimeout: 60_000
  }
})
