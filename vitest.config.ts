import { defineConfig } from "vitest/config"

// vitest 3.2 deprecates `vitest.workspace.ts`; the same per-package projects live here under `test.projects`.
export default defineConfig({
  test: {
    projects: ["packages/*"],
    testTimeout: 60_000,
    hookTimeout: 60_000
  }
})
