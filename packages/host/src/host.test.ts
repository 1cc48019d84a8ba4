import type { ManagedRuntimeProfile } from "@openma/contract";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { gate } from "./testing/faults.ts";
import { AMA_WORKER_PROFILE, drive, openRig, type Rig, SUPERVISED_DRIVER, steps, TEST_TIMINGS, traceDetail, until } from "./testing/rig.ts";
import type { HarnessRunInput, HarnessRunResult, TurnCommitResult } from "./types.ts";

const signal = new AbortController().signal;
const HEAD = ["plan:ok", "acquire_fence:ok"];
const PLACED = [...HEAD, "materialize_workspace:ok", "prepare_outputs:ok", "acquire_compute:ok", "attach:ok"];
const FINAL = ["drain:ok", "checkpoint_workspace:ok", "collect_outputs:ok", "finalize_outputs:ok", "publish:ok"];
const DONE = ["terminate_compute:ok", "release_outputs:ok", "release_workspace:ok", "release_fence:ok"];
const TURN = ["checkpoint_workspace:ok", "collect_outputs:ok", "finalize_outputs:ok", "publish:ok", "commit_turn:ok"];

function profile(overrides: Partial<ManagedRuntimeProfile> = {}): ManagedRuntimeProfile {
  return { ...AMA_WORKER_PROFILE, ...overrides };
}

/** Resolves once the harness's signal aborts, like a harness that stops cooperatively. */
function stopsOnAbort(input: HarnessRunInput): Promise<HarnessRunResult> {
  return new Promise((resolve) => input.signal.addEventListener("abort", () => resolve({ type: "failed", error: "aborted" })));
}

describe.each(BACKENDS)("ManagedRuntimeHost on %s", (dialect) => {
  let storage: TestStorage;
  let rig: Rig;
  beforeAll(async () => {
    storage = await openTestStorage(dialect);
  });
  afterAll(async () => storage?.cleanup());

  function write(input: HarnessRunInput, files: Record<string, string>, outputs: Record<string, string> = {}) {
    Object.assign(rig.workspace.files(input.workspace.bindingId), files);
    if (input.outputs) Object.assign(rig.outputs.files(input.outputs.bindingId), outputs);
  }

  /** A harness script that writes workspace files and completes. */
  function writes(files: Record<string, string>) {
    return async (input: HarnessRunInput): Promise<HarnessRunResult> => {
      write(input, files);
      return { type: "completed" };
    };
  }

  async function active() {
    return rig.sqlFence.active({ scope: rig.scope, signal });
  }

  it("runs every step and publishes workspace, outputs and the cleared checkpoint pointer in one revision", async () => {
    rig = openRig(storage);
    rig.harness.script(async (input) => {
      expect(input.attempt).toBe(1);
      expect(input.restored).toBeNull();
      expect(input.fence).not.toHaveProperty("token");
      write(input, { "src/main.ts": "console.log(1)" }, { "report.md": "# done" });
      return { type: "completed" };
    });
    const result = await rig.run();
    expect(steps(result)).toEqual([...PLACED, "run_harness:ok", ...FINAL, ...DONE]);
    expect(result).toMatchObject({
      type: "completed",
      generation: 1,
      rejectedOutputs: [],
      cleanup: { compute: "terminated", orphanIds: [] },
    });
    const published = await active();
    expect(result.type === "completed" && result.publication).toEqual(published);
    expect(published).toMatchObject({ revision: 1, generation: 1, runtimeCheckpoint: null, outputs: { entryCount: 1 } });
    expect(rig.workspace.candidates.get(published!.workspace!.id)).toEqual({ "src/main.ts": "console.log(1)" });
    const history = await rig.sqlFence.history({ scope: rig.scope, limit: 10, signal });
    expect(history.map((h) => h.idempotencyKey)).toEqual(["1:final:publish"]);
    expect(rig.host().capabilities.provider).toBe("fake");
  });

  it("refuses admission before touching the fence when a guarantee is missing", async () => {
    rig = openRig(storage);
    const result = await rig.run(profile({ runtimeCheckpoint: "required" }), { runtimeCheckpoint: undefined });
    expect(result.type).toBe("admission_error");
    expect(steps(result)).toEqual(["plan:rejected"]);
    expect(rig.faults.calls).toEqual([]);
  });

  it("returns a conflict while another owner holds the fence", async () => {
    rig = openRig(storage);
    const other = await rig.sqlFence.acquire({ scope: rig.scope, ownerId: "other#1", ttlMs: 60_000, signal });
    const result = await rig.run();
    expect(result).toMatchObject({ type: "conflict", holderExpiresAt: other.type === "acquired" ? other.fence.expiresAt : 0 });
    expect(steps(result)).toEqual(["plan:ok", "acquire_fence:rejected"]);
  });

  it("falls back to the last verified revision when the newest candidate is corrupt", async () => {
    rig = openRig(storage);
    rig.harness.script(writes({ a: "1" }), writes({ a: "2" }));
    await rig.run();
    await rig.run();
    const newest = (await active())!.workspace!;
    rig.workspace.corrupt.add(newest.id);
    const result = await rig.run();
    expect(steps(result).slice(2, 4)).toEqual(["materialize_workspace:rejected", "materialize_workspace:fallback"]);
    expect(result.type).toBe("completed");
    expect(rig.harness.runs[2]!.restored).not.toEqual(newest);
    expect(rig.workspace.candidates.get((await active())!.workspace!.id)).toEqual({ a: "1" });
  });

  it("never starts a durable workspace empty when every revision is corrupt", async () => {
    rig = openRig(storage);
    rig.harness.script(writes({ a: "1" }), writes({ a: "2" }));
    await rig.run();
    await rig.run();
    for (const id of rig.workspace.candidates.keys()) rig.workspace.corrupt.add(id);
    const before = await active();
    const result = await rig.run();
    expect(result).toMatchObject({ type: "failed", stage: "materialize_workspace" });
    expect(steps(result)).toEqual([
      ...HEAD,
      "materialize_workspace:rejected",
      "materialize_workspace:rejected",
      "materialize_workspace:failed",
      "release_fence:ok",
    ]);
    expect(await active()).toEqual(before);

    // Only an explicitly ephemeral profile may start over from nothing.
    const ephemeral = await rig.run(profile({ workspace: { requirement: "ephemeral", preferredStrategies: ["checkpoint_restore"] } }));
    expect(steps(ephemeral).slice(2, 5)).toEqual([
      "materialize_workspace:rejected",
      "materialize_workspace:rejected",
      "materialize_workspace:fallback",
    ]);
    expect(rig.harness.runs.at(-1)!.restored).toBeNull();
  });

  it("commits live turns under the same fence, idempotently per turn id", async () => {
    rig = openRig(storage);
    const answers: TurnCommitResult[] = [];
    let commitLater!: HarnessRunInput["commitTurn"];
    rig.harness.script(async (input) => {
      commitLater = input.commitTurn;
      write(input, { a: "turn-1" }, { "o.txt": "x" });
      answers.push(await input.commitTurn("turn_1"));
      answers.push(await input.commitTurn("turn_1"));
      answers.push(await input.commitTurn(""));
      answers.push(await input.commitTurn("x".repeat(129)));
      rig.faults.arm("workspace.checkpoint", { type: "throw", message: "disk full" });
      answers.push(await input.commitTurn("turn_2"));
      write(input, { a: "final" });
      return { type: "completed" };
    });
    const result = await rig.run();
    expect(answers).toEqual([
      { type: "committed", revision: 1, replayed: false },
      { type: "committed", revision: 1, replayed: false },
      { type: "rejected", reason: "invalid_turn_id" },
      { type: "rejected", reason: "invalid_turn_id" },
      { type: "failed", error: "disk full" },
    ]);
    expect(steps(result)).toEqual([
      ...PLACED,
      ...TURN,
      "checkpoint_workspace:failed",
      "commit_turn:failed",
      "run_harness:ok",
      ...FINAL,
      ...DONE,
    ]);
    const history = await rig.sqlFence.history({ scope: rig.scope, limit: 10, signal });
    expect(history.map((h) => h.idempotencyKey)).toEqual(["1:final:publish", "1:turn:turn_1:publish"]);
    expect(await commitLater("turn_3")).toEqual({ type: "rejected", reason: "not_running" });
  });

  it("turn commits with nothing to publish report no revision", async () => {
    rig = openRig(storage);
    let answer: TurnCommitResult | undefined;
    rig.harness.script(async (input) => {
      answer = await input.commitTurn("t1");
      return { type: "completed" };
    });
    const result = await rig.run(profile({ workspace: { requirement: "ephemeral" }, outputs: { requirement: "disabled" } }));
    expect(answer).toEqual({ type: "committed", revision: null, replayed: false });
    expect(result).toMatchObject({ type: "completed", publication: null });
    expect(steps(result)).toEqual([
      ...HEAD,
      "materialize_workspace:ok",
      "acquire_compute:ok",
      "attach:ok",
      "publish:skipped",
      "commit_turn:ok",
      "run_harness:ok",
      "drain:ok",
      "publish:skipped",
      "terminate_compute:ok",
      "release_workspace:ok",
      "release_fence:ok",
    ]);
  });

  it("publishes only the runtime checkpoint of an ephemeral workspace", async () => {
    rig = openRig(storage);
    const result = await rig.run(
      profile({ workspace: { requirement: "ephemeral" }, outputs: { requirement: "disabled" }, runtimeCheckpoint: "optional" }),
    );
    expect(result.type === "completed" && result.publication).toMatchObject({
      revision: 1,
      workspace: null,
      outputs: null,
      runtimeCheckpoint: { checkpointId: "ck_1", workspaceCandidateId: null },
    });
  });

  it("restores the runtime checkpoint of an ephemeral workspace, which belongs to no candidate", async () => {
    rig = openRig(storage);
    const ephemeral = profile({
      workspace: { requirement: "ephemeral" },
      outputs: { requirement: "disabled" },
      runtimeCheckpoint: "optional",
    });
    await rig.run(ephemeral);
    const result = await rig.run(ephemeral);
    expect(steps(result)).toContain("restore_runtime_checkpoint:ok");
  });

  it("loses the fence mid-run: aborts the harness cooperatively, hard-kills, publishes nothing", async () => {
    rig = openRig(storage);
    const started = gate();
    let late: TurnCommitResult | undefined;
    rig.harness.script(async (input) => {
      started.open();
      const result = await stopsOnAbort(input);
      late = await input.commitTurn("late");
      return result;
    });
    const running = rig.run();
    await started.promise;
    rig.faults.arm("fence.renew", { type: "return", value: { type: "stale", reason: "superseded" } });
    rig.scheduler.advance(TEST_TIMINGS.renewEveryMs);
    const result = await running;
    expect(result).toMatchObject({ type: "lease_lost", stage: "run_harness", reason: "lease lost: fence superseded" });
    expect(late).toEqual({ type: "rejected", reason: "lease_lost" });
    expect(steps(result)).toEqual([
      ...PLACED,
      "checkpoint_workspace:lease_lost",
      "commit_turn:rejected",
      "run_harness:lease_lost",
      "terminate_compute:ok",
      "abort_outputs:ok",
      "release_workspace:ok",
      "release_fence:lost",
    ]);
    expect([...rig.outputs.bindings.values()].map((b) => b.end)).toEqual(["aborted:lease_lost"]);
    expect(await active()).toBeNull();
    expect(rig.faults.calls).not.toContain("fence.publish");
  });

  it("hard-kills a harness that ignores the abort once the grace period is over", async () => {
    rig = openRig(storage);
    const started = gate();
    rig.harness.script(async () => {
      started.open();
      return new Promise<HarnessRunResult>(() => {});
    });
    const running = rig.run();
    await started.promise;
    rig.faults.arm("fence.renew", { type: "return", value: { type: "stale", reason: "expired" } });
    rig.scheduler.advance(TEST_TIMINGS.renewEveryMs);
    await until(() => rig.scheduler.pending.includes(TEST_TIMINGS.abortGraceMs), "grace period");
    expect(rig.faults.calls).not.toContain("sandbox.terminate");
    rig.scheduler.advance(TEST_TIMINGS.abortGraceMs);
    const result = await running;
    expect(result).toMatchObject({ type: "lease_lost", cleanup: { compute: "terminated" } });
    expect(traceDetail(result, "run_harness")).toMatch(/did not stop within 7000 ms/);
    expect(rig.sandbox.alive).toEqual([]);
  });

  it("keeps the fence through a transient renewal failure", async () => {
    rig = openRig(storage);
    const release = gate();
    rig.harness.script(async () => {
      await release.promise;
      return { type: "completed" };
    });
    const running = rig.run();
    await until(() => rig.harness.runs.length === 1, "harness start");
    rig.faults.arm("fence.renew", { type: "throw", message: "connection reset" });
    rig.scheduler.advance(TEST_TIMINGS.renewEveryMs);
    await until(() => rig.faults.calls.includes("fence.renew"), "first renewal");
    rig.scheduler.advance(TEST_TIMINGS.renewEveryMs);
    await until(() => rig.faults.count("fence.renew") === 2, "second renewal");
    release.open();
    const result = await running;
    expect(result.type).toBe("completed");
    expect((await active())!.revision).toBe(1);
  });

  it("loses the fence while a checkpoint is in flight: the next step refuses to start", async () => {
    rig = openRig(storage);
    const hold = gate();
    rig.faults.arm("workspace.checkpoint", { type: "wait", until: hold.promise });
    const running = rig.run();
    await until(() => rig.faults.calls.includes("workspace.checkpoint"), "checkpoint in flight");
    rig.faults.arm("fence.renew", { type: "return", value: { type: "stale", reason: "superseded" } });
    rig.scheduler.advance(TEST_TIMINGS.renewEveryMs);
    await until(() => rig.faults.calls.includes("fence.renew"), "renewal");
    // Renewals stopped; only the grace period runs, and the checkpoint answers within it.
    await until(() => rig.sandbox.alive.length === 1 && rig.scheduler.pending.join() === String(TEST_TIMINGS.abortGraceMs), "loss noticed");
    hold.open();
    const result = await running;
    expect(steps(result)).toEqual([
      ...PLACED,
      "run_harness:ok",
      "drain:ok",
      "checkpoint_workspace:ok",
      "collect_outputs:lease_lost",
      "terminate_compute:ok",
      "abort_outputs:ok",
      "release_workspace:ok",
      "release_fence:lost",
    ]);
    expect(await active()).toBeNull();
  });

  it("cancellation aborts the harness and publishes nothing", async () => {
    rig = openRig(storage);
    const cancel = new AbortController();
    let commit: TurnCommitResult | undefined;
    rig.harness.script(async (input) => {
      const result = await stopsOnAbort(input);
      commit = await input.commitTurn("after-cancel");
      return result;
    });
    const running = rig.host().run({ scope: rig.scope, profile: AMA_WORKER_PROFILE, signal: cancel.signal });
    await until(() => rig.harness.runs.length === 1, "harness start");
    cancel.abort();
    const result = await running;
    expect(result).toMatchObject({ type: "cancelled", stage: "run_harness" });
    expect(commit).toEqual({ type: "rejected", reason: "not_running" });
    // The harness stopped within the grace period: its timer is gone with the run, nothing is left sleeping.
    expect(rig.scheduler.pending).toEqual([]);
    expect(steps(result).slice(-6)).toEqual([
      "commit_turn:rejected",
      "run_harness:cancelled",
      "terminate_compute:ok",
      "abort_outputs:ok",
      "release_workspace:ok",
      "release_fence:ok",
    ]);
  });

  it("cold-acquires and restores the newest publication when the sandbox disappears", async () => {
    rig = openRig(storage);
    const committed = gate();
    rig.harness.script(async (input) => {
      write(input, { a: "turn-1" });
      await input.commitTurn("t1");
      committed.open();
      return stopsOnAbort(input);
    });
    let restoredFiles: Record<string, string> = {};
    rig.harness.script(async (input) => {
      restoredFiles = { ...rig.workspace.files(input.workspace.bindingId) };
      return { type: "completed" };
    });
    const running = rig.run();
    await committed.promise;
    await until(() => rig.scheduler.pending.includes(TEST_TIMINGS.sandboxHeartbeatMs), "heartbeat loop");
    rig.sandbox.vanish(rig.harness.runs[0]!.sandbox.runtimeId);
    rig.scheduler.advance(TEST_TIMINGS.sandboxHeartbeatMs);
    const result = await running;
    expect(result.type).toBe("completed");
    const second = rig.harness.runs[1]!;
    expect(second.attempt).toBe(2);
    expect(second.restored?.id).toBe((await rig.sqlFence.history({ scope: rig.scope, limit: 5, signal }))[1]!.workspace!.id);
    expect(restoredFiles).toEqual({ a: "turn-1" });
    expect(steps(result)).toEqual([
      ...PLACED,
      ...TURN,
      "sandbox_heartbeat:lost",
      "run_harness:lost",
      "terminate_compute:ok",
      "abort_outputs:ok",
      "release_workspace:ok",
      ...PLACED.slice(2),
      "run_harness:ok",
      ...FINAL,
      ...DONE,
    ]);
  });

  it("gives up after the cold-restart budget", async () => {
    rig = openRig(storage);
    const lost = { type: "return" as const, value: { type: "sandbox_lost", reason: "provider deleted the box" } };
    rig.faults.arm("harness.run", lost, lost);
    const result = await rig.run();
    expect(result).toMatchObject({ type: "failed", stage: "run_harness", error: "provider deleted the box" });
    expect(steps(result).filter((s) => s === "run_harness:lost")).toHaveLength(2);
  });

  it("treats a throwing heartbeat as transient", async () => {
    rig = openRig(storage);
    const release = gate();
    rig.harness.script(async () => {
      await release.promise;
      return { type: "completed" };
    });
    rig.faults.arm("sandbox.heartbeat", { type: "throw", message: "timeout" });
    const running = rig.run();
    await until(() => rig.scheduler.pending.includes(TEST_TIMINGS.sandboxHeartbeatMs), "heartbeat loop");
    rig.scheduler.advance(TEST_TIMINGS.sandboxHeartbeatMs);
    await until(() => rig.faults.calls.includes("sandbox.heartbeat"), "heartbeat");
    release.open();
    const result = await running;
    expect(result.type).toBe("completed");
    expect(steps(result)).toContain("sandbox_heartbeat:failed");
  });

  it.each([
    ["ama_worker", AMA_WORKER_PROFILE.driver, TEST_TIMINGS.drainTimeoutMs],
    ["openma_supervised", SUPERVISED_DRIVER, 45_000],
  ] as const)("bounds drain by the %s timeout", async (_name, driver, timeoutMs) => {
    rig = openRig(storage);
    rig.faults.arm("harness.drain", { type: "wait", until: new Promise(() => {}) });
    const result = await drive(rig.scheduler, rig.run(profile({ driver })), [timeoutMs]);
    expect(result).toMatchObject({ type: "failed", stage: "drain", error: `drain timed out after ${timeoutMs} ms` });
  });

  describe("runtime checkpoints", () => {
    const optional = profile({ runtimeCheckpoint: "optional", driver: SUPERVISED_DRIVER });

    it("restores a validated checkpoint of an earlier generation instead of acquiring cold", async () => {
      rig = openRig(storage);
      await rig.run(optional);
      const published = (await active())!;
      expect(published.runtimeCheckpoint).toMatchObject({ generation: 1, workspaceCandidateId: published.workspace!.id });
      const result = await rig.run(optional);
      expect(steps(result).slice(4, 6)).toEqual(["restore_runtime_checkpoint:ok", "attach:ok"]);
      expect(rig.harness.runs[1]!.sandbox.runtimeId).toMatch(/^rt_restored/);
      expect((await active())!.runtimeCheckpoint).toMatchObject({ generation: 2 });
    });

    it("falls back to a cold start when the harness build changed", async () => {
      rig = openRig(storage);
      await rig.run(optional);
      const result = await rig.run({ ...optional, driver: { ...SUPERVISED_DRIVER, harness: { id: "pi", version: "2.0.0" } } });
      expect(steps(result).slice(4, 6)).toEqual(["restore_runtime_checkpoint:rejected", "acquire_compute:ok"]);
      expect(result.trace[4]!.detail).toMatch(/harness_mismatch/);
    });

    it.each([
      ["fails", { type: "return" as const, value: { type: "failed", error: "snapshot expired" } }],
      ["throws", { type: "throw" as const, message: "provider 500" }],
    ])("falls back to a cold start when restore %s", async (_name, fault) => {
      rig = openRig(storage);
      await rig.run(optional);
      rig.faults.arm("checkpoint.restore", fault);
      const result = await rig.run(optional);
      expect(steps(result).slice(4, 6)).toEqual(["restore_runtime_checkpoint:failed", "acquire_compute:ok"]);
      expect(result.type).toBe("completed");
    });

    it("falls back when the checkpoint is gone from the provider", async () => {
      rig = openRig(storage);
      await rig.run(optional);
      rig.checkpoints.refs.clear();
      const result = await rig.run(optional);
      expect(steps(result)[4]).toBe("restore_runtime_checkpoint:failed");
    });
  });

  describe("retained runtimes", () => {
    const retained = profile({ workspace: { requirement: "continuable", preferredStrategies: ["retained_runtime"] } });

    it("suspends instead of terminating after a completed run", async () => {
      rig = openRig(storage);
      const result = await rig.run(retained);
      expect(result).toMatchObject({ type: "completed", cleanup: { compute: "suspended" } });
      expect(steps(result).slice(-4)).toEqual(["suspend_compute:ok", "release_outputs:ok", "release_workspace:ok", "release_fence:ok"]);
      expect([...rig.sandbox.runtimes.values()]).toEqual(["suspended"]);
    });

    it("terminates a runtime that could not be suspended", async () => {
      rig = openRig(storage);
      rig.faults.arm("sandbox.suspend", { type: "return", value: { type: "failed", error: "quota" } });
      const result = await rig.run(retained);
      expect(result).toMatchObject({ cleanup: { compute: "terminated" } });
      expect(steps(result)).toContain("suspend_compute:failed");
    });

    it("records a suspend_failed orphan when neither suspend nor kill works", async () => {
      rig = openRig(storage);
      rig.faults.arm("sandbox.suspend", { type: "throw" }).arm("sandbox.terminate", { type: "throw" });
      const result = await rig.run(retained);
      expect(result).toMatchObject({ cleanup: { compute: "orphaned" } });
      const orphan = await rig.orphans.get({ id: result.type === "completed" ? result.cleanup.orphanIds[0]! : "", signal });
      expect(orphan).toMatchObject({ reason: "suspend_failed", state: "pending", generation: 1 });
    });

    it("terminates (never suspends) a retained runtime whose run failed", async () => {
      rig = openRig(storage);
      rig.faults.arm("harness.drain", { type: "throw" });
      const result = await rig.run(retained);
      expect(result).toMatchObject({ type: "failed", cleanup: { compute: "terminated" } });
    });
  });

  it("records a lease_lost orphan when the kill after a lost fence fails", async () => {
    rig = openRig(storage);
    rig.harness.script(stopsOnAbort);
    rig.faults.arm("sandbox.terminate", { type: "throw", message: "gone dark" });
    const running = rig.run();
    await until(() => rig.harness.runs.length === 1, "harness start");
    rig.faults.arm("fence.renew", { type: "return", value: { type: "stale", reason: "superseded" } });
    rig.scheduler.advance(TEST_TIMINGS.renewEveryMs);
    const result = await running;
    expect(result.type).toBe("lease_lost");
    const id = result.type === "lease_lost" ? result.cleanup.orphanIds[0]! : "";
    expect(await rig.orphans.get({ id, signal })).toMatchObject({ reason: "lease_lost", lastError: "gone dark" });
  });
});
