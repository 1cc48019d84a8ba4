/**
 * The host's warm-compute path (ADR 0032) over the fakes and the real SQL
 * fence: the pool is asked only under the held fence and after the
 * workspace is restored, for the first placement only; a claimed sandbox is
 * killed at the end and settled; a miss starts cold; a claim that throws
 * fails the run instead of starting cold; a failed kill of a claimed
 * sandbox leaves an orphan record and lets its owner record lapse; a
 * cancelled run does not ask the pool.
 */
import type { ManagedRuntimeProfile } from "@openma/contract";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { gate } from "./testing/faults.ts";
import { AMA_WORKER_PROFILE, openRig, type Rig, steps, traceDetail, until } from "./testing/rig.ts";
import type { WarmComputeClaim, WarmComputePort } from "./types.ts";

/** A pool over the rig's fake sandbox: one started runtime per claim, each claim and settle recorded. */
function fakePool(rig: Rig, answer: "claim" | "miss" | "throw" = "claim", holdUntil?: Promise<void>) {
  const events: string[] = [];
  const port: WarmComputePort = {
    async claim(input): Promise<WarmComputeClaim> {
      // What the host had done when it asked: the fence held, the workspace restored.
      events.push(`claim after ${rig.faults.calls.filter((c) => c === "fence.acquire" || c === "workspace.materialize").join(",")}`);
      expect(input.fence).not.toHaveProperty("token");
      await holdUntil;
      if (answer === "miss") return { type: "miss", reason: "no warm sandbox is ready" };
      if (answer === "throw") throw new Error("moving the workspace failed");
      const lease = rig.sandbox.start("warm");
      return { type: "claimed", compute: { lease, settle: async (end) => void events.push(`settle ${lease.runtimeId} ${end}`) } };
    },
  };
  return { port, events };
}

describe("ManagedRuntimeHost with a warm pool", () => {
  let storage: TestStorage;
  beforeAll(async () => {
    storage = await openTestStorage("sqlite");
  });
  afterAll(async () => storage?.cleanup());

  it("claims under the held fence after the restore, kills the claimed sandbox at the end and settles it", async () => {
    const rig = openRig(storage);
    const pool = fakePool(rig);
    const result = await rig.run(AMA_WORKER_PROFILE, { warm: pool.port });
    expect(result.type).toBe("completed");
    expect(pool.events).toEqual(["claim after fence.acquire,workspace.materialize", "settle warm_1 terminated"]);
    expect(traceDetail(result, "acquire_compute")).toBe("warm warm_1");
    expect(rig.faults.count("sandbox.acquire")).toBe(0);
    expect(rig.sandbox.alive).toEqual([]);
    expect(steps(result)).toContain("terminate_compute:ok");
  });

  it("starts cold on a miss, and never asks for a retained runtime", async () => {
    const rig = openRig(storage);
    const pool = fakePool(rig, "miss");
    const result = await rig.run(AMA_WORKER_PROFILE, { warm: pool.port });
    expect(result.type).toBe("completed");
    expect(steps(result)).toContain("acquire_compute:skipped");
    expect(rig.faults.count("sandbox.acquire")).toBe(1);

    const retained = openRig(storage);
    const never = fakePool(retained);
    const profile: ManagedRuntimeProfile = {
      ...AMA_WORKER_PROFILE,
      workspace: { requirement: "continuable", preferredStrategies: ["retained_runtime"] },
    };
    const kept = await retained.run(profile, { warm: never.port });
    expect(kept.type).toBe("completed");
    expect(never.events).toEqual([]);
  });

  it("fails the run (no cold start over possibly half-moved bindings) when the claim throws", async () => {
    const rig = openRig(storage);
    const result = await rig.run(AMA_WORKER_PROFILE, { warm: fakePool(rig, "throw").port });
    expect(result).toMatchObject({ type: "failed", stage: "acquire_compute" });
    expect(rig.faults.count("sandbox.acquire")).toBe(0);
    expect(steps(result)).toContain("release_fence:ok");
  });

  it("a claimed sandbox whose kill fails becomes an orphan record and its owner record is let lapse", async () => {
    const rig = openRig(storage);
    const pool = fakePool(rig);
    rig.faults.always("sandbox.terminate", { type: "return", value: { type: "failed", error: "engine refused" } });
    const result = await rig.run(AMA_WORKER_PROFILE, { warm: pool.port });
    expect(result.type).toBe("completed");
    if (result.type !== "completed") return;
    expect(result.cleanup.compute).toBe("orphaned");
    expect(pool.events.at(-1)).toBe("settle warm_1 not_terminated");
  });

  it("is not asked once the run was cancelled before compute, and a claim that throws on the abort ends the run cancelled", async () => {
    const rig = openRig(storage);
    const pool = fakePool(rig);
    const preparing = gate();
    rig.faults.arm("outputs.prepare", { type: "wait", until: preparing.promise });
    const cancel = new AbortController();
    const running = rig.host({ warm: pool.port }).run({ scope: rig.scope, profile: AMA_WORKER_PROFILE, signal: cancel.signal });
    await until(() => rig.faults.count("outputs.prepare") === 1, "prepare_outputs");
    cancel.abort();
    preparing.open();
    expect(await running).toMatchObject({ type: "cancelled", stage: "acquire_compute" });
    expect(pool.events).toEqual([]);

    const second = openRig(storage);
    const claiming = gate();
    const throwing = fakePool(second, "throw", claiming.promise);
    const stop = new AbortController();
    const run = second.host({ warm: throwing.port }).run({ scope: second.scope, profile: AMA_WORKER_PROFILE, signal: stop.signal });
    await until(() => throwing.events.length === 1, "the claim");
    stop.abort();
    claiming.open();
    expect(await run).toMatchObject({ type: "cancelled", stage: "acquire_compute" });
    expect(second.faults.count("sandbox.acquire")).toBe(0);
  });
});
