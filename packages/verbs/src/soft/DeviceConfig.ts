/**
 * What a SoftVerbs device is configured with and reports: where it listens, its socket buffers, the faults it can
 * inject (and how a fault setting is checked), and its counters.
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
  duplicates: 0,
  droppedState: 0,
  foreignSource: 0,
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
