import type { Effect } from "effect"

/** What a victim role gives the victim's line loop (`victim.ts`): its ready line and its request handler. */
export interface Role {
  readonly ready: Record<string, unknown>
  readonly on: (message: Record<string, unknown>) => Effect.Effect<Record<string, unknown>, unknown>
}
