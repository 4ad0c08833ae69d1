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
