/**
 * `pnpm bench <suite> [--quick] [--json]`: runs a benchmark suite and prints its results, each figure beside a floor
 * measured in the same run. A suite is `packages/<suite>/bench/<suite>.ts`, exporting `run(options)`.
 *
 * With `--json`, stdout carries exactly one JSON object per suite:
 * `{"suite":…,"results":[{"name","unit","value","better","floor","ratio"}]}`; progress goes to stderr.
 */
import { existsSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

/** One measured figure beside its floor. */
export interface BenchResult {
  readonly name: string
  readonly unit: string
  readonly value: number
  readonly better: "lower" | "higher"
  readonly floor: number
  readonly ratio: number
}

/** What a suite's `run` receives. */
export interface BenchOptions {
  readonly quick: boolean
  readonly log: (line: string) => void
}

/** Each suite and the package that holds it. */
const suites = { verbs: "verbs", rpc: "rpc", engine: "core" } as const
const root = join(dirname(fileURLToPath(import.meta.url)), "..")

const usage = `usage: pnpm bench <${[...Object.keys(suites), "all"].join("|")}> [--quick] [--json]`

const main = async (): Promise<number> => {
  const args = process.argv.slice(2)
  const json = args.includes("--json")
  const quick = args.includes("--quick")
  const unknown = args.filter((a) => a.startsWith("-") && a !== "--json" && a !== "--quick")
  const names = args.filter((a) => !a.startsWith("-"))
  if (args.includes("--help") || args.includes("-h")) {
    console.log(usage)
    return 0
  }
  if (unknown.length > 0 || names.length !== 1) {
    console.error(unknown.length > 0 ? `unknown option ${unknown.join(" ")}` : "name one suite")
    console.error(usage)
    return 2
  }
  const wanted = names[0] === "all" ? Object.keys(suites) : [names[0] as string]
  for (const suite of wanted) {
    const pkg = (suites as Record<string, string>)[suite]
    const file = join(root, "packages", pkg ?? suite, "bench", `${suite}.ts`)
    if (pkg === undefined || !existsSync(file)) {
      if (names[0] === "all") continue
      console.error(`no benchmark suite "${suite}"; the suites are ${Object.keys(suites).join(", ")}`)
      console.error(usage)
      return 2
    }
    const mod = (await import(pathToFileURL(file).href)) as {
      run: (o: BenchOptions) => Promise<ReadonlyArray<BenchResult>>
    }
    const log = (line: string) => process.stderr.write(`${line}\n`)
    const results = await mod.run({ quick, log })
    if (json) {
      process.stdout.write(`${JSON.stringify({ suite, results })}\n`)
    } else {
      console.log(`suite ${suite}${quick ? " (quick)" : ""}`)
      for (const r of results) {
        const good = r.better === "lower" ? "lower is better" : "higher is better"
        console.log(
          `  ${r.name.padEnd(22)} ${r.value.toFixed(2).padStart(12)} ${r.unit.padEnd(6)} floor ${r.floor.toFixed(2).padStart(12)}  ratio ${r.ratio.toFixed(2)} (${good})`
        )
      }
    }
  }
  return 0
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err)
    process.exit(1)
  }
)
