/**
 * The probe's child processes: real Node processes (so the pid is the process itself and `SIGSTOP` freezes it)
 * running `node.ts` — through tsx's loader from a clone, or the built `probe-node.js` beside the bundle of the installed
 * `tent` command — spoken to in JSON lines with request ids. Each is killed when its scope
 * closes — resumed first if stopped, asked to leave by closing stdin, then `SIGKILL` — even when the probe failed
 * or was interrupted. Every request is bounded.
 *
 * @since 0.1.0
 */
import { type ChildProcess, spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { Data, Effect, type Scope } from "effect"

declare const TENT_BUNDLE: boolean | undefined

/**
 * How a child is started: `node <file>` (the bundle's `probe-node.js`, or `node.js` beside a build), or, from a clone,
 * `node.ts` bundled once per process (`@tent/verbs/testing/entry`: a child starts in ~0.3 s instead of ~2 s through
 * tsx's loader), else `node --import tsx node.ts`.
 */
const childCommand = async (): Promise<ReadonlyArray<string>> => {
  if (typeof TENT_BUNDLE === "boolean" && TENT_BUNDLE)
    return [fileURLToPath(new URL("./probe-node.js", import.meta.url))]
  if (import.meta.url.endsWith(".js")) return [fileURLToPath(new URL("./node.js", import.meta.url))]
  const { entryArgs } = await import("@tent/verbs/testing/entry")
  return entryArgs(fileURLToPath(new URL("./node.ts", import.meta.url)))
}

/** A probe child that did not start, died, or did not answer in time. */
export class ChildFailure extends Data.TaggedError("ChildFailure")<{ readonly message: string }> {}

/** A running probe child. */
export interface Child {
  readonly role: string
  readonly pid: number
  readonly segment: string
  readonly addr: number
  /** One request, its reply (at most `timeoutMs`). */
  readonly request: <A = Record<string, unknown>>(
    message: Record<string, unknown>,
    timeoutMs?: number
  ) => Effect.Effect<A, ChildFailure>
  readonly signal: (signal: NodeJS.Signals) => void
  /** Lines the child wrote on stderr (its logs), for a failure message. */
  readonly stderr: () => string
}

const start = (
  command: ReadonlyArray<string>,
  role: string,
  options: Record<string, unknown>
): Promise<{ child: Child; process: ChildProcess }> =>
  new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [...command, JSON.stringify({ role, ...options })], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, TENT_PROBE_CHILD: "1" }
    })
    let errText = ""
    proc.stderr?.on("data", (b: Buffer) => {
      errText = (errText + b.toString()).slice(-4000)
    })
    const lines = createInterface({ input: proc.stdout as NodeJS.ReadableStream })
    const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>()
    let nextId = 1
    let ready = false
    // Not ready in time: killed, and the start fails once it has exited (reaped: never left behind the probe).
    let late = false
    const timer = setTimeout(() => {
      late = true
      proc.kill("SIGKILL")
    }, 60_000)
    // A spawn that fails emits `error` (and no `exit`); a write to a child that has died fails on its stdin with EPIPE
    // (its `exit` fails what waits on it). Neither may throw in the probe.
    proc.once("error", (e) => {
      clearTimeout(timer)
      if (!ready) reject(new Error(`the probe's ${role} process could not be started: ${e.message}`))
    })
    proc.stdin?.on("error", () => {})
    proc.once("exit", (code, signal) => {
      clearTimeout(timer)
      if (late) {
        reject(new Error(`the probe's ${role} process was not ready within 60 s: ${errText.trim()}`))
        return
      }
      // What it said, stack frames left out (the message, not the last frames, is what tells why).
      const said = errText
        .split("\n")
        .filter((l) => !/^\s+at /.test(l))
        .join("\n")
        .trim()
        .slice(-1500)
      const err = new Error(`the probe's ${role} process exited (${code ?? signal}): ${said}`)
      if (!ready) reject(err)
      for (const w of waiting.values()) w.reject(err)
      waiting.clear()
    })
    lines.on("line", (line) => {
      if (late) return
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
          role,
          pid: proc.pid as number,
          segment: value.segment as string,
          addr: value.addr as number,
          request: <A>(message: Record<string, unknown>, timeoutMs = 30_000) =>
            Effect.async<A, ChildFailure>((resume) => {
              const id = nextId++
              const t = setTimeout(() => {
                waiting.delete(id)
                resume(
                  Effect.fail(
                    new ChildFailure({
                      message: `the ${role} did not answer ${String(message.cmd)} within ${timeoutMs / 1000} s`
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
                  resume(Effect.fail(new ChildFailure({ message: e.message })))
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
          stderr: () => errText
        }
        resolve({ child, process: proc })
        return
      }
      const id = value.id as number
      const w = waiting.get(id)
      if (w === undefined) return
      waiting.delete(id)
      if (typeof value.error === "string") w.reject(new Error(`the ${role} failed ${value.error}`))
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

/** Every pid the probe started and has not reaped yet (for tests and for a last-resort exit hook). */
export const live = new Set<number>()

/** Starts a probe child with `options`; killed when the scope closes. */
export const spawnChild = (
  role: string,
  options: Record<string, unknown>
): Effect.Effect<Child, ChildFailure, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => childCommand().then((command) => start(command, role, options)),
      catch: (e) => new ChildFailure({ message: (e as Error).message })
    }).pipe(Effect.tap(({ process: p }) => Effect.sync(() => live.add(p.pid as number)))),
    ({ process: p }) =>
      Effect.promise(() => stop(p)).pipe(Effect.ensuring(Effect.sync(() => live.delete(p.pid as number))))
  ).pipe(Effect.map(({ child }) => child))
