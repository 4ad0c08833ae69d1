/**
 * The fuzzer's deterministic random numbers: splitmix32 over a 32-bit state. The same seed gives the same inputs,
 * so a run that found something is replayed with `tent fuzz --seed N --target T`. Each target draws from a stream of
 * its own ({@link Prng.forTarget}), so running one target alone sees the inputs it saw in a run of all of them.
 */

/** A splitmix32 generator. */
export class Prng {
  private state: number

  constructor(seed: number) {
    this.state = seed >>> 0
  }

  /** The generator of `target` under `seed`: the seed mixed with the target's name. */
  static forTarget(seed: number, target: string): Prng {
    let h = 0x811c9dc5
    for (let i = 0; i < target.length; i++) h = Math.imul(h ^ target.charCodeAt(i), 0x01000193)
    return new Prng((seed ^ h) >>> 0)
  }

  /** The next 32 random bits, as an unsigned number. */
  u32(): number {
    this.state = (this.state + 0x9e3779b9) | 0
    let z = this.state
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
    return (z ^ (z >>> 16)) >>> 0
  }

  /** An integer in `[0, n)` (n ≤ 2^32). */
  int(n: number): number {
    return Math.floor((this.u32() / 0x1_0000_0000) * n)
  }

  /** An integer in `[lo, hi]`. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1)
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.u32() / 0x1_0000_0000 < p
  }

  /** One element of a non-empty array. */
  pick<T>(xs: ReadonlyArray<T>): T {
    return xs[this.int(xs.length)] as T
  }

  /** `n` random bytes. */
  bytes(n: number): Buffer {
    const out = Buffer.allocUnsafe(n)
    for (let i = 0; i < n; i += 4) {
      const v = this.u32()
      for (let k = 0; k < 4 && i + k < n; k++) out[i + k] = (v >>> (8 * k)) & 0xff
    }
    return out
  }

  /** A u64 as a bigint. */
  u64(): bigint {
    return (BigInt(this.u32()) << 32n) | BigInt(this.u32())
  }
}

/** A seed for a run that was given none: from the clock and `Math.random`, printed so that it can be replayed. */
export const freshSeed = (): number => ((Date.now() ^ Math.floor(Math.random() * 0x7fffffff)) >>> 0) & 0x7fffffff
