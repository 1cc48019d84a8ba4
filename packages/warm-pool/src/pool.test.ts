import {
  type FenceIdentity,
  type ManagedRuntimePlan,
  type ManagedSandboxLease,
  type OwnedRuntime,
  type RuntimeResourceScope,
  type SandboxAcquireResult,
  type SandboxListResult,
  type SandboxOwnershipPort,
  WARM_POOL_SESSION_PREFIX,
} from "@openma/contract";
import { SandboxReaper } from "@openma/host";
import { FakeSandbox } from "@openma/host/testing/fakes";
import { Faults, gate } from "@openma/host/testing/faults";
import { until } from "@openma/host/testing/rig";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import { deploymentId, SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseWarmPoolTargets } from "./config.ts";
import { type PoolOwner, WarmPool, type WarmPoolOptions, type WarmProfile, type WarmSandbox } from "./pool.ts";

const signal = new AbortController().signal;

const PLAN: ManagedRuntimePlan = {
  provider: "fake",
  driver: { type: "ama_worker", process: { command: "true" } },
  workspace: { requirement: "ephemeral", strategy: "ephemeral", durability: "none" },
  outputs: null,
  runtimeCheckpoint: null,
};
const PROFILE: WarmProfile = { provider: "fake", plan: PLAN, variant: { image: "base" } };

/** The fake driver, listing what it runs by the owner id written at acquire (as the real drivers label theirs). */
class PoolingFake extends FakeSandbox {
  readonly owners = new Map<string, { ownerId: string; scope: RuntimeResourceScope }>();
  readonly acquired: { scope: RuntimeResourceScope; fence: FenceIdentity }[] = [];

  constructor(readonly faults = new Faults()) {
    super(faults);
  }

  override async acquire(input?: { scope: RuntimeResourceScope; fence: FenceIdentity }): Promise<SandboxAcquireResult> {
    const result = await super.acquire();
    if (result.type === "acquired" && input !== undefined) {
      this.owners.set(result.lease.runtimeId, { ownerId: input.fence.ownerId, scope: input.scope });
      this.acquired.push(input);
    }
    return result;
  }

  async listOwned(): Promise<SandboxListResult> {
    const runtimes: OwnedRuntime[] = [...this.owners]
      .filter(([id]) => this.runtimes.get(id) === "running")
      .map(([runtimeId, o]) => ({
        lease: { provider: this.capabilities.provider, runtimeId },
        scope: o.scope,
        ownerId: o.ownerId,
        generation: 1,
        state: "running",
        createdAt: null,
      }));
    return { type: "listed", runtimes };
  }
}

/** Owner records kept in memory: what the pool claims, attaches and ends. */
class MemoryOwners {
  readonly live = new Map<string, ManagedSandboxLease | null>();
  readonly abandoned: string[] = [];
  #n = 0;

  claim = async (): Promise<PoolOwner> => {
    const id = `sbo_${++this.#n}`;
    this.live.set(id, null);
    return {
      id,
      attach: async (lease) => {
        if (!this.live.has(id)) return false;
        this.live.set(id, lease);
        return true;
      },
      release: async () => void this.live.delete(id),
      abandon: async () => {
        this.live.delete(id);
        this.abandoned.push(id);
      },
    };
  };
}

function rig(overrides: Partial<WarmPoolOptions<PoolOwner>> = {}) {
  const scheduler = new ManualScheduler();
  const driver = new PoolingFake();
  const owners = new MemoryOwners();
  const slots = new Set<string>();
  const errors: string[] = [];
  let n = 0;
  const pool = new WarmPool<PoolOwner>({
    driver,
    environmentId: "env_1",
    target: 2,
    profile: PROFILE,
    scheduler,
    claimOwner: owners.claim,
    async slot(slotId) {
      slots.add(slotId);
      return { workspace: { bindingId: `ws-${slotId}`, strategy: "ephemeral", mountPath: "/workspace" }, outputs: null };
    },
    discardSlot: async (slotId) => void slots.delete(slotId),
    newSlotId: () => `s${++n}`,
    retryMs: 1_000,
    onError: (err, where) => errors.push(`${where.step}: ${String(err)}`),
    ...overrides,
  });
  const settled = (ready: number) => until(() => pool.stats().ready === ready && pool.stats().starting === 0, `${ready} ready`);
  return { scheduler, driver, owners, slots, errors, pool, settled };
}

/** What a session does with a claimed sandbox when it is done: terminate it and end its record. Never back to the pool. */
async function finish(driver: PoolingFake, sandbox: WarmSandbox<PoolOwner>): Promise<void> {
  await driver.terminate({ lease: sandbox.lease });
  await sandbox.owner.release();
}

describe("WarmPool", () => {
  it("fills to its target under pool scopes, hands each sandbox out once, and refills", async () => {
    const { driver, owners, pool, settled } = rig();
    pool.start();
    await settled(2);
    expect(driver.alive).toHaveLength(2);
    expect(driver.acquired.map((a) => a.scope.sessionId)).toEqual([`${WARM_POOL_SESSION_PREFIX}s1`, `${WARM_POOL_SESSION_PREFIX}s2`]);
    // The owner record exists and names the sandbox before it is ready: the fence's owner id is the record's id.
    expect([...owners.live.keys()].sort()).toEqual(driver.acquired.map((a) => a.fence.ownerId).sort());

    const first = await pool.claim({ profile: PROFILE, signal });
    const second = await pool.claim({ profile: PROFILE, signal });
    expect(first.type).toBe("warm");
    expect(second.type).toBe("warm");
    if (first.type !== "warm" || second.type !== "warm") return;
    expect(first.sandbox.lease.runtimeId).not.toBe(second.sandbox.lease.runtimeId);
    await settled(2);
    expect(pool.stats()).toMatchObject({ target: 2, ready: 2, claimed: 2, created: 4, discarded: 0 });
    await finish(driver, first.sandbox);
    await finish(driver, second.sandbox);
    expect(driver.alive).toHaveLength(2);
  });

  it("refuses a claim whose profile differs, taking nothing (fail closed)", async () => {
    const { pool, settled } = rig();
    pool.start();
    await settled(2);
    for (const profile of [
      { ...PROFILE, variant: { image: "dev" } },
      { ...PROFILE, variant: { image: "base", network: "gateway" } },
      { ...PROFILE, provider: "other" },
      { ...PROFILE, plan: { ...PLAN, outputs: { requirement: "best_effort", strategy: "final_collect", durability: "best_effort" } } },
    ] as WarmProfile[]) {
      expect(await pool.claim({ profile, signal })).toEqual({
        type: "miss",
        reason: "the session's sandbox profile differs from the pool's",
      });
    }
    expect(pool.stats()).toMatchObject({ ready: 2, claimed: 0 });
  });

  it("never hands one sandbox to two concurrent claims", async () => {
    const { pool, settled } = rig({ target: 3 });
    pool.start();
    await settled(3);
    const claims = await Promise.all(Array.from({ length: 5 }, () => pool.claim({ profile: PROFILE, signal })));
    const warm = claims.flatMap((c) => (c.type === "warm" ? [c.sandbox.lease.runtimeId] : []));
    expect(warm).toHaveLength(3);
    expect(new Set(warm).size).toBe(3);
    expect(claims.filter((c) => c.type === "miss")).toHaveLength(2);
  });

  it("discards a sandbox that died in the pool and hands out the next", async () => {
    const { driver, owners, pool, settled, slots } = rig();
    pool.start();
    await settled(2);
    const [dead] = driver.alive;
    driver.vanish(dead as string);
    const claim = await pool.claim({ profile: PROFILE, signal });
    expect(claim.type === "warm" && claim.sandbox.lease.runtimeId).not.toBe(dead);
    await settled(2);
    expect(pool.stats()).toMatchObject({ discarded: 1, claimed: 1 });
    // The dead one's record and slot are gone; the live ones (2 ready + 1 claimed) keep theirs.
    expect(owners.live.size).toBe(3);
    expect(slots.size).toBe(3);
  });

  it("retries a failed start after retryMs on the injected scheduler", async () => {
    const { driver, owners, pool, scheduler, settled, errors } = rig();
    driver.faults.arm(
      "sandbox.acquire",
      { type: "throw", message: "engine down" },
      { type: "return", value: { type: "unavailable", reason: "full", retryable: true } },
    );
    pool.start();
    await until(() => pool.stats().failed === 2 && pool.stats().starting === 0, "two failures");
    expect(pool.stats().ready).toBe(0);
    expect(owners.live.size).toBe(0);
    expect(errors.join("\n")).toMatch(/engine down/);
    await scheduler.untilSleeping(1);
    expect(scheduler.pending).toEqual([1_000]);
    scheduler.advance(1_000);
    await settled(2);
    expect(driver.alive).toHaveLength(2);
  });

  it("drains: terminates what is ready and what was starting, and refills nothing after", async () => {
    const { driver, owners, pool, slots, scheduler } = rig();
    const held = gate();
    driver.faults.arm("sandbox.acquire", { type: "wait", until: held.promise });
    pool.start();
    await until(() => pool.stats().ready === 1, "one ready, one held");
    const draining = pool.drain();
    expect(await pool.claim({ profile: PROFILE, signal })).toEqual({ type: "miss", reason: "the pool is draining" });
    held.open();
    await draining;
    expect(driver.alive).toEqual([]);
    expect(owners.live.size).toBe(0);
    expect(slots.size).toBe(0);
    expect(pool.stats()).toMatchObject({ ready: 0, starting: 0, draining: true, created: 2, discarded: 2 });
    expect(scheduler.pending).toEqual([]);
  });

  it("a sandbox the driver cannot kill at drain leaves its record to lapse for the reaper", async () => {
    const { driver, owners, pool, settled } = rig({ target: 1 });
    pool.start();
    await settled(1);
    driver.faults.arm("sandbox.terminate", { type: "throw", message: "engine gone" });
    await pool.drain();
    expect(owners.abandoned).toHaveLength(1);
  });

  it("a target of 0 starts nothing", async () => {
    const { driver, pool } = rig({ target: 0 });
    pool.start();
    expect(pool.stats()).toMatchObject({ ready: 0, starting: 0 });
    expect(driver.alive).toEqual([]);
    expect(await pool.claim({ profile: PROFILE, signal })).toEqual({ type: "miss", reason: "no warm sandbox is ready" });
    expect(() => rig({ target: -1 })).toThrow(RangeError);
  });
});

describe("WarmPool with owner records in SQL", () => {
  let storage: TestStorage;
  let deployment: string;
  beforeAll(async () => {
    storage = await openTestStorage("sqlite");
    deployment = await deploymentId(storage.storage.db);
  });
  afterAll(async () => storage?.cleanup());

  const TTL = 30_000;
  let env = 0;

  /** A pool whose owners are SQL records; renewing them is the host's lease controller's job, so here nothing renews. */
  function sqlRig(target: number) {
    const scheduler = new ManualScheduler(Date.parse("2026-06-01T00:00:00Z") + ++env * 1e9);
    const port: SandboxOwnershipPort = new SqlSandboxOwnership(storage.storage.db, { clock: scheduler });
    const driver = new PoolingFake();
    const environmentId = `env_sql_${env}`;
    // Each rig's records under a driver name of its own, so one test's reaper never judges another's.
    const name = `fake-${env}`;
    let n = 0;
    const owner = (id: string): PoolOwner => ({
      id,
      attach: (lease) => port.attach({ id, lease, signal }),
      release: () => port.release({ id, signal }),
      abandon: () => port.abandon({ id, signal }),
    });
    const pool = new WarmPool<PoolOwner>({
      driver,
      environmentId,
      target,
      profile: PROFILE,
      scheduler,
      async claimOwner(scope) {
        const id = `sbo_${env}_${++n}`;
        await port.claim({ id, scope, driver: name, deployment, leaseTtlMs: TTL, idleMs: 7 * 86_400_000, signal });
        return owner(id);
      },
      slot: async (slotId) => ({ workspace: { bindingId: slotId, strategy: "ephemeral", mountPath: "/workspace" }, outputs: null }),
      newSlotId: () => `${env}-${n + 1}`,
    });
    const settled = (ready: number) => until(() => pool.stats().ready === ready && pool.stats().starting === 0, `${ready} ready`);
    const stats = async () => (await port.stats({ deployment, environmentId, signal })).find((s) => s.driver === name);
    return { scheduler, port, driver, pool, settled, stats, environmentId, name };
  }

  it("after 200 sessions the pool holds its target, rebinds each claimed record to its session, and leaks nothing", async () => {
    const { port, driver, pool, settled, stats, environmentId } = sqlRig(3);
    pool.start();
    await settled(3);
    expect(await stats()).toMatchObject({ owned: 3, pooled: 3 });
    const runtimeIds = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const claim = await pool.claim({ profile: PROFILE, signal });
      if (claim.type !== "warm") throw new Error(`session ${i}: ${claim.reason}`);
      const { sandbox } = claim;
      // Never reused: every session gets a sandbox no earlier session had.
      expect(runtimeIds.has(sandbox.lease.runtimeId)).toBe(false);
      runtimeIds.add(sandbox.lease.runtimeId);
      const session = { environmentId, sessionId: `sesn_${i}` };
      expect(await port.rebind({ id: sandbox.owner.id, scope: session, idleMs: 60_000, signal })).toBe(true);
      const [record] = await port.get({ ids: [sandbox.owner.id], signal });
      expect(record?.scope).toEqual(session);
      await finish(driver, sandbox);
      await settled(3);
    }
    expect(pool.stats()).toMatchObject({ target: 3, ready: 3, claimed: 200, created: 203, discarded: 0, failed: 0 });
    expect(driver.alive).toHaveLength(3);
    expect(await stats()).toMatchObject({ owned: 3, pooled: 3 });
    await pool.drain();
    expect(driver.alive).toEqual([]);
    expect(await stats()).toBeUndefined();
  });

  it("a crashed pool (no drain, no renewal) is reaped once its records' leases lapse", async () => {
    const { scheduler, port, driver, pool, settled, name } = sqlRig(4);
    pool.start();
    await settled(4);
    const reaper = new SandboxReaper({
      sandbox: driver,
      ownership: port,
      orphans: new SqlRuntimeOrphanStore(storage.storage.db, { clock: scheduler }),
      deployment,
      driver: name,
      scheduler,
      intervalMs: 10_000,
    });
    // The process died: nobody drains, nobody renews. While the leases hold, the reaper leaves them alone.
    expect(await reaper.reapOnce()).toMatchObject({ listed: 4, live: 4, reaped: 0 });
    scheduler.advance(TTL);
    expect(await reaper.reapOnce()).toMatchObject({ listed: 4, live: 0, reaped: 4 });
    expect(driver.alive).toEqual([]);
  });

  it("a record taken while its sandbox started: that sandbox is terminated, never pooled", async () => {
    const { port, driver, pool, scheduler, name } = sqlRig(1);
    const held = gate();
    driver.faults.arm("sandbox.acquire", { type: "wait", until: held.promise });
    pool.start();
    await until(() => driver.faults.count("sandbox.acquire") === 1, "acquire in flight");
    scheduler.advance(TTL);
    const [record] = await port.listStale({ deployment, driver: name, limit: 10, signal });
    expect(await port.takeOver({ id: record?.id as string, signal })).toBe("taken");
    held.open();
    await until(() => pool.stats().failed === 1, "attach refused");
    expect(pool.stats().ready).toBe(0);
    expect(driver.alive).toEqual([]);
    await pool.drain();
  });
});

describe("parseWarmPoolTargets", () => {
  it("reads <environment id>=<size> pairs and refuses anything else", () => {
    const ok = parseWarmPoolTargets(" env_a=2, env_b=0 ,");
    expect(ok.ok && [...ok.targets]).toEqual([
      ["env_a", 2],
      ["env_b", 0],
    ]);
    expect(parseWarmPoolTargets(undefined)).toEqual({ ok: true, targets: new Map() });
    for (const bad of ["env_a", "env a=1", "env_a=x", "env_a=65", "env_a=-1", "env_a=1,env_a=2", "=3"]) {
      expect(parseWarmPoolTargets(bad).ok, bad).toBe(false);
    }
  });
});
