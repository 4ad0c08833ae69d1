/**
 * What a SoftVerbs device is configured with and reports: where it listens, its socket buffers, how late a WRITE's
 * payload may land, the faults it can inject (and how a configuration or a fault setting is checked), and its counters.
 */
import { InvalidFaults } from "../Errors.js"
import type { QpCounters } from "./SoftQp.js"

/** Where a SoftVerbs device listens. */
export interface SoftDeviceConfig {
  readonly name: string
  /** IPv4 address to bind (default 127.0.0.1). */
  readonly host?: string
  /** UDP port (default 0: any free port). */
  readonly port?: number
  /**
   * SO_RCVBUF and SO_SNDBUF to ask for, in bytes (default 4 MiB). The kernel may grant less (`net.core.rmem_max`,
   * `wmem_max`); the window of every QP is sized to what it granted.
   */
  readonly socketBufferBytes?: number
  /**
   * Milliseconds between a responder accepting (and acknowledging) an RDMA WRITE or WRITE_WITH_IMM packet and its
   * payload landing in the target MR: a whole number from 0 to 1000 (`MAX_PLACEMENT_DELAY_MS`), default 0 (placed as
   * it arrives). It models a NIC whose ACK means it has the data, not that host memory shows it (PCIe posted writes).
   * Order within a QP holds (a later receive completion or READ of the QP waits for the earlier payloads); across QPs
   * nothing does, so a SEND on another QP can complete before an earlier WRITE's bytes are visible. See
   * `qp/Placement.ts`.
   */
  readonly placementDelayMs?: number
}

/** The longest `placementDelayMs` a device accepts, in milliseconds. */
export const MAX_PLACEMENT_DELAY_MS = 1000

/**
 * Checks a device's configuration: what is wrong with it, naming the device and the key, or undefined. (Its name is
 * checked for uniqueness by the provider, which sees every device.)
 */
export const checkDeviceConfig = (config: SoftDeviceConfig): string | undefined => {
  const bytes = config.socketBufferBytes
  if (bytes !== undefined && !(Number.isSafeInteger(bytes) && bytes > 0)) {
    return `device "${config.name}": socketBufferBytes must be a positive integer of bytes, got ${bytes}`
  }
  const delay = config.placementDelayMs
  if (delay !== undefined && !(Number.isInteger(delay) && delay >= 0 && delay <= MAX_PLACEMENT_DELAY_MS)) {
    return (
      `device "${config.name}": placementDelayMs must be a whole number of milliseconds from 0 ` +
      `to ${MAX_PLACEMENT_DELAY_MS}, got ${String(delay)}`
    )
  }
  return undefined
}

/** The socket buffers of a device: what was asked, and what the kernel granted (as Linux reports it: doubled). */
export interface SocketBuffers {
  readonly asked: number
  readonly recv: number
  readonly send: number
}

/** Packet loss and delay to inject, device-wide or towards/from one peer device (`host:port`). */
export interface SoftFaults {
  /** Fraction of received datagrams dropped (0..1). */
  readonly dropIn?: number
  /** Fraction of sent datagrams dropped (0..1). */
  readonly dropOut?: number
  /** Milliseconds every sent datagram is held back. */
  readonly delayMs?: number
}

/** Counters of a SoftVerbs device. */
export interface SoftCounters extends QpCounters {
  rxPackets: number
  txPackets: number
  malformed: number
  malformedShort: number
  malformedVersion: number
  malformedOp: number
  malformedLength: number
  unknownQpn: number
  droppedFault: number
  droppedPortDown: number
  handlerErrors: number
  sendErrors: number
  /** Packets built in a fresh buffer because their send slot was still queued for the kernel. */
  sendSlotsBusy: number
}

/** A device's counters, all zero. */
export const newCounters = (): SoftCounters => ({
  rxPackets: 0,
  txPackets: 0,
  malformed: 0,
  malformedShort: 0,
  malformedVersion: 0,
  malformedOp: 0,
  malformedLength: 0,
  unknownQpn: 0,
  droppedFault: 0,
  droppedPortDown: 0,
  handlerErrors: 0,
  sendErrors: 0,
  sendSlotsBusy: 0,
  retransmits: 0,
  rnrNaksSent: 0,
  rnrRetries: 0,
  seqNaksSent: 0,
  readRerequests: 0,
  accessNaksSent: 0,
  placementsDelayed: 0,
  duplicates: 0,
  droppedState: 0,
  foreignSource: 0,
  badToken: 0,
  protocolErrors: 0
})

/** 4 MiB socket buffers asked for by default (the kernel reports double); the window per QP is sized to what is granted. */
export const SOCKET_BUFFER = 4 * 1024 * 1024

/**
 * Bytes of socket buffer (as Linux reports it, doubled) one datagram of `bytes` is charged for: the kernel counts the
 * packet's whole allocation. Measured on loopback: 832 for 112 B, 2.3 KiB for 1 KiB, 8.5 KiB for 4 KiB datagrams;
 * this bounds them from above.
 */
export const datagramCost = (bytes: number): number => 2 * (bytes + 384)

/** The longest delay `setTimeout` honours (a longer one fires after 1 ms). */
const MAX_DELAY_MS = 2 ** 31 - 1

/** Checks a fault setting (and the peer it is for): the first thing wrong with it, or undefined. */
export const checkFaults = (faults: unknown, peer?: unknown): InvalidFaults | undefined => {
  if (typeof faults !== "object" || faults === null || Array.isArray(faults)) {
    return new InvalidFaults({ field: "faults", message: `faults must be an object, got ${String(faults)}` })
  }
  for (const [field, value] of Object.entries(faults)) {
    if (field !== "dropIn" && field !== "dropOut" && field !== "delayMs") {
      return new InvalidFaults({ field, message: `unknown fault "${field}" (known: dropIn, dropOut, delayMs)` })
    }
    if (value === undefined) continue
    const max = field === "delayMs" ? MAX_DELAY_MS : 1
    if (typeof value !== "number" || !(value >= 0 && value <= max)) {
      const what = field === "delayMs" ? `milliseconds in 0..${MAX_DELAY_MS}` : "a fraction in 0..1"
      return new InvalidFaults({ field, message: `fault ${field} must be ${what}, got ${String(value)}` })
    }
  }
  if (peer !== undefined) {
    const m = typeof peer === "string" ? /^(.+):(\d{1,5})$/.exec(peer) : null
    if (m === null || Number(m[2]) < 1 || Number(m[2]) > 65535) {
      return new InvalidFaults({ field: "peer", message: `peer must be "host:port" of a device, got ${String(peer)}` })
    }
  }
  return undefined
}
