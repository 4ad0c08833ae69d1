import { Command } from "@effect/cli"
import { Effect } from "effect"
export const command = Command.make("probe", {}, () => Effect.void)
