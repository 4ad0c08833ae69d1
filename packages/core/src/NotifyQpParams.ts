/**
 * Seam of RFC PR 2 ("notify QP attributes from `EndPointParams`"): the RC attributes the notify QP is brought up
 * with (RESET → INIT → RTR → RTS).
 *
 * TENT `main` ({@link legacy}) hard-codes them (endpoint.cpp:1025-1110): path MTU 4096 (not clamped to the port),
 * min_rnr_timer 0x12 (5.12 ms), timeout 0x12 (1.07 s per attempt), retry_cnt 7, rnr_retry 7, max_rd_atomic 1,
 * max_dest_rd_atomic 1, hop limit 255, INIT access `REMOTE_WRITE`. The data QPs take theirs from `EndPointParams`
 * (min_rnr_timer 12 = 0.64 ms, timeout 14 = 67 ms). PR 2's Layer derives the notify QP's from `EndPointParams` with
 * rnr_retry pinned to 7: the RFC measured a 2000-notification burst's p50 going from 15.3 ms to 1.6 ms.
 *
 * @since 0.1.0
 */
import { AccessFlags, Mtu, Rc } from "@tent/verbs"
import { Context, Layer } from "effect"
import type { EndpointParams } from "./EngineConfig.js"
import { clampMtu } from "./internal/rdma/NicPath.js"

/**
 * Chooses the notify QP's RC attributes.
 *
 * @since 0.1.0
 */
export interface NotifyQpParamsShape {
  /** The attributes, given the data QPs' `EndPointParams`, the port's active MTU (`ibv_mtu`) and the GID index. */
  readonly params: (endpoint: EndpointParams, activeMtu: Mtu, sgidIndex: number) => Rc.RcParams
}

/**
 * The notify QP attribute policy.
 *
 * @since 0.1.0
 */
export class NotifyQpParams extends Context.Tag("@tent/core/NotifyQpParams")<NotifyQpParams, NotifyQpParamsShape>() {}

/**
 * TENT `main`'s hard-coded notify QP attributes.
 *
 * @since 0.1.0
 */
export const legacy: NotifyQpParamsShape = {
  params: (_endpoint, _activeMtu, sgidIndex) => ({
    ...Rc.defaultParams,
    pathMtu: Mtu.MTU_4096,
    minRnrTimer: 0x12,
    timeout: 0x12,
    retryCnt: 7,
    rnrRetry: 7,
    maxRdAtomic: 1,
    maxDestRdAtomic: 1,
    accessFlags: AccessFlags.REMOTE_WRITE,
    sgidIndex,
    hopLimit: 255
  })
}

/**
 * {@link legacy} as a Layer.
 *
 * @since 0.1.0
 */
export const layerLegacy: Layer.Layer<NotifyQpParams> = Layer.succeed(NotifyQpParams, legacy)

/**
 * RFC PR 2: `path_mtu` (clamped to the port's active MTU), `min_rnr_timer`, `timeout` and `retry_cnt` from the data
 * QPs' `EndPointParams`, so both QPs of an endpoint run on one retry budget; `rnr_retry` pinned to 7 (an RNR NAK is
 * flow control on the endpoint's only SEND/RECV QP and must never retire it). The rest as {@link legacy}.
 *
 * @since 0.1.0
 */
export const fromEndpoint: NotifyQpParamsShape = {
  params: (endpoint, activeMtu, sgidIndex) => ({
    ...legacy.params(endpoint, activeMtu, sgidIndex),
    pathMtu: clampMtu(endpoint.pathMtu, activeMtu),
    minRnrTimer: endpoint.minRnrTimer,
    timeout: endpoint.sendTimeout,
    retryCnt: endpoint.sendRetryCount,
    rnrRetry: 7
  })
}

/**
 * {@link fromEndpoint} as a Layer (`Series.ParamsFromEndpoint`).
 *
 * @since 0.1.0
 */
export const layer: Layer.Layer<NotifyQpParams> = Layer.succeed(NotifyQpParams, fromEndpoint)
