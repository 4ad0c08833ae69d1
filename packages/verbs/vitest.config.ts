import { defineProject } from "vitest/config"

export default defineProject({
  test: {
    name: "verbs",
    include: ["test/**/*.test.ts"]
  }
})
