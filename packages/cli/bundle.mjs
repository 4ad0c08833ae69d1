// `pnpm build`'s second step (after `tsc -b tsconfig.build.json`): bundles the `tent` command into `dist/bin/` (ESM;
// one entry per kind of process the command starts: `tent.js`, and `probe-node.js` for the probe's two children),
// split so that each subcommand's body is a chunk loaded only when it runs. koffi (a native addon) stays external;
// the version is inlined from package.json. Then records each command's `--help` (as printed to a pipe) in
// `help.json`, which `tent --help` and `tent <command> --help` print without loading the parser.
import { execFileSync } from "node:child_process"
import { readFileSync, writeFileSync } from "node:fs"
import { rm } from "node:fs/promises"
import { fileURLToPath } from "node:url"
import { build } from "esbuild"

const here = fileURLToPath(new URL(".", import.meta.url))
const { version } = JSON.parse(readFileSync(`${here}package.json`, "utf8"))
const outdir = `${here}dist/bin`

/**
 * @effect/cli imports YAML, TOML and INI parsers for `Options.fileParse`, which tent does not use (`--config` is
 * TENT's JSON, read by the engine): the bundle gets a parser that says so instead of 400 KiB loaded by every call.
 */
const withoutFileParsers = {
  name: "without-file-parsers",
  setup(b) {
    b.onResolve({ filter: /^(yaml|toml|ini)$/ }, (a) =>
      a.importer.includes("@effect/cli") ? { path: a.path, namespace: "without-file-parsers" } : undefined
    )
    b.onLoad({ filter: /.*/, namespace: "without-file-parsers" }, (a) => ({
      contents: `export const parse = () => { throw new Error("the tent command does not parse ${a.path} option files") }`,
      loader: "js"
    }))
  }
}

await rm(outdir, { recursive: true, force: true })
const result = await build({
  absWorkingDir: here,
  entryPoints: { tent: "src/bin.ts", "probe-node": "src/probe/node.ts" },
  outdir,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  external: ["koffi"],
  plugins: [withoutFileParsers],
  // Minified: V8 reads (and pre-parses) every byte of a module it loads, and the parser's and the engine's chunks are
  // most of what a command costs before it runs; the source maps beside them map a stack trace back
  // (`node --enable-source-maps`).
  minify: true,
  define: { TENT_VERSION: JSON.stringify(version), TENT_BUNDLE: "true" },
  // Some dependencies are CommonJS and `require` node's own modules: give the bundle a `require`.
  banner: {
    js: "import { createRequire as __tentCreateRequire } from 'node:module'; const require = __tentCreateRequire(import.meta.url);"
  },
  chunkNames: "[name]-[hash]",
  sourcemap: true,
  sourcesContent: false,
  legalComments: "none",
  logLevel: "warning",
  metafile: process.env.TENT_BUNDLE_METAFILE !== undefined
})
// `TENT_BUNDLE_METAFILE=FILE pnpm build` writes esbuild's metafile (which module went into which chunk, and why).
if (process.env.TENT_BUNDLE_METAFILE !== undefined) {
  writeFileSync(process.env.TENT_BUNDLE_METAFILE, JSON.stringify(result.metafile))
}

const helpOf = (args) =>
  execFileSync(process.execPath, [`${outdir}/tent.js`, ...args, "--help"], {
    encoding: "utf8",
    env: { ...process.env, TENT_CLI_FAST: "0", NO_COLOR: "1" },
    timeout: 120_000
  })
const root = helpOf([])
const commands = [...root.matchAll(/^ {2}- ([a-z]+) /gm)].map((m) => m[1])
if (commands.length === 0) throw new Error("no commands found in `tent --help`")
const texts = { "": root }
for (const c of commands) texts[c] = helpOf([c])
writeFileSync(`${outdir}/help.json`, `${JSON.stringify(texts)}\n`)
