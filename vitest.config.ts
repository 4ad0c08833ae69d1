import { defineConfig } from "vitest/config"

// vitest 3.2 deprecates `vitest.workspace.ts`; the same per-package projects live here under `test.projects`.
// Two lanes on a 2-core machine (docs/testing.md, "Two lanes"):
// - the packages' files one at a time (vitest's default workers, one fewer than the cores) in the `forks` pool, one
//   process for all of them (`isolate: false`: a fresh process and module graph per file cost ~1.4 s a file);
// - beside them, in the `threads` pool (vitest runs each pool's files at once, each pool one at a time), the CLI's
//   fault matrix (`probe.test.ts`, ~3.4 min, mostly the rules' own waits) and then the install check (build, pack,
//   install: ~1.5 min).
// Every file two at a time failed a timed bound in one run of three; this overlaps only those two with the rest.
export default defineConfig({
  test: {
    projects: [
      "packages/*",
      {
        extends: true,
        root: "./packages/cli",
        test: { name: "cli-lane", include: ["test/probe.test.ts", "test/install.test.ts"], pool: "threads" }
      }
    ],
    poolOptions: { forks: { isolate: false } },
    testTimeout: 60_000,
    hookTimeout: 60_000
  }
})
