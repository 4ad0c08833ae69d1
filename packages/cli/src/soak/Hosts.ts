/**
 * The soak's two hosts: two network namespaces, `A` (the sender) and `B` (the receiver), joined by three veth pairs
 * — rail 0 and rail 1 (one SoftVerbs NIC on each end) and the control plane's link — and the faults the kernel makes
 * on them: a link set down (a pulled cable, a dead NIC port), an nftables `numgen random` drop on a rail (a lossy
 * link), the control plane's link down (a partition of the control plane alone).
 *
 * Every name carries this process's pid (`tent-soak-<pid>-a`, `ts<pid>b0`), so a clean-up at start removes what an
 * earlier run that was killed left behind (its pid is gone) and never what a running one uses. Deleting a namespace
 * deletes its veth ends (and so their peers) and its nftables tables.
 *
 * @since 0.2.0
 */
import { execFileSync, spawnSync } from "node:child_process"
import { Data, Effect, type Scope } from "effect"

/**
 * The soak cannot run here (not root, no `ip`, no `nft`), or a command it ran on the hosts failed.
 *
 * @since 0.2.0
 */
export class HostFailure extends Data.TaggedError("HostFailure")<{
  readonly message: string
  /** Missing: what the soak needs is not on this machine (exit 2); otherwise a command failed (exit 1). */
  readonly missing: boolean
}> {}

/**
 * One side's addresses: its two rails and its control plane.
 *
 * @since 0.2.0
 */
export interface Side {
  readonly ns: string
  readonly rails: readonly [string, string]
  readonly control: string
  /** Interface names: rail 0, rail 1, control plane. */
  readonly links: readonly [string, string, string]
}

/**
 * The two hosts of one soak arm.
 *
 * @since 0.2.0
 */
export interface Hosts {
  readonly a: Side
  readonly b: Side
}

/**
 * Which link a fault takes: a rail (0, 1) or the control plane.
 *
 * @since 0.2.0
 */
export type Link = 0 | 1 | "control"

const PREFIX = "tent-soak-"
const SUBNET = "10.201"

const run = (cmd: string, args: ReadonlyArray<string>): string =>
  execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })

const tryRun = (cmd: string, args: ReadonlyArray<string>): Effect.Effect<void, HostFailure> =>
  Effect.try({
    try: () => void run(cmd, args),
    catch: (e) =>
      new HostFailure({
        message: `${cmd} ${args.join(" ")} failed: ${String((e as { stderr?: unknown }).stderr ?? e).trim()}`,
        missing: false
      })
  })

/**
 * What is missing for the soak on this machine (`undefined`: nothing): root, `ip`, `nft`, namespaces.
 *
 * @since 0.2.0
 */
export const missing = (): string | undefined => {
  if (typeof process.getuid === "function" && process.getuid() !== 0) {
    return "tent soak needs root (it makes network namespaces, veth pairs and nftables rules): run it as root"
  }
  if (spawnSync("ip", ["-V"], { stdio: "ignore" }).status !== 0) {
    return "tent soak needs the ip command (iproute2): apt-get install iproute2"
  }
  if (spawnSync("nft", ["--version"], { stdio: "ignore" }).status !== 0) {
    return "tent soak needs the nft command (nftables): apt-get install nftables"
  }
  return undefined
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM"
  }
}

/**
 * Removes what an earlier soak left behind: its namespaces and any of its veth ends still in this namespace, when
 * the process that made them is gone. Returns what it removed.
 *
 * @since 0.2.0
 */
export const cleanLeftovers = (): ReadonlyArray<string> => {
  const removed: Array<string> = []
  const text = spawnSync("ip", ["netns", "list"], { encoding: "utf8" }).stdout ?? ""
  for (const line of text.split("\n")) {
    const name = line.split(" ")[0] ?? ""
    const m = /^tent-soak-(\d+)-[ab]$/.exec(name)
    if (m === null || alive(Number(m[1]))) continue
    if (spawnSync("ip", ["netns", "del", name], { stdio: "ignore" }).status === 0) removed.push(name)
  }
  const links = spawnSync("ip", ["-o", "link", "show"], { encoding: "utf8" }).stdout ?? ""
  for (const line of links.split("\n")) {
    const m = /^\d+:\s+(ts(\d+)[ab][01c])[@:]/.exec(line)
    if (m === null || alive(Number(m[2]))) continue
    if (spawnSync("ip", ["link", "del", m[1] as string], { stdio: "ignore" }).status === 0) removed.push(m[1] as string)
  }
  return removed
}

/** The names this process uses for arm `k` (0, 1). */
const names = (k: number): Hosts => {
  const tag = `${process.pid}`
  const side = (s: "a" | "b", host: number): Side => ({
    ns: `${PREFIX}${tag}-${s}${k === 0 ? "" : k}`,
    rails: [`${SUBNET}.0.${host}`, `${SUBNET}.1.${host}`],
    control: `${SUBNET}.2.${host}`,
    links: [`ts${tag}${s}0`, `ts${tag}${s}1`, `ts${tag}${s}c`]
  })
  return { a: side("a", 1), b: side("b", 2) }
}

/**
 * Removes both namespaces (their links and rules go with them). Never fails.
 *
 * @since 0.2.0
 */
export const destroy = (h: Hosts): void => {
  for (const ns of [h.a.ns, h.b.ns]) spawnSync("ip", ["netns", "del", ns], { stdio: "ignore" })
  for (const link of [...h.a.links]) spawnSync("ip", ["link", "del", link], { stdio: "ignore" })
}

/**
 * Builds the two hosts (removed when the scope closes, whatever happened).
 *
 * @since 0.2.0
 */
export const make = (k = 0): Effect.Effect<Hosts, HostFailure, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const h = names(k)
      destroy(h)
      return Effect.gen(function* () {
        yield* tryRun("ip", ["netns", "add", h.a.ns])
        yield* tryRun("ip", ["netns", "add", h.b.ns])
        for (const ns of [h.a.ns, h.b.ns]) yield* tryRun("ip", ["-n", ns, "link", "set", "lo", "up"])
        for (let i = 0; i < 3; i++) {
          const la = h.a.links[i] as string
          const lb = h.b.links[i] as string
          yield* tryRun("ip", ["link", "add", la, "type", "veth", "peer", "name", lb])
          yield* tryRun("ip", ["link", "set", la, "netns", h.a.ns])
          yield* tryRun("ip", ["link", "set", lb, "netns", h.b.ns])
          const addr = (s: Side) => (i === 2 ? s.control : (s.rails[i] as string))
          yield* tryRun("ip", ["-n", h.a.ns, "addr", "add", `${addr(h.a)}/24`, "dev", la])
          yield* tryRun("ip", ["-n", h.b.ns, "addr", "add", `${addr(h.b)}/24`, "dev", lb])
          yield* tryRun("ip", ["-n", h.a.ns, "link", "set", la, "up"])
          yield* tryRun("ip", ["-n", h.b.ns, "link", "set", lb, "up"])
        }
        return h
      }).pipe(Effect.tapError(() => Effect.sync(() => destroy(h))))
    }),
    (h) => Effect.sync(() => destroy(h))
  )

const linkOf = (s: Side, link: Link): string => (link === "control" ? s.links[2] : s.links[link])

/**
 * Sets the receiver host's end of `link` down or up (its peer then has no carrier: nothing crosses the link).
 *
 * @since 0.2.0
 */
export const setLink = (h: Hosts, link: Link, up: boolean): Effect.Effect<void, HostFailure> =>
  tryRun("ip", ["-n", h.b.ns, "link", "set", linkOf(h.b, link), up ? "up" : "down"])

const TABLE = "tent_soak"

/**
 * Drops `percent` % of the packets, at random (nftables `numgen random`), in and out of the receiver host's end of
 * rail `rail`; `percent` 0 removes the rule.
 *
 * @since 0.2.0
 */
export const setDrop = (h: Hosts, rail: 0 | 1, percent: number): Effect.Effect<void, HostFailure> => {
  const nft = (...args: ReadonlyArray<string>) => tryRun("ip", ["netns", "exec", h.b.ns, "nft", ...args])
  if (percent <= 0) return Effect.ignore(nft("delete", "table", "inet", TABLE))
  const dev = h.b.links[rail]
  const p = String(Math.round(percent))
  return Effect.gen(function* () {
    yield* Effect.ignore(nft("delete", "table", "inet", TABLE))
    yield* nft("add", "table", "inet", TABLE)
    yield* nft("add", "chain", "inet", TABLE, "in", "{ type filter hook input priority 0; }")
    yield* nft("add", "chain", "inet", TABLE, "out", "{ type filter hook output priority 0; }")
    yield* nft("add", "rule", "inet", TABLE, "in", "iifname", dev, "numgen", "random", "mod", "100", "<", p, "drop")
    yield* nft("add", "rule", "inet", TABLE, "out", "oifname", dev, "numgen", "random", "mod", "100", "<", p, "drop")
  })
}

/**
 * The soak's namespaces that exist now (for a check that none is left).
 *
 * @since 0.2.0
 */
export const present = (): ReadonlyArray<string> =>
  (spawnSync("ip", ["netns", "list"], { encoding: "utf8" }).stdout ?? "")
    .split("\n")
    .map((l) => l.split(" ")[0] ?? "")
    .filter((n) => n.startsWith(PREFIX))
