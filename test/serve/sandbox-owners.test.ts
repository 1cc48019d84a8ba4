/**
 * Ownership of serve-lane sandboxes against the real Docker Engine (and real
 * bubblewrap), two
 * "servers" (resolvers) on one database, in-process so time is virtual: the
 * dead one's clock never moves (a killed process renews nothing), the live
 * one's is the world's. After the dead owner's lease runs out, the live
 * server's reaper removes exactly the dead owner's container, found by
 * label at the engine, and never its own.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger } from "@openma/api";
import type { SandboxRequest } from "@openma/contract";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import { deploymentId, SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostProbes, openBackend, type SandboxSelection, type ServeSandboxes, sessionSandboxes } from "../../apps/openma/src/sandbox.ts";
import { type ServeOwnership, serveOwnership } from "../../apps/openma/src/sandbox-owners.ts";

const TTL = 6_000;
const REAP = 2_000;
const silent: Logger = { info() {}, warn() {}, error() {} };
const request = (sessionId: string): SandboxRequest => ({
  sessionId,
  environmentId: "env_own",
  environment: null,
  signal: new AbortController().signal,
});

/** Lets pending promise chains (renewals, reaper passes, engine calls) run before time moves on. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 50));

/** The live sandboxes of a deployment as the engine (Docker) or the host (bubblewrap's records and processes) sees them. */
async function liveAtEngine(selection: Exclude<SandboxSelection, { type: "none" }>, deployment: string): Promise<string[]> {
  if (selection.type === "docker") {
    const { connectDocker } = await import("@openma/driver-node-docker");
    const containers = await connectDocker().listContainers({
      filters: { label: [`openma.deployment=${deployment}`, "openma.lane=serve"] },
    });
    return containers
      .filter((c) => c.State === "running")
      .map((c) => c.Labels["openma.session"] ?? "?")
      .sort();
  }
  const { BubblewrapSandbox } = await import("@openma/driver-bubblewrap");
  const listed = await new BubblewrapSandbox({ labels: { "openma.deployment": deployment } }).listOwned({
    signal: AbortSignal.timeout(10_000),
  });
  if (listed.type === "failed") throw new Error(listed.error);
  return listed.runtimes
    .filter((r) => r.state === "running")
    .map((r) => r.scope.sessionId)
    .sort();
}

describe.each(["docker", "bubblewrap"] as const)("serve-lane sandbox ownership on %s", (driver) => {
  let store: TestStorage;
  let dataDir: string;
  let selection: Exclude<SandboxSelection, { type: "none" }>;
  beforeAll(async () => {
    if (driver === "docker") {
      const docker = await hostProbes.docker();
      if (!docker.ok) throw new Error(`Docker is required for this test: ${docker.reason}`);
      selection = { type: "docker", image: docker.image };
    } else {
      const bwrap = await hostProbes.bubblewrap();
      if (!bwrap.ok) throw new Error(`bubblewrap is required for this test: ${bwrap.reason}`);
      selection = { type: "bubblewrap" };
    }
    store = await openTestStorage("sqlite");
    dataDir = await mkdtemp(join(tmpdir(), "openma-owners-"));
  });
  afterAll(async () => {
    await store?.cleanup();
    await rm(dataDir, { recursive: true, force: true });
  });

  function server(world: ManualScheduler, clock: ManualScheduler): ServeOwnership {
    return serveOwnership({
      port: new SqlSandboxOwnership(store.storage.db, { clock: world }),
      orphans: new SqlRuntimeOrphanStore(store.storage.db, { clock: world }),
      deployment: deployment,
      config: { leaseTtlMs: TTL, reapIntervalMs: REAP },
      logger: silent,
      scheduler: clock,
    });
  }
  let deployment = "";

  it("a dead owner's container is reaped by the live server; the live server's is never touched", async () => {
    deployment = await deploymentId(store.storage.db);
    const world = new ManualScheduler(Date.now());
    const frozen = new ManualScheduler(Date.now());
    const deadOwnership = server(world, frozen);
    const liveOwnership = server(world, world);
    const deadBackend = await openBackend(selection, deadOwnership.labels);
    const atEngine = () => liveAtEngine(selection, deployment);
    let dead: ServeSandboxes | null = null;
    let live: ServeSandboxes | null = null;
    try {
      dead = sessionSandboxes(deadBackend, { dataDir, logger: silent, scheduler: frozen, ownership: deadOwnership, idleMs: 3_600_000 });
      expect(await dead.resolve(request("sesn_dead"))).toMatchObject({ type: "ready" });
      const liveBackend = await openBackend(selection, liveOwnership.labels);
      live = sessionSandboxes(liveBackend, { dataDir, logger: silent, scheduler: world, ownership: liveOwnership, idleMs: 3_600_000 });
      expect(await live.resolve(request("sesn_live"))).toMatchObject({ type: "ready" });
      expect(await atEngine()).toEqual(["sesn_dead", "sesn_live"]);

      // The dead server renews nothing; the live one renews on the world's clock while its reaper looks.
      for (let t = 0; t <= TTL + 2 * REAP; t += 1_000) {
        world.advance(1_000);
        await settle();
      }
      await expect.poll(atEngine, { timeout: 20_000 }).toEqual(["sesn_live"]);
      const provider = driver === "docker" ? "node-docker" : "bubblewrap";
      expect(await liveOwnership.stats()).toEqual([{ driver: provider, owned: 1, idle: 0, orphaned: 0, pooled: 0 }]);
      // The live server still uses its sandbox.
      expect(await live.resolve(request("sesn_live"))).toMatchObject({ type: "ready" });
      await live.release("sesn_live");
      expect(await atEngine()).toEqual([]);
      expect(await liveOwnership.stats()).toEqual([]);
    } finally {
      await live?.close();
      await dead?.close();
    }
  });
});
