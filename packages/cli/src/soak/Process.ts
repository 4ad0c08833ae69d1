/**
 * The soak's child processes: `node soak/node.ts` (through tsx's loader from a clone) run in a network namespace
 * with `ip netns exec`, which execs Node in place, so the pid is Node's own and a signal reaches it. Spoken to in JSON
 * lines with request ids, as the probe's children (`probe/Children.ts`, whose `ChildFailure` it shares); a child
 * leaves when its stdin closes, so one whose parent died goes with it. Each is stopped when its scope closes —
 * resumed first if stopped, stdin closed, then `SIGKILL` — and every request is bounded.
 *
 * @since 0.2.0
 */
import { type ChildProcess, spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { Effect, type Scope } from "effect"
import { ChildFailure } from "../probe/Children.js"

export {
  /**
   * A child that did not start, died, or did not answer in time (the probe's `ChildFailure`, re-exported).
   *
   * @since 0.2.0
   */
  ChildFailure
}

/**
 * `node <node.js>` beside a build; from a clone, `node.ts` (or a test's fixture, given by its absolute path) bundled
 * once per process (`@tent/verbs/testing/entry`), else through tsx's loader.
 */
const nodeArgs = async (file: string): Promise<ReadonlyArray<string>> => {
  if (import.meta.url.endsWith(".js") && !file.startsWith("/")) {
    return [fileURLToPath(new URL(`./${file}.js`, import.meta.url))]
  }
  const { entryArgs } = await import("@tent/verbs/testing/entry")
  return entryArgs(file.startsWith("/") ? file : fileURLToPath(new URL(`./${file}.ts`, import.meta.url)))
}

/**
 * A running child.
 *
 * @since 0.2.0
 */
export interface Child {
  readonly pid: number
  /** Its ready line. */
  readonly ready: Record<string, unknown>
  readonly request: <A = Record<string, unknown>>(
    message: Record<string, unknown>,
    timeoutMs?: number
  ) => Effect.Effect<A, ChildFailure>
  readonly signal: (signal: NodeJS.Signals) => void
  /** Whether it has exited. */
  readonly exited: () => boolean
}

const start = (
  command: ReadonlyArray<string>,
  ns: string,
  options: Record<string, unknown>,
  readyMs: number
): Promise<{ child: Child; process: ChildProcess }> =>
  new Promise((resolve, reject) => {
    const proc = spawn("ip", ["netns", "exec", ns, process.execPath, ...command, JSON.stringify(options)], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, TENT_SOAK_CHILD: "1" }
    })
    let errText = ""
    proc.stderr?.on("data", (b: Buffer) => {
      errText = (errText + b.toString()).slice(-4000)
    })
    const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>()
    let nextId = 1
    let ready = false
    const timer = setTimeout(() => proc.kill("SIGKILL"), readyMs)
    proc.once("error", (e) => {
      clearTimeout(timer)
      if (!ready) reject(new Error(`the soak's ${String(options.role)} could not be started: ${e.message}`))
    })
    proc.stdin?.on("error", () => {})
    proc.once("exit", (code, signal) => {
      clearTimeout(timer)
      const said = errText
        .split("\n")
        .filter((l) => !/^\s+at /.test(l))
        .join("\n")
        .trim()
        .slice(-1500)
      const err = new Error(`the soak's ${String(options.role)} in ${ns} exited (${code ?? signal}): ${said}`)
      if (!ready) reject(err)
      for (const w of waiting.values()) w.reject(err)
      waiting.clear()
    })
    createInterface({ input: proc.stdout as NodeJS.ReadableStream }).on("line", (line) => {
      let value: Record<string, unknown>
      try {
        value = JSON.parse(line) as Record<string, unknown>
      } catch {
        return
      }
      if (!ready) {
        ready = true
        clearTimeout(timer)
        const child: Child = {
          pid: proc.pid as number,
          ready: value,
          request: <A>(message: Record<string, unknown>, timeoutMs = 30_000) =>
            Effect.async<A, ChildFailure>((resume) => {
              const id = nextId++
              const fail = (m: string) => resume(Effect.fail(new ChildFailure({ message: m })))
              const t = setTimeout(() => {
                waiting.delete(id)
                fail(`the soak's ${String(options.role)} did not answer ${String(message.cmd)} within ${timeoutMs} ms`)
              }, timeoutMs)
              waiting.set(id, {
                resolve: (v) => {
                  clearTimeout(t)
                  resume(Effect.succeed(v as A))
                },
                reject: (e) => {
                  clearTimeout(t)
                  fail(e.message)
                }
              })
              proc.stdin?.write(`${JSON.stringify({ ...message, id })}\n`)
              return Effect.sync(() => {
                clearTimeout(t)
                waiting.delete(id)
              })
            }),
          signal: (s) => {
            if (proc.exitCode === null && proc.signalCode === null) proc.kill(s)
          },
          exited: () => proc.exitCode !== null || proc.signalCode !== null
        }
        resolve({ child, process: proc })
        return
      }
      const w = waiting.get(value.id as number)
      if (w === undefined) return
      waiting.delete(value.id as number)
      if (typeof value.error === "string") w.reject(new Error(`the soak's ${String(options.role)}: ${value.error}`))
      else w.resolve(value)
    })
  })

const stop = async (p: ChildProcess): Promise<void> => {
  if (p.exitCode !== null || p.signalCode !== null) return
  const exited = new Promise<void>((r) => p.once("exit", () => r()))
  p.kill("SIGCONT")
  p.stdin?.end()
  await Promise.race([exited, new Promise((r) => setTimeout(r, 1000))])
  if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL")
  await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))])
}

/**
 * Every child pid not yet reaped (a last-resort exit hook kills them).
 *
 * @since 0.2.0
 */
export const live = new Set<number>()

/**
 * Starts `file` (`node`: the soak's node; or an absolute path) in namespace `ns` with `options` as its argument;
 * stopped when the scope closes.
 *
 * @since 0.2.0
 */
export const spawnIn = (
  ns: string,
  options: Record<string, unknown>,
  file = "node",
  readyMs = 90_000
): Effect.Effect<Child, ChildFailure, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => nodeArgs(file).then((command) => start(command, ns, options, readyMs)),
      catch: (e) => new ChildFailure({ message: (e as Error).message })
    }).pipe(Effect.tap(({ process: p }) => Effect.sync(() => live.add(p.pid as number)))),
    ({ process: p }) =>
      Effect.promise(() => stop(p)).pipe(Effect.ensuring(Effect.sync(() => live.delete(p.pid as number))))
  ).pipe(Effect.map(({ child }) => child))
