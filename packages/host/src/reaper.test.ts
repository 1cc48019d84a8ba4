import type { OrphanReconcileReport } from "@openma/contract";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RuntimeReaper } from "./reaper.ts";
import { FakeSandbox } from "./testing/fakes.ts";
import { Faults, gate } from "./testing/faults.ts";
import { until } from "./testing/rig.ts";

const signal = new AbortController().signal;
const POLICY = { baseDelayMs: 1_000, maxDelayMs: 4_000, maxAttempts: 3, claimTtlMs: 60_000 };
let sessions = 0;

describe.each(BACKENDS)("RuntimeReaper on %s", (dialect) => {
  let storage: TestStorage;
  beforeAll(async () => {
    storage = await openTestStorage(dialect);
  });
  afterAll(async () => storage?.cleanup());

  function setup() {
    const scheduler = new ManualScheduler(Date.parse("2026-04-01T00:00:00Z"));
    const faults = new Faults();
    const sandbox = new FakeSandbox(faults);
    const orphans = new SqlRuntimeOrphanStore(storage.storage.db, { clock: scheduler, policy: POLICY });
    const scope = { environmentId: "env_reap", sessionId: `sesn_reap_${++sessions}` };
    return { scheduler, faults, sandbox, orphans, scope };
  }

  it("reaps orphans on its schedule, backs off a failing one and dead-letters it at the cap", async () => {
    const { scheduler, faults, sandbox, orphans, scope } = setup();
    const good = sandbox.start();
    const bad = sandbox.start();
    for (const lease of [good, bad]) {
      await orphans.enqueue({ scope, generation: 1, lease, reason: "terminate_failed", error: "kill failed", redact: ["tok"], signal });
    }
    faults.always("sandbox.reap", { type: "return", value: { type: "failed", error: "provider 503" } });
    const reports: OrphanReconcileReport[] = [];
    const reaper = new RuntimeReaper({
      orphans,
      reaper: withGood(sandbox, good.runtimeId),
      scheduler,
      intervalMs: 10_000,
      onReport: (r) => reports.push(r),
    });
    reaper.start();
    reaper.start();
    expect(reaper.running).toBe(true);

    scheduler.advance(10_000);
    await until(() => reports.length === 1, "first pass");
    expect(reports[0]).toMatchObject({ reaped: 1, retried: 1 });
    expect(sandbox.runtimes.get(good.runtimeId)).toBe("stopped");
    for (let pass = 2; pass <= 3; pass++) {
      scheduler.advance(10_000);
      await until(() => reports.length === pass, `pass ${pass}`);
    }
    expect(reports.map((r) => r.deadLettered)).toEqual([0, 0, 1]);
    const dead = await orphans.listDeadLetters({ signal });
    expect(dead.filter((d) => d.scope.sessionId === scope.sessionId).map((d) => d.lease.runtimeId)).toEqual([bad.runtimeId]);
    await reaper.stop();
    expect(reaper.running).toBe(false);
    expect(scheduler.pending).toEqual([]);
  });

  it("runs GC on its own interval and reports failures without stopping", async () => {
    const { scheduler, sandbox, orphans } = setup();
    const errors: unknown[] = [];
    let gcRuns = 0;
    const reaper = new RuntimeReaper({
      orphans,
      reaper: sandbox,
      scheduler,
      intervalMs: 60_000,
      limit: 5,
      gc: {
        intervalMs: 15_000,
        run: async () => {
          gcRuns += 1;
          if (gcRuns === 1) throw new Error("store offline");
        },
      },
      onError: (err) => errors.push(err),
    });
    reaper.start();
    scheduler.advance(15_000);
    await until(() => errors.length === 1, "gc error");
    await until(() => scheduler.pending.includes(15_000), "gc loop continues");
    scheduler.advance(15_000);
    await until(() => gcRuns === 2, "second gc");
    await reaper.stop();
    expect(await reaper.reconcileOnce()).toMatchObject({ due: expect.any(Number) });
  });

  it("swallows errors when nobody listens", async () => {
    const { scheduler, sandbox, orphans } = setup();
    let runs = 0;
    const gc = {
      intervalMs: 1_000,
      run: async () => {
        runs += 1;
        throw new Error("ignored");
      },
    };
    const reaper = new RuntimeReaper({ orphans, reaper: sandbox, scheduler, intervalMs: 60_000, gc });
    reaper.start();
    scheduler.advance(1_000);
    await until(() => runs === 1 && scheduler.pending.includes(1_000), "gc pass");
    await reaper.stop();
  });

  it("does not report the pass it interrupted when stopped", async () => {
    const { scheduler, faults, sandbox, orphans, scope } = setup();
    await orphans.enqueue({ scope, generation: 1, lease: sandbox.start(), reason: "lease_lost", error: null, redact: [], signal });
    const hold = gate();
    faults.arm("sandbox.reap", { type: "wait", until: hold.promise });
    const errors: unknown[] = [];
    const reaper = new RuntimeReaper({ orphans, reaper: sandbox, scheduler, intervalMs: 1_000, onError: (e) => errors.push(e) });
    reaper.start();
    scheduler.advance(1_000);
    await until(() => faults.calls.includes("sandbox.reap"), "reap in flight");
    const stopped = reaper.stop();
    hold.open();
    await stopped;
    expect(errors).toEqual([]);
  });
});

/** The fake sandbox, except that one runtime's reap bypasses the injected failures. */
function withGood(sandbox: FakeSandbox, runtimeId: string) {
  return {
    async reap(input: Parameters<FakeSandbox["reap"]>[0]) {
      if (input.lease.runtimeId !== runtimeId) return sandbox.reap(input);
      sandbox.runtimes.set(runtimeId, "stopped");
      return { type: "reaped" as const };
    },
  };
}
