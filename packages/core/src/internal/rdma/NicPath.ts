/**
 * Names and attributes shared by the RDMA files: NIC paths (`"<server>@<nic>"`, TENT `MakeNicPath`), GIDs as TENT's
 * bootstrap carries them, and the data QPs' RC attributes from `EndPointParams` (TENT `params.h`).
 */
import { AccessFlags, Mtu, QpAttrMask, QpState, type QueuePair, Rc } from "@tent/verbs"
import { Effect } from "effect"
import type { EndpointParams } from "../../EngineConfig.js"

/** `"<server>@<nic>"` (TENT `MakeNicPath`). */
export const nicPath = (server: string, nic: string): string => `${server}@${nic}`

/** Splits a NIC path at its last `@`. */
export const parseNicPath = (path: string): { readonly server: string; readonly nic: string } | undefined => {
  const at = path.lastIndexOf("@")
  return at <= 0 || at === path.length - 1 ? undefined : { server: path.slice(0, at), nic: path.slice(at + 1) }
}

/** A GID as TENT's bootstrap carries it: `"fe:80:…"`, 16 bytes. */
export const gidText = (gid: Uint8Array): string => Array.from(gid, (b) => b.toString(16).padStart(2, "0")).join(":")

/** Parses {@link gidText}; `undefined` if it is not 16 hex bytes. */
export const parseGidText = (text: string): Uint8Array | undefined => {
  const parts = text.split(":")
  if (parts.length !== 16 || !parts.every((p) => /^[0-9a-fA-F]{2}$/.test(p))) return undefined
  return Uint8Array.from(parts, (p) => Number.parseInt(p, 16))
}

/** `path_mtu` bytes → `ibv_mtu`, clamped to the port's active MTU. */
export const clampMtu = (bytes: number, active: Mtu): Mtu => {
  const wanted =
    bytes >= 4096 ? Mtu.MTU_4096 : bytes >= 2048 ? Mtu.MTU_2048 : bytes >= 1024 ? Mtu.MTU_1024 : Mtu.MTU_512
  return (wanted < active ? wanted : active) as Mtu
}

/**
 * The data QPs' RC attributes from `EndPointParams` (traffic class and service level included), for a device with
 * `activeMtu` and `sgidIndex`, fitted to its port and limits when known (`Rc.clampParams`: the port's number and link
 * layer, the READ depths the device allows).
 */
export const dataQpParams = (
  p: EndpointParams,
  device: { readonly activeMtu: Mtu; readonly sgidIndex: number; readonly limits?: Rc.Limits | undefined }
): Rc.RcParams => {
  const params: Rc.RcParams = {
    ...Rc.defaultParams,
    pkeyIndex: p.pkeyIndex,
    pathMtu: clampMtu(p.pathMtu, device.activeMtu),
    minRnrTimer: p.minRnrTimer,
    timeout: p.sendTimeout,
    retryCnt: p.sendRetryCount,
    rnrRetry: p.sendRnrCount,
    maxRdAtomic: p.maxRdAtomic,
    maxDestRdAtomic: p.maxDestRdAtomic,
    accessFlags: AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ,
    sgidIndex: device.sgidIndex,
    hopLimit: p.hopLimit,
    trafficClass: p.trafficClass,
    serviceLevel: p.serviceLevel
  }
  return device.limits === undefined ? params : Rc.clampParams(params, device.limits)
}

/**
 * The server part of this engine's NIC paths (TENT `rdma_server_name_`, `rdma_transport.cpp:328-343`): with
 * `transports/rdma/bind_address` set, that host and the port of the segment name (`host:port`; else
 * `rpc_server_port`); otherwise the segment name itself.
 */
export const rdmaServerName = (bindAddress: string, segmentName: string, rpcServerPort: number): string => {
  if (bindAddress === "") return segmentName
  const port = /:(\d+)$/.exec(segmentName)?.[1] ?? String(rpcServerPort)
  return `${bindAddress}:${port}`
}

/**
 * The notify QP's attributes from the `NotifyQpParams` seam, on the data QPs' port, traffic class and service level
 * (TENT's `setupNotifyQpConnection` takes the endpoint's), fitted to the device.
 */
export const notifyQpParams = (
  seam: { readonly params: (endpoint: EndpointParams, activeMtu: Mtu, sgidIndex: number) => Rc.RcParams },
  p: EndpointParams,
  device: { readonly activeMtu: Mtu; readonly sgidIndex: number; readonly limits?: Rc.Limits | undefined }
): Rc.RcParams => {
  const params: Rc.RcParams = {
    ...seam.params(p, device.activeMtu, device.sgidIndex),
    trafficClass: p.trafficClass,
    serviceLevel: p.serviceLevel
  }
  return device.limits === undefined ? params : Rc.clampParams(params, device.limits)
}

/** Moves `qp` to ERR (its outstanding work flushes), unless it is there or in RESET already. */
export const toErr = (qp: QueuePair): void => {
  if (qp.state === QpState.ERR || qp.state === QpState.RESET) return
  // A QP's modify is synchronous in both providers; the Effect is run where retirement runs (any fiber, under lock).
  Effect.runSync(Effect.ignore(qp.modifyQp({ qpState: QpState.ERR }, QpAttrMask.STATE)))
}
