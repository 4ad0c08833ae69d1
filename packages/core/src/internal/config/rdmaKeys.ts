/**
 * The RDMA keys whose values need more than a range check: TENT's named QP pools and the lane count that
 * `num_lanes` and its legacy name `endpoint/qp_mul_factor` settle between them.
 */
import type { ConfigError } from "effect"
import { Either, Option } from "effect"
import { invalid } from "./KeySpec.js"

/** One named QP pool as `EngineConfig.QpPool` declares it. */
interface QpPool {
  readonly name: string
  readonly numQp: number
  readonly serviceLevel: number
  readonly trafficClass: number
}

const POOLS = "transports/rdma/endpoint/qp_pools"

/** Parses `qp_pools`: an array of `{name, num_qp > 0, service_level?, traffic_class?}` (TENT skips bad entries). */
export const parsePools = (text: string): Either.Either<ReadonlyArray<QpPool>, ConfigError.ConfigError> => {
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch {
    return Either.left(invalid(POOLS, `not JSON: ${text}`))
  }
  if (!Array.isArray(raw)) return Either.left(invalid(POOLS, `Expected an array of pools, got ${text}`))
  const pools: Array<QpPool> = []
  const intIn = (v: unknown, lo: number, hi: number) =>
    v === undefined || (Number.isInteger(v) && (v as number) >= lo && (v as number) <= hi)
  for (const p of raw as Array<Record<string, unknown>>) {
    const ok =
      p !== null &&
      typeof p === "object" &&
      typeof p.name === "string" &&
      p.name !== "" &&
      Number.isInteger(p.num_qp) &&
      (p.num_qp as number) > 0 &&
      intIn(p.service_level, -1, 15) &&
      intIn(p.traffic_class, -1, 255)
    if (!ok) {
      return Either.left(
        invalid(
          POOLS,
          `each pool is {name, num_qp > 0, service_level -1..15, traffic_class -1..255}, got ${JSON.stringify(p)}`
        )
      )
    }
    pools.push({
      name: p.name as string,
      numQp: p.num_qp as number,
      serviceLevel: (p.service_level as number | undefined) ?? -1,
      trafficClass: (p.traffic_class as number | undefined) ?? -1
    })
  }
  return Either.right(pools)
}

/** `num_lanes` when set, else `qp_mul_factor` when set (not -1), else `num_lanes`' default; both set and different fails. */
export const settleLanes = ({
  lanes,
  lanesSet,
  qpMulFactor
}: {
  readonly lanes: number
  readonly lanesSet: Option.Option<number>
  readonly qpMulFactor: number
}): Either.Either<number, ConfigError.ConfigError> => {
  if (qpMulFactor === -1) return Either.right(lanes)
  if (Option.isSome(lanesSet) && lanes !== qpMulFactor) {
    return Either.left(
      invalid(
        "transports/rdma/endpoint/qp_mul_factor",
        `${qpMulFactor} but transports/rdma/num_lanes is ${lanes}: the lane count must agree (as TENT)`
      )
    )
  }
  return Either.right(qpMulFactor)
}
