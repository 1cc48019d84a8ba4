/**
 * The provider leases the E2B and Daytona rows claim (`provider_lease_timeout`,
 * `provider_activity_lease`): every heartbeat renews the provider's own
 * clock, so a sandbox whose host keeps beating outlives the interval, and
 * one whose host died ends on the provider's side without any OpenMA
 * process (E2B kills it at its timeout; Daytona stops it after its
 * auto-stop interval, files kept). The stand-ins' clocks are a
 * ManualScheduler, so provider time moves only when the test says so; the
 * runtime's state is read at the stand-in, never through the driver.
 */
import type { RuntimeResourceScope } from "@openma/contract";
import type { RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { eventually } from "@openma/driver-suite/eventually";
import { startDaytonaStandIn } from "@openma/standin-daytona";
import { startE2BStandIn } from "@openma/standin-e2b";
import type { CloudStandIn } from "@openma/standin-kit";
import { ManualScheduler } from "@openma/time";
import { afterEach, describe, expect, it } from "vitest";
import { type Vendor, vendorDriver } from "../support/cloud.ts";

const never = () => new AbortController().signal;
const MINUTE = 60_000;

interface Lane {
  /** The provider's interval, as the driver is configured with it. */
  intervalMs: number;
  start(scheduler: ManualScheduler): Promise<CloudStandIn>;
  driver(standIn: CloudStandIn): RemoteSandboxDriver;
  /** The stand-in's state once the interval ran out without a renewal. */
  lapsed: "gone" | "suspended";
}

/** The vendor's driver as `openma` configures it from the stand-in's variables, plus the interval's own. */
function configuredDriver(vendor: Vendor, standIn: CloudStandIn, extra: Record<string, string>): RemoteSandboxDriver {
  return vendorDriver(vendor, { ...standIn, env: { ...standIn.env, ...extra } } as CloudStandIn);
}

const LANES: Record<"e2b" | "daytona", Lane> = {
  e2b: {
    intervalMs: 10 * MINUTE,
    start: (scheduler) => startE2BStandIn({ scheduler }),
    driver: (standIn) => configuredDriver("e2b", standIn, { OPENMA_E2B_SANDBOX_TIMEOUT_MS: String(10 * MINUTE) }),
    lapsed: "gone",
  },
  daytona: {
    intervalMs: 10 * MINUTE,
    start: (scheduler) => startDaytonaStandIn({ scheduler }),
    driver: (standIn) => configuredDriver("daytona", standIn, { OPENMA_DAYTONA_AUTO_STOP_MINUTES: "10" }),
    lapsed: "suspended",
  },
};

describe.each(Object.keys(LANES) as (keyof typeof LANES)[])("the provider lease on %s", (vendor) => {
  let standIn: CloudStandIn | undefined;
  afterEach(async () => {
    await standIn?.close();
  });

  it("is renewed by every heartbeat, and ends the sandbox at the provider once the heartbeats stop", async () => {
    const lane = LANES[vendor];
    // Provider time starts at the wall clock, so what the SDK reads back (end of life, activity) is plausible.
    const scheduler = new ManualScheduler(Date.now());
    const started = await lane.start(scheduler);
    standIn = started;
    const driver = lane.driver(started);
    const acquire = async (name: string) => {
      const scope: RuntimeResourceScope = { environmentId: "env_lease", sessionId: `sesn_lease_${vendor}_${name}` };
      const fence = { scope, ownerId: `owner-${name}`, generation: 1, expiresAt: Date.now() + 3_600_000 };
      const acquired = await driver.acquire({
        scope,
        fence,
        workspace: { bindingId: `ws-${name}`, strategy: "ephemeral", mountPath: "/workspace" },
        outputs: null,
        idempotencyKey: name,
        signal: never(),
      });
      if (acquired.type !== "acquired") throw new Error(acquired.reason);
      const wrote = await driver
        .toolSandbox(acquired.lease)
        .exec({ command: ["sh", "-c", "echo kept > /workspace/kept.txt"], timeoutMs: 60_000, signal: never() });
      expect(wrote.type === "exited" && wrote.exitCode).toBe(0);
      return { scope, fence, lease: acquired.lease, name };
    };
    type Held = Awaited<ReturnType<typeof acquire>>;
    const beat = (run: Held) => driver.heartbeat({ scope: run.scope, fence: run.fence, lease: run.lease, signal: never() });
    const state = (run: Held) => started.state(run.lease.runtimeId);
    // Two sandboxes made together: the host beats for `kept` only, `left` stands for one whose host died.
    const kept = await acquire("kept");
    const left = await acquire("left");

    // Two beats 70% of the interval apart: 1.4 intervals pass. `left` lapses at the provider, `kept` runs on.
    scheduler.advance(lane.intervalMs * 0.7);
    expect(await beat(kept)).toEqual({ type: "alive" });
    scheduler.advance(lane.intervalMs * 0.7);
    await eventually(async () => state(left) === lane.lapsed, `the unbeaten ${vendor} sandbox to be ${lane.lapsed}`, 60_000);
    expect(state(kept)).toBe("running");
    expect(await beat(kept)).toEqual({ type: "alive" });
    expect((await beat(left)).type).toBe("lost");

    // Now `kept`'s host dies too: past the interval the provider ends it on its own.
    scheduler.advance(lane.intervalMs + 1_000);
    await eventually(async () => state(kept) === lane.lapsed, `the ${vendor} sandbox to be ${lane.lapsed} once unbeaten`, 60_000);
    expect((await beat(kept)).type).toBe("lost");

    if (lane.lapsed === "suspended") {
      // Daytona's auto-stop keeps the filesystem: an acquire with the same key starts the box again, file and all.
      const again = await lane.driver(started).acquire({
        scope: kept.scope,
        fence: kept.fence,
        workspace: { bindingId: "ws-again", strategy: "ephemeral", mountPath: "/workspace" },
        outputs: null,
        idempotencyKey: kept.name,
        signal: never(),
      });
      expect(again.type === "acquired" && again.lease.runtimeId).toBe(kept.lease.runtimeId);
      expect(state(kept)).toBe("running");
      const read = await driver.toolSandbox(kept.lease).readFile({ path: "/workspace/kept.txt", maxBytes: 1024, signal: never() });
      expect(read.type === "ok" && Buffer.from(read.content).toString("utf8")).toBe("kept\n");
    }
    for (const run of [kept, left])
      expect(
        await driver.terminate({ scope: run.scope, fence: run.fence, lease: run.lease, reason: "completed", signal: never() }),
      ).toEqual({
        type: "terminated",
      });
    expect(started.live()).toBe(0);
    // A sandbox the provider ended on its own is removed from the engine after it left the provider's books.
    await eventually(async () => (await started.boxes.containers()).length === 0, "no container of the stand-in left", 60_000);
  });
});
