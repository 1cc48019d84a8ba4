import type { ManagedSandboxLease, OwnedRuntime, SandboxListResult, SandboxOwnerRecord, SandboxOwnershipPort } from "@openma/contract";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import { deploymentId, SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxReaper, type SandboxReaperOptions, type SandboxReapReport } from "./sandbox-reaper.ts";
import { FakeSandbox } from "./testing/fakes.ts";
import { Faults, gate } from "./testing/faults.ts";
import { until } from "./testing/rig.ts";

const signal = new AbortController().signal;
const TTL = 30_000;
const IDLE = 100_000;
const POLICY = { baseDelayMs: 1_000, maxDelayMs: 4_000, maxAttempts: 2, claimTtlMs: 60_000 };
let n = 0;

/** A fake driver that also lists what it owns, by the owner id written at "acquire". */
class ListingSandbox extends FakeSandbox {
  readonly owners = new Map<string, { ownerId: string; scope: OwnedRuntime["scope"] }>();

  startOwned(ownerId: string, sessionId = `sesn_${++n}`): ManagedSandboxLease {
    const lease = this.start();
    this.owners.set(lease.runtimeId, { ownerId, scope: { environmentId: "env_1", sessionId } });
    return lease;
  }

  listOwned(): Promise<SandboxListResult> {
    return this.faults.run("sandbox.list", () => ({
      type: "listed" as const,
      runtimes: [...this.owners]
        .filter(([id]) => this.runtimes.get(id) === "running")
        .map(([runtimeId, o]) => ({
          lease: { provider: this.capabilities.provider, runtimeId },
          scope: o.scope,
          ownerId: o.ownerId,
          generation: 1,
          state: "running" as const,
          createdAt: null,
        })),
    }));
  }

  constructor(readonly faults: Faults) {
    super(faults);
  }
}

/** The port with some methods replaced (a concurrent owner or reaper acting at a precise point). */
function delegate(port: SandboxOwnershipPort, overrides: Partial<SandboxOwnershipPort>): SandboxOwnershipPort {
  return {
    claim: (i) => port.claim(i),
    attach: (i) => port.attach(i),
    renew: (i) => port.renew(i),
    touch: (i) => port.touch(i),
    rebind: (i) => port.rebind(i),
    abandon: (i) => port.abandon(i),
    release: (i) => port.release(i),
    get: (i) => port.get(i),
    takeOver: (i) => port.takeOver(i),
    listStale: (i) => port.listStale(i),
    stats: (i) => port.stats(i),
    ...overrides,
  };
}

describe.each(BACKENDS)("SandboxReaper on %s", (dialect) => {
  let storage: TestStorage;
  let deployment: string;
  beforeAll(async () => {
    storage = await openTestStorage(dialect);
    deployment = await deploymentId(storage.storage.db);
  });
  afterAll(async () => storage?.cleanup());

  function setup(overrides: Partial<SandboxReaperOptions> = {}) {
    const scheduler = new ManualScheduler(Date.parse("2026-05-01T00:00:00Z") + ++n * 1e9);
    const faults = new Faults();
    const sandbox = new ListingSandbox(faults);
    const ownership = new SqlSandboxOwnership(storage.storage.db, { clock: scheduler });
    const orphans = new SqlRuntimeOrphanStore(storage.storage.db, { clock: scheduler, policy: POLICY });
    const driver = `fake-${n}`;
    const reports: SandboxReapReport[] = [];
    const claim = async (id: string) =>
      ownership.claim({ id, scope: { environmentId: "env_1", sessionId: id }, driver, deployment, leaseTtlMs: TTL, idleMs: IDLE, signal });
    const reaper = new SandboxReaper({
      sandbox,
      ownership,
      orphans,
      deployment,
      driver,
      scheduler,
      intervalMs: 10_000,
      onReport: (r) => reports.push(r),
      ...overrides,
    });
    return { scheduler, faults, sandbox, ownership, orphans, driver, reports, claim, reaper };
  }

  it("at start-up and on schedule reaps expired, idle and unowned sandboxes, never a live owner's", async () => {
    const { scheduler, sandbox, ownership, claim, reaper, reports } = setup();
    await claim("sbo_live");
    await claim("sbo_dead");
    await claim("sbo_idle");
    const live = sandbox.startOwned("sbo_live");
    const dead = sandbox.startOwned("sbo_dead");
    const idle = sandbox.startOwned("sbo_idle");
    const unowned = sandbox.startOwned("sbo_never_recorded");
    await ownership.abandon({ id: "sbo_dead", signal });

    reaper.start();
    reaper.start();
    expect(reaper.running).toBe(true);
    await until(() => reports.length === 1, "start-up pass");
    expect(reports[0]).toMatchObject({ listed: 4, live: 2, reaped: 2, orphaned: 0, cleared: 0 });
    expect(sandbox.alive.sort()).toEqual([live.runtimeId, idle.runtimeId].sort());
    expect(sandbox.runtimes.get(dead.runtimeId)).toBe("stopped");
    expect(sandbox.runtimes.get(unowned.runtimeId)).toBe("stopped");

    // The live owner keeps renewing and using its sandbox; the idle one's owner only renews.
    for (let t = 0; t < IDLE; t += 10_000) {
      await ownership.renew({ id: "sbo_live", leaseTtlMs: TTL, signal });
      await ownership.renew({ id: "sbo_idle", leaseTtlMs: TTL, signal });
      await ownership.touch({ id: "sbo_live", idleMs: IDLE, signal });
      await scheduler.untilSleeping(1);
      scheduler.advance(10_000);
      const pass = reports.length + 1;
      await until(() => reports.length === pass, `pass ${pass}`);
    }
    expect(sandbox.alive).toEqual([live.runtimeId]);
    expect((await ownership.get({ ids: ["sbo_live", "sbo_idle"], signal })).map((r) => r.id)).toEqual(["sbo_live"]);
    await reaper.stop();
    expect(reaper.running).toBe(false);
    expect(scheduler.pending).toEqual([]);
  });

  it("an owner that renews between the snapshot and the takeover keeps its sandbox", async () => {
    const { sandbox, ownership, claim, driver, scheduler, orphans } = setup();
    await claim("sbo_racing");
    const lease = sandbox.startOwned("sbo_racing");
    await ownership.abandon({ id: "sbo_racing", signal });
    // The snapshot says expired; the owner renews right after (modelled: its record comes back live).
    const racing = delegate(ownership, {
      get: async (input) => {
        const records = await ownership.get(input);
        await storage.storage.db
          .updateTable("sandbox_owners")
          .set({ lease_expires_at_ms: scheduler.now() + TTL })
          .where("id", "=", "sbo_racing")
          .execute();
        return records;
      },
    });
    const reaper = new SandboxReaper({ sandbox, ownership: racing, orphans, deployment, driver, scheduler, intervalMs: 1_000 });
    expect(await reaper.reapOnce()).toMatchObject({ listed: 1, live: 1, reaped: 0 });
    expect(sandbox.alive).toEqual([lease.runtimeId]);
  });

  it("a sandbox it cannot kill becomes an orphan record, retried with backoff, then dead-lettered", async () => {
    const { sandbox, faults, claim, ownership, orphans, reaper, scheduler } = setup({ callTimeoutMs: 5_000, staleLimit: 10 });
    await claim("sbo_stuck");
    const stuck = sandbox.startOwned("sbo_stuck");
    const thrown = sandbox.startOwned("sbo_thrown");
    await ownership.abandon({ id: "sbo_stuck", signal });
    faults.arm("sandbox.reap", { type: "throw", message: "socket hang up" });
    faults.always("sandbox.reap", { type: "return", value: { type: "failed", error: "provider 503" } });
    // Armed faults are consumed in order: the first reap throws, later ones fail.
    const first = await reaper.reapOnce();
    expect(first).toMatchObject({ listed: 2, reaped: 0, orphaned: 2 });
    expect(first.orphans).toMatchObject({ due: 2, retried: 2 });
    const dead = async () => (await orphans.listDeadLetters({ signal })).map((r) => r.lease.runtimeId);
    scheduler.advance(POLICY.maxDelayMs);
    await reaper.reapOnce();
    expect(await dead()).toEqual(expect.arrayContaining([stuck.runtimeId, thrown.runtimeId]));
  });

  it("clears records whose sandbox is already gone, reaping by stored lease when the listing lagged", async () => {
    const { sandbox, claim, ownership, reaper, reports } = setup();
    await claim("sbo_gone");
    await claim("sbo_lagged");
    await claim("sbo_listed");
    const lagged = sandbox.start();
    await ownership.attach({ id: "sbo_lagged", lease: lagged, signal });
    const listed = sandbox.startOwned("sbo_listed");
    for (const id of ["sbo_gone", "sbo_lagged", "sbo_listed"]) await ownership.abandon({ id, signal });
    const report = await reaper.reapOnce();
    expect(report).toMatchObject({ listed: 1, reaped: 1, cleared: 2 });
    expect(sandbox.runtimes.get(lagged.runtimeId)).toBe("stopped");
    expect(sandbox.runtimes.get(listed.runtimeId)).toBe("stopped");
    expect(await ownership.get({ ids: ["sbo_gone", "sbo_lagged", "sbo_listed"], signal })).toEqual([]);
    expect(reports).toHaveLength(1);
  });

  it("reaps a stale record's unlisted runtime before deleting the record, so a reaper killed in between leaves it for the next", async () => {
    const { sandbox, claim, ownership, orphans, driver, scheduler } = setup();
    await claim("sbo_unlisted");
    // Started but never listed: a provider that cannot list (the Cloudflare bridge) knows it only by the record's lease.
    const unlisted = sandbox.start();
    await ownership.attach({ id: "sbo_unlisted", lease: unlisted, signal });
    await ownership.abandon({ id: "sbo_unlisted", signal });
    const states: (string | undefined)[] = [];
    const watched = delegate(ownership, {
      takeOver: async (input) => {
        states.push(sandbox.runtimes.get(unlisted.runtimeId));
        return ownership.takeOver(input);
      },
    });
    const reaper = new SandboxReaper({ sandbox, ownership: watched, orphans, deployment, driver, scheduler, intervalMs: 1_000 });
    expect(await reaper.reapOnce()).toMatchObject({ listed: 0, cleared: 1 });
    expect(states).toEqual(["stopped"]);
    expect(await ownership.get({ ids: ["sbo_unlisted"], signal })).toEqual([]);
  });

  it("skips a stale record another reaper took first", async () => {
    const { sandbox, claim, ownership, orphans, driver, scheduler } = setup();
    await claim("sbo_contended");
    await ownership.abandon({ id: "sbo_contended", signal });
    const contended = delegate(ownership, {
      listStale: async (input) => {
        const records: SandboxOwnerRecord[] = await ownership.listStale(input);
        for (const r of records) await ownership.release({ id: r.id, signal });
        return records;
      },
    });
    const reaper = new SandboxReaper({ sandbox, ownership: contended, orphans, deployment, driver, scheduler, intervalMs: 1_000 });
    expect(await reaper.reapOnce()).toMatchObject({ cleared: 0 });
  });

  it("reports a failed listing and goes on; a pass cut short by stop is no error", async () => {
    const errors: unknown[] = [];
    const { faults, reaper, scheduler } = setup({ onError: (err) => errors.push(err) });
    faults.arm("sandbox.list", { type: "return", value: { type: "failed", error: "engine down", retryable: true } });
    reaper.start();
    await until(() => errors.length === 1, "reported error");
    expect(String(errors[0])).toMatch(/listing fake-\d+ sandboxes failed: engine down/);
    const held = gate();
    faults.arm("sandbox.list", { type: "wait", until: held.promise });
    await scheduler.untilSleeping(1);
    scheduler.advance(10_000);
    await until(() => faults.count("sandbox.list") === 2, "second listing");
    const stopped = reaper.stop();
    held.open();
    await stopped;
    expect(errors).toHaveLength(1);
  });

  it("works without report or error callbacks", async () => {
    const { faults, sandbox, ownership, orphans, driver, scheduler } = setup();
    const reaper = new SandboxReaper({ sandbox, ownership, orphans, deployment, driver, scheduler, intervalMs: 1_000 });
    faults.arm("sandbox.list", { type: "throw", message: "boom" });
    reaper.start();
    // The pass is over once the loop sleeps for its interval.
    await until(() => scheduler.pending.includes(1_000), "first pass");
    await reaper.stop();
    sandbox.startOwned("sbo_x");
    const aborted = new AbortController();
    aborted.abort();
    await expect(reaper.reapOnce(aborted.signal)).rejects.toThrow();
  });
});
