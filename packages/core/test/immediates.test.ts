/**
 * Transfer-bound notifications on the data QPs (`transports/rdma/notify/transfer_bound` = `immediate`): never ahead
 * of their data, exactly once, and today's bytes to a peer that does not take them. Two engines in this process over
 * real UDP sockets (SoftVerbs); the receiver's NICs acknowledge a WRITE before placing it (`placementDelayMs`), as a
 * real NIC may, so a notification that overtakes its data shows.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Series } from "../src/index.js"
import { immPair, type Mode } from "./fixtures/imm-pair.js"

const SLICE = 4096
/** Two requests of one slice each: the slices go to both lanes of the one endpoint. */
const PER_TRANSFER = 2 * SLICE
const WINDOW = 32

const utf8 = new TextEncoder()
const text = new TextDecoder()
const value = (i: number): number => (i * 13 + 7) & 0xff

/**
 * `n` transfers of two slices, `WINDOW` in flight (each in a slot of its own, the slot's bytes `value(i)`), each with
 * a notification naming it. The receiver's `subscribe` handler reads the slot when the notification arrives: a slot
 * not yet all `value(i)` is a notification seen before its data.
 */
const run = (mode: Mode, n: number, options: Parameters<typeof immPair>[1] & { readonly retireEach?: boolean } = {}) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { a, b } = yield* immPair(mode, options)
      const src = Buffer.alloc(WINDOW * PER_TRANSFER)
      const dst = Buffer.alloc(WINDOW * PER_TRANSFER)
      const local = yield* a.engine.registerSegment(src)
      const remote = yield* b.engine.registerSegment(dst)
      const target = yield* a.engine.openSegment(b.engine.segmentName)
      const seen = new Uint8Array(n)
      let early = 0
      let arrived = 0
      let duplicates = 0
      let strangers = 0
      yield* b.engine.subscribe(
        (note) => {
          const i = Number(text.decode(note.name).slice(1))
          if (!Number.isInteger(i) || i < 0 || i >= n) {
            strangers++
            return
          }
          if (seen[i] === 1) duplicates++
          seen[i] = 1
          arrived++
          const slot = dst.subarray((i % WINDOW) * PER_TRANSFER, ((i % WINDOW) + 1) * PER_TRANSFER)
          const want = value(i)
          for (let k = 0; k < slot.length; k += 512) {
            if (slot[k] !== want || slot[slot.length - 1] !== want) {
              early++
              break
            }
          }
        },
        { consume: true }
      )
      for (let wave = 0; wave < n; wave += WINDOW) {
        const batches: Array<number> = []
        for (let i = wave; i < Math.min(n, wave + WINDOW); i++) {
          const off = (i % WINDOW) * PER_TRANSFER
          src.fill(value(i), off, off + PER_TRANSFER)
          const batch = yield* a.engine.allocateBatch
          yield* a.engine.submitTransfer(
            batch,
            [0, 1].map((j) => ({
              opcode: "WRITE" as const,
              source: local.addr + off + j * SLICE,
              target,
              targetOffset: remote.addr + off + j * SLICE,
              length: SLICE
            })),
            { name: utf8.encode(`t${i}`), msg: new Uint8Array(0) }
          )
          if (options.retireEach === true) {
            // The endpoint goes to ERR right after the record and markers were posted: markers flush, the fallback runs.
            for (const ep of yield* a.diag.endpoints) yield* a.diag.retire(ep.localNic, ep.peerNicPath)
          }
          batches.push(batch)
        }
        for (const batch of batches) {
          const s = yield* a.engine.waitTransfer(batch, 30_000)
          if (s.status !== "COMPLETED") return yield* Effect.fail(new Error(`transfer ended ${s.status}`))
          yield* a.engine.freeBatch(batch)
        }
        // Every notification of the wave before its slots are written again (bounded: 20 s).
        const last = Math.min(n, wave + WINDOW)
        for (let t = 0; t < 4000 && seen.subarray(wave, last).includes(0); t++) yield* Effect.sleep("5 millis")
      }
      for (let t = 0; t < 400 && arrived < n; t++) yield* Effect.sleep("5 millis")
      return {
        early,
        arrived,
        duplicates,
        strangers,
        missing: n - seen.reduce((x, y) => x + y, 0),
        sent: { ...a.diag.counters.immediates },
        received: { ...b.diag.counters.immediates }
      }
    })
  )

describe("transfer-bound notifications on the data QPs", () => {
  it.live(
    "with a placement delay, 0 of 10^4 notifications over immediates is seen before its data; each arrives once",
    () =>
      Effect.gen(function* () {
        const r = yield* run("immediate", 10_000, { device: { placementDelayMs: 2 } })
        expect(r).toMatchObject({ early: 0, arrived: 10_000, duplicates: 0, strangers: 0, missing: 0 })
        // The path was taken (the first transfer learns the peer's offer; a lane at its bound of markers in flight,
        // imm_recvs / 2, sends a transfer the notify QP's way).
        expect(r.received.released).toBeGreaterThanOrEqual(9_500)
        expect(r.sent.markers).toBeGreaterThanOrEqual(2 * 9_500)
      }),
    240_000
  )

  it.live(
    "negative control: the notify-QP path (TENT's) with a placement delay shows notifications ahead of their data",
    () =>
      Effect.gen(function* () {
        // 20 ms, not the 2 ms above: both engines share this process's event loop, and one that lags more than the
        // delay (a loaded machine) runs the placement timers before it reads the notification's datagram, which would
        // hide the hazard this control must show (seen once in CI: 0 of 2000 early at 2 ms)
        const r = yield* run("notify_qp", 2000, { device: { placementDelayMs: 20 } })
        expect(r.early).toBeGreaterThan(0)
        expect(r).toMatchObject({ arrived: 2000, duplicates: 0, missing: 0 })
        expect(r.sent.markers).toBe(0)
      }),
    120_000
  )

  it.live(
    "a peer that does not take immediates gets the notify QP's notifications: nothing held, nothing marked, all arrive",
    () =>
      Effect.gen(function* () {
        const r = yield* run("immediate", 200, { receiverMode: "notify_qp" })
        expect(r).toMatchObject({ arrived: 200, duplicates: 0, missing: 0 })
        expect(r.sent.records).toBe(0)
        expect(r.sent.markers).toBe(0)
        // And without receipts (the RFC's series) the path is not taken either: a fallback could not resend once.
        const rfc = yield* run("immediate", 200, { series: Series.rfc })
        expect(rfc).toMatchObject({ arrived: 200, duplicates: 0, missing: 0 })
        expect(rfc.sent.records).toBe(0)
      }),
    120_000
  )

  it.live(
    "an endpoint retired right after each record and its markers were posted: every notification arrives exactly once",
    () =>
      Effect.gen(function* () {
        const r = yield* run("immediate", 64, { retireEach: true, device: { placementDelayMs: 2 } })
        // Exactly once, and never ahead of the data: a fallback copy goes only once the tasks completed.
        expect(r).toMatchObject({ early: 0, arrived: 64, duplicates: 0, missing: 0, strangers: 0 })
        // The fallback ran: tracks spoiled by the flushed markers.
        expect(r.sent.spoiled).toBeGreaterThan(0)
      }),
    120_000
  )

  it.live(
    "a batch that ends FAILED after its held record went: the target gets the failure notice with the record's stamp, once, and no success",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          // One attempt per slice and no failover: a slice whose packets are all lost fails its batch.
          const { a, b } = yield* immPair("immediate", {
            senderJson: { max_failover_attempts: 0, transports: { rdma: { workers: { max_retry_count: 1 } } } }
          })
          const local = yield* a.engine.registerSegment(Buffer.alloc(PER_TRANSFER))
          const remote = yield* b.engine.registerSegment(Buffer.alloc(PER_TRANSFER))
          const target = yield* a.engine.openSegment(b.engine.segmentName)
          const got: Array<{ readonly name: string; readonly failure: string | undefined }> = []
          yield* b.engine.subscribe((n) => void got.push({ name: text.decode(n.name), failure: n.failure }), {
            consume: true
          })
          const requests = [0, 1].map((j) => ({
            opcode: "WRITE" as const,
            source: local.addr + j * SLICE,
            target,
            targetOffset: remote.addr + j * SLICE,
            length: SLICE
          }))
          const transfer = (name: string) =>
            Effect.gen(function* () {
              const batch = yield* a.engine.allocateBatch
              yield* a.engine.submitTransfer(batch, requests, { name: utf8.encode(name), msg: new Uint8Array(0) })
              return yield* a.engine.waitTransfer(batch, 30_000)
            })
          // The first transfer learns the peer's offer (its endpoint comes up in it).
          expect((yield* transfer("warm")).status).toBe("COMPLETED")
          const recordsBefore = a.diag.counters.immediates?.records ?? 0
          // Every datagram the sender's NIC sends is lost: data, markers and the held record alike.
          yield* a.control.setFaults("mlx0", { dropOut: 1 })
          const status = yield* transfer("lost")
          yield* a.control.setFaults("mlx0", {})
          expect(status.status).toBe("FAILED")
          expect((a.diag.counters.immediates?.records ?? 0) - recordsBefore).toBe(1) // it rode the immediates path
          for (let t = 0; t < 2000 && !got.some((g) => g.name === "lost"); t++) yield* Effect.sleep("5 millis")
          yield* Effect.sleep("300 millis") // a second outcome, if any, has time to arrive
          const lost = got.filter((g) => g.name === "lost")
          expect(lost.length).toBe(1)
          expect(lost[0]?.failure).toBeDefined()
        })
      ),
    120_000
  )

  it.live(
    "a record held while 5000 later notifications of its sender are admitted (past the replay window) is still delivered once",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          // No resend of the record meanwhile (once its markers completed it could go unheld, over the control plane).
          const { a, b } = yield* immPair("immediate", { senderJson: { notification: { receipt_resend_ms: 60_000 } } })
          const local = yield* a.engine.registerSegment(Buffer.alloc(PER_TRANSFER).fill(7))
          const dst = Buffer.alloc(PER_TRANSFER)
          const remote = yield* b.engine.registerSegment(dst)
          const target = yield* a.engine.openSegment(b.engine.segmentName)
          const names: Array<string> = []
          let early = 0
          yield* b.engine.subscribe(
            (n) => {
              const name = text.decode(n.name)
              names.push(name)
              if (name.startsWith("held") && dst[PER_TRANSFER - 1] !== 7) early++
            },
            { consume: true }
          )
          const transfer = (name: string) =>
            Effect.gen(function* () {
              const batch = yield* a.engine.allocateBatch
              yield* a.engine.submitTransfer(
                batch,
                [0, 1].map((j) => ({
                  opcode: "WRITE" as const,
                  source: local.addr + j * SLICE,
                  target,
                  targetOffset: remote.addr + j * SLICE,
                  length: SLICE
                })),
                { name: utf8.encode(name), msg: new Uint8Array(0) }
              )
              return batch
            })
          yield* a.engine.waitTransfer(yield* transfer("warm"), 30_000)
          dst.fill(0)
          // The receiver's data pollers paused: the record's immediates wait in its CQ while 5000 later notifications
          // (more than the replay window's 4096 seqs) are admitted; then they are polled and the record released.
          yield* b.diag.pauseDataPollers(true)
          const batch = yield* transfer("held")
          for (let i = 0; i < 5000; i++) {
            yield* a.engine.sendNotification(b.engine.segmentName, {
              name: utf8.encode(`s${i}`),
              msg: new Uint8Array(0)
            })
          }
          for (let t = 0; t < 2000 && names.length < 5001; t++) yield* Effect.sleep("5 millis")
          expect(names.includes("held")).toBe(false)
          yield* b.diag.pauseDataPollers(false)
          yield* a.engine.waitTransfer(batch, 30_000)
          for (let t = 0; t < 2000 && !names.includes("held"); t++) yield* Effect.sleep("5 millis")
          yield* Effect.sleep("200 millis")
          expect(names.filter((n) => n === "held").length).toBe(1)
          expect(names.filter((n) => n.startsWith("s")).length).toBe(5000)
          expect(early).toBe(0)
          expect(b.diag.counters.immediates?.released).toBe(1)
        })
      ),
    120_000
  )
})
