import type { OrphanReaper, OrphanReapInput, OrphanReapResult, OrphanRetryPolicy } from "@openma/contract";
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "./clock.ts";
import { runtimeOrphanId, SqlRuntimeOrphanStore } from "./orphans.ts";
import { BACKENDS, openTestStorage, type TestStorage } from "./testing.ts";

const scope = { environmentId: "env_1", sessionId: "sesn_1" };
const signal = new AbortController().signal;
const TOKEN = "rtf_super-secret-fence-token";
const policy: OrphanRetryPolicy = { baseDelayMs: 1_000, maxDelayMs: 5_000, maxAttempts: 5, claimTtlMs: 60_000 };

/** A reaper that fails on demand and records every call. */
class FakeReaper implements OrphanReaper {
  readonly calls: OrphanReapInput[] = [];
  /** Per runtime id: results to return, in order; then the default. */
  readonly script = new Map<string, Array<OrphanReapResult | Error>>();
  fallback: OrphanReapResult = { type: "reaped" };

  async reap(input: OrphanReapInput): Promise<OrphanReapResult> {
    this.calls.push(input);
    const next = this.script.get(input.lease.runtimeId)?.shift() ?? this.fallback;
    if (next instanceof Error) throw next;
    return next;
  }

  callsFor(runtimeId: string): number {
    return this.calls.filter((c) => c.lease.runtimeId === runtimeId).length;
  }
}

const failed = (error: string): OrphanReapResult => ({ type: "failed", error });

describe.each(BACKENDS)("SQL orphan store on %s", (dialect) => {
  let t: TestStorage;
  let clock: ManualClock;
  let orphans: SqlRuntimeOrphanStore;
  let reaper: FakeReaper;
  afterEach(async () => t?.cleanup());

  async function open() {
    t = await openTestStorage(dialect);
    clock = new ManualClock();
    orphans = new SqlRuntimeOrphanStore(t.storage.db, { clock, policy });
    reaper = new FakeReaper();
  }

  const enqueue = (runtimeId: string, generation = 3, error: string | null = null) =>
    orphans.enqueue({
      scope,
      generation,
      lease: { provider: "docker", runtimeId, metadata: { container: `oma-${runtimeId}`, retained: false } },
      reason: "terminate_failed",
      error,
      redact: [TOKEN],
      signal,
    });

  it("persists a token-free record, once per runtime", async () => {
    await open();
    const record = await enqueue("rt_1", 3, `docker rm failed; fence ${TOKEN} was held`);
    expect(record).toEqual({
      id: runtimeOrphanId(scope, 3, { provider: "docker", runtimeId: "rt_1" }),
      scope,
      generation: 3,
      lease: { provider: "docker", runtimeId: "rt_1", metadata: { container: "oma-rt_1", retained: false } },
      reason: "terminate_failed",
      state: "pending",
      attempts: 0,
      nextAttemptAt: clock.now(),
      lastError: "docker rm failed; fence [redacted] was held",
      createdAt: clock.now(),
      updatedAt: clock.now(),
      resolvedAt: null,
    });
    clock.advance(10);
    expect(await enqueue("rt_1", 3, "second failure")).toEqual(record);
    expect(await enqueue("rt_1", 4)).not.toMatchObject({ id: record.id }); // another generation is another record
    const rows = await t.storage.db.selectFrom("runtime_orphans").selectAll().execute();
    expect(rows).toHaveLength(2);
    expect(JSON.stringify(rows)).not.toContain(TOKEN);
  });

  it("refuses a lease that carries a secret, and malformed input", async () => {
    await open();
    const base = { scope, generation: 1, reason: "terminate_failed" as const, error: null, redact: [TOKEN], signal };
    await expect(orphans.enqueue({ ...base, lease: { provider: "docker", runtimeId: "rt", metadata: { auth: TOKEN } } })).rejects.toThrow(
      /must never be persisted/,
    );
    await expect(orphans.enqueue({ ...base, lease: { provider: "", runtimeId: "rt" } })).rejects.toBeInstanceOf(TypeError);
    await expect(orphans.enqueue({ ...base, generation: 0, lease: { provider: "p", runtimeId: "rt" } })).rejects.toBeInstanceOf(TypeError);
    await expect(
      orphans.enqueue({ ...base, reason: "bogus" as "lease_lost", lease: { provider: "p", runtimeId: "rt" } }),
    ).rejects.toBeInstanceOf(TypeError);
    await expect(
      orphans.enqueue({ ...base, scope: { environmentId: "", sessionId: "s" }, lease: { provider: "p", runtimeId: "rt" } }),
    ).rejects.toBeInstanceOf(TypeError);
    await expect(orphans.reconcile({ reaper, limit: 0, signal })).rejects.toBeInstanceOf(TypeError);
    expect(() => new SqlRuntimeOrphanStore(t.storage.db, { clock, policy: { ...policy, maxAttempts: 0 } })).toThrow(TypeError);
    expect(await t.storage.db.selectFrom("runtime_orphans").selectAll().execute()).toEqual([]);
  });

  it("reaps due orphans idempotently; not_found counts as reaped", async () => {
    await open();
    const a = await enqueue("rt_a");
    const b = await enqueue("rt_b");
    reaper.script.set("rt_b", [{ type: "not_found" }]);
    expect(await orphans.reconcile({ reaper, signal })).toEqual({ due: 2, reaped: 2, retried: 0, deadLettered: 0, skipped: 0 });
    const calls = reaper.calls.map((c) => ({ runtimeId: c.lease.runtimeId, reason: c.reason, scope: c.scope }));
    expect(calls.sort((x, y) => x.runtimeId.localeCompare(y.runtimeId))).toEqual(
      [a, b].map((r) => ({ runtimeId: r.lease.runtimeId, reason: "terminate_failed", scope })),
    );
    expect(await orphans.get({ id: a.id, signal })).toMatchObject({
      state: "reaped",
      attempts: 1,
      resolvedAt: clock.now(),
      lastError: null,
    });
    clock.advance(1_000_000);
    expect(await orphans.reconcile({ reaper, signal })).toEqual({ due: 0, reaped: 0, retried: 0, deadLettered: 0, skipped: 0 });
    await enqueue("rt_a"); // a late duplicate cleanup does not resurrect it
    expect(await orphans.reconcile({ reaper, signal })).toMatchObject({ due: 0 });
    expect(reaper.calls).toHaveLength(2);
  });

  it("backs off exponentially, caps the delay, and dead-letters after the attempt cap", async () => {
    await open();
    const record = await enqueue("rt_bad");
    reaper.fallback = failed("provider returned 503");
    const delays: number[] = [];
    for (let attempt = 1; attempt < policy.maxAttempts; attempt++) {
      expect(await orphans.reconcile({ reaper, signal })).toMatchObject({ due: 1, retried: 1 });
      const after = await orphans.get({ id: record.id, signal });
      expect(after).toMatchObject({ state: "pending", attempts: attempt, lastError: "provider returned 503" });
      delays.push(after!.nextAttemptAt - clock.now());
      // Not due a millisecond early: the reaper is not called again.
      clock.advance(after!.nextAttemptAt - clock.now() - 1);
      expect(await orphans.reconcile({ reaper, signal })).toMatchObject({ due: 0 });
      clock.advance(1);
    }
    expect(delays).toEqual([1_000, 2_000, 4_000, 5_000]);
    expect(await orphans.reconcile({ reaper, signal })).toMatchObject({ due: 1, deadLettered: 1 });
    expect(reaper.callsFor("rt_bad")).toBe(policy.maxAttempts);
    const dead = await orphans.listDeadLetters({ signal });
    expect(dead).toEqual([expect.objectContaining({ id: record.id, state: "dead_letter", attempts: 5, resolvedAt: clock.now() })]);
    clock.advance(10 * 60_000);
    expect(await orphans.reconcile({ reaper, signal })).toMatchObject({ due: 0 });

    // The operator fixes the provider and requeues it with a fresh budget.
    reaper.fallback = { type: "reaped" };
    expect(await orphans.requeue({ id: record.id, signal })).toMatchObject({ type: "requeued", record: { state: "pending", attempts: 0 } });
    expect(await orphans.requeue({ id: record.id, signal })).toEqual({ type: "not_dead_letter", state: "pending" });
    expect(await orphans.requeue({ id: "orph_missing", signal })).toEqual({ type: "not_found" });
    expect(await orphans.reconcile({ reaper, signal })).toMatchObject({ reaped: 1 });
    expect(await orphans.listDeadLetters({ signal })).toEqual([]);
  });

  it("records a thrown reaper error as a failed attempt", async () => {
    await open();
    const record = await enqueue("rt_throw");
    reaper.script.set("rt_throw", [new Error(`socket hang up`)]);
    expect(await orphans.reconcile({ reaper, signal })).toMatchObject({ retried: 1 });
    expect(await orphans.get({ id: record.id, signal })).toMatchObject({ attempts: 1, lastError: "Error: socket hang up" });
  });

  it("does not let a permanently failing orphan starve the others", async () => {
    await open();
    await enqueue("rt_bad");
    clock.advance(1);
    await enqueue("rt_good");
    reaper.script.set(
      "rt_bad",
      Array.from({ length: 10 }, () => failed("still broken")),
    );
    expect(await orphans.reconcile({ reaper, limit: 1, signal })).toMatchObject({ due: 1, retried: 1 });
    // The failing record moved behind: the next single-slot pass reaches the other one.
    expect(await orphans.reconcile({ reaper, limit: 1, signal })).toMatchObject({ due: 1, reaped: 1 });
    expect(reaper.callsFor("rt_good")).toBe(1);
  });

  it("lets concurrent reconcilers reap each orphan exactly once", async () => {
    await open();
    for (let i = 0; i < 6; i++) await enqueue(`rt_${i}`);
    const reports = await Promise.all([0, 1, 2].map(() => orphans.reconcile({ reaper, signal })));
    expect(reports.reduce((n, r) => n + r.reaped, 0)).toBe(6);
    expect(reaper.calls).toHaveLength(6);
    expect(new Set(reaper.calls.map((c) => c.lease.runtimeId)).size).toBe(6);
  });

  it("retries after a reconciler dies mid-reap, with that attempt counted", async () => {
    await open();
    const record = await enqueue("rt_1");
    let started!: () => void;
    const reaping = new Promise<void>((resolve) => {
      started = resolve;
    });
    // A reaper that never returns stands in for a process that died during the provider call.
    const hang: OrphanReaper = {
      reap: () => {
        started();
        return new Promise<never>(() => {});
      },
    };
    void orphans.reconcile({ reaper: hang, signal });
    await reaping;
    expect(await orphans.get({ id: record.id, signal })).toMatchObject({ attempts: 1, nextAttemptAt: clock.now() + policy.claimTtlMs });
    const survivor = new SqlRuntimeOrphanStore(t.storage.db, { clock, policy });
    expect(await survivor.reconcile({ reaper, signal })).toMatchObject({ due: 0 });
    clock.advance(policy.claimTtlMs);
    expect(await survivor.reconcile({ reaper, signal })).toMatchObject({ due: 1, reaped: 1 });
    expect(await orphans.get({ id: record.id, signal })).toMatchObject({ state: "reaped", attempts: 2 });
  });

  it("records an aborted reap as a failed attempt before surfacing the abort", async () => {
    await open();
    const record = await enqueue("rt_1");
    const controller = new AbortController();
    const aborting: OrphanReaper = {
      async reap(input) {
        controller.abort(new Error("host shutting down"));
        input.signal.throwIfAborted();
        return { type: "reaped" };
      },
    };
    await expect(orphans.reconcile({ reaper: aborting, signal: controller.signal })).rejects.toThrow("host shutting down");
    expect(await orphans.get({ id: record.id, signal })).toMatchObject({
      state: "pending",
      attempts: 1,
      lastError: "Error: host shutting down",
    });
    await expect(orphans.reconcile({ reaper, signal: controller.signal })).rejects.toThrow();
    expect(reaper.calls).toHaveLength(0);
  });
});
