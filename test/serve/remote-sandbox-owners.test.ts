/**
 * Ownership of serve-lane sandboxes on each cloud driver, against its
 * stand-in (the vendor's wire protocol, real local sandboxes behind it):
 * two "servers" on one database, in-process so time is virtual. The dead
 * one renews nothing; once its owner lease has run out, the live server's
 * reaper (listing by the deployment's labels or metadata at the provider)
 * removes the dead owner's runtime and never its own. Counted at the
 * stand-in, not through our records.
 */
import type { Logger } from "@openma/api";
import type { SandboxRequest } from "@openma/contract";
import type { CloudStandIn } from "@openma/standin-kit";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import { deploymentId, SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openRemoteServeSandboxes } from "../../apps/openma/src/remote-sandboxes.ts";
import type { ServeSandboxes } from "../../apps/openma/src/sandbox.ts";
import { serveOwnership } from "../../apps/openma/src/sandbox-owners.ts";
import { startVendorStandIn, VENDORS } from "../support/cloud.ts";

const TTL = 6_000;
const REAP = 2_000;
const silent: Logger = { info() {}, warn() {}, error() {} };
const request = (sessionId: string): SandboxRequest => ({
  sessionId,
  environmentId: "env_cloud_own",
  environment: null,
  signal: AbortSignal.timeout(120_000),
});
/** Lets pending renewals, reaper passes and provider calls run before virtual time moves on. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 50));

describe.each(VENDORS)("serve-lane sandbox ownership on %s (stand-in)", (vendor) => {
  let store: TestStorage;
  let standIn: CloudStandIn;
  beforeAll(async () => {
    store = await openTestStorage("sqlite");
    standIn = await startVendorStandIn(vendor);
  });
  afterAll(async () => {
    await standIn?.close();
    await store?.cleanup();
  });

  it("a dead owner's runtime is reaped by the live server; the live server's is never touched", async () => {
    const deployment = await deploymentId(store.storage.db);
    const world = new ManualScheduler(Date.now());
    const frozen = new ManualScheduler(Date.now());
    const ownership = (clock: ManualScheduler) =>
      serveOwnership({
        port: new SqlSandboxOwnership(store.storage.db, { clock: world }),
        orphans: new SqlRuntimeOrphanStore(store.storage.db, { clock: world }),
        deployment,
        config: { leaseTtlMs: TTL, reapIntervalMs: REAP },
        logger: silent,
        scheduler: clock,
      });
    const open = (clock: ManualScheduler) =>
      openRemoteServeSandboxes(vendor, standIn.env, {
        dataDir: "/nonexistent-unused",
        logger: silent,
        scheduler: clock,
        idleMs: 3_600_000,
        ownership: ownership(clock),
      });
    let dead: ServeSandboxes | null = null;
    let live: ServeSandboxes | null = null;
    try {
      dead = await open(frozen);
      expect(await dead.resolve(request("sesn_dead"))).toMatchObject({ type: "ready" });
      live = await open(world);
      expect(await live.resolve(request("sesn_live"))).toMatchObject({ type: "ready" });
      expect(standIn.live()).toBe(2);

      for (let t = 0; t <= TTL + 2 * REAP; t += 1_000) {
        world.advance(1_000);
        await settle();
      }
      await expect.poll(() => standIn.live(), { timeout: 60_000 }).toBe(1);
      // The survivor is the live server's: it still answers, and releasing it leaves nothing at the provider.
      expect(await live.resolve(request("sesn_live"))).toMatchObject({ type: "ready" });
      await live.release("sesn_live");
      expect(standIn.live()).toBe(0);
    } finally {
      await live?.close();
      await dead?.close();
    }
  });
});
