/**
 * Chaos lane, the hard kill after the grace period: after a lease loss or a
 * cancellation the host waits at most `abortGraceMs` for any port. A port
 * call that hangs then (a publish stuck on the dead database connection that
 * broke the renewals, a checkpoint, an acquire) is abandoned, and compute is
 * killed at grace expiry, not when, or if, the call answers. The abandoned
 * call publishes nothing and whatever it acquires late is killed at once.
 * Virtual time only; the real SQL fence on both backends.
 */
import type { FencePublishResult, ManagedRuntimeProfile } from "@openma/contract";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { type Gate, gate } from "./testing/faults.ts";
import { AMA_WORKER_PROFILE, openRig, type Rig, settle, steps, TEST_TIMINGS, traceDetail, until } from "./testing/rig.ts";
import type { HarnessRunResult, RuntimeRunResult, TurnCommitResult } from "./types.ts";

const signal = new AbortController().signal;
const GRACE = TEST_TIMINGS.abortGraceMs;
const HEAD = ["plan:ok", "acquire_fence:ok", "materialize_workspace:ok", "prepare_outputs:ok"];
const PLACED = [...HEAD, "acquire_compute:ok", "attach:ok"];
const COMMIT_UPLOADED = ["checkpoint_workspace:ok", "collect_outputs:ok", "finalize_outputs:ok"];
const ABANDONED = new RegExp(`no answer within ${GRACE} ms of the abort; abandoned`);
/** A port call that never answers. */
const HANG = { type: "wait", until: new Promise<never>(() => {}) } as const;

describe.each(BACKENDS)("hard kill at grace expiry on %s", (dialect) => {
  let storage: TestStorage;
  let rig: Rig;
  beforeAll(async () => {
    storage = await openTestStorage(dialect);
  });
  afterAll(async () => storage?.cleanup());
  afterEach(() => {
    vi.restoreAllMocks();
  });

  const active = () => rig.sqlFence.active({ scope: rig.scope, signal });

  /**
   * The run is interrupted; the host arms the grace period and kills nothing
   * before it is over, then kills (once) as soon as it is, without any
   * hanging call having answered.
   */
  async function graceThenKill(running: Promise<RuntimeRunResult>, aliveDuringGrace: number): Promise<RuntimeRunResult> {
    await until(() => rig.scheduler.pending.includes(GRACE), "grace period armed");
    rig.scheduler.advance(GRACE - 1);
    await settle();
    expect(rig.sandbox.alive).toHaveLength(aliveDuringGrace);
    expect(rig.faults.calls).not.toContain("sandbox.terminate");
    rig.scheduler.advance(1);
    return running;
  }

  it("kills compute when the grace period ends while a turn commit's publish hangs on a lost fence", async () => {
    rig = openRig(storage);
    rig.faults.arm("fence.publish", HANG);
    let turn: TurnCommitResult | undefined;
    rig.harness.script(async (input): Promise<HarnessRunResult> => {
      rig.workspace.files(input.workspace.bindingId)["notes.md"] = "turn 1";
      turn = await input.commitTurn("turn_1");
      // Deaf to the abort as well: only the hard kill stops it.
      return new Promise(() => {});
    });
    const running = rig.run();
    await until(() => rig.faults.calls.includes("fence.publish"), "turn publish on the wire");

    // The database connection is gone: renewals throw until the safety margin, then the lease controller gives up.
    rig.faults.always("fence.renew", { type: "throw", message: "connection to the database lost" });
    const placement = rig.harness.runs[0]!;
    while (!placement.signal.aborted) {
      rig.scheduler.advance(5_000);
      await settle();
    }
    expect(String(placement.signal.reason)).toContain("could not renew before expiry");

    const result = await graceThenKill(running, 1);
    expect(result).toMatchObject({ type: "lease_lost", stage: "run_harness", cleanup: { compute: "terminated", orphanIds: [] } });
    expect(steps(result)).toEqual([
      ...PLACED,
      ...COMMIT_UPLOADED,
      "publish:lease_lost",
      "commit_turn:rejected",
      "run_harness:lease_lost",
      "terminate_compute:ok",
      "abort_outputs:ok",
      "release_workspace:ok",
      "release_fence:lost",
    ]);
    expect(traceDetail(result, "publish")).toMatch(ABANDONED);
    expect(traceDetail(result, "run_harness")).toMatch(`did not stop within ${GRACE} ms`);
    expect(turn).toEqual({ type: "rejected", reason: "lease_lost" });

    // Killed exactly once, while the publish still has no answer; it was never retried, and nothing was published.
    expect(rig.sandbox.alive).toEqual([]);
    expect(rig.faults.count("sandbox.terminate")).toBe(1);
    expect(rig.faults.count("fence.publish")).toBe(1);
    expect(await active()).toBeNull();
    expect(await rig.sqlFence.history({ scope: rig.scope, limit: 10, signal })).toEqual([]);
    expect([...rig.outputs.bindings.values()].map((b) => b.end)).toEqual(["aborted:lease_lost"]);
    expect(rig.scheduler.pending).toEqual([]);
  });

  it("kills compute when the grace period ends while the final publish hangs on a lost fence", async () => {
    rig = openRig(storage);
    rig.harness.script(async (input) => {
      rig.workspace.files(input.workspace.bindingId)["notes.md"] = "final";
      return { type: "completed" };
    });
    rig.faults.arm("fence.publish", HANG);
    const running = rig.run();
    await until(() => rig.faults.calls.includes("fence.publish"), "final publish on the wire");
    rig.faults.arm("fence.renew", { type: "return", value: { type: "stale", reason: "superseded" } });
    rig.scheduler.advance(TEST_TIMINGS.renewEveryMs);

    const result = await graceThenKill(running, 1);
    expect(result).toMatchObject({ type: "lease_lost", stage: "publish", cleanup: { compute: "terminated" } });
    expect(steps(result)).toEqual([
      ...PLACED,
      "run_harness:ok",
      "drain:ok",
      ...COMMIT_UPLOADED,
      "publish:lease_lost",
      "terminate_compute:ok",
      "abort_outputs:ok",
      "release_workspace:ok",
      "release_fence:lost",
    ]);
    expect(traceDetail(result, "publish")).toMatch(ABANDONED);
    expect(rig.sandbox.alive).toEqual([]);
    expect(rig.faults.count("sandbox.terminate")).toBe(1);
    expect(await active()).toBeNull();
  });

  it("kills a cancelled run whose turn publish hangs, and the publish landing late is refused", async () => {
    rig = openRig(storage);
    // A statement already on the wire: the abort cannot recall it, it reaches the database whenever it does.
    const publish = rig.sqlFence.publish.bind(rig.sqlFence);
    const answers: FencePublishResult[] = [];
    vi.spyOn(rig.sqlFence, "publish").mockImplementation(async (input) => {
      const answer = await publish({ ...input, signal });
      answers.push(answer);
      return answer;
    });
    const late = gate();
    rig.faults.arm("fence.publish", { type: "wait", until: late.promise });
    let turn: TurnCommitResult | undefined;
    rig.harness.script(async (input) => {
      rig.workspace.files(input.workspace.bindingId)["notes.md"] = "turn 1";
      turn = await input.commitTurn("turn_1");
      return { type: "completed" };
    });
    const cancel = new AbortController();
    const running = rig.host().run({ scope: rig.scope, profile: AMA_WORKER_PROFILE, signal: cancel.signal });
    await until(() => rig.faults.calls.includes("fence.publish"), "turn publish on the wire");
    cancel.abort();

    const result = await graceThenKill(running, 1);
    expect(result).toMatchObject({ type: "cancelled", stage: "run_harness", cleanup: { compute: "terminated" } });
    const trace = steps(result);
    expect(trace).toEqual([
      ...PLACED,
      ...COMMIT_UPLOADED,
      "publish:cancelled",
      "commit_turn:rejected",
      "run_harness:cancelled",
      "terminate_compute:ok",
      "abort_outputs:ok",
      "release_workspace:ok",
      "release_fence:ok",
    ]);
    expect(traceDetail(result, "publish")).toMatch(ABANDONED);
    expect(turn).toEqual({ type: "rejected", reason: "not_running" });
    expect(rig.sandbox.alive).toEqual([]);

    // The publish reaches the database after the kill and the fence release: refused, and the result is not rewritten.
    late.open();
    await until(() => answers.length === 1, "late publish answered");
    expect(answers[0]!.type).toBe("stale");
    await settle();
    expect(await active()).toBeNull();
    expect(await rig.sqlFence.history({ scope: rig.scope, limit: 10, signal })).toEqual([]);
    expect(steps(result)).toEqual(trace);
    expect(rig.faults.count("fence.publish")).toBe(1);
    expect(rig.faults.count("sandbox.terminate")).toBe(1);
  });

  /** Holds `point` until opened, cancels once it is in flight, and lets the grace period run out. */
  async function cancelWhileHanging(point: string, profile: ManagedRuntimeProfile): Promise<{ result: RuntimeRunResult; late: Gate }> {
    const late = gate();
    rig.faults.arm(point, { type: "wait", until: late.promise });
    const cancel = new AbortController();
    const running = rig.host().run({ scope: rig.scope, profile, signal: cancel.signal });
    await until(() => rig.faults.calls.includes(point), `${point} in flight`);
    cancel.abort();
    return { result: await graceThenKill(running, 0), late };
  }

  it("kills compute that a sandbox acquire abandoned at grace expiry returns late, at once", async () => {
    rig = openRig(storage);
    const { result, late } = await cancelWhileHanging("sandbox.acquire", AMA_WORKER_PROFILE);
    expect(result).toMatchObject({ type: "cancelled", stage: "acquire_compute", cleanup: { compute: "none" } });
    expect(steps(result)).toEqual([...HEAD, "acquire_compute:cancelled", "abort_outputs:ok", "release_workspace:ok", "release_fence:ok"]);
    expect(traceDetail(result, "acquire_compute")).toMatch(ABANDONED);

    late.open();
    await until(() => rig.faults.count("sandbox.terminate") === 1, "late runtime killed");
    expect([...rig.sandbox.runtimes.values()]).toEqual(["stopped"]);
    expect(rig.harness.runs).toEqual([]);
    // The result handed out is not rewritten by the late cleanup.
    expect(result).toMatchObject({ cleanup: { compute: "none", orphanIds: [] } });
    expect(steps(result)).not.toContain("terminate_compute:ok");
  });

  it("kills a runtime restored from a checkpoint after the grace period, at once", async () => {
    rig = openRig(storage);
    const profile = { ...AMA_WORKER_PROFILE, runtimeCheckpoint: "optional" as const };
    expect(await rig.run(profile)).toMatchObject({ type: "completed", publication: { runtimeCheckpoint: { checkpointId: "ck_1" } } });
    rig.faults.calls.length = 0;

    const { result, late } = await cancelWhileHanging("checkpoint.restore", profile);
    expect(result).toMatchObject({ type: "cancelled", stage: "acquire_compute", cleanup: { compute: "none" } });
    expect(steps(result)).toEqual([
      ...HEAD,
      "restore_runtime_checkpoint:failed",
      "acquire_compute:cancelled",
      "abort_outputs:ok",
      "release_workspace:ok",
      "release_fence:ok",
    ]);
    expect(traceDetail(result, "restore_runtime_checkpoint")).toMatch(ABANDONED);
    expect(rig.faults.calls).not.toContain("sandbox.acquire");

    late.open();
    await until(() => rig.faults.count("sandbox.terminate") === 1, "late restored runtime killed");
    expect(rig.sandbox.alive).toEqual([]);
    expect(rig.harness.runs).toHaveLength(1);
  });
});
