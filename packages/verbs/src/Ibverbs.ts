/**
 * The `Ibverbs` provider of the {@link Verbs} service: the system `libibverbs.so.1` (rdma-core) through koffi, for
 * hosts with real RDMA NICs. Control-path verbs are the library's exported functions; the `static inline` hot-path
 * verbs (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`) are called through the provider's
 * `ibv_context.ops` function pointers, decoded once per opened device, on preallocated structs.
 *
 * Building the Layer never fails: a missing library, a host without devices, or an absent named device is reported by
 * `getDeviceList`/`openDevice` as `DeviceNotFound`, with a message that says what to do.
 *
 * @since 0.1.0
 */
import { Config, Effect, Layer } from "effect"
import koffi, { type LibraryHandle } from "koffi"
import { DeviceNotFound } from "./Errors.js"
import * as Device from "./ibverbs/Device.js"
import { bind, type Library } from "./ibverbs/Library.js"
import { Verbs, type VerbsShape } from "./Verbs.js"

/**
 * Options of the provider.
 *
 * @since 0.1.0
 */
export interface Options {
  /** The libibverbs to load: a soname or a path (tests point it at an ABI-compatible double). */
  readonly library?: string
  /**
   * Where sysfs is mounted (default `/sys`): GID auto-selection reads each GID's network device from
   * `class/infiniband/<device>/ports/<port>/gid_attrs/ndevs/<index>` under it, as TENT does. Since 0.2.0.
   */
  readonly sysfs?: string
}

/**
 * Default options: the rdma-core soname.
 *
 * @since 0.1.0
 */
export const defaults = { library: "libibverbs.so.1" } as const

/**
 * The environment key naming the library to load.
 *
 * @since 0.1.0
 */
export const LIBRARY_KEY = "TENT_IBVERBS_LIBRARY"

/**
 * The provider's options from config (`TENT_IBVERBS_LIBRARY`, default `libibverbs.so.1`).
 *
 * @since 0.1.0
 */
export const config: Config.Config<Options> = Config.string(LIBRARY_KEY).pipe(
  Config.withDefault(defaults.library),
  Config.withDescription("Path or soname of libibverbs for the Ibverbs provider (default libibverbs.so.1)"),
  Config.map((library) => ({ library }))
)

const loaded = new Map<string, Library | DeviceNotFound>()

const install =
  "rdma-core's user-space verbs: `apt-get install libibverbs1 ibverbs-providers` (Debian/Ubuntu) or " +
  `\`dnf install libibverbs rdma-core\` (RHEL/Fedora), or set ${LIBRARY_KEY} to the library's path.`

const cause = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/**
 * Loads and binds a libibverbs once per path; a failure becomes the `DeviceNotFound` every call then reports. Verbs
 * that only newer rdma-core exports are bound on first use (`Library.optional`), so their absence is no load failure.
 */
const load = (path: string): Library | DeviceNotFound => {
  let lib = loaded.get(path)
  if (lib === undefined) {
    lib = ((): Library | DeviceNotFound => {
      let handle: LibraryHandle
      try {
        handle = koffi.load(path)
      } catch (e) {
        const message = `libibverbs could not be loaded from "${path}" (${cause(e)}). Install ${install}`
        return new DeviceNotFound({ reason: "LibraryMissing", available: [], message })
      }
      try {
        return bind(handle)
      } catch (e) {
        const message = `"${path}" is not a usable libibverbs: ${cause(e)}. Install ${install}`
        return new DeviceNotFound({ reason: "LibraryMissing", available: [], message })
      }
    })()
    loaded.set(path, lib)
  }
  return lib
}

/**
 * Builds the service over the libibverbs at `options.library`.
 *
 * @since 0.1.0
 */
export const make = (options: Options = {}): Effect.Effect<VerbsShape> =>
  Effect.sync(() => {
    const lib = load(options.library ?? defaults.library)
    if (lib instanceof DeviceNotFound) {
      return {
        provider: "ibverbs",
        getDeviceList: Effect.fail(lib),
        openDevice: () => Effect.fail(lib)
      }
    }
    return {
      provider: "ibverbs",
      getDeviceList: Device.getDeviceList(lib),
      openDevice: (name: string) => Device.openDevice(lib, name, options.sysfs)
    }
  })

/**
 * The `Verbs` service over libibverbs.
 *
 * @since 0.1.0
 */
export const layer = (options: Options = {}): Layer.Layer<Verbs> => Layer.effect(Verbs, make(options))

/**
 * The `Verbs` service over the libibverbs named by config (`TENT_IBVERBS_LIBRARY`).
 *
 * @since 0.1.0
 */
export const layerConfig = (options: Config.Config<Options> = config): Layer.Layer<Verbs, never> =>
  Layer.effect(Verbs, Effect.flatMap(Effect.orDie(options), make))
