/**
 * TENT's `Topology` as a memory segment's descriptor carries it (`detail.topology`, `segment.h:124-143`): a string
 * holding `Topology::toString()` (`src/runtime/topology.cpp:50-80`), i.e. `{"mems": [...], "nics": [...]}` dumped by
 * nlohmann with indent 4. A NIC's id is its index in `nics`; a peer's RDMA path names the remote NIC by that id
 * (`getNicName`, `rdma_transport.cpp:715-718`, `workers.cpp:329-335`) and reads the buffer's rkey at it
 * (`workers.cpp:1124-1136`). A memory entry lists, per priority rank, the NIC ids to reach memory at its location;
 * a buffer whose location has no entry uses the wildcard `"*"` entry (`workers.cpp:906-908`).
 */
import type { JsonValue } from "./NlohmannJson.js"
import * as NlohmannJson from "./NlohmannJson.js"

/** `Topology::NicType::NIC_RDMA` (`topology.h:44-49`). */
export const NIC_RDMA = 0
/** `Topology::MemType::MEM_UNKNOWN` (`topology.h:50`), the type of the wildcard entry. */
export const MEM_UNKNOWN = 4
/** `kWildcardLocation` (`types.h:183`): the location of our buffers, and the memory entry that serves it. */
export const WILDCARD = "*"

const byteOrder = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b))

/**
 * nlohmann's `dump(indent)` (json.h `serializer::dump` with `pretty_print`): a member or element per line, indented
 * `indent` spaces per level, `": "` after a key, `[]` and `{}` for empty containers, keys in byte order; scalars as
 * the compact form writes them.
 */
export const dumpIndented = (v: JsonValue, indent = 4, level = 0): string => {
  const pad = " ".repeat(indent * (level + 1))
  const end = " ".repeat(indent * level)
  if (Array.isArray(v)) {
    if (v.length === 0) return "[]"
    return `[\n${v.map((x) => pad + dumpIndented(x, indent, level + 1)).join(",\n")}\n${end}]`
  }
  if (v !== null && typeof v === "object") {
    const obj = v as { readonly [key: string]: JsonValue | undefined }
    const keys = Object.keys(obj)
      .filter((k) => obj[k] !== undefined)
      .sort(byteOrder)
    if (keys.length === 0) return "{}"
    const members = keys.map(
      (k) => `${pad}${NlohmannJson.stringify(k)}: ${dumpIndented(obj[k] as JsonValue, indent, level + 1)}`
    )
    return `{\n${members.join(",\n")}\n${end}}`
  }
  return NlohmannJson.stringify(v)
}

/**
 * The topology we publish for our RDMA devices, in order (NIC id = index): each an RDMA NIC of unknown PCI address and
 * NUMA node, and one wildcard memory entry that prefers them all (rank 0), as TENT's `parsePriorityMatrix` builds its
 * wildcard (`topology.cpp:322-333`). No device: TENT's empty topology (`{"mems": [], "nics": []}`).
 */
export const ofDevices = (names: ReadonlyArray<string>): string =>
  dumpIndented(
    names.length === 0
      ? { mems: [], nics: [] }
      : {
          nics: names.map((name) => ({ name, pci_bus_id: "", type: NIC_RDMA, numa_node: -1 })),
          mems: [
            {
              name: WILDCARD,
              pci_bus_id: "",
              type: MEM_UNKNOWN,
              numa_node: -1,
              device_list: { rank0: names.map((_, id) => id), rank1: [], rank2: [] }
            }
          ]
        }
  )

/**
 * The NIC names of a topology string, by NIC id, read as `Topology::parse` does (`topology.cpp:188-210`: a missing
 * `nics` is no NIC, a missing `name` is `""`). `undefined` when TENT's parse would fail (not JSON, `nics` not an
 * array, a name not a string): TENT then keeps no topology.
 */
export const nicNames = (topology: string): ReadonlyArray<string> | undefined => {
  const j = NlohmannJson.parse(topology)
  if (j instanceof NlohmannJson.JsonSyntaxError || j === null || typeof j !== "object" || Array.isArray(j)) {
    return undefined
  }
  const nics = (j as { readonly [key: string]: JsonValue | undefined }).nics
  if (nics === undefined) return []
  if (!Array.isArray(nics)) return undefined
  const names: Array<string> = []
  for (const nic of nics as ReadonlyArray<JsonValue>) {
    if (nic === null || typeof nic !== "object" || Array.isArray(nic)) return undefined
    const name = (nic as { readonly [key: string]: JsonValue | undefined }).name ?? ""
    if (typeof name !== "string") return undefined
    names.push(name)
  }
  return names
}
