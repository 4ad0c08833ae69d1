/**
 * Where a node binds: `--host` (the control plane's interface, TENT's `rpc_server_hostname`) and `--device-hosts`
 * (the IPv4 address each SoftVerbs device's UDP socket binds, `soft0=10.0.0.1,soft1=10.0.1.1`). A device without an
 * entry binds the control plane's host when that is one IPv4 address, else 127.0.0.1. So two nodes in two network
 * namespaces talk over veth pairs: each device on its own link (a rail), the control plane on another. No parser is
 * loaded here (`NodeOptions.ts` and the soak's child nodes read it).
 *
 * @since 0.2.0
 */
import { isIPv4 } from "node:net"
import * as Option from "effect/Option"

/**
 * What `--host` and `--device-hosts` parse to (both optional: a node binds 127.0.0.1 by default).
 *
 * @since 0.2.0
 */
export interface AddressOptions {
  readonly host?: Option.Option<string> | undefined
  readonly deviceHosts?: Option.Option<string> | undefined
}

/**
 * One SoftVerbs device and the address its socket binds.
 *
 * @since 0.2.0
 */
export interface DeviceAddress {
  readonly name: string
  readonly host: string
}

/**
 * `--host`, when given: overrides `rpc_server_hostname` (as its environment variable would).
 *
 * @since 0.2.0
 */
export const controlHost = (o: AddressOptions): string | undefined =>
  o.host === undefined ? undefined : Option.getOrUndefined(o.host)

/**
 * Each of `names` with its host: `--device-hosts`' entry, else `fallback` (the control plane's host) when it is one
 * IPv4 address, else 127.0.0.1. A string is the usage error: an entry that is not `NAME=IPv4`, or names no device.
 *
 * @since 0.2.0
 */
export const deviceAddresses = (
  names: ReadonlyArray<string>,
  o: AddressOptions,
  fallback: string
): ReadonlyArray<DeviceAddress> | string => {
  const given = new Map<string, string>()
  const text = o.deviceHosts === undefined ? "" : Option.getOrElse(o.deviceHosts, () => "")
  for (const part of text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0)) {
    const at = part.indexOf("=")
    const name = part.slice(0, at).trim()
    const host = part.slice(at + 1).trim()
    if (at <= 0 || !isIPv4(host)) {
      return `--device-hosts wants NAME=IPv4 entries joined by commas (for example soft0=10.0.0.1,soft1=10.0.1.1), got ${JSON.stringify(part)}`
    }
    if (!names.includes(name)) {
      return `--device-hosts names ${JSON.stringify(name)}, which is not one of this node's SoftVerbs devices (${names.join(", ")}); check: --soft-devices`
    }
    given.set(name, host)
  }
  const otherwise = isIPv4(fallback) && fallback !== "0.0.0.0" ? fallback : "127.0.0.1"
  return names.map((name) => ({ name, host: given.get(name) ?? otherwise }))
}
