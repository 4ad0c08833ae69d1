/**
 * `NotifyWire`, the one codec of TENT's notification payload `[u32 name_len][name][u32 msg_len][msg]`, lenient as
 * TENT's `handleNotifyRecv`; and the control plane's `Notify` body, that payload then nothing or exactly a 16-byte
 * stamp trailer `[u64 session][u64 seq]`.
 */
import * as Net from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { makeNotification, type Notification, NotifyWire } from "../src/index.js"
import { notificationCodec } from "../src/internal/codec.js"
import { FrameWriter, Kind } from "../src/internal/frame.js"
import { eventually, makeAgent, startServer } from "./helpers.js"

const bytes = (...parts: Array<ReadonlyArray<number> | string>): Buffer =>
  Buffer.concat(parts.map((p) => (typeof p === "string" ? Buffer.from(p) : Buffer.from(p))))

/** TENT's payload of name "ab", msg "xyz", as the wire has always carried it. */
const abXyz = bytes([2, 0, 0, 0], "ab", [3, 0, 0, 0], "xyz")

const stampBytes = (session: bigint, seq: bigint): Buffer => {
  const b = Buffer.alloc(16)
  b.writeBigUInt64LE(session, 0)
  b.writeBigUInt64LE(seq, 8)
  return b
}

describe("NotifyWire", () => {
  it("encodes at an offset into a caller's buffer; -1 above max (default one slot)", () => {
    const buf = Buffer.alloc(64, 0xee)
    expect(NotifyWire.encode(buf, 3, Buffer.from("ab"), Buffer.from("xyz"))).toBe(13)
    expect(buf.subarray(3, 16)).toEqual(abXyz)
    expect(buf[2]).toBe(0xee)
    expect(buf[16]).toBe(0xee)
    expect(NotifyWire.encode(buf, 0, Buffer.from("ab"), Buffer.from("xyz"), 12)).toBe(-1)
    const slot = Buffer.alloc(NotifyWire.SLOT_BYTES)
    expect(NotifyWire.encode(slot, 0, new Uint8Array(0), new Uint8Array(NotifyWire.MAX_PAYLOAD))).toBe(65536)
    expect(NotifyWire.encode(slot, 0, new Uint8Array(1), new Uint8Array(NotifyWire.MAX_PAYLOAD))).toBe(-1)
    // pinned to TENT's wire: kNotifyBufferSize and the two u32 length prefixes
    expect([NotifyWire.SLOT_BYTES, NotifyWire.HEADER_BYTES, NotifyWire.MAX_PAYLOAD]).toEqual([65536, 8, 65528])
  })

  it("decodes leniently, as TENT's handleNotifyRecv: trailing bytes ignored; the reject codes", () => {
    const r = new NotifyWire.DecodedRanges()
    const buf = Buffer.concat([Buffer.alloc(5), abXyz, Buffer.alloc(20, 9)])
    expect(NotifyWire.decode(buf, 5, 13 + 20, r)).toBe(0)
    expect([r.nameStart, r.nameEnd, r.msgStart, r.msgEnd]).toEqual([9, 11, 15, 18])
    expect(NotifyWire.decode(buf, 5, 13 + 16, r)).toBe(0)
    expect(r.msgEnd).toBe(18)
    expect(NotifyWire.decode(buf, 5, 0, r)).toBe(NotifyWire.Reject.Empty)
    expect(NotifyWire.decode(buf, 5, 7, r)).toBe(NotifyWire.Reject.Short)
    expect(NotifyWire.decode(buf, 5, 12, r)).toBe(NotifyWire.Reject.MsgTooLong)
    const longName = bytes([200, 0, 0, 0], "ab", [3, 0, 0, 0], "xyz")
    expect(NotifyWire.decode(longName, 0, longName.length, r)).toBe(NotifyWire.Reject.NameTooLong)
  })
})

describe("Notify with a stamp", () => {
  const body = (n: Notification): Buffer => {
    const w = new FrameWriter()
    notificationCodec.encode(w, n)
    return w.take()
  }

  it("an unstamped Notify body is byte-identical to TENT's payload; a stamped one appends the 16-byte trailer", () => {
    expect(body(makeNotification("ab", "xyz"))).toEqual(abXyz)
    const stamp = { session: 0x0102030405060708n, seq: 42n }
    expect(body({ ...makeNotification("ab", "xyz"), stamp })).toEqual(
      Buffer.concat([abXyz, stampBytes(stamp.session, 42n)])
    )
  })

  it("the codec round-trips both forms; an unstamped one decodes without a stamp key", () => {
    const plain = notificationCodec.decode(abXyz, 0, abXyz.length) as Notification
    expect("stamp" in plain).toBe(false)
    expect(Buffer.from(plain.msg).toString()).toBe("xyz")
    const stamp = { session: 2n ** 64n - 1n, seq: 0n }
    const stamped = body({ ...makeNotification("ab", "xyz"), stamp })
    expect(notificationCodec.decode(stamped, 0, stamped.length)).toEqual({ ...makeNotification("ab", "xyz"), stamp })
    expect(() => notificationCodec.decode(stamped, 0, stamped.length - 1)).toThrow()
  })

  it("the Notify body is exact: nothing after msg, or exactly a stamp; anything else is malformed", () => {
    expect(notificationCodec.decode(abXyz, 0, 13)).toEqual(makeNotification("ab", "xyz"))
    const stamped = Buffer.concat([abXyz, stampBytes(2n ** 64n - 1n, 7n)])
    expect((notificationCodec.decode(stamped, 0, stamped.length) as Notification).stamp).toEqual({
      session: 2n ** 64n - 1n,
      seq: 7n
    })
    for (const extra of [1, 8, 15, 17, 32]) {
      const body = Buffer.concat([abXyz, Buffer.alloc(extra)])
      expect(() => notificationCodec.decode(body, 0, body.length), `${extra} trailing bytes`).toThrow(
        /malformed Notify body/
      )
    }
    expect(() => notificationCodec.decode(abXyz, 0, 12)).toThrow(/malformed Notify body/)
  })

  it.scopedLive("the agent's Notify frame on the wire is today's bytes without a stamp, + 16 with one", () =>
    Effect.gen(function* () {
      const seen: Array<Buffer> = []
      const sink = Net.createServer((socket) => socket.on("data", (c: Buffer) => seen.push(c)))
      yield* Effect.acquireRelease(
        Effect.async<void>((resume) => {
          sink.listen(0, "127.0.0.1", () => resume(Effect.void))
        }),
        () => Effect.sync(() => sink.close())
      )
      const port = (sink.address() as Net.AddressInfo).port
      const agent = yield* makeAgent({ notify_timeout_ms: 60_000 })
      const calls = yield* Effect.fork(
        Effect.all(
          [
            agent.notify(`127.0.0.1:${port}`, makeNotification("ab", "xyz")),
            agent.notify(`127.0.0.1:${port}`, { ...makeNotification("ab", "xyz"), stamp: { session: 1n, seq: 2n } })
          ],
          { concurrency: 2 }
        )
      )
      yield* eventually(() => Buffer.concat(seen).length >= 2 * (9 + 1 + 13) + 16)
      yield* Fiber.interrupt(calls)
      const frame = (id: number, payload: Buffer) => {
        const head = Buffer.alloc(10)
        head.writeUInt32LE(6 + payload.length, 0)
        head[4] = Kind.Request
        head.writeUInt32LE(id, 5)
        head[9] = 1 // Notify's index in the group
        return Buffer.concat([head, payload])
      }
      expect(Buffer.concat(seen).subarray(0, 2 * 23 + 16)).toEqual(
        Buffer.concat([frame(1, abXyz), frame(2, Buffer.concat([abXyz, stampBytes(1n, 2n)]))])
      )
    })
  )

  it.scopedLive(
    "round trip through the server: the handler sees the stamp, or none; max_notify_bytes counts name + msg only",
    () =>
      Effect.gen(function* () {
        const server = yield* startServer({ maxNotifyBytes: 5 })
        const agent = yield* makeAgent()
        const stamp = { session: 2n ** 63n + 5n, seq: 2n ** 64n - 1n }
        yield* agent.notify(server.address, makeNotification("ab", "xyz"))
        yield* agent.notify(server.address, { ...makeNotification("ab", "xyz"), stamp })
        expect(server.received).toHaveLength(2)
        expect("stamp" in (server.received[0] as Notification)).toBe(false)
        expect(server.received[1]?.stamp).toEqual(stamp)
        const tooLarge = yield* Effect.flip(agent.notify(server.address, { ...makeNotification("ab", "wxyz"), stamp }))
        expect(tooLarge).toMatchObject({ _tag: "NotificationTooLarge", size: 6, max: 5 })
      })
  )

  it.scopedLive("a stamp that is not a u64 fails the call as Protocol without sending it", () =>
    Effect.gen(function* () {
      const server = yield* startServer()
      const agent = yield* makeAgent()
      const bad = yield* Effect.flip(
        agent.notify(server.address, { ...makeNotification("a", "b"), stamp: { session: -1n, seq: 0n } })
      )
      expect(bad).toMatchObject({ _tag: "TransportFailure", reason: "Protocol" })
      yield* agent.notify(server.address, makeNotification("after", ""))
      expect(server.received.map((n) => Buffer.from(n.name).toString())).toEqual(["after"])
    })
  )

  it.scopedLive("the server closes a connection whose Notify body has trailing bytes that are not a stamp", () =>
    Effect.gen(function* () {
      const server = yield* startServer()
      const reply = yield* Effect.async<Buffer>((resume) => {
        const got: Array<Buffer> = []
        const socket = Net.createConnection({ host: "127.0.0.1", port: server.port }, () => {
          const payload = Buffer.concat([abXyz, Buffer.alloc(17)])
          const head = Buffer.alloc(10)
          head.writeUInt32LE(6 + payload.length, 0)
          head[4] = Kind.Request
          head.writeUInt32LE(1, 5)
          head[9] = 1
          socket.write(Buffer.concat([head, payload]))
        })
        socket.on("data", (c: Buffer) => got.push(c))
        socket.on("error", () => {})
        socket.on("close", () => resume(Effect.succeed(Buffer.concat(got))))
      })
      expect(reply[4]).toBe(Kind.ProtocolError)
      expect(reply.subarray(9).toString()).toMatch(/malformed Notify body/)
      expect(server.received).toHaveLength(0)
    })
  )
})

describe("Notify with a failure notice (Notification.failure)", () => {
  const body = (n: Notification): Buffer => {
    const w = new FrameWriter()
    notificationCodec.encode(w, n)
    return w.take()
  }
  const reasonBytes = (reason: string): Buffer => {
    const r = Buffer.from(reason, "utf8")
    const len = Buffer.alloc(4)
    len.writeUInt32LE(r.length, 0)
    return Buffer.concat([len, r])
  }

  it("is the payload, a 24-byte stamp trailer (zeros unstamped), then [u32 reason_len][reason]; round-trips", () => {
    const unstamped = { ...makeNotification("ab", "xyz"), failure: "TransferTimeout: slice in flight 10 s" }
    const b1 = body(unstamped)
    expect(b1).toEqual(Buffer.concat([abXyz, Buffer.alloc(24), reasonBytes(unstamped.failure)]))
    const d1 = notificationCodec.decode(b1, 0, b1.length) as Notification
    expect(d1).toEqual(unstamped)
    expect("stamp" in d1).toBe(false)
    const stamp = { session: 7n, seq: 9n, epoch: 2n ** 64n - 1n }
    const b2 = body({ ...unstamped, stamp, failure: "é" })
    expect(notificationCodec.decode(b2, 0, b2.length)).toEqual({ ...unstamped, stamp, failure: "é" })
    // A stamp without an epoch keeps none; an empty reason is still a failure notice.
    const b3 = body({ ...unstamped, stamp: { session: 7n, seq: 9n }, failure: "" })
    expect(b3.length).toBe(13 + 28)
    expect(notificationCodec.decode(b3, 0, b3.length)).toEqual({
      ...unstamped,
      stamp: { session: 7n, seq: 9n },
      failure: ""
    })
  })

  it("a success is the bytes of before (no key); a reason_len that does not end the body is malformed", () => {
    expect(body(makeNotification("ab", "xyz"))).toEqual(abXyz)
    expect("failure" in (notificationCodec.decode(abXyz, 0, abXyz.length) as Notification)).toBe(false)
    const good = body({ ...makeNotification("ab", "xyz"), failure: "why" })
    for (const bad of [good.subarray(0, good.length - 1), Buffer.concat([good, Buffer.alloc(1)])]) {
      expect(() => notificationCodec.decode(bad, 0, bad.length)).toThrow(/malformed Notify body/)
    }
  })

  it.scopedLive("through the server, the handler sees the failure and its stamp", () =>
    Effect.gen(function* () {
      const server = yield* startServer()
      const agent = yield* makeAgent()
      const stamp = { session: 3n, seq: 4n, epoch: 5n }
      yield* agent.notify(server.address, { ...makeNotification("ab", "xyz"), stamp, failure: "RdmaTransferFailed" })
      yield* agent.notify(server.address, makeNotification("ab", "xyz"))
      expect(server.received[0]).toMatchObject({ stamp, failure: "RdmaTransferFailed" })
      expect("failure" in (server.received[1] as Notification)).toBe(false)
    })
  )
})
