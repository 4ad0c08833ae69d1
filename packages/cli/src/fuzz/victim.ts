/**
 * The fuzz victim: one process the fuzzer attacks, driven over JSON lines on stdin/stdout (see `Child.ts`). It prints
 * what the fuzzer needs when it is ready (addresses, QP numbers, registered regions), then answers one line per
 * request. Role `engine` (`victimEngine.ts`): a real `TransferEngine` on a SoftVerbs NIC, its control plane on
 * 127.0.0.1; role `verbs` (`victimVerbs.ts`): a SoftVerbs device with connected RC QPs. It leaves when stdin closes.
 *
 * Started only by the fuzzer (`TENT_FUZZ_VICTIM=1`); `inject` (a negative control of the harness's own checks)
 * is reachable only this way, never through `tent serve`.
 */
import { createInterface } from "node:readline"
import { Effect, Logger, Runtime, type Scope } from "effect"
import type { Role } from "./role.js"
import * as EngineVictim from "./victimEngine.js"
import * as VerbsVictim from "./victimVerbs.js"

if (process.env.TENT_FUZZ_VICTIM !== "1") {
  process.stderr.write("this is a tent fuzz victim process; run `tent fuzz` instead\n")
  process.exit(2)
}

const opts = JSON.parse(process.argv[2] ?? "{}") as Record<string, unknown>

const serveLines = (role: Role): Effect.Effect<void> =>
  Effect.gen(function* () {
    const run = Runtime.runPromise(yield* Effect.runtime<never>())
    process.stdout.write(`${JSON.stringify(role.ready)}\n`)
    yield* Effect.async<void>((resume) => {
      const rl = createInterface({ input: process.stdin })
      rl.on("line", (line) => {
        let message: Record<string, unknown>
        try {
          message = JSON.parse(line) as Record<string, unknown>
        } catch {
          return
        }
        const id = message.id
        run(role.on(message)).then(
          (reply) => process.stdout.write(`${JSON.stringify({ ...reply, id })}\n`),
          (e) => process.stdout.write(`${JSON.stringify({ id, error: String(e) })}\n`)
        )
      })
      rl.on("close", () => resume(Effect.void))
    })
  })

const role: Effect.Effect<Role, unknown, Scope.Scope> =
  opts.role === "verbs" ? VerbsVictim.make(opts) : EngineVictim.make(opts)

Effect.runFork(
  Effect.scoped(Effect.flatMap(role, serveLines)).pipe(
    Effect.provide(Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.logfmtLogger))),
    Effect.catchAllCause((cause) => Effect.sync(() => process.stderr.write(`victim failed: ${cause}\n`))),
    Effect.ensuring(Effect.sync(() => process.exit(0)))
  )
)
