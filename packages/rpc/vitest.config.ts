import { defineProject } from "vitest/config"

export default defineProject({
  test: {
    name: "rpc",
    include: ["test/**/*.test.ts"]
  }
})
