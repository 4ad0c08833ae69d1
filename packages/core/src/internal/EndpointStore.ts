/**
 * `EndpointStore`: a device's endpoints by peer NIC path, as TENT's `SIEVEEndpointStore` (the RDMA context's store)
 * and `FIFOEndpointStore`. At capacity (`transports/rdma/endpoint/endpoint_store_cap`, default 65 536) inserting a
 * new endpoint evicts one; the evicted endpoint is retired (TENT `evictOne` → `beginDestroy`) and waits in the
 * reclaim list with the endpoints removed after a failure, until `reclaim` finds it quiescent and destroys it.
 *
 * SIEVE keeps the endpoints in insertion order with a "visited" bit each, set by every lookup that finds a live
 * endpoint. To evict, a hand walks from the oldest endpoint towards the newest (wrapping round), clearing visited bits,
 * and evicts the first endpoint it finds unvisited; it stays where it stopped for the next eviction. New endpoints go
 * in at the head, so an endpoint in use survives the arrival of many one-off peers, which FIFO would evict first.
 *
 * Lookup, insertion and eviction are plain synchronous code; only `reclaim` and `clear`, which take endpoint locks,
 * are Effects.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { RdmaEndpoint } from "./rdma/RdmaEndpoint.js"

/** Which endpoint an insertion at capacity evicts: SIEVE (TENT's RDMA context) or the oldest (FIFO). */
export type EvictionPolicy = "sieve" | "fifo"

/** Options of an {@link EndpointStore}. */
export interface EndpointStoreOptions {
  /** Default `"sieve"`, as TENT's RDMA context. */
  readonly policy?: EvictionPolicy
}

/** One endpoint in the eviction queue; `newer` points towards the head, `older` towards the tail. */
interface Entry {
  readonly key: string
  readonly ep: RdmaEndpoint
  visited: boolean
  newer: Entry | undefined
  older: Entry | undefined
}

const retiring = (ep: RdmaEndpoint): boolean => ep.status === "DESTROYING" || ep.status === "DESTROYED"

/**
 * A device's endpoints. Keys are the endpoints' peer NIC paths (`ep.peerNicPath`), as in TENT, where the store is
 * keyed by the endpoint's name.
 */
export class EndpointStore {
  /** The live endpoints by peer NIC path (read-only for callers: change it through the store). */
  readonly active = new Map<string, RdmaEndpoint>()
  /** Retired endpoints not yet destroyed (TENT `waiting_list_`). */
  readonly waiting = new Set<RdmaEndpoint>()
  /** Endpoints evicted for capacity so far. */
  evictions = 0
  /** Called each time an endpoint joins `waiting` (the transport's reclaim pass sleeps until then). */
  onWaiting: () => void = () => {}
  readonly policy: EvictionPolicy
  private readonly entries = new Map<string, Entry>()
  /** Newest endpoint. */
  private head: Entry | undefined
  /** Oldest endpoint. */
  private tail: Entry | undefined
  /** Where SIEVE's next eviction starts looking; `undefined` means the tail. */
  private hand: Entry | undefined

  constructor(
    readonly capacity: number,
    options: EndpointStoreOptions = {}
  ) {
    this.policy = options.policy ?? "sieve"
  }

  /** Live endpoints. */
  get size(): number {
    return this.entries.size
  }

  /**
   * The endpoint stored for `key`, marking it visited as TENT's `SIEVEEndpointStore::get` does (a lookup through
   * `active` does not count as a use for SIEVE). Plain synchronous code, for the data path.
   */
  get(key: string): RdmaEndpoint | undefined {
    const entry = this.entries.get(key)
    if (entry === undefined) return undefined
    entry.visited = true
    return entry.ep
  }

  /**
   * The live endpoint for `key` (marking it visited), or a new one from `make` inserted at the head. An endpoint
   * found retiring is moved to the reclaim list and replaced (endpoints are never reused); at capacity, one endpoint
   * is evicted first.
   */
  getOrInsert(key: string, make: () => RdmaEndpoint): RdmaEndpoint {
    const found = this.entries.get(key)
    if (found !== undefined) {
      if (!retiring(found.ep)) {
        found.visited = true
        return found.ep
      }
      this.remove(found.ep)
    }
    const ep = make()
    while (this.entries.size >= this.capacity && this.tail !== undefined) this.evictOne()
    const entry: Entry = { key, ep, visited: false, newer: undefined, older: this.head }
    if (this.head !== undefined) this.head.newer = entry
    this.head = entry
    if (this.tail === undefined) this.tail = entry
    this.entries.set(key, entry)
    this.active.set(key, ep)
    return ep
  }

  /**
   * TENT `remove`: takes `ep` out of the live endpoints, retires it if nobody did yet, and hands it to `reclaim`.
   * From any fiber; retiring an endpoint that is already retiring does nothing.
   */
  remove(ep: RdmaEndpoint): void {
    const entry = this.entries.get(ep.peerNicPath)
    if (entry !== undefined && entry.ep === ep) this.unlink(entry)
    ep.retireNoLock()
    this.waiting.add(ep)
    this.onWaiting()
  }

  /** TENT `evictOne`: picks a victim by the policy, retires it and moves it to the reclaim list. */
  private evictOne(): void {
    let victim: Entry
    if (this.policy === "fifo") {
      victim = this.tail as Entry
    } else {
      victim = this.hand ?? (this.tail as Entry)
      while (victim.visited) {
        victim.visited = false
        victim = victim.newer ?? (this.tail as Entry)
      }
      // The hand rests on the next newer endpoint (`unlink` keeps it there); past the head it restarts at the tail.
      this.hand = victim
    }
    this.unlink(victim)
    this.evictions++
    victim.ep.retireNoLock("evicted")
    this.waiting.add(victim.ep)
    this.onWaiting()
  }

  private unlink(entry: Entry): void {
    if (this.hand === entry) this.hand = entry.newer
    if (entry.newer !== undefined) entry.newer.older = entry.older
    else this.head = entry.older
    if (entry.older !== undefined) entry.older.newer = entry.newer
    else this.tail = entry.newer
    entry.newer = undefined
    entry.older = undefined
    this.entries.delete(entry.key)
    if (this.active.get(entry.key) === entry.ep) this.active.delete(entry.key)
  }

  /**
   * TENT `reclaim` (the monitor's ≥ 1 s cadence): `finishDestroy` every waiting endpoint and forget those destroyed.
   * Endpoints still busy (data work requests outstanding, younger than the destroy timeout) wait for the next pass.
   */
  readonly reclaim: Effect.Effect<void> = Effect.suspend(() => {
    if (this.waiting.size === 0) return Effect.void
    return Effect.forEach(
      Array.from(this.waiting),
      (ep) =>
        Effect.map(ep.finishDestroy, (done) => {
          if (done) this.waiting.delete(ep)
        }),
      { discard: true }
    )
  })

  /**
   * TENT `clear` (device shutdown): empties the store at once, then deconstructs every endpoint it held, live or
   * waiting, so nothing touches the device after its CQs and protection domain are gone.
   */
  readonly clear: Effect.Effect<void> = Effect.suspend(() => {
    const all = [...this.active.values(), ...this.waiting]
    this.entries.clear()
    this.active.clear()
    this.waiting.clear()
    this.head = undefined
    this.tail = undefined
    this.hand = undefined
    return Effect.forEach(all, (ep) => ep.deconstruct, { discard: true })
  })
}
