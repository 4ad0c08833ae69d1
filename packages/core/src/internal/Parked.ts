/**
 * A background pass that runs every `interval` while it has work, and holds no timer otherwise, so an idle engine
 * wakes for nothing: the receipts ticker, the slice-timeout check, the reclaim pass.
 */
import { type Duration, Effect } from "effect"

/** A parked loop: fork `loop` in a scope; `wake()` is plain synchronous code, cheap when the loop is already awake. */
export interface Parked {
  readonly wake: () => void
  readonly loop: Effect.Effect<never>
}

/**
 * `pass` every `interval` (the first one `interval` after a wake) while awake; after a pass, `idle()` true parks the
 * loop until the next `wake()`. The check and the park are one synchronous step, so a wake after it is never missed;
 * other fibers may run between the pass and the check, so `idle` reads the state itself, not what the pass saw. It may
 * install the wake where the work will come from. `awake`: whether the loop starts awake.
 */
export const parked = (
  interval: Duration.DurationInput,
  pass: Effect.Effect<void>,
  idle: () => boolean,
  awake = false
): Parked => {
  const latch = Effect.unsafeMakeLatch(awake)
  return {
    wake: () => latch.unsafeOpen(),
    loop: Effect.forever(
      Effect.zipRight(
        Effect.zipRight(latch.await, Effect.sleep(interval)),
        Effect.zipRight(
          pass,
          Effect.sync(() => {
            if (idle()) latch.unsafeClose()
          })
        )
      )
    )
  }
}
