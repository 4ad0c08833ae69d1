/**
 * The control plane's shared secret between engines: two engines holding it move bytes and notifications over RDMA
 * and TCP as without it; an engine without it (or with another) gets no descriptor, no endpoint, no byte written and
 * no notification delivered. Engines in this process, over real SoftVerbs devices and the real control plane on
 * 127.0.0.1.
 */
import { createHash } from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { makeNotification, notificationText } from "@tent/rpc"
import { Effect } from "effect"
import type { TransferEngine } from "../src/index.js"
import { engine, receive } from "./fixtures/policies.js"

const secretFile = (secret: string): string => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "tent-auth-"))
  const file = Path.join(dir, "secret")
  Fs.writeFileSync(file, `${secret}\n`, { mode: 0o600 })
  return file
}
const SECRET = secretFile("a cluster's shared secret, 32 bytes+")
const OTHER = secretFile("another cluster's secret, not ours!")
const withSecret = (file: string | undefined, extra: object = {}) =>
  file === undefined ? extra : { ...extra, rpc: { auth_secret_file: file } }

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex")

/** Writes `len` bytes from `tx` into `rx`'s segment and sends a notification bound to the transfer. */
const writeAndNotify = (
  tx: { readonly engine: TransferEngine.TransferEngineShape },
  segment: string,
  targetAddr: number,
  tag: string
) =>
  Effect.gen(function* () {
    const src = Buffer.alloc(4096, 0x5a)
    const mem = yield* tx.engine.registerSegment(src)
    const target = yield* tx.engine.openSegment(segment)
    const batch = yield* tx.engine.allocateBatch
    yield* tx.engine.submitTransfer(
      batch,
      [{ opcode: "WRITE", source: mem.addr, target, targetOffset: targetAddr, length: src.length }],
      makeNotification(tag, "done")
    )
    return yield* tx.engine.waitTransfer(batch, 20_000)
  })

describe("engines sharing the control plane's secret", { timeout: 120_000 }, () => {
  for (const transport of ["rdma", "tcp"] as const) {
    it.scopedLive(`${transport}: with the secret, bytes and notifications arrive; without it, nothing does`, () =>
      Effect.gen(function* () {
        const only =
          transport === "rdma"
            ? { transports: { tcp: { enable: false } } }
            : { transports: { rdma: { enable: false } } }
        const rx = yield* engine(withSecret(SECRET, only))
        const memory = Buffer.alloc(64 * 1024, 0x11)
        const region = yield* rx.engine.registerSegment(memory)
        const before = sha(memory)

        // outsiders: no secret, and another secret
        for (const file of [undefined, OTHER]) {
          const outsider = yield* engine(withSecret(file, only))
          const opened = yield* Effect.either(outsider.engine.openSegment(rx.engine.segmentName))
          expect(opened._tag).toBe("Left")
          expect(String((opened as { left: unknown }).left)).toMatch(/authentication (required|failed)/)
          const sent = yield* Effect.either(
            outsider.engine.sendNotification(rx.engine.segmentName, makeNotification("intruder", "x"))
          )
          expect(sent._tag).toBe("Left")
        }
        expect(sha(memory)).toBe(before)
        expect((yield* receive(rx.engine, 1, 500)).length).toBe(0)
        expect((yield* rx.diag.endpoints).length).toBe(0)

        // a member
        const tx = yield* engine(withSecret(SECRET, only))
        const status = yield* writeAndNotify(tx, rx.engine.segmentName, region.addr + 1024, "member")
        expect(status).toMatchObject({ status: "COMPLETED", transferredBytes: 4096 })
        expect(sha(memory.subarray(1024, 1024 + 4096))).toBe(sha(Buffer.alloc(4096, 0x5a)))
        const got = yield* receive(rx.engine, 1)
        expect(got.map((n) => notificationText(n).name)).toEqual(["member"])
      })
    )
  }

  it.scopedLive("negative control: a receiver without the secret takes the outsider's bytes and notification", () =>
    Effect.gen(function* () {
      const rx = yield* engine({ transports: { tcp: { enable: false } } })
      const memory = Buffer.alloc(64 * 1024, 0x11)
      const region = yield* rx.engine.registerSegment(memory)
      const before = sha(memory)
      const outsider = yield* engine({ transports: { tcp: { enable: false } } })
      const status = yield* writeAndNotify(outsider, rx.engine.segmentName, region.addr, "intruder")
      expect(status).toMatchObject({ status: "COMPLETED" })
      expect(sha(memory)).not.toBe(before)
      expect((yield* receive(rx.engine, 1)).map((n) => notificationText(n).name)).toEqual(["intruder"])
    })
  )
})
