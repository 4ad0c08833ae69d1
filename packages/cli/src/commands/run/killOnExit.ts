/** The sets of child pids already covered by an exit hook. */
const hooked = new WeakSet<ReadonlySet<number>>()

/**
 * Kills every pid still in `live` when this process exits, however it exits (a finalizer that did not run: an
 * uncaught error, `process.exit`). Once per set; the set is read at exit, so children started later are covered.
 */
export const killOnExit = (live: ReadonlySet<number>): void => {
  if (hooked.has(live)) return
  hooked.add(live)
  process.on("exit", () => {
    for (const pid of live) {
      try {
        process.kill(pid, "SIGKILL")
      } catch {
        // already gone
      }
    }
  })
}
