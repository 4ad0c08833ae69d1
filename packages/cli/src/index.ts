/**
 * `@tent/cli`: the `tent` command (`Cli.run`), the node it builds for ad hoc use, and the probe's pieces.
 *
 * @since 0.1.0
 */
export * as Cli from "./Cli.js"
export * as Node from "./Node.js"
export * as Render from "./Render.js"
