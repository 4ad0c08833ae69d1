/**
 * `@tent/cli`: the `tent` command (`Cli.run`), the node it builds for ad hoc use, and the probe's pieces.
 *
 * @since 0.1.0
 */
export * as Cli from "./Cli.js"
/**
 * One engine node for the ad hoc commands (`serve`, `send`, `recv`, `transfer`).
 *
 * @since 0.1.0
 */
export * as Node from "./Node.js"
/**
 * Typed errors rendered for a person: one line that says what failed and what to check.
 *
 * @since 0.1.0
 */
export * as Render from "./Render.js"
