/**
 * The kill -9 loop of issue 21 (test/support/crash-loop.ts) for every cloud
 * driver, against its stand-in: the vendor's wire protocol, real local
 * containers behind it. Live sandboxes are counted by the stand-in (what
 * the provider would bill), never from our own records. 10 kills per
 * vendor rather than the local drivers' 20: a remote create or destroy
 * costs the stand-in a container each, and six vendors run this.
 */
import type { CloudStandIn } from "@openma/standin-kit";
import { startVendorStandIn, VENDORS, type Vendor } from "../support/cloud.ts";
import { describeCrashLoop } from "../support/crash-loop.ts";

/** One file per vendor (crash-loop-<vendor>.test.ts), so the vendors' loops run in parallel; later vendors run fewer kills to keep CI's budget. */
export function describeCloudCrashLoop(vendor: Vendor, kills = 10): void {
  let standIn: CloudStandIn | null = null;
  describeCrashLoop(vendor, {
    seed: 31 + VENDORS.indexOf(vendor),
    kills,
    async setup() {
      standIn = await startVendorStandIn(vendor);
    },
    env: () => ({ OPENMA_SANDBOX: vendor, ...(standIn?.env ?? {}) }),
    live: async () => standIn?.live() ?? Number.NaN,
    inventory: async () => ({
      boxes: standIn?.boxes.all().map((b) => ({ id: b.id, state: b.state })),
      // The bridge's books: the sandbox ids that have a container.
      ids: standIn !== null && "assigned" in standIn ? (standIn as CloudStandIn & { assigned(): string[] }).assigned() : undefined,
    }),
    async teardown() {
      await standIn?.close();
    },
  });
}
