/** A peer's RPC address split into host and port: `host:port`, or `[v6]:port`. */
export const parseAddress = (address: string): { readonly host: string; readonly port: number } | undefined => {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(address)
  if (m === null) return undefined
  const port = Number(m[3])
  if (port < 1 || port > 65535) return undefined
  return { host: (m[1] ?? m[2]) as string, port }
}

/** `host:port` (IPv6 hosts in brackets). */
export const formatAddress = (host: string, port: number): string =>
  host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`

/** One address of a network interface, as `os.networkInterfaces()` lists it. */
interface InterfaceAddress {
  readonly family: string | number
  readonly address: string
}

/**
 * The address `rpc_server_hostname: ""` stands for, found as TENT's `discoverLocalIpAddress` finds it
 * (`tent/src/common/ip.cpp:23-58`): the first IPv4 address of an interface not named `lo`, else the first IPv6 one
 * (a link-local one with its interface as scope); undefined when there is none.
 */
export const discoverHost = (
  interfaces: Readonly<Record<string, ReadonlyArray<InterfaceAddress> | undefined>>
): string | undefined => {
  for (const family of ["IPv4", "IPv6"]) {
    for (const [name, addresses] of Object.entries(interfaces)) {
      if (name === "lo") continue
      for (const a of addresses ?? []) {
        const f = typeof a.family === "number" ? `IPv${a.family}` : a.family
        if (f !== family) continue
        return family === "IPv6" && a.address.toLowerCase().startsWith("fe80:") ? `${a.address}%${name}` : a.address
      }
    }
  }
  return undefined
}
