/**
 * `RpcAgent.decorate(agent, guard)`: every control-plane call passes `guard.admit` before and `guard.record` after
 * (the seam RFC PR 4's PeerHealth decorates the agent through).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"
import { makeNotification, RpcAgent, TransportFailure } from "../src/index.js"
import { bootstrapDesc, eventually, makeAgent, startServer } from "./helpers.js"

/** The seven guarded entry points, each as one call to `address`. */
const everyCall = (agent: RpcAgent.RpcAgentShape, address: string) => ({
  bootstrap: agent.bootstrap(address, bootstrapDesc("a@soft0")),
  notify: agent.notify(address, makeNotification("n", "m")),
  getSegmentDesc: agent.getSegmentDesc(address),
  probe: agent.probe(address),
  sendData: agent.sendData(address, 0x10000, new Uint8Array(4)),
  recvData: agent.recvData(address, 0x10000, 4),
  call: agent.call(address, "Probe", undefined)
})

/** A guard that records what it saw, refusing every call when `refuse` is set. */
const recordingGuard = (refuse: boolean) => {
  const admitted: Array<string> = []
  const recorded: Array<{ address: string; failure: TransportFailure | undefined }> = []
  const guard: RpcAgent.CallGuard = {
    admit: (address) =>
      refuse
        ? Effect.fail(new TransportFailure({ address, reason: "Refused", message: "guard: peer is down" }))
        : Effect.sync(() => void admitted.push(address)),
    record: (address, failure) => Effect.sync(() => void recorded.push({ address, failure }))
  }
  return { guard, admitted, recorded }
}

describe("RpcAgent.decorate", () => {
  it.scopedLive("a guard that refuses fails every call without sending anything (no connection opened)", () =>
    Effect.gen(function* () {
      const server = yield* startServer()
      const { guard, recorded } = recordingGuard(true)
      const agent = RpcAgent.decorate(yield* makeAgent(), guard)
      for (const [name, call] of Object.entries(everyCall(agent, server.address))) {
        const exit = yield* Effect.exit(call as Effect.Effect<unknown, unknown>)
        expect({ name, failure: Exit.isFailure(exit) && String(exit.cause) }).toEqual({
          name,
          failure: expect.stringMatching(/guard: peer is down/)
        })
      }
      expect(yield* agent.connections).toEqual([])
      expect(server.received).toHaveLength(0)
      expect(recorded).toEqual([]) // a refused call did not happen: nothing to record
    })
  )

  it.scopedLive(
    "record sees each call's outcome: an answer (success or typed error) as undefined, a transport failure as itself",
    () =>
      Effect.gen(function* () {
        const server = yield* startServer({ maxNotifyBytes: 64 })
        const { guard, admitted, recorded } = recordingGuard(false)
        const agent = RpcAgent.decorate(yield* makeAgent({ request_timeout_ms: 2000 }), guard)
        const at = server.address

        for (const call of Object.values(everyCall(agent, at)))
          yield* Effect.exit(call as Effect.Effect<unknown, unknown>)
        // bootstrap, notify, getSegmentDesc, probe and call succeed; the data calls get SegmentRangeInvalid (no memory)
        expect(admitted).toEqual(Array(7).fill(at))
        expect(recorded).toEqual(Array(7).fill({ address: at, failure: undefined }))

        recorded.length = 0
        const rejected = yield* Effect.flip(agent.bootstrap(at, bootstrapDesc("reject")))
        expect(rejected._tag).toBe("BootstrapRejected")
        const tooLarge = yield* Effect.flip(agent.notify(at, makeNotification("n", new Uint8Array(100))))
        expect(tooLarge._tag).toBe("NotificationTooLarge")
        expect(recorded).toEqual([
          { address: at, failure: undefined },
          { address: at, failure: undefined }
        ])

        // refused by the agent itself, before sending (its own limits): the peer said nothing, nothing is recorded
        recorded.length = 0
        admitted.length = 0
        const strict = RpcAgent.decorate(yield* makeAgent({ max_notify_bytes: 16, max_data_bytes: 16 }), guard)
        const localNotify = yield* Effect.flip(strict.notify(at, makeNotification("n", new Uint8Array(100))))
        expect(localNotify._tag).toBe("NotificationTooLarge")
        const localData = yield* Effect.flip(strict.sendData(at, 0, new Uint8Array(100)))
        expect(localData._tag).toBe("DataTooLarge")
        const malformed = yield* Effect.flip(strict.probe("not-an-address"))
        expect(malformed.message).toContain("is not a host:port")
        expect(admitted).toEqual([at, at, "not-an-address"])
        expect(recorded).toEqual([])

        recorded.length = 0
        const nowhere = "127.0.0.1:1"
        const refused = yield* Effect.flip(agent.probe(nowhere))
        expect(refused).toBeInstanceOf(TransportFailure)
        expect(recorded).toEqual([{ address: nowhere, failure: refused }])

        // an interrupted call has no outcome to record
        recorded.length = 0
        const admittedBefore = admitted.length
        const slow = yield* Effect.fork(agent.notify(at, makeNotification("sleep", "5000")))
        // admitted (so sent) before it is interrupted: the absence of a record is then the guard's doing
        expect(yield* eventually(() => admitted.length > admittedBefore)).toBe(true)
        yield* Effect.sleep(50)
        yield* Fiber.interrupt(slow)
        expect(recorded).toEqual([])
      })
  )
})
