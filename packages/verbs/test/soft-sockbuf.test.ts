import type * as dgram from "node:dgram"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Logger, LogLevel } from "effect"
import { Errno, Rc, SoftVerbs, WcStatus, WrOpcode } from "../src/index.js"
import type { SoftDevice } from "../src/soft/SoftDevice.js"
import type { SoftQp } from "../src/soft/SoftQp.js"
import { openSide, pollN, sendWr } from "./support.js"

const socketOf = (device: SoftDevice): dgram.Socket => (device as unknown as { socket: dgram.Socket }).socket

/** Bytes of (doubled) socket buffer a datagram of `bytes` is charged for, as the provider reckons it. */
const cost = (bytes: number) => 2 * (bytes + 384)

describe("SoftVerbs socket buffers (the window follows what the kernel granted)", () => {
  it.scopedLive(
    "asked for 64 KiB, the window is what the granted buffers hold (14 packets of 4 KiB), logged; 200 WRITEs of 4 KiB lose nothing",
    () =>
      Effect.gen(function* () {
        const lines: Array<string> = []
        const capture = Logger.make(({ logLevel, message }) => {
          lines.push(`${logLevel.label} ${Array.isArray(message) ? message.join(" ") : String(message)}`)
        })
        const { control, verbs } = yield* SoftVerbs.make({
          devices: [
            { name: "a", socketBufferBytes: 65536 },
            { name: "b", socketBufferBytes: 65536 }
          ]
        }).pipe(
          Logger.withMinimumLogLevel(LogLevel.Debug),
          Effect.provide(Logger.replace(Logger.defaultLogger, capture))
        )
        const a = yield* openSide(verbs, control, "a", { bufSize: 1 << 20 })
        const b = yield* openSide(verbs, control, "b", { bufSize: 1 << 20 })
        // timeout 18 (1.07 s): only a real loss, not a starved process, makes this requester retransmit.
        const params = { ...Rc.defaultParams, timeout: 18, retryCnt: 7 }
        const psnA = Rc.randomPsn()
        const psnB = Rc.randomPsn()
        yield* Rc.connect(a.qp, psnA, { gid: yield* b.ctx.queryGid(1, 0), qpNum: b.qp.qpNum, psn: psnB }, params)
        yield* Rc.connect(b.qp, psnB, { gid: yield* a.ctx.queryGid(1, 0), qpNum: a.qp.qpNum, psn: psnA }, params)

        // What the kernel granted, read from the sockets themselves (Linux reports twice what was asked).
        const recv = socketOf(a.device).getRecvBufferSize()
        const send = socketOf(a.device).getSendBufferSize()
        expect(a.device.socketBuffers).toEqual({ asked: 65536, recv, send })
        const window = Math.floor(Math.min(recv, send) / cost(48 + 4096))
        expect(window).toBeLessThan(512)
        expect(window).toBeGreaterThan(0)
        expect((a.qp as SoftQp).maxWindow).toBe(window)
        const logged = lines.filter((l) => l.includes('SoftVerbs device "a"'))
        expect(logged).toHaveLength(1)
        expect(logged[0]).toContain(`window ${window} packets`)
        expect(logged[0]).toContain(`SO_RCVBUF ${recv}`)

        // 200 WRITEs of one full packet each, posted at once: the window keeps what is in flight inside b's receive
        // buffer, so the kernel drops nothing and nothing is retransmitted.
        const n = 200
        for (let i = 0; i < n * 4096; i += 4) a.buf.writeUInt32LE((i * 2246822519) >>> 0, i)
        for (let i = 0; i < n; i++) {
          const rc = a.qp.postSend(
            sendWr(a, i, i * 4096, 4096, {
              opcode: WrOpcode.RDMA_WRITE,
              sendFlags: i === n - 1 ? 2 : 0,
              remoteAddr: b.mr.addr + i * 4096,
              rkey: b.mr.rkey
            })
          )
          expect(rc).toBe(0)
        }
        const wcs = yield* pollN(a.cq, 1, 30_000)
        console.log(
          `granted SO_RCVBUF ${recv} B, SO_SNDBUF ${send} B: window ${window}; ${n} WRITEs: retransmits ${a.device.counters.retransmits}, b received ${b.device.counters.rxPackets} datagrams`
        )
        expect(wcs.map((w) => w.status)).toEqual([WcStatus.SUCCESS])
        expect(b.buf.subarray(0, n * 4096).equals(a.buf.subarray(0, n * 4096))).toBe(true)
        expect(a.device.counters.retransmits).toBe(0)
      })
  )

  it.scopedLive("a socket buffer size that is not a positive integer is refused, naming the device", () =>
    Effect.gen(function* () {
      for (const socketBufferBytes of [0, -1, 1.5, Number.NaN]) {
        const err = yield* Effect.flip(SoftVerbs.make({ devices: [{ name: "x", socketBufferBytes }] }))
        expect(err).toMatchObject({ _tag: "RdmaError", errno: Errno.EINVAL })
        expect(err.message).toContain('"x"')
        expect(err.message).toContain("socketBufferBytes")
      }
    })
  )
})
