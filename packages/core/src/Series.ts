/**
 * The seven policy seams of the RFC's series, composed. `legacy` reproduces TENT `main`; each RFC PR replaces one
 * Layer (the file of each seam names its PR). `Policies` is everything `TransferEngine.layer` needs from them.
 *
 * | seam | file | RFC PR |
 * |---|---|---|
 * | `QpRetirement` | QpRetirement.ts | 1 |
 * | `NotifyQpParams` | NotifyQpParams.ts | 2 |
 * | `NotificationRouting` | NotificationRouting.ts | 3 |
 * | `PeerHealthPolicy` | PeerHealth.ts | 4 |
 * | `DescriptorPolicy` (`StaleClassifier`) | DescriptorPolicy.ts | 5 |
 * | `Dedup` | Dedup.ts | 6 |
 * | `Resend` | Resend.ts | 7 |
 *
 * @since 0.1.0
 */
import type { DescriptorCache } from "@tent/rpc"
import { Layer } from "effect"
import * as Dedup from "./Dedup.js"
import * as DescriptorPolicy from "./DescriptorPolicy.js"
import * as NotificationRouting from "./NotificationRouting.js"
import * as NotifyQpParams from "./NotifyQpParams.js"
import * as PeerHealth from "./PeerHealth.js"
import * as QpRetirement from "./QpRetirement.js"
import * as Resend from "./Resend.js"

/** The services of the seven seams. */
export type Policies =
  | QpRetirement.QpRetirement
  | NotifyQpParams.NotifyQpParams
  | NotificationRouting.NotificationRouting
  | PeerHealth.PeerHealthPolicy
  | DescriptorCache.StaleClassifier
  | Dedup.Dedup
  | Resend.Resend

/** TENT `main`: every seam's legacy Layer. */
export const legacy: Layer.Layer<Policies> = Layer.mergeAll(
  QpRetirement.layerLegacy,
  NotifyQpParams.layerLegacy,
  NotificationRouting.layerLegacy,
  PeerHealth.layerLegacy,
  DescriptorPolicy.layerLegacy,
  Dedup.layerLegacy,
  Resend.layerLegacy
)
