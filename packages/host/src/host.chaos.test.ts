/**
 * Chaos lane: a fault injected at every stage of the transaction, one row
 * per fault point, each asserting the exact step/cleanup trace and the
 * seed's asymmetric outcome: before candidate creation and during upload the
 * active pointers stay as they were; after upload the publish is retried
 * with the same key and lands exactly once; a stale fence publishes nothing;
 * a failed hard kill leaves a token-free orphan. Virtual time only.
 */
import type { ActivePublication, ManagedRuntimeProfile } from "@openma/contract";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import type { FakeOutputBinding } from "./testing/fakes.ts";
import type { Fault } from "./testing/faults.ts";
import { AMA_WORKER_PROFILE, drive, openRig, type Rig, steps, TEST_TIMINGS } from "./testing/rig.ts";
import type { ComputeEnd, RuntimeRunResult } from "./types.ts";

const HEAD = ["plan:ok", "acquire_fence:ok"];
const PLACED = [...HEAD, "materialize_workspace:ok", "prepare_outputs:ok", "acquire_compute:ok", "attach:ok"];
const RAN = [...PLACED, "run_harness:ok", "drain:ok"];
const COLLECTED = [...RAN, "checkpoint_workspace:ok", "collect_outputs:ok", "finalize_outputs:ok"];
/** Cleanup of a run that did not complete: kill, abort outputs, release bindings, release the fence last. */
const UNWIND_FAILED = ["terminate_compute:ok", "abort_outputs:ok", "release_workspace:ok", "release_fence:ok"];
const UNWIND_DONE = ["terminate_compute:ok", "release_outputs:ok", "release_workspace:ok", "release_fence:ok"];

const THROW: Fault = { type: "throw", message: "injected" };
const ret = (value: unknown): Fault => ({ type: "return", value });

interface Row {
  name: string;
  profile?: Partial<ManagedRuntimeProfile>;
  arm: (rig: Rig) => void;
  /** Sleep durations the driver may wake (publish retry delay). */
  advance?: number[];
  result: Pick<RuntimeRunResult, "type"> & { stage?: string };
  trace: string[];
  /** Whether generation 2's final publication became active. */
  published: boolean;
  outputs: FakeOutputBinding["end"] | "never_prepared";
  compute: ComputeEnd;
}

const ROWS: Row[] = [
  {
    name: "fence acquire throws",
    arm: (r) => r.faults.arm("fence.acquire", THROW),
    result: { type: "failed", stage: "acquire_fence" },
    trace: ["plan:ok", "acquire_fence:failed"],
    published: false,
    outputs: "never_prepared",
    compute: "none",
  },
  {
    name: "workspace materialize throws",
    arm: (r) => r.faults.arm("workspace.materialize", THROW),
    result: { type: "failed", stage: "materialize_workspace" },
    trace: [...HEAD, "materialize_workspace:failed", "release_fence:ok"],
    published: false,
    outputs: "never_prepared",
    compute: "none",
  },
  {
    name: "outputs prepare throws",
    arm: (r) => r.faults.arm("outputs.prepare", THROW),
    result: { type: "failed", stage: "prepare_outputs" },
    trace: [...HEAD, "materialize_workspace:ok", "prepare_outputs:failed", "release_workspace:ok", "release_fence:ok"],
    published: false,
    outputs: "never_prepared",
    compute: "none",
  },
  {
    name: "sandbox acquire throws",
    arm: (r) => r.faults.arm("sandbox.acquire", THROW),
    result: { type: "failed", stage: "acquire_compute" },
    trace: [...HEAD, "materialize_workspace:ok", "prepare_outputs:ok", "acquire_compute:failed", ...UNWIND_FAILED.slice(1)],
    published: false,
    outputs: "aborted:failed",
    compute: "none",
  },
  {
    name: "sandbox unavailable",
    arm: (r) => r.faults.arm("sandbox.acquire", ret({ type: "unavailable", reason: "no capacity", retryable: true })),
    result: { type: "failed", stage: "acquire_compute" },
    trace: [...HEAD, "materialize_workspace:ok", "prepare_outputs:ok", "acquire_compute:failed", ...UNWIND_FAILED.slice(1)],
    published: false,
    outputs: "aborted:failed",
    compute: "none",
  },
  {
    name: "workspace attach throws",
    arm: (r) => r.faults.arm("workspace.attach", THROW),
    result: { type: "failed", stage: "attach" },
    trace: [...PLACED.slice(0, -1), "attach:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "outputs attach throws",
    arm: (r) => r.faults.arm("outputs.attach", THROW),
    result: { type: "failed", stage: "attach" },
    trace: [...PLACED.slice(0, -1), "attach:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "harness throws",
    arm: (r) => r.faults.arm("harness.run", THROW),
    result: { type: "failed", stage: "run_harness" },
    trace: [...PLACED, "run_harness:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "harness reports failure",
    arm: (r) => r.faults.arm("harness.run", ret({ type: "failed", error: "exit code 3" })),
    result: { type: "failed", stage: "run_harness" },
    trace: [...PLACED, "run_harness:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "drain throws",
    arm: (r) => r.faults.arm("harness.drain", THROW),
    result: { type: "failed", stage: "drain" },
    trace: [...PLACED, "run_harness:ok", "drain:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "drain reports failure",
    arm: (r) => r.faults.arm("harness.drain", ret({ type: "failed", error: "writer still busy" })),
    result: { type: "failed", stage: "drain" },
    trace: [...PLACED, "run_harness:ok", "drain:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "workspace checkpoint throws (before candidate creation)",
    arm: (r) => r.faults.arm("workspace.checkpoint", THROW),
    result: { type: "failed", stage: "checkpoint_workspace" },
    trace: [...RAN, "checkpoint_workspace:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "outputs collect throws (during upload)",
    arm: (r) => r.faults.arm("outputs.collect", THROW),
    result: { type: "failed", stage: "collect_outputs" },
    trace: [...RAN, "checkpoint_workspace:ok", "collect_outputs:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "outputs finalize throws (during upload)",
    arm: (r) => r.faults.arm("outputs.finalize", THROW),
    result: { type: "failed", stage: "finalize_outputs" },
    trace: [...RAN, "checkpoint_workspace:ok", "collect_outputs:ok", "finalize_outputs:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "publish throws once (after upload, before CAS): retried with the same key",
    arm: (r) => r.faults.arm("fence.publish", THROW),
    advance: [TEST_TIMINGS.publishRetryDelayMs],
    result: { type: "completed" },
    trace: [...COLLECTED, "publish:retried", "publish:ok", ...UNWIND_DONE],
    published: true,
    outputs: "released",
    compute: "terminated",
  },
  {
    name: "publish committed but its answer was lost: the replay lands exactly once",
    arm: (r) => r.faults.arm("fence.publish.ack", THROW),
    advance: [TEST_TIMINGS.publishRetryDelayMs],
    result: { type: "completed" },
    trace: [...COLLECTED, "publish:retried", "publish:ok", ...UNWIND_DONE],
    published: true,
    outputs: "released",
    compute: "terminated",
  },
  {
    name: "publish throws on every attempt: outcome unknown, run fails",
    arm: (r) => r.faults.always("fence.publish", THROW),
    advance: [TEST_TIMINGS.publishRetryDelayMs],
    result: { type: "failed", stage: "publish" },
    trace: [...COLLECTED, "publish:retried", "publish:retried", "publish:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "publish refused as stale: nothing published, treated as lease loss",
    arm: (r) => r.faults.arm("fence.publish", ret({ type: "stale", reason: "superseded" })),
    result: { type: "lease_lost", stage: "publish" },
    trace: [...COLLECTED, "publish:lease_lost", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:lease_lost",
    compute: "terminated",
  },
  {
    name: "publish key conflict",
    arm: (r) => r.faults.arm("fence.publish", ret({ type: "conflict", reason: "idempotency_key_reused" })),
    result: { type: "failed", stage: "publish" },
    trace: [...COLLECTED, "publish:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "hard kill throws after publication: token-free orphan",
    arm: (r) => r.faults.arm("sandbox.terminate", THROW),
    result: { type: "completed" },
    trace: [...COLLECTED, "publish:ok", "terminate_compute:failed", "enqueue_orphan:ok", ...UNWIND_DONE.slice(1)],
    published: true,
    outputs: "released",
    compute: "orphaned",
  },
  {
    name: "hard kill fails after a failure: orphan, pointers unchanged",
    arm: (r) => r.faults.arm("harness.drain", THROW).arm("sandbox.terminate", ret({ type: "failed", error: "daemon unreachable" })),
    result: { type: "failed", stage: "drain" },
    trace: [...PLACED, "run_harness:ok", "drain:failed", "terminate_compute:failed", "enqueue_orphan:ok", ...UNWIND_FAILED.slice(1)],
    published: false,
    outputs: "aborted:failed",
    compute: "orphaned",
  },
  {
    name: "hard kill and orphan record both fail: leaked, reported",
    arm: (r) => {
      r.faults.arm("sandbox.terminate", THROW);
      vi.spyOn(r.orphans, "enqueue").mockRejectedValueOnce(new Error("database down"));
    },
    result: { type: "completed" },
    trace: [...COLLECTED, "publish:ok", "terminate_compute:failed", "enqueue_orphan:failed", ...UNWIND_DONE.slice(1)],
    published: true,
    outputs: "released",
    compute: "leaked",
  },
  {
    name: "output release throws after publication",
    arm: (r) => r.faults.arm("outputs.release", THROW),
    result: { type: "completed" },
    trace: [...COLLECTED, "publish:ok", "terminate_compute:ok", "release_outputs:failed", "release_workspace:ok", "release_fence:ok"],
    published: true,
    outputs: "open",
    compute: "terminated",
  },
  {
    name: "output abort throws after a failure",
    arm: (r) => r.faults.arm("harness.run", THROW).arm("outputs.abort", THROW),
    result: { type: "failed", stage: "run_harness" },
    trace: [...PLACED, "run_harness:failed", "terminate_compute:ok", "abort_outputs:failed", "release_workspace:ok", "release_fence:ok"],
    published: false,
    outputs: "open",
    compute: "terminated",
  },
  {
    name: "workspace release throws",
    arm: (r) => r.faults.arm("workspace.release", THROW),
    result: { type: "completed" },
    trace: [...COLLECTED, "publish:ok", "terminate_compute:ok", "release_outputs:ok", "release_workspace:failed", "release_fence:ok"],
    published: true,
    outputs: "released",
    compute: "terminated",
  },
  {
    name: "optional runtime checkpoint throws: workspace path only",
    profile: { runtimeCheckpoint: "optional" },
    arm: (r) => r.faults.arm("checkpoint.create", THROW),
    result: { type: "completed" },
    trace: [
      ...RAN,
      "checkpoint_workspace:ok",
      "checkpoint_runtime:fallback",
      "collect_outputs:ok",
      "finalize_outputs:ok",
      "publish:ok",
      ...UNWIND_DONE,
    ],
    published: true,
    outputs: "released",
    compute: "terminated",
  },
  {
    name: "required runtime checkpoint fails: closed",
    profile: { runtimeCheckpoint: "required" },
    arm: (r) => r.faults.arm("checkpoint.create", ret({ type: "failed", error: "CRIU not available" })),
    result: { type: "failed", stage: "checkpoint_runtime" },
    trace: [...RAN, "checkpoint_workspace:ok", "checkpoint_runtime:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "required runtime checkpoint of the wrong generation: rejected, discarded, closed",
    profile: { runtimeCheckpoint: "required" },
    arm: (r) => r.faults.arm("checkpoint.create", ret({ type: "created", ref: foreignCheckpoint(r) })),
    result: { type: "failed", stage: "checkpoint_runtime" },
    trace: [...RAN, "checkpoint_workspace:ok", "discard_runtime_checkpoint:ok", "checkpoint_runtime:failed", ...UNWIND_FAILED],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "created runtime checkpoint left unpublished by a later failure: discarded",
    profile: { runtimeCheckpoint: "required" },
    arm: (r) => r.faults.arm("outputs.finalize", THROW),
    result: { type: "failed", stage: "finalize_outputs" },
    trace: [
      ...RAN,
      "checkpoint_workspace:ok",
      "checkpoint_runtime:ok",
      "collect_outputs:ok",
      "finalize_outputs:failed",
      "discard_runtime_checkpoint:ok",
      ...UNWIND_FAILED,
    ],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "runtime checkpoint committed by a publish whose every answer was lost: kept",
    profile: { runtimeCheckpoint: "required" },
    arm: (r) => r.faults.always("fence.publish.ack", THROW),
    advance: [TEST_TIMINGS.publishRetryDelayMs],
    result: { type: "failed", stage: "publish" },
    trace: [
      ...RAN,
      "checkpoint_workspace:ok",
      "checkpoint_runtime:ok",
      "collect_outputs:ok",
      "finalize_outputs:ok",
      "publish:retried",
      "publish:retried",
      "publish:failed",
      "discard_runtime_checkpoint:skipped",
      ...UNWIND_FAILED,
    ],
    // The first attempt committed: the outcome was unknown to the host, not to the fence.
    published: true,
    outputs: "aborted:failed",
    compute: "terminated",
  },
  {
    name: "runtime checkpoint left unpublished and the fence unreadable: left for GC",
    profile: { runtimeCheckpoint: "optional" },
    arm: (r) => r.faults.arm("outputs.collect", THROW).arm("fence.active", THROW),
    result: { type: "failed", stage: "collect_outputs" },
    trace: [
      ...RAN,
      "checkpoint_workspace:ok",
      "checkpoint_runtime:ok",
      "collect_outputs:failed",
      "discard_runtime_checkpoint:skipped",
      ...UNWIND_FAILED,
    ],
    published: false,
    outputs: "aborted:failed",
    compute: "terminated",
  },
];

function foreignCheckpoint(rig: Rig) {
  return {
    provider: rig.sandbox.capabilities.provider,
    checkpointId: "ck_foreign",
    kind: "process" as const,
    sourceRuntimeId: "rt_2",
    sessionId: rig.scope.sessionId,
    generation: 1,
    workspaceCandidateId: null,
    harness: { id: "other", version: "0", runtimeIdentity: "{}" },
  };
}

describe.each(BACKENDS)("runtime host fault matrix on %s", (dialect) => {
  let storage: TestStorage;
  let rig: Rig;
  beforeAll(async () => {
    storage = await openTestStorage(dialect);
  });
  afterAll(async () => storage?.cleanup());
  afterEach(() => {
    vi.restoreAllMocks();
  });

  /** Generation 1 publishes revision 1; generation 2 (the one under test) writes different files. */
  async function seed(): Promise<ActivePublication> {
    rig.harness.script(
      async (input) => {
        rig.workspace.files(input.workspace.bindingId)["a.txt"] = "one";
        rig.outputs.files(input.outputs!.bindingId)["report.md"] = "v1";
        return { type: "completed" };
      },
      async (input) => {
        rig.workspace.files(input.workspace.bindingId)["a.txt"] = "two";
        rig.outputs.files(input.outputs!.bindingId)["report.md"] = "v2";
        return { type: "completed" };
      },
    );
    const first = await rig.run();
    expect(first.type).toBe("completed");
    rig.faults.calls.length = 0;
    return (await rig.sqlFence.active({ scope: rig.scope, signal: new AbortController().signal }))!;
  }

  it.each(ROWS)("$name", async (row) => {
    rig = openRig(storage);
    const before = await seed();
    let token = "";
    const acquire = rig.sqlFence.acquire.bind(rig.sqlFence);
    vi.spyOn(rig.sqlFence, "acquire").mockImplementation(async (input) => {
      const acquired = await acquire(input);
      if (acquired.type === "acquired") token = acquired.fence.token;
      return acquired;
    });
    row.arm(rig);
    const profile = { ...AMA_WORKER_PROFILE, ...row.profile };
    const result = await drive(rig.scheduler, rig.run(profile), row.advance ?? []);

    expect(result).toMatchObject(row.result);
    expect(steps(result)).toEqual(row.trace);
    expect(JSON.stringify(result)).not.toContain(token || "no-token");

    const after = await rig.sqlFence.active({ scope: rig.scope, signal: new AbortController().signal });
    if (row.published) {
      // Exactly one new revision, whatever the retries: the same key never publishes twice.
      expect(after!.revision).toBe(before.revision + 1);
      expect(after!.generation).toBe(2);
      expect(rig.workspace.candidates.get(after!.workspace!.id)).toEqual({ "a.txt": "two" });
      expect(rig.outputs.manifests.get(after!.outputs!.id)).toMatchObject([{ logicalPath: "report.md" }]);
    } else {
      expect(after).toEqual(before);
    }

    const gen2Outputs = [...rig.outputs.bindings.values()].slice(1);
    expect(gen2Outputs.map((b) => b.end)).toEqual(row.outputs === "never_prepared" ? [] : [row.outputs]);
    if (result.type !== "conflict" && result.type !== "admission_error") expect(result.cleanup.compute).toBe(row.compute);
    const alive = rig.sandbox.alive;
    if (row.compute === "orphaned" || row.compute === "leaked") expect(alive).toHaveLength(1);
    else expect(alive).toEqual([]);

    const orphanRows = await storage.storage.db
      .selectFrom("runtime_orphans")
      .selectAll()
      .where("session_id", "=", rig.scope.sessionId)
      .execute();
    expect(orphanRows).toHaveLength(row.compute === "orphaned" ? 1 : 0);
    // Token-free: the fence token appears nowhere in the orphan record.
    if (token) expect(JSON.stringify(orphanRows)).not.toContain(token);
    // The fence is released at the very end, so the next owner can start at once.
    expect(
      (await rig.sqlFence.acquire({ scope: rig.scope, ownerId: "next", ttlMs: 1_000, signal: new AbortController().signal })).type,
    ).toBe("acquired");
  });
});
