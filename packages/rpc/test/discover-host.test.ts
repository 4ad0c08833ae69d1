/**
 * `rpc_server_hostname: ""`: the address TENT's `discoverLocalIpAddress` (`tent/src/common/ip.cpp:23-58`) would pick,
 * from a list of interfaces as `os.networkInterfaces()` gives it. Pure: no socket is bound to what it finds.
 */
import { describe, expect, it } from "@effect/vitest"
import { discoverHost } from "../src/internal/address.js"

const v4 = (address: string) => ({ family: "IPv4", address })
const v6 = (address: string) => ({ family: "IPv6", address })

describe('discoverHost: rpc_server_hostname "" as TENT finds it', () => {
  it("the first IPv4 address of an interface not named lo, before any IPv6 one", () => {
    expect(
      discoverHost({
        lo: [v4("127.0.0.1"), v6("::1")],
        eth0: [v6("2001:db8::5"), v4("10.0.0.7")],
        eth1: [v4("192.168.1.9")]
      })
    ).toBe("10.0.0.7")
  })

  it("IPv6 only when no interface has IPv4; a link-local one carries its interface as scope", () => {
    expect(discoverHost({ lo: [v4("127.0.0.1")], eth0: [v6("2001:db8::5")] })).toBe("2001:db8::5")
    expect(discoverHost({ lo: [v4("127.0.0.1")], ib0: [v6("fe80::1")] })).toBe("fe80::1%ib0")
    // Node before 18.4 numbered the family
    expect(discoverHost({ eth0: [{ family: 4, address: "10.1.2.3" }] })).toBe("10.1.2.3")
  })

  it("nothing but lo: nothing found (the listener then fails naming rpc_server_hostname)", () => {
    expect(discoverHost({ lo: [v4("127.0.0.1"), v6("::1")] })).toBeUndefined()
    expect(discoverHost({})).toBeUndefined()
  })
})
