/**
 * Warm pools in the runtime-host lane (ADR 0032, docs/warm-pools.md) on the
 * real local drivers (bubblewrap, node-docker) and on a cloud driver (E2B
 * against its stand-in), with the real SQL fence, owner records and
 * workspace adapters, and virtual time (owner and fence leases move only
 * when the test advances the clock).
 *
 * 1. A run takes a sandbox that was started for a pool slot before the
 *    session existed, and only after its fence is held (the trace). The
 *    next generation of the same session restores the workspace the first
 *    published and is served by another pooled sandbox, which sees (and can
 *    write) the restored files: a pooled sandbox never serves twice, each
 *    run's is gone at the engine after it, and the pool refills. After
 *    several runs the engine holds exactly the pool's target and the owner
 *    table exactly its records; closing drains both to zero.
 * 2. A process killed with a full pool and one sandbox already claimed and
 *    rebound to a session (its clock frozen: it renews nothing) leaks
 *    nothing: another process's pool reaper ends all of them once their
 *    owner leases lapse, and their records go.
 *
 * Fails, never skips, when bubblewrap, dockerd or the images are missing.
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import {
  type FenceIdentity,
  hasSandboxInventory,
  type RuntimeResourceScope,
  resolveManagedRuntimePlan,
  type SandboxInventoryPort,
} from "@openma/contract";
import { steps, traceDetail } from "@openma/host/testing/rig";
import { type RuntimeHostWarmPool, runtimeHostWarmPool } from "@openma/runtime-host";
import { FsBlobStore } from "@openma/storage/blobs";
import { deploymentId, SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  AMA_WORKER_PROFILE,
  type DriverName,
  HostFence,
  type LocalEngine,
  newScope,
  openEngine,
  type RealSandbox,
  type RuntimeParts,
  removeDir,
  runtimeHost,
  runtimeParts,
  SandboxHarness,
  scratchDir,
} from "./support.ts";

const TARGET = 2;
const TTL = 6_000;
const REAP = 2_000;
const RUNS = 4;
const DRIVERS: readonly DriverName[] = ["bubblewrap", "node-docker", "e2b"];

type Listed = RealSandbox & SandboxInventoryPort;

/** Runtimes at the engine (as the driver lists them) by the scope they were started for, running ones only. */
async function running(sandbox: Listed): Promise<Array<{ runtimeId: string; sessionId: string }>> {
  const listed = await sandbox.listOwned({ signal: AbortSignal.timeout(30_000) });
  if (listed.type === "failed") throw new Error(listed.error);
  return listed.runtimes.filter((r) => r.state === "running").map((r) => ({ runtimeId: r.lease.runtimeId, sessionId: r.scope.sessionId }));
}

const pooledIds = async (sandbox: Listed) =>
  (await running(sandbox)).filter((r) => r.sessionId.startsWith("warm-pool:")).map((r) => r.runtimeId);

describe.each(DRIVERS)("the runtime host's warm pool on %s", (driver) => {
  let dir: string | undefined;
  let engine: LocalEngine | undefined;
  let storage: TestStorage | undefined;
  let parts: RuntimeParts;
  let world: ManualScheduler;
  let deployment: string;
  const pools: RuntimeHostWarmPool[] = [];

  beforeEach(async () => {
    dir = engine = storage = undefined;
    dir = await scratchDir();
    engine = await openEngine(driver, dir);
    storage = await openTestStorage("sqlite");
    world = new ManualScheduler(Date.now());
    parts = runtimeParts(storage, world, new FsBlobStore(join(dir, "blobs")));
    deployment = await deploymentId(storage.storage.db);
  });

  afterEach(async () => {
    for (const pool of pools.splice(0)) await pool.close();
    await engine?.close();
    await storage?.cleanup();
    await removeDir(dir);
  });

  function listed(): Listed {
    const sandbox = engine!.open();
    if (!hasSandboxInventory(sandbox)) throw new Error(`${driver} cannot list what it holds`);
    return sandbox;
  }

  function openPool(sandbox: Listed, clock: ManualScheduler, scope: RuntimeResourceScope, name: string, target = TARGET) {
    const local = engine!.ports === undefined;
    const pool = runtimeHostWarmPool({
      sandbox,
      environmentId: scope.environmentId,
      target,
      root: local ? join(dir!, `${name}-warm`) : null,
      ownership: new SqlSandboxOwnership(storage!.storage.db, { clock: world }),
      orphans: parts.orphans,
      deployment,
      leaseTtlMs: TTL,
      reapIntervalMs: REAP,
      scheduler: clock,
      retryMs: 1_000,
    });
    pools.push(pool);
    return pool;
  }

  const ownerStats = () =>
    new SqlSandboxOwnership(storage!.storage.db, { clock: world }).stats({ deployment, signal: AbortSignal.timeout(10_000) });

  /**
   * A full pool at the engine; a failed start is retried on virtual time, a second per look. A dead process's clock
   * (null) never moves: its leases must not be renewed past the database's time.
   */
  async function untilFull(sandbox: Listed, pool: RuntimeHostWarmPool, clock: ManualScheduler | null): Promise<string[]> {
    for (let look = 0; look < 600; look++) {
      const ids = await pooledIds(sandbox);
      // Both: the engine may list a sandbox before its acquire has answered the pool.
      if (ids.length === TARGET && pool.stats()?.ready === TARGET) return ids;
      clock?.advance(1_000);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`the pool did not fill to ${TARGET}`);
  }

  it("binds a pooled sandbox only under the held fence, restores /workspace into it, never reuses one, and drains to zero", async () => {
    const scope = newScope();
    const sandbox = listed();
    const pool = openPool(sandbox, world, scope, "a");
    const notes: Array<string | null> = [];
    const harness = new SandboxHarness(sandbox, async (p) => {
      notes.push(await p.read("/workspace/notes.md"));
      // Written from inside: the restored files are the sandbox's to change.
      await p.write(`generation ${p.input.fence.generation}\n`, "report\n");
      return { type: "completed" };
    });
    const host = runtimeHost(parts, {
      name: "a",
      dir: dir!,
      sandbox,
      harness,
      fence: new HostFence(parts.sqlFence),
      ports: engine!.ports?.(join(dir!, "a"), parts.store, world, sandbox),
      warm: pool.port,
    });
    const planned = resolveManagedRuntimePlan(AMA_WORKER_PROFILE, host.capabilities);
    if (planned.type !== "planned") throw new Error(planned.error.message);
    pool.start(planned.plan);

    const used = new Set<string>();
    for (let run = 1; run <= RUNS; run++) {
      const before = await untilFull(sandbox, pool, world);
      const result = await host.run({ scope, profile: AMA_WORKER_PROFILE });
      if (result.type !== "completed") throw new Error(`run ${run}: ${JSON.stringify(result)}`);
      const trace = steps(result);
      // The fence first, the pooled sandbox after the workspace was restored, and no cold acquire.
      expect(trace.indexOf("acquire_fence:ok")).toBeLessThan(trace.indexOf("materialize_workspace:ok"));
      expect(trace.indexOf("materialize_workspace:ok")).toBeLessThan(trace.indexOf("acquire_compute:ok"));
      const runtimeId = harness.runs[run - 1]!.input.sandbox.runtimeId;
      expect(traceDetail(result, "acquire_compute")).toBe(`warm ${runtimeId}`);
      expect(before).toContain(runtimeId);
      expect(used.has(runtimeId)).toBe(false);
      used.add(runtimeId);
      expect(result.cleanup.compute).toBe("terminated");
      expect((await running(sandbox)).map((r) => r.runtimeId)).not.toContain(runtimeId);
      expect(await engine!.state(scope, harness.runs[run - 1]!.input.sandbox)).toBe("gone");
    }
    // Each generation saw the workspace the previous one published, in a sandbox started before it.
    expect(notes).toEqual([null, ...Array.from({ length: RUNS - 1 }, (_, i) => `generation ${i + 1}\n`)]);
    expect(used.size).toBe(RUNS);

    await untilFull(sandbox, pool, world);
    // Nothing but the pool runs at the engine, and the owner table holds exactly the pool's records.
    expect((await running(sandbox)).filter((r) => !r.sessionId.startsWith("warm-pool:"))).toEqual([]);
    expect(await ownerStats()).toMatchObject([{ owned: TARGET, pooled: TARGET, orphaned: 0 }]);
    expect(pool.stats()).toMatchObject({ target: TARGET, claimed: RUNS, discarded: 0 });
    await pool.close();
    expect(await running(sandbox)).toEqual([]);
    expect(await ownerStats()).toEqual([]);
  }, 300_000);

  it("a process killed with a full pool and a claimed sandbox leaks nothing: another pool's reaper ends them once their leases lapse", async () => {
    const scope = newScope();
    const frozen = new ManualScheduler(world.now());
    const deadSandbox = listed();
    const dead = openPool(deadSandbox, frozen, scope, "dead");
    const host = runtimeHost(parts, {
      name: "dead",
      dir: dir!,
      sandbox: deadSandbox,
      harness: new SandboxHarness(deadSandbox, async () => ({ type: "completed" })),
      fence: new HostFence(parts.sqlFence),
    });
    const planned = resolveManagedRuntimePlan(AMA_WORKER_PROFILE, host.capabilities);
    if (planned.type !== "planned") throw new Error(planned.error.message);
    dead.start(planned.plan);
    await untilFull(deadSandbox, dead, null);
    // The dead process had claimed one for a run (rebound to the session) before it died; the pool started another.
    const fence: FenceIdentity = { scope, ownerId: "runtime-host:dead", generation: 1, expiresAt: world.now() + TTL };
    // The run's restored workspace, as the workspace port made it (a local pool binds it into the sandbox).
    const workspace = join(dir!, "dead-run", "workspace");
    await mkdir(workspace, { recursive: true });
    const claimed = await dead.port.claim({
      scope,
      fence,
      plan: planned.plan,
      workspace: { bindingId: "wsb_dead", strategy: "checkpoint_restore", mountPath: "/workspace", metadata: { hostPath: workspace } },
      outputs: null,
      signal: AbortSignal.timeout(30_000),
    });
    if (claimed.type !== "claimed") throw new Error(claimed.reason);
    // The claimed one still runs under its slot's scope at the engine; the pool refilled beside it.
    await expect.poll(async () => (await running(deadSandbox)).length, { timeout: 60_000 }).toBe(TARGET + 1);
    expect(await ownerStats()).toMatchObject([{ owned: TARGET + 1, pooled: TARGET }]);

    // Another process of the deployment: its pool holds nothing, its reaper judges every pool-started sandbox.
    const liveSandbox = listed();
    const live = openPool(liveSandbox, world, scope, "live", 0);
    live.start(planned.plan);
    for (let t = 0; t <= TTL + 2 * REAP; t += 1_000) {
      world.advance(1_000);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await expect.poll(() => running(liveSandbox), { timeout: 60_000 }).toEqual([]);
    await expect.poll(ownerStats, { timeout: 30_000 }).toEqual([]);
    expect(await engine!.state(scope, claimed.compute.lease)).toBe("gone");
  }, 300_000);
});
