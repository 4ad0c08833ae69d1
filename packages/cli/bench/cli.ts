/**
 * `pnpm bench cli`: how fast the built `tent` command (`dist/bin/tent.js`, from `pnpm build`) answers, each figure
 * beside the floor `node -e 0` measured in the same run (medians of 9, 5 with `--quick`; interleaved): `cli_version_ms`,
 * `cli_help_ms`, `cli_devices_ms`, `cli_send_ms` (a whole `tent send` process to a live `tent serve`), and the peak
 * RSS of `--version` and `--help` beside the floor's. The targets are differences, not ratios: `--version` and
 * `--help` within 250 ms of the floor and ≤ 100 MiB, `devices` within 400 ms, `send` ≤ 600 ms wall; the log says
 * which are met.
 *
 * @since 0.1.0
 */
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync, readdirSync, statSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { type BenchOptions, type BenchResult, median } from "@tent/verbs/bench"

const cli = fileURLToPath(new URL("../", import.meta.url))
const bin = `${cli}dist/bin/tent.js`

/** The newest modification time under `dir` (source files only). */
const newest = (dir: string): number => {
  let t = 0
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = `${dir}/${e.name}`
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs)
  }
  return t
}

/** Runs `node args…` to its end: wall time in ms and, with `rss`, the process's peak RSS in MiB. */
const runOnce = (
  args: ReadonlyArray<string>,
  rss: boolean
): Promise<{ readonly ms: number; readonly rssMiB: number; readonly code: number | null; readonly out: string }> =>
  new Promise((resolve, reject) => {
    const hook =
      "data:text/javascript,import{writeSync}from'node:fs';process.on('exit',()=>{try{writeSync(3,String(process.resourceUsage().maxRSS))}catch{}})"
    const t0 = performance.now()
    const p = spawn(process.execPath, rss ? ["--import", hook, ...args] : args, {
      stdio: ["ignore", "pipe", "pipe", "pipe"],
      env: { ...process.env, NO_COLOR: "1" }
    })
    let out = ""
    let rssKiB = ""
    p.stdout?.on("data", (b: Buffer) => {
      out += b.toString()
    })
    p.stderr?.on("data", (b: Buffer) => {
      out += b.toString()
    })
    ;(p.stdio[3] as NodeJS.ReadableStream | null)?.on("data", (b: Buffer) => {
      rssKiB += b.toString()
    })
    const timer = setTimeout(() => {
      p.kill("SIGKILL")
      reject(new Error(`node ${args.join(" ")} did not finish within 60 s`))
    }, 60_000)
    p.on("error", reject)
    p.on("close", (code) => {
      clearTimeout(timer)
      resolve({ ms: performance.now() - t0, rssMiB: Number(rssKiB) / 1024, code, out })
    })
  })

/** A `tent serve` in the background, killed by `stop`. */
const serve = (): Promise<{ readonly address: string; readonly stop: () => void }> =>
  new Promise((resolve, reject) => {
    const p: ChildProcess = spawn(process.execPath, [bin, "serve", "--soft-devices", "benchsoft0"], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, NO_COLOR: "1" }
    })
    let err = ""
    const stop = () => {
      p.kill("SIGKILL")
    }
    const timer = setTimeout(() => {
      stop()
      reject(new Error(`tent serve did not start within 60 s: ${err.slice(-500)}`))
    }, 60_000)
    p.stderr?.on("data", (b: Buffer) => {
      err += b.toString()
    })
    p.stdout?.on("data", (b: Buffer) => {
      const m = /listening on (\S+):/.exec(b.toString())
      if (m !== null) {
        clearTimeout(timer)
        resolve({ address: m[1] as string, stop })
      }
    })
    p.on("exit", (code) => {
      clearTimeout(timer)
      reject(new Error(`tent serve exited ${code}: ${err.slice(-500)}`))
    })
  })

export const run = async ({ quick, log }: BenchOptions): Promise<ReadonlyArray<BenchResult>> => {
  if (!existsSync(bin))
    throw new Error(`${bin} is missing: run \`pnpm build\` first (this suite measures the built command)`)
  if (newest(`${cli}src`) > statSync(bin).mtimeMs) {
    log("warning: packages/cli/src changed after the last `pnpm build`: these figures are of the older build")
  }
  const rounds = quick ? 5 : 9
  const floor = ["-e", "0"]
  const cases = {
    cli_version_ms: [bin, "--version"],
    cli_help_ms: [bin, "--help"],
    cli_devices_ms: [bin, "devices", "--soft-devices", "benchsoft0"]
  } as const
  const times: Record<string, Array<number>> = { floor: [], cli_send_ms: [] }
  for (const k of Object.keys(cases)) times[k] = []
  const server = await serve()
  try {
    for (let r = 0; r < rounds; r++) {
      // Interleaved: the floor runs inside every round, so a slower moment of the machine hits both.
      times.floor?.push((await runOnce(floor, false)).ms)
      for (const [k, args] of Object.entries(cases)) {
        const res = await runOnce(args, false)
        if (res.code !== 0) throw new Error(`node ${args.join(" ")} exited ${res.code}: ${res.out.slice(-500)}`)
        times[k]?.push(res.ms)
      }
      const send = await runOnce(
        [bin, "send", "--soft-devices", "benchsoft1", server.address, "bench", String(r)],
        false
      )
      if (send.code !== 0) throw new Error(`tent send exited ${send.code}: ${send.out.slice(-500)}`)
      times.cli_send_ms?.push(send.ms)
    }
  } finally {
    server.stop()
  }
  const rss = {
    floor: median(await Promise.all([0, 1, 2].map(() => runOnce(floor, true))).then((xs) => xs.map((x) => x.rssMiB))),
    cli_version_rss_mib: median(
      (await Promise.all([0, 1, 2].map(() => runOnce(cases.cli_version_ms, true)))).map((x) => x.rssMiB)
    ),
    cli_help_rss_mib: median(
      (await Promise.all([0, 1, 2].map(() => runOnce(cases.cli_help_ms, true)))).map((x) => x.rssMiB)
    )
  }
  const f = median(times.floor ?? [])
  const results: Array<BenchResult> = []
  for (const k of [...Object.keys(cases), "cli_send_ms"]) {
    const v = median(times[k] ?? [])
    results.push({ name: k, unit: "ms", value: v, better: "lower", floor: f, ratio: v / f })
  }
  for (const k of ["cli_version_rss_mib", "cli_help_rss_mib"] as const) {
    results.push({ name: k, unit: "MiB", value: rss[k], better: "lower", floor: rss.floor, ratio: rss[k] / rss.floor })
  }
  const over = (k: string) => (results.find((r) => r.name === k)?.value ?? Number.NaN) - f
  const targets = [
    ["--version within 250 ms of the floor", over("cli_version_ms") <= 250],
    ["--help within 250 ms of the floor", over("cli_help_ms") <= 250],
    ["devices within 400 ms of the floor", over("cli_devices_ms") <= 400],
    ["send ≤ 600 ms wall", (results.find((r) => r.name === "cli_send_ms")?.value ?? Number.NaN) <= 600],
    ["--version and --help ≤ 100 MiB", rss.cli_version_rss_mib <= 100 && rss.cli_help_rss_mib <= 100]
  ] as const
  log(`floor node -e 0: ${f.toFixed(0)} ms, ${rss.floor.toFixed(0)} MiB (median of ${rounds})`)
  for (const k of ["cli_version_ms", "cli_help_ms", "cli_devices_ms", "cli_send_ms"]) {
    log(
      `  ${k.padEnd(16)} ${(results.find((r) => r.name === k)?.value ?? 0).toFixed(0).padStart(5)} ms  (floor + ${over(k).toFixed(0)} ms)`
    )
  }
  for (const [what, met] of targets) log(`  target ${what}: ${met ? "met" : "NOT met"}`)
  return results
}
