/**
 * `@tent/verbs`: the `Verbs` service and its providers.
 *
 * @since 0.1.0
 */
export * from "./Constants.js"
export * from "./Errors.js"
export * from "./Gid.js"
export * as Ibverbs from "./Ibverbs.js"
export * as Rc from "./Rc.js"
export * as SoftVerbs from "./SoftVerbs.js"
export * from "./Verbs.js"
