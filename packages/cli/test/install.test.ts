/**
 * The packages as a user installs them: `pnpm build`, `pnpm pack` of the five packages, the tarballs installed with
 * plain `npm` into an empty folder outside the workspace, and there `npx tent --version`, `npx tent devices`, and the
 * core README's program (its ```ts block, read from the README so the two cannot drift) type-checked against the
 * installed declarations with `tsc --noEmit`, then compiled and run with `node`. Needs the npm registry for the
 * packages' own dependencies (effect, koffi, ...), as any install does.
 */
import { execFile } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { afterAll, describe, expect, it } from "vitest"

const root = fileURLToPath(new URL("../../../", import.meta.url))
const packages = ["verbs", "rpc", "health", "core", "cli"] as const
const exec = promisify(execFile)
const work = mkdtempSync(join(tmpdir(), "tent-install-"))

/** Runs a command to its end (bounded); a non-zero exit fails the test with its output. */
const sh = async (
  cmd: string,
  args: ReadonlyArray<string>,
  cwd: string,
  timeoutMs = 300_000,
  env: Record<string, string> = {}
) => {
  try {
    return await exec(cmd, args, {
      cwd,
      timeout: timeoutMs,
      maxBuffer: 64 << 20,
      env: { ...process.env, NO_COLOR: "1", ...env }
    })
  } catch (e) {
    const x = e as { code?: number | string; stdout?: string; stderr?: string; message: string }
    throw new Error(
      `${cmd} ${args.join(" ")} exited ${x.code ?? "?"} in ${cwd}: ${x.message}\n${x.stdout ?? ""}\n${x.stderr ?? ""}`
    )
  }
}

/** The core README's program: its first ```ts block. */
const readmeProgram = (): string => {
  const readme = readFileSync(`${root}packages/core/README.md`, "utf8")
  const m = /```ts\n([\s\S]*?)```/.exec(readme)
  if (m === null) throw new Error("packages/core/README.md has no ```ts block")
  return m[1] as string
}

afterAll(() => {
  rmSync(work, { recursive: true, force: true })
})

describe("installed from the tarballs", () => {
  it("builds, packs, installs with npm, and runs tent and the README's program", { timeout: 900_000 }, async () => {
    await sh(process.execPath, [`${root}node_modules/typescript/bin/tsc`, "-b", "tsconfig.build.json"], root)
    await sh(process.execPath, [`${root}packages/cli/bundle.mjs`], root)
    const tarballs = join(work, "tarballs")
    for (const p of packages) {
      await sh("npx", ["--yes", "pnpm@10.34.9", "pack", "--pack-destination", tarballs], `${root}packages/${p}`)
    }
    // One version: every package's is the root's, and `tent --version` prints it.
    const version = JSON.parse(readFileSync(`${root}package.json`, "utf8")).version as string
    const files = readdirSync(tarballs).filter((f) => f.endsWith(".tgz"))
    expect(files.sort()).toEqual(packages.map((p) => `tent-${p}-${version}.tgz`).sort())
    // Each tarball holds dist/, README.md, LICENSE and package.json only, and exports dist/ to its consumers.
    for (const f of files) {
      const { stdout } = await sh("tar", ["tzf", join(tarballs, f)], work)
      const top = new Set(
        stdout
          .split("\n")
          .filter((l) => l.length > 0)
          .map((l) => l.split("/")[1])
      )
      expect([...top].sort(), f).toEqual(["LICENSE", "README.md", "dist", "package.json"])
    }

    const app = join(work, "app")
    await sh("mkdir", ["-p", app], work)
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }))
    await sh(
      "npm",
      [
        "install",
        "--no-audit",
        "--no-fund",
        "--prefer-offline",
        ...files.map((f) => join(tarballs, f)),
        "effect@3.22.4",
        "typescript@5.9.3",
        "@types/node@20.19.43"
      ],
      app,
      600_000
    )
    expect((await sh("npx", ["tent", "--version"], app)).stdout.trim()).toBe(version)
    const devices = await sh("npx", ["tent", "devices", "--json"], app)
    expect(JSON.parse(devices.stdout).soft.map((d: { name: string }) => d.name)).toEqual(["soft0", "soft1"])

    // The probe's children run from the bundle too (its own entry, probe-node.js, beside tent.js).
    const probe = await sh(
      "npx",
      ["tent", "probe", "--quick", "--only", "1", "--arm", "series", "--json"],
      app,
      300_000,
      {
        TENT_PROBE_COUNT: "100"
      }
    )
    expect(JSON.parse(probe.stdout).rows.map((r: { received: number; sent: number }) => [r.received, r.sent])).toEqual([
      [200, 200]
    ])
    // The answers that load nothing are the parser's own: --version, and each command's recorded --help.
    for (const args of [["--version"], ["--help"], ["send", "--help"], ["probe", "-h"]]) {
      const fast = await sh("npx", ["tent", ...args], app)
      const parser = await sh("npx", ["tent", ...args], app, 300_000, { TENT_CLI_FAST: "0" })
      expect(fast.stdout, args.join(" ")).toBe(parser.stdout)
    }
    // What each process loads (a resolve hook records every module): --version and --help neither the parser nor a
    // command's body; `tent send` (read by Argv.readHot) its own body and not the parser, the probe's, the bench's or
    // another command's; a command line readHot leaves to the parser loads the parser.
    const hooks = [
      'import { appendFileSync } from "node:fs"',
      "export async function resolve(s, c, next) {",
      "  const r = await next(s, c)",
      '  if (r.url.startsWith("file:")) appendFileSync(process.env.LOAD_LOG, r.url + "\\n")',
      "  return r",
      "}"
    ]
    writeFileSync(join(app, "hooks.mjs"), `${hooks.join("\n")}\n`)
    writeFileSync(
      join(app, "register.mjs"),
      'import { register } from "node:module"\nregister("./hooks.mjs", import.meta.url)\n'
    )
    const loaded = async (args: ReadonlyArray<string>, exit: number) => {
      const log = join(app, `load-${args.join("-")}.log`)
      writeFileSync(log, "")
      const bin = join(app, "node_modules/@tent/cli/dist/bin/tent.js")
      const run = sh(process.execPath, ["--import", "./register.mjs", bin, ...args], app, 300_000, { LOAD_LOG: log })
      if (exit === 0) await run
      else await expect(run).rejects.toThrow(`exited ${exit} in`)
      return readFileSync(log, "utf8")
        .split("\n")
        .filter((l) => l.includes("/@tent/cli/dist/bin/"))
        .map((l) => l.slice(l.lastIndexOf("/") + 1))
    }
    const parser = /^(Main|Cli|NodeContext|Send|Serve|Recv|Transfer|Devices|Probe|Bench)-|^probe-node/
    const names = async (args: ReadonlyArray<string>, exit: number) =>
      [...new Set((await loaded(args, exit)).filter((f) => parser.test(f)))]
        .map((f) => f.slice(0, f.indexOf("-")))
        .sort()
    expect(await names(["--version"], 0)).toEqual([])
    expect(await names(["send", "--help"], 0)).toEqual([])
    expect(await names(["send", "nonsense", "a", "b"], 2)).toEqual(["Main", "Send"])
    expect(await names(["send", "nonsense", "a"], 2)).toEqual(["Cli", "Main", "NodeContext"])

    writeFileSync(join(app, "program.ts"), readmeProgram())
    writeFileSync(
      join(app, "main.ts"),
      'import { Effect } from "effect"\nimport { program } from "./program.js"\n\nconsole.log(JSON.stringify(await Effect.runPromise(program)))\n'
    )
    const tsconfig = {
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        exactOptionalPropertyTypes: true,
        skipLibCheck: false,
        types: ["node"],
        outDir: "out"
      },
      files: ["program.ts", "main.ts"]
    }
    writeFileSync(join(app, "tsconfig.json"), JSON.stringify(tsconfig))
    await sh(process.execPath, ["node_modules/typescript/bin/tsc", "--noEmit"], app)
    await sh(process.execPath, ["node_modules/typescript/bin/tsc"], app)
    const ran = await sh(process.execPath, ["out/main.js"], app, 120_000)
    expect(JSON.parse(ran.stdout.trim().split("\n").at(-1) as string)).toEqual({
      note: { name: "done", msg: "batch 1" },
      data: "hello, rdma"
    })
  })
})
