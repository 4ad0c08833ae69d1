/**
 * The Ibverbs provider over the system `libibverbs.so.1`. On a host without RDMA devices (these machines: no NIC, no
 * soft-RoCE) it must fail with `DeviceNotFound`, cleanly. On a host with a NIC the second test runs a real RC loopback
 * between two QPs of one device: `TENT_IBVERBS_DEVICE` picks the device (default: the first), `TENT_IBVERBS_PORT` its
 * port (default 1), `TENT_IBVERBS_GID_INDEX` the GID (default 0; RoCE v2 is often 1 or 3, see `show_gids`). On an
 * InfiniBand port the QPs address each other by the port's LID, on RoCE by GID; sizes and depths are clamped to the
 * device's limits.
 */
import { existsSync, readdirSync } from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import koffi from "koffi"
import { AccessFlags, Errno, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode } from "../src/Constants.js"
import * as Ibverbs from "../src/Ibverbs.js"
import * as Rc from "../src/Rc.js"
import { type CompletionQueue, Verbs, WorkCompletion } from "../src/Verbs.js"

const sysDevices = (() => {
  try {
    return readdirSync("/sys/class/infiniband")
  } catch {
    return []
  }
})()
const libraryLoads = (() => {
  try {
    koffi.load("libibverbs.so.1")
    return true
  } catch {
    return false
  }
})()
const hasNic = sysDevices.length > 0 && libraryLoads
if (!hasNic) {
  console.log(
    `[ibverbs-system] the hardware loopback is skipped: ${libraryLoads ? "no RDMA device in /sys/class/infiniband" : "libibverbs.so.1 is not installed"}`
  )
}

const pollOne = (cq: CompletionQueue, wc: Array<WorkCompletion>) =>
  Effect.gen(function* () {
    for (let i = 0; i < 2000; i++) {
      const n = cq.pollCq(1, wc)
      if (n !== 0) {
        expect(n).toBe(1)
        return wc[0] as WorkCompletion
      }
      yield* Effect.sleep("1 millis")
    }
    return yield* Effect.dieMessage("no completion within 2 s")
  })

describe("Ibverbs over the system libibverbs", () => {
  it.scopedLive.skipIf(hasNic)("without RDMA devices, getDeviceList and openDevice fail with DeviceNotFound", () =>
    Effect.gen(function* () {
      const v = yield* Verbs
      expect(v.provider).toBe("ibverbs")
      const listed = yield* Effect.flip(v.getDeviceList)
      const opened = yield* Effect.flip(v.openDevice("mlx5_0"))
      expect(listed._tag).toBe("DeviceNotFound")
      expect(opened._tag).toBe("DeviceNotFound")
      if (!libraryLoads) {
        expect(listed.message).toContain("libibverbs1")
      } else {
        expect(listed.message).toContain("ibv_get_device_list found none")
        // rdma-core answers ENOSYS when the kernel has no uverbs class at all (what these machines measure).
        if (!existsSync("/sys/class/infiniband_verbs")) expect(listed.message).toContain("ENOSYS")
      }
      console.log(`[ibverbs-system] Ibverbs here: ${listed.message}`)
    }).pipe(Effect.provide(Ibverbs.layer()))
  )

  it.scopedLive.skipIf(!hasNic)("with a NIC: RC loopback between two QPs, SEND_WITH_IMM and RDMA_WRITE land", () =>
    Effect.gen(function* () {
      const v = yield* Verbs
      const devices = yield* v.getDeviceList
      const name = process.env.TENT_IBVERBS_DEVICE ?? (devices[0]?.name as string)
      const portNum = Number(process.env.TENT_IBVERBS_PORT ?? "1")
      const gidIndex = Number(process.env.TENT_IBVERBS_GID_INDEX ?? "0")
      const ctx = yield* v.openDevice(name)
      const limits = yield* Rc.queryLimits(ctx, portNum)
      const gid = yield* ctx.queryGid(portNum, gidIndex)
      const pd = yield* ctx.allocPd
      const cqA = yield* ctx.createCq(Rc.clampCqe(16, limits))
      const cqB = yield* ctx.createCq(Rc.clampCqe(16, limits))
      const cap = { maxSendWr: 8, maxRecvWr: 8, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 }
      const a = yield* Rc.createQp(pd, { sendCq: cqA, recvCq: cqA, cap, qpType: QpType.RC }, limits)
      const b = yield* Rc.createQp(pd, { sendCq: cqB, recvCq: cqB, cap, qpType: QpType.RC }, limits)
      const access = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ
      const src = Buffer.alloc(4096)
      src.write("tent over real verbs")
      const dst = Buffer.alloc(4096)
      const mrA = yield* pd.regMr(src, access)
      const mrB = yield* pd.regMr(dst, access)
      const params = Rc.clampParams({ ...Rc.defaultParams, sgidIndex: gidIndex }, limits)
      const lid = limits.port.lid
      yield* Rc.connect(a, 100, { gid, lid, qpNum: b.qpNum, psn: 200 }, params)
      yield* Rc.connect(b, 200, { gid, lid, qpNum: a.qpNum, psn: 100 }, params)

      expect(b.postRecv({ wrId: 7, sgList: [{ addr: mrB.addr, length: 64, lkey: mrB.lkey }] })).toBe(0)
      const send = { wrId: 1, sgList: [{ addr: mrA.addr, length: 20, lkey: mrA.lkey }] }
      expect(
        a.postSend({ ...send, opcode: WrOpcode.SEND_WITH_IMM, sendFlags: SendFlags.SIGNALED, immData: 0xc0ffee })
      ).toBe(0)
      const wc = WorkCompletion.array(1)
      expect(yield* pollOne(cqA, wc)).toMatchObject({ wrId: 1, status: WcStatus.SUCCESS, opcode: WcOpcode.SEND })
      expect(yield* pollOne(cqB, wc)).toMatchObject({
        wrId: 7,
        status: WcStatus.SUCCESS,
        byteLen: 20,
        immData: 0xc0ffee
      })
      expect(dst.subarray(0, 20).toString()).toBe("tent over real verbs")

      expect(
        a.postSend({
          ...send,
          wrId: 2,
          opcode: WrOpcode.RDMA_WRITE,
          sendFlags: SendFlags.SIGNALED,
          remoteAddr: mrB.addr + 1000,
          rkey: mrB.rkey
        })
      ).toBe(0)
      expect(yield* pollOne(cqA, wc)).toMatchObject({ wrId: 2, status: WcStatus.SUCCESS })
      expect(dst.subarray(1000, 1020).toString()).toBe("tent over real verbs")
      expect(a.postSend({ ...send, sgList: [], numSge: 2, opcode: WrOpcode.SEND, sendFlags: 0 })).toBe(Errno.EINVAL)
    }).pipe(Effect.provide(Ibverbs.layer()))
  )
})
