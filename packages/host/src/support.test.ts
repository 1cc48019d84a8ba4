/**
 * The small pieces: timing validation, the fence lease adapter, error text,
 * and the shared test fakes themselves (a fake that lies makes every other
 * test worthless, so its own behaviour is pinned here).
 */
import type { RuntimeResourceFence, RuntimeResourceFencePort } from "@openma/contract";
import { ManualScheduler } from "@openma/time";
import { describe, expect, it } from "vitest";
import { describeError } from "./context.ts";
import { fenceLeaseStore } from "./fence-lease.ts";
import { FakeOutputs, FakeSandbox, FakeWorkspace } from "./testing/fakes.ts";
import { Faults } from "./testing/faults.ts";
import { FaultyFence } from "./testing/fence.ts";
import { drive, TEST_TIMINGS, until } from "./testing/rig.ts";
import { resolveTimings, timingIssues } from "./timings.ts";
import { DEFAULT_HOST_TIMINGS } from "./types.ts";

const signal = new AbortController().signal;
const scope = { environmentId: "env", sessionId: "sesn" };
const fence: RuntimeResourceFence = { scope, ownerId: "o#1", generation: 3, token: "secret-token", expiresAt: 1_000 };

describe("host timings", () => {
  it("accepts the defaults and fills in what is not overridden", () => {
    expect(timingIssues(DEFAULT_HOST_TIMINGS)).toEqual([]);
    expect(resolveTimings(undefined)).toEqual(DEFAULT_HOST_TIMINGS);
    expect(resolveTimings({ publishAttempts: 5 }).publishAttempts).toBe(5);
  });

  it("names every out-of-range field, and refuses renewals that cannot beat the margin", () => {
    expect(timingIssues({ ...DEFAULT_HOST_TIMINGS, leaseTtlMs: 10, publishAttempts: 0.5, maxColdRestarts: -1 })).toEqual([
      "leaseTtlMs: must be an integer between 1000 and 86400000",
      "publishAttempts: must be an integer between 1 and 20",
      "maxColdRestarts: must be an integer between 0 and 10",
    ]);
    expect(() => resolveTimings({ leaseTtlMs: 60_000, safetyMarginMs: 20_000, renewEveryMs: 40_000 })).toThrow(
      /renewEveryMs: must be shorter than leaseTtlMs - safetyMarginMs/,
    );
  });
});

describe("fenceLeaseStore", () => {
  function port(
    renew: RuntimeResourceFencePort["renew"],
    release: RuntimeResourceFencePort["release"] = async () => ({ type: "released" }),
  ) {
    return { renew, release } as RuntimeResourceFencePort;
  }

  it("maps renewed, stale and thrown renewals onto the lease controller's vocabulary", async () => {
    const renewed = fenceLeaseStore(
      port(async ({ fence: f, ttlMs }) => ({ type: "renewed", fence: { ...f, expiresAt: f.expiresAt + ttlMs } })),
      500,
    );
    expect(await renewed.renew(fence, signal)).toEqual({ type: "renewed", lease: { ...fence, expiresAt: 1_500 }, expiresAt: 1_500 });
    const stale = fenceLeaseStore(
      port(async () => ({ type: "stale", reason: "superseded" })),
      500,
    );
    expect(await stale.renew(fence, signal)).toEqual({ type: "lost", reason: "fence superseded" });
    const down = fenceLeaseStore(
      port(async () => {
        throw new Error("ECONNRESET");
      }),
      500,
    );
    expect(await down.renew(fence, signal)).toEqual({ type: "transient", error: "ECONNRESET" });
    const released: RuntimeResourceFence[] = [];
    const store = fenceLeaseStore(
      port(renewed.renew as never, async (input) => {
        released.push(input.fence);
        return { type: "released" };
      }),
      500,
    );
    await store.release(fence, signal);
    expect(released).toEqual([fence]);
  });

  it("describes thrown values that are not errors", () => {
    expect(describeError(new Error("boom"))).toBe("boom");
    expect(describeError("plain")).toBe("plain");
  });
});

describe("test fakes", () => {
  it("fake sandboxes report runtime state and reap idempotently", async () => {
    const sandbox = new FakeSandbox(new Faults());
    const lease = sandbox.start();
    expect(await sandbox.inspect({ lease })).toEqual({ state: "running" });
    const reap = { scope, lease, reason: "terminate_failed" as const, signal };
    expect(await sandbox.reap(reap)).toEqual({ type: "reaped" });
    expect(await sandbox.reap(reap)).toEqual({ type: "not_found" });
    sandbox.vanish(lease.runtimeId);
    expect(await sandbox.inspect({ lease })).toEqual({ state: "unknown" });
    expect(await sandbox.reap(reap)).toEqual({ type: "not_found" });
  });

  it("fake workspaces and outputs discard what they hold and refuse unknown bindings", async () => {
    const faults = new Faults();
    const workspace = new FakeWorkspace(faults);
    const candidate = { id: "ws_x", contentHash: `sha256:${"0".repeat(64)}` };
    workspace.candidates.set(candidate.id, {});
    expect(await workspace.discard({ candidate })).toEqual({ type: "discarded" });
    expect(await workspace.discard({ candidate })).toEqual({ type: "not_found" });
    expect(() => workspace.files("wsb_missing")).toThrow(/unknown/);
    const outputs = new FakeOutputs(faults);
    const manifest = await outputs.finalize({ entries: [] });
    expect(await outputs.discard({ manifest })).toEqual({ type: "discarded" });
    expect(await outputs.discard({ manifest })).toEqual({ type: "not_found" });
    expect(() => outputs.files("outb_missing")).toThrow(/unknown/);
  });

  it("the faulty fence passes isCurrent through", async () => {
    const inner = { isCurrent: async () => true } as unknown as RuntimeResourceFencePort;
    const faults = new Faults().arm("fence.isCurrent", { type: "return", value: false });
    const fenced = new FaultyFence(inner, faults);
    expect(await fenced.isCurrent({ fence, signal })).toBe(false);
    expect(await fenced.isCurrent({ fence, signal })).toBe(true);
  });

  it("waiting helpers fail loudly instead of hanging", async () => {
    await expect(until(() => false, "nothing", 3)).rejects.toThrow("timed out waiting for nothing");
    const scheduler = new ManualScheduler(0);
    await expect(drive(scheduler, new Promise(() => {}), [TEST_TIMINGS.publishRetryDelayMs], 3)).rejects.toThrow(/did not finish/);
  });
});
