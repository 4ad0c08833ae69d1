import * as Net from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { DataTooLarge, SegmentRangeInvalid, TransportFailure } from "../src/index.js"
import { Kind } from "../src/internal/frame.js"
import { READY_WITHIN_MS, spawnPeer } from "./fixtures/process.js"
import { besideTimer, makeAgent, startServer, timed } from "./helpers.js"

/** The peer fixture's memory: base address and byte pattern (see fixtures/peer.ts). */
const BASE = 0x10000
const SIZE = 300_000
const pattern = (n: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7 + 3) & 0xff))
const bytes = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff))

// Each test starts a peer process first (up to READY_WITHIN_MS on a loaded machine).
describe("SendData / RecvData against a peer process's registered memory", {
  timeout: READY_WITHIN_MS + 30_000
}, () => {
  it.scopedLive("write then read back moves exactly the bytes asked for, nothing around them", () =>
    Effect.gen(function* () {
      const peer = yield* spawnPeer(["--memory", String(SIZE)])
      const { address } = peer.ready
      const agent = yield* makeAgent({ request_timeout_ms: 5000 })
      const expected = pattern(SIZE)
      expect(Buffer.from(yield* agent.recvData(address, BASE, SIZE))).toEqual(expected)

      const data = bytes(100_003, 5)
      yield* agent.sendData(address, BASE + 17, data)
      data.copy(expected, 17)
      const back = yield* agent.recvData(address, BASE + 17, data.length)
      expect(Buffer.from(back)).toEqual(data)
      // the last byte of the region, and an empty write at its end
      yield* agent.sendData(address, BASE + SIZE - 1, Buffer.from([0xab]))
      expected[SIZE - 1] = 0xab
      yield* agent.sendData(address, BASE + SIZE, Buffer.alloc(0))
      expect(Buffer.from(yield* agent.recvData(address, BASE, SIZE))).toEqual(expected)
    })
  )

  it.scopedLive("out-of-range and unregistered ranges are typed refusals and leave the memory untouched", () =>
    Effect.gen(function* () {
      const peer = yield* spawnPeer(["--memory", String(SIZE)])
      const { address } = peer.ready
      const agent = yield* makeAgent({ request_timeout_ms: 5000 })
      const cases: ReadonlyArray<readonly [number, number]> = [
        [BASE + SIZE - 10, 20], // runs past the end
        [BASE - 1, 2], // starts before the region
        [0, 16], // nothing registered there
        [BASE + SIZE, 1], // just past the end
        [Number.MAX_SAFE_INTEGER - 4, 8] // wraps nothing: still outside
      ]
      for (const [addr, len] of cases) {
        const w = yield* Effect.flip(agent.sendData(address, addr, bytes(len, 9)))
        expect(w).toBeInstanceOf(SegmentRangeInvalid)
        expect(w).toMatchObject({ addr, length: len })
        const r = yield* Effect.flip(agent.recvData(address, addr, len))
        expect(r).toBeInstanceOf(SegmentRangeInvalid)
      }
      // negative control: the same agent does write in range, so the refusals above were about the range
      yield* agent.sendData(address, BASE, Buffer.from([1, 2, 3]))
      const expected = pattern(SIZE)
      expected.set([1, 2, 3], 0)
      expect(Buffer.from(yield* agent.recvData(address, BASE, SIZE))).toEqual(expected)
      // the connection survived every refusal
      expect(yield* agent.connections).toEqual([address])
    })
  )

  it.scopedLive("a request above max_data_bytes is refused: by the agent before sending, by the server typed", () =>
    Effect.gen(function* () {
      const peer = yield* spawnPeer(["--memory", String(SIZE), "--max-data", "65536"])
      const { address } = peer.ready
      const small = yield* makeAgent({ max_data_bytes: 1000 })
      const local = yield* Effect.flip(small.sendData(address, BASE, Buffer.alloc(1001)))
      expect(local).toBeInstanceOf(DataTooLarge)
      expect(local).toMatchObject({ size: 1001, max: 1000 })
      expect(yield* small.connections).toEqual([]) // nothing was sent

      const agent = yield* makeAgent({ request_timeout_ms: 5000 })
      const remote = yield* Effect.flip(agent.recvData(address, BASE, 65537))
      expect(remote).toBeInstanceOf(DataTooLarge)
      expect(remote).toMatchObject({ size: 65537, max: 65536 })
      const write = yield* Effect.flip(agent.sendData(address, BASE, Buffer.alloc(65537, 0xee)))
      expect(write).toBeInstanceOf(DataTooLarge)
      // a GiB read claim is refused from its header (nothing allocated, nothing waited for), before the 5 s timeout
      const [huge, ms] = yield* timed(Effect.flip(agent.recvData(address, BASE, 1024 * 1024 * 1024)))
      expect(huge).toBeInstanceOf(DataTooLarge)
      expect(ms).toBeLessThan(5000)
      expect(Buffer.from(yield* agent.recvData(address, BASE, 65536))).toEqual(pattern(65536))
    })
  )

  it.scopedLive("a frozen peer: the data call fails Timeout at rpc/request_timeout_ms", () =>
    Effect.gen(function* () {
      const peer = yield* spawnPeer(["--memory", "4096"])
      const { address } = peer.ready
      const agent = yield* makeAgent({ request_timeout_ms: 400 })
      yield* agent.recvData(address, BASE, 16)
      peer.signal("SIGSTOP")
      yield* Effect.addFinalizer(() => Effect.sync(() => peer.signal("SIGCONT")))
      const {
        value: e,
        took,
        late
      } = yield* besideTimer(400, Effect.flip(agent.sendData(address, BASE, Buffer.alloc(64))))
      expect(e).toBeInstanceOf(TransportFailure)
      expect(e).toMatchObject({ reason: "Timeout" })
      expect(took).toBeGreaterThanOrEqual(399)
      // not a period later than a plain 400 ms timer armed with it (which a loaded machine delays as much)
      expect(late).toBeLessThan(400)
    })
  )
})

describe("SendData / RecvData on a server without memory, and malformed bodies", () => {
  it.scopedLive("no memory supplied → SegmentRangeInvalid; a malformed body closes that connection only", () =>
    Effect.gen(function* () {
      const server = yield* startServer()
      const agent = yield* makeAgent({ request_timeout_ms: 2000 })
      const e = yield* Effect.flip(agent.recvData(server.address, 0, 8))
      expect(e).toBeInstanceOf(SegmentRangeInvalid)
      expect(server.data).toMatchObject({ rejected: 1, sent: 0, received: 0 })

      // SendData (wire index 4) whose header claims 100 bytes but carries 3
      const frame = Buffer.alloc(4 + 5 + 1 + 16 + 3)
      frame.writeUInt32LE(frame.length - 4, 0)
      frame[4] = Kind.Request
      frame.writeUInt32LE(1, 5)
      frame[9] = 4
      frame.writeUInt32LE(0, 10)
      frame.writeUInt32LE(100, 18)
      const closed = yield* Effect.async<boolean>((resume) => {
        const socket = Net.createConnection({ host: "127.0.0.1", port: server.port })
        const timer = setTimeout(() => {
          socket.destroy()
          resume(Effect.succeed(false))
        }, 20_000)
        socket.on("error", () => {})
        socket.on("data", () => {}) // read the ProtocolError frame, so the end of the stream is seen
        socket.on("close", () => {
          clearTimeout(timer)
          resume(Effect.succeed(true))
        })
        socket.on("connect", () => socket.write(frame))
        return Effect.sync(() => socket.destroy())
      })
      expect(closed).toBe(true)
      // the server still serves the well-behaved client
      yield* agent.probe(server.address)
    })
  )
})
