import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import { deploymentId, SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { openTestStorage } from "@openma/storage/testing";
import { describe, expect, it } from "vitest";
import { checkSandboxOwnership } from "./sandbox-owners.ts";

const signal = new AbortController().signal;
const scope = { environmentId: "env_1", sessionId: "sesn_1" };

describe("openma doctor: sandboxes", () => {
  it("is skipped where no database exists yet, and never creates one", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "openma-doctor-"));
    try {
      const result = await checkSandboxOwnership({ OPENMA_DATA_DIR: dataDir }, 5_000);
      expect(result).toMatchObject({ id: "sandboxes", status: "skipped" });
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it("reports owned, idle and orphaned sandboxes per driver", async () => {
    const t = await openTestStorage("sqlite");
    try {
      const clock = { now: () => Date.now() };
      const owners = new SqlSandboxOwnership(t.storage.db, { clock });
      const deployment = await deploymentId(t.storage.db);
      await owners.claim({ id: "sbo_1", scope, driver: "node-docker", deployment, leaseTtlMs: 60_000, idleMs: 60_000, signal });
      const orphans = new SqlRuntimeOrphanStore(t.storage.db, { clock });
      await orphans.enqueue({
        scope,
        generation: 1,
        lease: { provider: "node-docker", runtimeId: "c1" },
        reason: "lease_lost",
        error: null,
        redact: [],
        signal,
      });
      const result = await checkSandboxOwnership({ OPENMA_DATA_DIR: t.dataDir }, 5_000);
      expect(result).toMatchObject({
        id: "sandboxes",
        status: "warn",
        detail: "node-docker: 1 owned (0 in warm pools), 0 idle, 1 orphaned",
        facts: { "node-docker": ["owned=1", "pooled=0", "idle=0", "orphaned=1"] },
      });
    } finally {
      await t.cleanup();
    }
  });
});
