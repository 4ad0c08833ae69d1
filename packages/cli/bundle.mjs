// `pnpm build`'s second step (after `tsc -b tsconfig.build.json`): bundles the `tent` command into `dist/bin/` (ESM;
// one entry per kind of process the command starts: `tent.js`, and `probe-node.js` for the probe's two children),
// split so that each subcommand's body is a chunk loaded only when it runs. koffi (a native addon) stays external;
// the version is inlined from package.json. Then records each command's `--help` (as printed to a pipe) in
// `help.json`, which `tent --help` and `tent <command> --help` print without loading the parser.
import { execFileSync } from "node:child_process"
import { readFileSync, writeFileSync } from "node:fs"
import { readFile, rm } from "node:fs/promises"
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

/**
 * A workspace module that imports `{ EngineConfig } from "@tent/core"` (or `{ Effect } from "effect"`) is bundled as
 * importing `EngineConfig.ts` (`effect/dist/esm/Effect.js`) itself. Code splitting makes a chunk of every module an
 * index re-exports, used or not (esbuild follows every import of a module it keeps), so through the indexes every
 * command would load all of Effect, and `tent devices` the whole engine to read its configuration. These indexes
 * only re-export (`export * as X from`, `export { x } from`, `export * from`), so the module a name comes from is
 * read off the index: the same module, the same binding. A name not found that way stays an import from the index;
 * type-only names go (the bundle has no types).
 */
const directImports = {
  name: "direct-imports",
  setup(b) {
    const indexes = new Map()
    /** Each name the index of `spec` exports, by the absolute path of the module it comes from. */
    const exportsOf = async (spec, resolveDir) => {
      const known = indexes.get(spec)
      if (known !== undefined) return known
      const resolved = await b.resolve(spec, { kind: "import-statement", resolveDir })
      const names = new Map()
      indexes.set(spec, names)
      if (resolved.errors.length > 0 || resolved.external) return names
      const dir = resolved.path.slice(0, resolved.path.lastIndexOf("/") + 1)
      const file = (f) => {
        const ts = `${dir}${f}.ts`
        return resolved.path.endsWith(".ts") ? ts : `${dir}${f}.js`
      }
      const index = readFileSync(resolved.path, "utf8")
      for (const [, name, f] of index.matchAll(/^export \* as (\w+) from "\.\/([\w/]+)\.js";?$/gm)) {
        names.set(name, { path: file(f), namespace: true })
      }
      for (const [, list, f] of index.matchAll(/^export \{([^}]*)\} from "\.\/([\w/]+)\.js";?$/gm)) {
        for (const name of list
          .split(",")
          .map((n) => n.trim())
          .filter((n) => /^\w+$/.test(n))) {
          names.set(name, { path: file(f), namespace: false })
        }
      }
      for (const [, f] of index.matchAll(/^export \* from "\.\/([\w/]+)\.js";?$/gm)) {
        const source = readFileSync(file(f), "utf8")
        for (const [, name] of source.matchAll(/^export (?:abstract )?(?:const|let|class|function\*?) (\w+)/gm)) {
          names.set(name, { path: file(f), namespace: false })
        }
      }
      return names
    }
    const bare = /^import \{([^}]*)\} from "(effect|@effect\/[\w-]+|@tent\/\w+)"$/gm
    b.onLoad({ filter: /\/packages\/(cli|core|rpc|health|verbs)\/src\/.*\.ts$/ }, async (a) => {
      const source = await readFile(a.path, "utf8")
      const dir = a.path.slice(0, a.path.lastIndexOf("/"))
      const specs = new Map()
      for (const [, , spec] of source.matchAll(bare)) specs.set(spec, await exportsOf(spec, dir))
      const contents = source.replace(bare, (whole, list, spec) => {
        const names = specs.get(spec)
        const direct = []
        const rest = []
        for (const item of list
          .split(",")
          .map((n) => n.trim())
          .filter((n) => n.length > 0 && !n.startsWith("type "))) {
          const [name, alias = name] = item.split(/\s+as\s+/)
          const from = names.get(name)
          if (from === undefined) rest.push(item)
          else if (from.namespace) direct.push(`import * as ${alias} from ${JSON.stringify(from.path)}`)
          else direct.push(`import { ${name} as ${alias} } from ${JSON.stringify(from.path)}`)
        }
        if (rest.length > 0) direct.push(`import { ${rest.join(", ")} } from "${spec}"`)
        // As many lines as the import had, so the source map's lines still match.
        return direct.join("; ") + "\n".repeat(whole.split("\n").length - 1)
      })
      return { contents, loader: "ts" }
    })
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
  // The probe's children from a clone are bundled by a test helper; the bundle never runs that branch.
  external: ["koffi", "@tent/verbs/testing/entry"],
  plugins: [withoutFileParsers, directImports],
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
