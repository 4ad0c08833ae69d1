import { defineProject } from "vitest/config"

export default defineProject({
  test: {
    name: "cli",
    include: ["test/**/*.test.ts"],
    // the fault matrix and the install check are a project of their own (`cli-lane`, the root `vitest.config.ts`),
    // run beside the other files
    exclude: ["test/probe.test.ts", "test/install.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000
  }
})
