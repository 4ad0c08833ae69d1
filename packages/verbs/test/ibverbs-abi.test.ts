/**
 * The koffi layouts of the Ibverbs binding against the C ABI: every `sizeof`, and every member's offset and size, of
 * every struct the binding reads or writes. Against the real `<infiniband/verbs.h>` compiled with gcc when the headers
 * are present (CI requires them), and always against the committed table of the probe's output.
 */
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "@effect/vitest"
import koffi from "koffi"
import * as Layout from "../src/ibverbs/Layout.js"
import {
  type AbiTable,
  diffTables,
  fixtures,
  gcc,
  koffiTable,
  makeBuildDir,
  missingToolchain,
  parseTable,
  requireHeaders
} from "./fixtures/ibverbs/toolchain.js"

const committed = parseTable(readFileSync(join(fixtures, "abi-table.txt"), "utf8"))
const fromKoffi = koffiTable(Layout.structs)

describe("Ibverbs ABI", () => {
  it("koffi's layouts match the committed table of gcc's sizeof/offsetof", () => {
    expect(committed.size).toBeGreaterThan(300)
    expect(diffTables(committed, fromKoffi)).toEqual([])
  })

  it("the hot-path offsets are those the table gives (ops.post_send @208, ibv_wc.imm_data @24, wr.rdma @40/48)", () => {
    const at = (key: string) => Number((committed.get(key) as string).split(" ")[0])
    expect(Layout.Off.context.postSend).toBe(at("ibv_context.ops.post_send"))
    expect(Layout.Off.context.postRecv).toBe(at("ibv_context.ops.post_recv"))
    expect(Layout.Off.context.pollCq).toBe(at("ibv_context.ops.poll_cq"))
    expect(Layout.Off.context.reqNotifyCq).toBe(at("ibv_context.ops.req_notify_cq"))
    expect(Layout.Off.verbsContext.context).toBe(at("verbs_context.context"))
    expect(Layout.Off.sendWr.immData).toBe(at("ibv_send_wr.imm_data"))
    expect(Layout.Off.sendWr.remoteAddr).toBe(at("ibv_send_wr.wr.rdma.remote_addr"))
    expect(Layout.Off.sendWr.rkey).toBe(at("ibv_send_wr.wr.rdma.rkey"))
    expect(Layout.Off.wc.immData).toBe(at("ibv_wc.imm_data"))
    expect(Layout.Off.qp.state).toBe(at("ibv_qp.state"))
    // The facts the issue measured on rdma-core 44.0, as a second witness.
    expect([Layout.Off.context.postSend, Layout.Off.context.postRecv, Layout.Off.context.pollCq]).toEqual([
      208, 216, 96
    ])
    expect([Layout.Size.sendWr, Layout.Size.wc, Layout.Size.qpAttr, Layout.Size.portAttr]).toEqual([128, 48, 144, 52])
  })

  it("negative control: a layout with one wrong member is caught, at that member and those after it", () => {
    // ibv_wc with vendor_err dropped: byte_len moves from 20 to 16, and the struct shrinks.
    const { vendor_err: _dropped, ...rest } = Object.fromEntries(
      Object.values(Layout.ibv_wc.members ?? {}).map((m) => [m.name, m.type])
    )
    const wrongWc = koffi.struct(rest)
    // ibv_send_wr with imm_data widened to 64 bits: the wr union moves from 40 to 48 and the struct grows to 136.
    const wrongSendWr = koffi.struct({
      ...Object.fromEntries(Object.values(Layout.ibv_send_wr.members ?? {}).map((m) => [m.name, m.type])),
      __anon0: koffi.union({ imm_data: "uint64_t", invalidate_rkey: "uint32_t" })
    })
    const diff = diffTables(committed, koffiTable({ ...Layout.structs, ibv_wc: wrongWc, ibv_send_wr: wrongSendWr }))
    expect(diff).toContain("ibv_wc.byte_len: C says 20 4, koffi says 16 4")
    expect(diff).toContain("ibv_wc.vendor_err: missing from koffi (C says 16 4)")
    expect(diff).toContain("ibv_send_wr.wr.rdma.remote_addr: C says 40 8, koffi says 48 8")
    expect(diff).toContain("ibv_send_wr.imm_data: C says 36 4, koffi says 40 8")
    expect(diff).toContain("sizeof ibv_send_wr: C says 128, koffi says 136")
    // Padding hides the dropped member from sizeof (44 rounds up to 48): only the per-member check catches it.
    expect(diff.some((line) => line.startsWith("sizeof ibv_wc:"))).toBe(false)
  })

  describe("against the real <infiniband/verbs.h>", () => {
    let build: ReturnType<typeof makeBuildDir> | undefined
    afterAll(() => build?.remove())

    let probed: AbiTable | undefined
    const probe = (): AbiTable => {
      if (probed === undefined) {
        build = makeBuildDir()
        const exe = join(build.dir, "abi-probe")
        gcc(["-o", exe, join(fixtures, "abi-probe.c")])
        probed = parseTable(execFileSync(exe, { encoding: "utf8" }))
      }
      return probed
    }

    if (missingToolchain !== undefined && !requireHeaders) {
      console.log(`[ibverbs-abi] skipping the gcc comparison: ${missingToolchain} (TENT_REQUIRE_VERBS_HEADERS unset)`)
    }
    const itHeaders = missingToolchain !== undefined && !requireHeaders ? it.skip : it

    itHeaders("gcc's sizeof/offsetof for every member the binding describes equal koffi's", () => {
      expect(missingToolchain, "TENT_REQUIRE_VERBS_HEADERS=1 but the toolchain is missing").toBeUndefined()
      const table = probe()
      expect(table.size).toBe(fromKoffi.size)
      expect(diffTables(table, fromKoffi)).toEqual([])
    })

    itHeaders("the committed table is what the probe prints on this header (regenerate it if this fails)", () => {
      expect(missingToolchain, "TENT_REQUIRE_VERBS_HEADERS=1 but the toolchain is missing").toBeUndefined()
      expect(diffTables(probe(), committed)).toEqual([])
    })
  })
})
