/**
 * Chaos lane, a compute-ending call that never answers: `terminate` (or a
 * retained runtime's `suspend`) hanging must not hold the end of a run
 * forever. At `terminateTimeoutMs` the call's signal is aborted and it is
 * abandoned as a failed kill: a token-free orphan record is persisted for the
 * reaper, exactly as for a `failed` answer, and cleanup goes on (bindings,
 * then the fence). A late answer changes nothing and kills nothing twice.
 * Virtual time only; the real SQL fence and orphan store on both backends.
 */
import type { ManagedRuntimeProfile, ManagedSandboxPort } from "@openma/contract";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { RuntimeReaper } from "./reaper.ts";
import { type Fault, gate } from "./testing/faults.ts";
import { AMA_WORKER_PROFILE, openRig, type Rig, settle, steps, TEST_TIMINGS, traceDetail, until } from "./testing/rig.ts";
import type { RuntimeRunResult } from "./types.ts";

const signal = new AbortController().signal;
const BOUND = TEST_TIMINGS.terminateTimeoutMs;
const ABANDONED = `no answer within ${BOUND} ms; abandoned`;
const PLACED = ["plan:ok", "acquire_fence:ok", "materialize_workspace:ok", "prepare_outputs:ok", "acquire_compute:ok", "attach:ok"];
const PUBLISHED = [
  ...PLACED,
  "run_harness:ok",
  "drain:ok",
  "checkpoint_workspace:ok",
  "collect_outputs:ok",
  "finalize_outputs:ok",
  "publish:ok",
];
const RELEASED = ["release_outputs:ok", "release_workspace:ok", "release_fence:ok"];
/** A port call that never answers. */
const HANG: Fault = { type: "wait", until: new Promise<never>(() => {}) };
const RETAINED: ManagedRuntimeProfile = {
  ...AMA_WORKER_PROFILE,
  workspace: { requirement: "continuable", preferredStrategies: ["retained_runtime"] },
};

describe.each(BACKENDS)("compute-ending calls bounded by terminateTimeoutMs on %s", (dialect) => {
  let storage: TestStorage;
  let rig: Rig;
  beforeAll(async () => {
    storage = await openTestStorage(dialect);
  });
  afterAll(async () => storage?.cleanup());
  afterEach(() => {
    vi.restoreAllMocks();
  });

  const orphanRows = () =>
    storage.storage.db.selectFrom("runtime_orphans").selectAll().where("session_id", "=", rig.scope.sessionId).execute();

  /** The fence token of the run, to prove it is written nowhere. */
  function captureToken(): () => string {
    let token = "";
    const acquire = rig.sqlFence.acquire.bind(rig.sqlFence);
    vi.spyOn(rig.sqlFence, "acquire").mockImplementation(async (input) => {
      const acquired = await acquire(input);
      if (acquired.type === "acquired") token = acquired.fence.token;
      return acquired;
    });
    return () => token;
  }

  /** The signals the host hands to `sandbox.<method>`, in call order (the spy calls through). */
  function signalsOf(method: "terminate" | "suspend"): () => AbortSignal[] {
    // Spied through the port's type: the fake's own signature leaves out the signal it ignores.
    const port: ManagedSandboxPort = rig.sandbox;
    if (method === "terminate") {
      const spy = vi.spyOn(port, "terminate");
      return () => spy.mock.calls.map(([input]) => input.signal);
    }
    const spy = vi.spyOn(port, "suspend");
    return () => spy.mock.calls.map(([input]) => input.signal);
  }

  /**
   * Waits for `point` to be on the wire with its bound armed, then proves the
   * run still unwinds one millisecond before the bound and moves on at it.
   */
  async function holdsUntilBound(point: string, finished: () => boolean, bound: () => AbortSignal[]): Promise<void> {
    await until(() => rig.faults.calls.includes(point) && rig.scheduler.pending.includes(BOUND), `${point} in flight, bound armed`);
    rig.scheduler.advance(BOUND - 1);
    await settle();
    expect(finished()).toBe(false);
    expect(bound().at(-1)!.aborted).toBe(false);
    expect(await orphanRows()).toEqual([]);
    // Cleanup is still at compute: neither binding is released, the fence is still held.
    expect([...rig.outputs.bindings.values()].at(-1)!.end).toBe("open");
    expect(rig.workspace.bindings.size).toBe(1);
    expect(rig.faults.calls).not.toContain("fence.release");
    rig.scheduler.advance(1);
  }

  function tracked(running: Promise<RuntimeRunResult>): { running: Promise<RuntimeRunResult>; finished: () => boolean } {
    let done = false;
    return {
      running: running.finally(() => {
        done = true;
      }),
      finished: () => done,
    };
  }

  /** Bindings and fence released: the next owner acquires at once. */
  async function expectReleased(outputsEnd: string): Promise<void> {
    expect([...rig.outputs.bindings.values()].at(-1)!.end).toBe(outputsEnd);
    expect(rig.workspace.bindings.size).toBe(0);
    const next = await rig.sqlFence.acquire({ scope: rig.scope, ownerId: "next", ttlMs: 1_000, signal });
    expect(next.type).toBe("acquired");
  }

  it.each([
    { name: "completed", drain: undefined, result: { type: "completed" }, outputs: "released", before: PUBLISHED, after: RELEASED },
    {
      name: "failed",
      drain: { type: "throw", message: "drain broke" } satisfies Fault,
      result: { type: "failed", stage: "drain" },
      outputs: "aborted:failed",
      before: [...PLACED, "run_harness:ok", "drain:failed"],
      after: ["abort_outputs:ok", "release_workspace:ok", "release_fence:ok"],
    },
  ])("orphans compute whose terminate never answers after a $name run, at the bound", async (row) => {
    rig = openRig(storage);
    const token = captureToken();
    const terminates = signalsOf("terminate");
    if (row.drain) rig.faults.arm("harness.drain", row.drain);
    rig.faults.arm("sandbox.terminate", HANG);
    const { running, finished } = tracked(rig.run());

    await holdsUntilBound("sandbox.terminate", finished, terminates);
    const result = await running;

    expect(result).toMatchObject({ ...row.result, cleanup: { compute: "orphaned", orphanIds: [expect.any(String)] } });
    expect(steps(result)).toEqual([...row.before, "terminate_compute:failed", "enqueue_orphan:ok", ...row.after]);
    expect(traceDetail(result, "terminate_compute")).toBe(ABANDONED);
    expect(terminates()).toHaveLength(1);
    expect(terminates()[0]!.aborted).toBe(true);
    expect(rig.scheduler.pending).not.toContain(BOUND);

    // The same token-free orphan a `failed` kill leaves, and the runtime is left to the reaper.
    const rows = await orphanRows();
    expect(rows).toHaveLength(1);
    expect(token()).not.toBe("");
    expect(JSON.stringify(rows)).not.toContain(token());
    expect(JSON.stringify(result)).not.toContain(token());
    const id = result.type === "completed" || result.type === "failed" ? result.cleanup.orphanIds[0]! : "";
    expect(await rig.orphans.get({ id, signal })).toMatchObject({ reason: "terminate_failed", state: "pending", lastError: ABANDONED });
    expect(rig.sandbox.alive).toHaveLength(1);
    await expectReleased(row.outputs);

    const reaper = new RuntimeReaper({ orphans: rig.orphans, reaper: rig.sandbox, scheduler: rig.scheduler, intervalMs: 60_000 });
    expect(await reaper.reconcileOnce()).toEqual({ due: 1, reaped: 1, retried: 0, deadLettered: 0, skipped: 0 });
    expect(rig.sandbox.alive).toEqual([]);
  });

  it("ignores a terminate answering after the bound: the result stands and nothing is killed twice", async () => {
    rig = openRig(storage);
    const late = gate();
    rig.faults.arm("sandbox.terminate", { type: "wait", until: late.promise });
    const terminates = signalsOf("terminate");
    const { running, finished } = tracked(rig.run());
    await holdsUntilBound("sandbox.terminate", finished, terminates);
    const result = await running;
    expect(result).toMatchObject({ type: "completed", cleanup: { compute: "orphaned" } });
    const handedOut = JSON.stringify(result);

    // The provider kills the runtime after all and says so.
    late.open();
    await until(() => rig.sandbox.alive.length === 0, "late kill landed");
    await settle();
    expect(JSON.stringify(result)).toBe(handedOut);
    expect(rig.faults.count("sandbox.terminate")).toBe(1);
    expect(await orphanRows()).toHaveLength(1);

    // The reaper's retry is idempotent: the runtime is already gone, the record is settled.
    const reaper = new RuntimeReaper({ orphans: rig.orphans, reaper: rig.sandbox, scheduler: rig.scheduler, intervalMs: 60_000 });
    expect(await reaper.reconcileOnce()).toEqual({ due: 1, reaped: 1, retried: 0, deadLettered: 0, skipped: 0 });
    expect(rig.faults.count("sandbox.reap")).toBe(1);
    expect(rig.faults.count("sandbox.terminate")).toBe(1);
  });

  it("kills a retained runtime whose suspend never answers, at the bound", async () => {
    rig = openRig(storage);
    const suspends = signalsOf("suspend");
    rig.faults.arm("sandbox.suspend", HANG);
    const { running, finished } = tracked(rig.run(RETAINED));

    await holdsUntilBound("sandbox.suspend", finished, suspends);
    expect(rig.faults.calls).not.toContain("sandbox.terminate");
    const result = await running;

    expect(result).toMatchObject({ type: "completed", cleanup: { compute: "terminated", orphanIds: [] } });
    expect(steps(result)).toEqual([...PUBLISHED, "suspend_compute:failed", "terminate_compute:ok", ...RELEASED]);
    expect(traceDetail(result, "suspend_compute")).toBe(ABANDONED);
    expect(suspends()[0]!.aborted).toBe(true);
    expect(rig.sandbox.alive).toEqual([]);
    expect(await orphanRows()).toEqual([]);
    expect(rig.scheduler.pending).not.toContain(BOUND);
    await expectReleased("released");
  });

  it("orphans a retained runtime when neither its suspend nor its kill answers, one bound each", async () => {
    rig = openRig(storage);
    const token = captureToken();
    const suspends = signalsOf("suspend");
    const terminates = signalsOf("terminate");
    rig.faults.arm("sandbox.suspend", HANG).arm("sandbox.terminate", HANG);
    const { running, finished } = tracked(rig.run(RETAINED));

    await holdsUntilBound("sandbox.suspend", finished, suspends);
    await holdsUntilBound("sandbox.terminate", finished, terminates);
    const result = await running;

    expect(result).toMatchObject({ type: "completed", cleanup: { compute: "orphaned", orphanIds: [expect.any(String)] } });
    expect(steps(result)).toEqual([...PUBLISHED, "suspend_compute:failed", "terminate_compute:failed", "enqueue_orphan:ok", ...RELEASED]);
    expect([suspends()[0]!.aborted, terminates()[0]!.aborted]).toEqual([true, true]);
    const rows = await orphanRows();
    expect(rows).toHaveLength(1);
    expect(JSON.stringify(rows)).not.toContain(token());
    const id = result.type === "completed" ? result.cleanup.orphanIds[0]! : "";
    expect(await rig.orphans.get({ id, signal })).toMatchObject({ reason: "suspend_failed", state: "pending" });
    await expectReleased("released");
  });
});
