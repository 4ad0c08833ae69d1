/**
 * The fuzzer's victim process: a real Node process (`node --expose-gc`, `victim.ts` bundled once per process or run
 * through tsx's loader: `@tent/verbs/testing/entry`) spoken to in JSON lines with request ids, so that a crash is seen
 * as its exit and its memory is measured after a full GC. It is killed when its scope closes — asked to leave by
 * closing stdin, then `SIGKILL` — even when the run failed or was interrupted. Every request is bounded. What it
 * wrote on stderr is kept (the last 16 KiB) for the report.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { Data, Effect, type Scope } from "effect"

/** The victim did not start, died, or did not answer in time. */
export class VictimFailure extends Data.TaggedError("VictimFailure")<{ readonly message: string }> {}

/** How the victim process ended, when it did. */
export interface Exited {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

/** A running victim. */
export interface Victim {
  readonly pid: number
  /** What the victim printed when it was ready. */
  readonly ready: Record<string, unknown>
  /** One request and its reply (at most `timeoutMs`). */
  readonly request: <A = Record<string, unknown>>(
    message: Record<string, unknown>,
    timeoutMs?: number
  ) => Effect.Effect<A, VictimFailure>
  /** Set once the process has exited (a crash, while the fuzz runs). */
  readonly exited: () => Exited | undefined
  /** The end of what it wrote on stderr. */
  readonly stderr: () => string
  /** Its log lines on stderr by level (`level=…` of the logfmt logger), and other lines as `other`. */
  readonly logLines: () => Readonly<Record<string, number>>
}

const root = fileURLToPath(new URL("../../../../", import.meta.url))
const entry = fileURLToPath(new URL("./victim.ts", import.meta.url))

/** Whether the victim can be started from here (a clone of the repository, not the bundled command). */
export const available = (): string | undefined =>
  existsSync(entry) && existsSync(`${root}node_modules/tsx/dist/loader.mjs`)
    ? undefined
    : `the fuzz victim ${entry} is not here: tent fuzz runs from a clone of the repository (pnpm fuzz), not from an installed package`

/**
 * The variables an engine reads its configuration from (`TENT_RPC_SECRET`, `MC_*`, every key in constant case): the
 * victim, and the fuzzer's own client, run the configuration the fuzzer gives them, whatever the shell exports.
 */
export const isConfigVariable = (name: string): boolean =>
  /^(TENT_|MC_|RPC_|TRANSPORTS_|NOTIFICATION_|PEER_HEALTH_|TOPOLOGY_|METRICS_|METADATA_|LOCAL_SEGMENT_NAME|MAX_FAILOVER_ATTEMPTS|ENABLE_AUTO_FAILOVER)/.test(
    name
  )

const victimEnv = (): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(process.env).filter(([k]) => !isConfigVariable(k)))

/** `victim.ts` bundled once per process (`@tent/verbs/testing/entry`), else through tsx's loader. */
const victimArgs = async (): Promise<ReadonlyArray<string>> => {
  const { entryArgs } = await import("@tent/verbs/testing/entry")
  return entryArgs(entry)
}

const start = (
  command: ReadonlyArray<string>,
  options: Record<string, unknown>
): Promise<{ victim: Victim; process: ChildProcess }> =>
  new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ["--expose-gc", ...command, JSON.stringify(options)], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...victimEnv(), TENT_FUZZ_VICTIM: "1" }
    })
    let errText = ""
    let partial = ""
    const levels: Record<string, number> = {}
    proc.stderr?.on("data", (b: Buffer) => {
      const text = b.toString()
      errText = (errText + text).slice(-16_384)
      const lines = (partial + text).split("\n")
      partial = (lines.pop() ?? "").slice(-4096)
      for (const line of lines) {
        if (line.trim() === "") continue
        const level = /(?:^|\s)level=(\w+)/.exec(line)?.[1] ?? "other"
        levels[level] = (levels[level] ?? 0) + 1
      }
    })
    const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>()
    let nextId = 1
    let ready = false
    let exited: Exited | undefined
    const timer = setTimeout(() => proc.kill("SIGKILL"), 60_000)
    proc.once("error", (e) => {
      clearTimeout(timer)
      if (!ready) reject(new Error(`the fuzz victim could not be started: ${e.message}`))
    })
    proc.stdin?.on("error", () => {})
    proc.once("exit", (code, signal) => {
      clearTimeout(timer)
      exited = { code, signal }
      const err = new Error(`the fuzz victim exited (${code ?? signal}): ${errText.trim().slice(-2000)}`)
      if (!ready) reject(err)
      for (const w of waiting.values()) w.reject(err)
      waiting.clear()
    })
    const lines = createInterface({ input: proc.stdout as NodeJS.ReadableStream })
    lines.on("line", (line) => {
      let value: Record<string, unknown>
      try {
        value = JSON.parse(line) as Record<string, unknown>
      } catch {
        return
      }
      if (!ready) {
        ready = true
        clearTimeout(timer)
        const victim: Victim = {
          pid: proc.pid as number,
          ready: value,
          request: <A>(message: Record<string, unknown>, timeoutMs = 30_000) =>
            Effect.async<A, VictimFailure>((resume) => {
              if (exited !== undefined) {
                resume(
                  Effect.fail(
                    new VictimFailure({ message: `the fuzz victim has exited (${exited.code ?? exited.signal})` })
                  )
                )
                return
              }
              const id = nextId++
              const t = setTimeout(() => {
                waiting.delete(id)
                resume(
                  Effect.fail(
                    new VictimFailure({
                      message: `the fuzz victim did not answer ${String(message.cmd)} within ${timeoutMs / 1000} s`
                    })
                  )
                )
              }, timeoutMs)
              waiting.set(id, {
                resolve: (v) => {
                  clearTimeout(t)
                  resume(Effect.succeed(v as A))
                },
                reject: (e) => {
                  clearTimeout(t)
                  resume(Effect.fail(new VictimFailure({ message: e.message })))
                }
              })
              proc.stdin?.write(`${JSON.stringify({ ...message, id })}\n`)
              return Effect.sync(() => {
                clearTimeout(t)
                waiting.delete(id)
              })
            }),
          exited: () => exited,
          stderr: () => errText,
          logLines: () => ({ ...levels })
        }
        resolve({ victim, process: proc })
        return
      }
      const w = waiting.get(value.id as number)
      if (w === undefined) return
      waiting.delete(value.id as number)
      if (typeof value.error === "string") w.reject(new Error(`the fuzz victim failed ${value.error}`))
      else w.resolve(value)
    })
  })

const stop = async (p: ChildProcess): Promise<void> => {
  if (p.exitCode !== null || p.signalCode !== null) return
  const exited = new Promise<void>((r) => p.once("exit", () => r()))
  p.stdin?.end()
  await Promise.race([exited, new Promise((r) => setTimeout(r, 2000))])
  if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL")
  await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))])
}

/** Every victim pid started and not reaped yet (for a last-resort exit hook). */
export const live = new Set<number>()

/** Starts a victim with `options` (its role and settings); killed when the scope closes. */
export const spawnVictim = (options: Record<string, unknown>): Effect.Effect<Victim, VictimFailure, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => victimArgs().then((command) => start(command, options)),
      catch: (e) => new VictimFailure({ message: (e as Error).message })
    }).pipe(Effect.tap(({ process: p }) => Effect.sync(() => live.add(p.pid as number)))),
    ({ process: p }) =>
      Effect.promise(() => stop(p)).pipe(Effect.ensuring(Effect.sync(() => live.delete(p.pid as number))))
  ).pipe(Effect.map(({ victim }) => victim))
