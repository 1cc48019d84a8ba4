import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "./clock.ts";
import { SqlRuntimeOrphanStore } from "./orphans.ts";
import { deploymentId, SqlSandboxOwnership } from "./sandbox-owners.ts";
import { BACKENDS, openTestStorage, type TestStorage } from "./testing.ts";

const signal = new AbortController().signal;
const scope = { environmentId: "env_1", sessionId: "sesn_1" };
const TTL = 60_000;
const IDLE = 600_000;

describe.each(BACKENDS)("SQL sandbox ownership on %s", (dialect) => {
  let t: TestStorage;
  afterEach(async () => t?.cleanup());

  async function open() {
    t = await openTestStorage(dialect);
    const clock = new ManualClock();
    const owners = new SqlSandboxOwnership(t.storage.db, { clock });
    const deployment = await deploymentId(t.storage.db);
    const claim = (id: string, driver = "node-docker") =>
      owners.claim({ id, scope, driver, deployment, leaseTtlMs: TTL, idleMs: IDLE, signal });
    return { clock, owners, deployment, claim };
  }

  it("has one stable deployment id per database", async () => {
    const { deployment } = await open();
    expect(deployment).toMatch(/^dep_[0-9a-f]{24}$/);
    expect(await deploymentId(t.storage.db)).toBe(deployment);
  });

  it("claims, attaches a lease, renews while live, and refuses a renew or touch once expired", async () => {
    const { clock, owners, claim } = await open();
    const record = await claim("sbo_a");
    expect(record).toMatchObject({ id: "sbo_a", lease: null, leaseExpiresAt: clock.now() + TTL, idleDeadlineAt: clock.now() + IDLE });
    const lease = { provider: "node-docker", runtimeId: "openma-serve-x", metadata: { generation: 1 } };
    expect(await owners.attach({ id: "sbo_a", lease, signal })).toBe(true);
    expect(await owners.attach({ id: "sbo_missing", lease, signal })).toBe(false);
    await expect(owners.attach({ id: "sbo_a", lease: { provider: "", runtimeId: "x" }, signal })).rejects.toThrow(/invalid lease/);

    clock.advance(TTL - 1);
    expect(await owners.renew({ id: "sbo_a", leaseTtlMs: TTL, signal })).toEqual({ type: "renewed", expiresAt: clock.now() + TTL });
    expect(await owners.touch({ id: "sbo_a", idleMs: IDLE, signal })).toBe(true);
    const [stored] = await owners.get({ ids: ["sbo_a", "sbo_missing"], signal });
    expect(stored).toMatchObject({ lease, lastUsedAt: clock.now(), idleDeadlineAt: clock.now() + IDLE });
    expect(await owners.get({ ids: [], signal })).toEqual([]);

    clock.advance(TTL);
    expect(await owners.renew({ id: "sbo_a", leaseTtlMs: TTL, signal })).toEqual({ type: "lost" });
    expect(await owners.touch({ id: "sbo_a", idleMs: IDLE, signal })).toBe(false);
  });

  it("lets a reaper take over only a record that is expired or idle, once", async () => {
    const { clock, owners, claim, deployment } = await open();
    await claim("sbo_live");
    await claim("sbo_dead");
    await claim("sbo_idle");
    await claim("sbo_other", "bubblewrap");
    await owners.abandon({ id: "sbo_dead", signal });
    expect(await owners.takeOver({ id: "sbo_live", signal })).toBe("live");
    expect(await owners.takeOver({ id: "sbo_dead", signal })).toBe("taken");
    expect(await owners.takeOver({ id: "sbo_dead", signal })).toBe("absent");

    // The idle record's owner keeps renewing but never uses it again.
    for (let i = 0; i < 11; i++) {
      clock.advance(TTL - 1);
      for (const id of ["sbo_live", "sbo_idle", "sbo_other"]) await owners.renew({ id, leaseTtlMs: TTL, signal });
      if (i < 10) await owners.touch({ id: "sbo_live", idleMs: IDLE, signal });
    }
    const stale = await owners.listStale({ deployment, driver: "node-docker", limit: 10, signal });
    expect(stale.map((r) => r.id)).toEqual(["sbo_idle"]);
    // listAll: live or not, of that deployment and driver only, oldest first (claimed at the same time here: by id).
    const all = await owners.listAll({ deployment, driver: "node-docker", limit: 10, signal });
    expect(all.map((r) => r.id)).toEqual(["sbo_idle", "sbo_live"]);
    await expect(owners.listAll({ deployment, driver: "x", limit: 1001, signal })).rejects.toThrow(/limit/);
    expect(await owners.stats({ deployment, signal })).toEqual([
      { driver: "bubblewrap", owned: 1, idle: 1, orphaned: 0, pooled: 0 },
      { driver: "node-docker", owned: 2, idle: 1, orphaned: 0, pooled: 0 },
    ]);
    expect(await owners.takeOver({ id: "sbo_idle", signal })).toBe("taken");
    await owners.release({ id: "sbo_live", signal });
    expect(await owners.get({ ids: ["sbo_live", "sbo_idle"], signal })).toEqual([]);
    await expect(owners.listStale({ deployment, driver: "x", limit: 0, signal })).rejects.toThrow(/limit/);
  });

  it("counts orphan records of a provider with the driver's stats", async () => {
    const { owners, deployment } = await open();
    const orphans = new SqlRuntimeOrphanStore(t.storage.db, { clock: new ManualClock() });
    const lease = { provider: "e2b", runtimeId: "sbx_1" };
    await orphans.enqueue({ scope, generation: 1, lease, reason: "lease_lost", error: null, redact: [], signal });
    expect(await owners.stats({ deployment, signal })).toEqual([{ driver: "e2b", owned: 0, idle: 0, orphaned: 1, pooled: 0 }]);
  });

  it("narrows the stats to one environment's sessions", async () => {
    const { owners, deployment, claim } = await open();
    const orphans = new SqlRuntimeOrphanStore(t.storage.db, { clock: new ManualClock() });
    await claim("sbo_here");
    await owners.claim({
      id: "sbo_there",
      scope: { environmentId: "env_2", sessionId: "sesn_2" },
      driver: "node-docker",
      deployment,
      leaseTtlMs: TTL,
      idleMs: IDLE,
      signal,
    });
    await orphans.enqueue({
      scope: { environmentId: "env_2", sessionId: "sesn_3" },
      generation: 1,
      lease: { provider: "e2b", runtimeId: "sbx_2" },
      reason: "lease_lost",
      error: null,
      redact: [],
      signal,
    });
    expect(await owners.stats({ deployment, environmentId: "env_1", signal })).toEqual([
      { driver: "node-docker", owned: 1, idle: 0, orphaned: 0, pooled: 0 },
    ]);
    expect(await owners.stats({ deployment, environmentId: "env_2", signal })).toEqual([
      { driver: "e2b", owned: 0, idle: 0, orphaned: 1, pooled: 0 },
      { driver: "node-docker", owned: 1, idle: 0, orphaned: 0, pooled: 0 },
    ]);
    expect(await owners.stats({ deployment, environmentId: "env_none", signal })).toEqual([]);
  });

  it("counts warm-pool records as pooled until a session's claim rebinds them; never rebinds a record that is not live", async () => {
    const { clock, owners, deployment } = await open();
    const pool = (n: number) => ({ environmentId: "env_1", sessionId: `warm-pool:slot_${n}` });
    for (const n of [1, 2, 3])
      await owners.claim({ id: `sbo_pool_${n}`, scope: pool(n), driver: "bubblewrap", deployment, leaseTtlMs: TTL, idleMs: IDLE, signal });
    expect(await owners.stats({ deployment, environmentId: "env_1", signal })).toEqual([
      { driver: "bubblewrap", owned: 3, idle: 0, orphaned: 0, pooled: 3 },
    ]);
    clock.advance(1_000);
    expect(await owners.rebind({ id: "sbo_pool_1", scope, idleMs: 5_000, signal })).toBe(true);
    const [record] = await owners.get({ ids: ["sbo_pool_1"], signal });
    expect(record).toMatchObject({ scope, idleDeadlineAt: clock.now() + 5_000, lastUsedAt: clock.now() });
    expect(await owners.stats({ deployment, environmentId: "env_1", signal })).toEqual([
      { driver: "bubblewrap", owned: 3, idle: 0, orphaned: 0, pooled: 2 },
    ]);
    // A lapsed record (a reaper may be taking its sandbox) and a missing one are not rebound.
    await owners.abandon({ id: "sbo_pool_2", signal });
    expect(await owners.rebind({ id: "sbo_pool_2", scope, idleMs: 5_000, signal })).toBe(false);
    expect(await owners.rebind({ id: "sbo_missing", scope, idleMs: 5_000, signal })).toBe(false);
    await expect(owners.rebind({ id: "sbo_pool_3", scope: { environmentId: "", sessionId: "x" }, idleMs: 5_000, signal })).rejects.toThrow(
      /scope/,
    );
    // A session id holding `%` or `_` is matched literally by nothing: only the prefix counts.
    await owners.claim({
      id: "sbo_odd",
      scope: { environmentId: "env_1", sessionId: "warm_pool:x" },
      driver: "bubblewrap",
      deployment,
      leaseTtlMs: TTL,
      idleMs: IDLE,
      signal,
    });
    expect((await owners.stats({ deployment, environmentId: "env_1", signal }))[0]).toMatchObject({ owned: 3, pooled: 1 });
  });

  it("rejects bad input with a clear error", async () => {
    const { owners, claim, deployment } = await open();
    await expect(claim("")).rejects.toThrow(/id/);
    await expect(
      owners.claim({
        id: "x",
        scope: { environmentId: "", sessionId: "s" },
        driver: "d",
        deployment,
        leaseTtlMs: TTL,
        idleMs: IDLE,
        signal,
      }),
    ).rejects.toThrow(/scope/);
    await expect(owners.claim({ id: "x", scope, driver: "", deployment, leaseTtlMs: TTL, idleMs: IDLE, signal })).rejects.toThrow(/driver/);
    await expect(owners.claim({ id: "x", scope, driver: "d", deployment, leaseTtlMs: 0, idleMs: IDLE, signal })).rejects.toThrow(
      /leaseTtlMs/,
    );
    await expect(owners.renew({ id: "x", leaseTtlMs: 1.5, signal })).rejects.toThrow(/leaseTtlMs/);
    await expect(owners.touch({ id: "x", idleMs: -1, signal })).rejects.toThrow(/idleMs/);
  });
});
