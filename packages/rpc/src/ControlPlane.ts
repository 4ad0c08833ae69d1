/**
 * The control-plane RPCs as an `@effect/rpc` group (`Bootstrap`, `Notify`, `GetSegmentDesc`, `Probe`), TENT's data
 * RPCs (`SendData`, `RecvData`) in a group of their own, and the types the agent and the server derive from them.
 *
 * @since 0.1.0
 */
import * as Rpc from "@effect/rpc/Rpc"
import * as RpcGroup from "@effect/rpc/RpcGroup"
import { Schema } from "effect"
import {
  BootstrapRejected,
  DataTooLarge,
  InvalidEntry,
  NotificationRefused,
  NotificationTooLarge,
  SegmentRangeInvalid
} from "./Errors.js"
import { BootstrapDesc, Notification, SegmentDesc } from "./Models.js"

/**
 * Exchange endpoint descriptors: the initiator sends its own, the peer replies with the one it accepted.
 *
 * @since 0.1.0
 */
export const Bootstrap = Rpc.make("Bootstrap", {
  payload: BootstrapDesc,
  success: BootstrapDesc,
  error: BootstrapRejected
})

/**
 * Deliver a notification over the control plane (the fallback path; bytes, not JSON).
 *
 * @since 0.1.0
 */
export const Notify = Rpc.make("Notify", {
  payload: Notification,
  error: Schema.Union(NotificationTooLarge, NotificationRefused)
})

/**
 * Ask a peer for the descriptor of the segment it serves (the peer registry's lookup).
 *
 * @since 0.1.0
 */
export const GetSegmentDesc = Rpc.make("GetSegmentDesc", {
  success: SegmentDesc,
  error: InvalidEntry
})

/**
 * Is the peer's control plane answering? Empty request, empty reply.
 *
 * @since 0.1.0
 */
export const Probe = Rpc.make("Probe", { success: Schema.Void })

/**
 * The control-plane group. Handlers come from whoever owns the engine: `ControlPlane.toLayer({ ... })`.
 *
 * @since 0.1.0
 */
export class ControlPlane extends RpcGroup.make(Bootstrap, Notify, GetSegmentDesc, Probe) {}

/**
 * Every RPC of {@link ControlPlane}.
 *
 * @since 0.1.0
 */
export type ControlPlaneRpcs = RpcGroup.Rpcs<typeof ControlPlane>
/**
 * The name of one control-plane RPC: `"Bootstrap" | "Notify" | "GetSegmentDesc" | "Probe"`.
 *
 * @since 0.1.0
 */
export type ControlPlaneTag = ControlPlaneRpcs["_tag"]
/**
 * The RPC named `T`.
 *
 * @since 0.1.0
 */
export type RpcOf<T extends ControlPlaneTag> = Rpc.ExtractTag<ControlPlaneRpcs, T>
/**
 * The payload an RPC takes (`void` for `GetSegmentDesc` and `Probe`).
 *
 * @since 0.1.0
 */
export type PayloadOf<T extends ControlPlaneTag> = Rpc.Payload<RpcOf<T>>
/**
 * What an RPC replies on success.
 *
 * @since 0.1.0
 */
export type SuccessOf<T extends ControlPlaneTag> = Rpc.Success<RpcOf<T>>
/**
 * The typed reply error of an RPC.
 *
 * @since 0.1.0
 */
export type ReplyErrorOf<T extends ControlPlaneTag> = Rpc.Error<RpcOf<T>>
/**
 * What the server needs in context: a handler for every RPC of the group.
 *
 * @since 0.1.0
 */
export type ControlPlaneHandlers = Rpc.ToHandler<ControlPlaneRpcs>

/**
 * TENT's data RPCs (function ids 3 and 4), the TCP transport's data path. They live in a group of their own so the
 * handlers of {@link ControlPlane} stay what they are: the server answers them itself from the memory its owner
 * registered (`Server.make({ memory })`), with bounds checks.
 */

/**
 * Write `data` into the peer's registered memory at `addr` (TENT `SendData`: 16-byte `{addr, len}` + data).
 *
 * @since 0.1.0
 */
export const SendData = Rpc.make("SendData", {
  payload: Schema.Struct({ addr: Schema.Number, data: Schema.Uint8ArrayFromSelf }),
  error: Schema.Union(SegmentRangeInvalid, DataTooLarge)
})

/**
 * Read `length` bytes of the peer's registered memory at `addr` (TENT `RecvData`: 16-byte header, data back).
 *
 * @since 0.1.0
 */
export const RecvData = Rpc.make("RecvData", {
  payload: Schema.Struct({ addr: Schema.Number, length: Schema.Number }),
  success: Schema.Uint8ArrayFromSelf,
  error: Schema.Union(SegmentRangeInvalid, DataTooLarge)
})

/**
 * The data RPCs, `SendData` and `RecvData`.
 *
 * @since 0.1.0
 */
export class DataPlane extends RpcGroup.make(SendData, RecvData) {}

/**
 * The name of one data RPC.
 *
 * @since 0.1.0
 */
export type DataPlaneTag = RpcGroup.Rpcs<typeof DataPlane>["_tag"]
/**
 * The typed reply errors of the data RPCs.
 *
 * @since 0.1.0
 */
export type DataReplyError = SegmentRangeInvalid | DataTooLarge
