import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PublicationRecord, RuntimeCheckpointRef } from "@openma/contract";
import { checkpointManifestKey, outputManifestKey, restoreCheckpoint } from "@openma/persistence";
import { FsBlobStore } from "@openma/storage/blobs";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FsSessionOutputs } from "./adapters/fs-outputs.ts";
import { FsCheckpointWorkspace } from "./adapters/fs-workspace.ts";
import { sqlFenceScopes, sqlRuntimePorts } from "./adapters/sql.ts";
import { collectRuntimeGarbage, retention } from "./gc.ts";
import { AMA_WORKER_PROFILE, openRig, type Rig } from "./testing/rig.ts";

const signal = new AbortController().signal;
const HOUR = 3_600_000;
const hash = (c: string) => `sha256:${c.repeat(64)}`;

function record(revision: number, parts: Partial<PublicationRecord>): PublicationRecord {
  return {
    revision,
    generation: revision,
    publishedAt: 0,
    ownerId: "o",
    idempotencyKey: `${revision}:final:publish`,
    workspace: null,
    outputs: null,
    runtimeCheckpoint: null,
    ...parts,
  };
}

function ref(id: string): RuntimeCheckpointRef {
  return {
    provider: "fake",
    checkpointId: id,
    kind: "process",
    sourceRuntimeId: "rt",
    sessionId: "s",
    generation: 1,
    workspaceCandidateId: null,
    harness: { id: "h", version: "1", runtimeIdentity: "{}" },
  };
}

describe("retention", () => {
  it("keeps the active candidates and N distinct earlier ones; older checkpoints are superseded", () => {
    const ws = (c: string) => ({ id: `ws_${c}`, contentHash: hash(c) });
    const out = (c: string) => ({ id: `out_${c}`, contentHash: hash(c), entryCount: 1 });
    const history = [
      record(5, { workspace: ws("d"), outputs: out("c"), runtimeCheckpoint: ref("ck_3") }),
      record(4, { workspace: ws("d"), outputs: out("b"), runtimeCheckpoint: ref("ck_3") }),
      record(3, { workspace: null, outputs: out("b"), runtimeCheckpoint: ref("ck_2") }),
      record(2, { workspace: ws("b"), runtimeCheckpoint: ref("ck_1") }),
      record(1, { workspace: ws("a") }),
    ];
    const kept = retention(history, 1);
    expect(kept.workspaces.map((w) => w.id)).toEqual(["ws_d", "ws_b"]);
    expect(kept.outputs.map((o) => o.id)).toEqual(["out_c", "out_b"]);
    expect(kept.runtimeCheckpoint?.checkpointId).toBe("ck_3");
    expect(kept.supersededCheckpoints.map((r) => r.checkpointId)).toEqual(["ck_2", "ck_1"]);
    expect(retention(history, 0).workspaces.map((w) => w.id)).toEqual(["ws_d"]);
    expect(retention([], 3)).toEqual({ workspaces: [], outputs: [], runtimeCheckpoint: null, supersededCheckpoints: [] });
    expect(
      retention([record(2, { runtimeCheckpoint: null }), record(1, { runtimeCheckpoint: ref("ck_9") })], 1).supersededCheckpoints,
    ).toHaveLength(1);
  });
});

describe.each(BACKENDS)("collectRuntimeGarbage on %s", (dialect) => {
  let storage: TestStorage;
  let dir: string;
  let store: FsBlobStore;
  let rig: Rig;
  let real: { workspace: FsCheckpointWorkspace; outputs: FsSessionOutputs };

  beforeAll(async () => {
    storage = await openTestStorage(dialect);
  });
  afterAll(async () => storage?.cleanup());
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-gc-"));
    store = new FsBlobStore(join(dir, "blobs"));
    rig = openRig(storage);
    real = {
      workspace: new FsCheckpointWorkspace({ root: join(dir, "ws"), store }),
      outputs: new FsSessionOutputs({ root: join(dir, "out"), store, scheduler: rig.scheduler }),
    };
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  const profile = { ...AMA_WORKER_PROFILE, runtimeCheckpoint: "optional" as const };

  /** Four published revisions, then a run whose candidate was written but never published. */
  async function publishFour() {
    for (const version of ["v1", "v2", "v3", "v4", "v5"]) {
      rig.harness.script(async (input) => {
        await writeFile(join(input.workspace.metadata!.hostPath as string, "file.txt"), `${version} `.repeat(20_000));
        await writeFile(join(input.outputs!.metadata!.hostPath as string, "out.txt"), version);
        return { type: "completed" };
      });
      if (version === "v5")
        rig.faults.arm("fence.publish", { type: "return", value: { type: "conflict", reason: "idempotency_key_reused" } });
      await rig.run(profile, real);
    }
    const history = await rig.sqlFence.history({ scope: rig.scope, limit: 10, signal });
    return { history };
  }

  function gc(overrides: Partial<Parameters<typeof collectRuntimeGarbage>[0]> = {}) {
    return collectRuntimeGarbage({
      fences: rig.sqlFence,
      scopes: [rig.scope],
      store,
      runtimeCheckpoint: rig.checkpoints,
      policy: { keepPrevious: 1, graceMs: HOUR },
      now: Date.now() + 2 * HOUR,
      signal,
      pageSize: 2,
      ...overrides,
    });
  }

  it("keeps the active and previous revision, sweeps the rest and discards superseded checkpoints", async () => {
    const { history } = await publishFour();
    expect(history).toHaveLength(4);
    const [v4, v3, v2, v1] = history.map((h) => h.workspace!.id);

    // Superseded process checkpoints go at once; blobs only once older than the grace period.
    const young = await gc({ now: Date.now() });
    expect(young.blobs.ok && young.blobs.report.deleted).toEqual([]);
    expect(young.runtimeCheckpoints).toEqual({ discarded: 3, notFound: 0, failed: 0 });

    const dry = await gc({ dryRun: true });
    expect(dry.runtimeCheckpoints).toEqual({ discarded: 0, notFound: 0, failed: 0 });
    expect(await store.exists(checkpointManifestKey(v1!))).toBe(true);

    const report = await gc();
    expect(report).toMatchObject({
      scopes: 1,
      retainedWorkspaces: 2,
      retainedOutputs: 2,
      runtimeCheckpoints: { discarded: 0, notFound: 3, failed: 0 },
    });
    expect(report.blobs.ok && report.blobs.report.deletedBytes).toBeGreaterThan(0);
    for (const id of [v1, v2]) expect(await store.exists(checkpointManifestKey(id!))).toBe(false);
    // The unpublished v5 candidate is swept too (it never reached the history).
    const manifests = await store.list("checkpoint/manifests");
    expect(manifests.map((m) => m.key).sort()).toEqual([checkpointManifestKey(v4!), checkpointManifestKey(v3!)].sort());
    expect((await store.list("session-outputs/manifests")).map((m) => m.key).sort()).toEqual(
      history
        .slice(0, 2)
        .map((h) => outputManifestKey(h.outputs!.id))
        .sort(),
    );
    // What is kept is still whole: the previous revision restores.
    expect((await restoreCheckpoint(store, v3!, join(dir, "restored"))).ok).toBe(true);
    expect([...rig.checkpoints.refs.keys()]).toEqual([history[0]!.runtimeCheckpoint!.checkpointId]);
  });

  it("counts checkpoint discards that fail and ignores candidates of other stores", async () => {
    await publishFour();
    rig.faults.always("checkpoint.discard", { type: "throw" });
    const other = openRig(storage);
    await other.run();
    const report = await gc({ scopes: [rig.scope, other.scope], runtimeCheckpoint: rig.checkpoints });
    expect(report).toMatchObject({ scopes: 2, retainedWorkspaces: 2, runtimeCheckpoints: { discarded: 0, failed: 3 } });
    expect(report.blobs.ok).toBe(true);
    const withoutPort = await gc({ runtimeCheckpoint: undefined, pageSize: undefined });
    expect(withoutPort.runtimeCheckpoints).toEqual({ discarded: 0, notFound: 0, failed: 0 });
  });

  it("lists every fenced scope a page at a time", async () => {
    const rigs = [openRig(storage), openRig(storage), openRig(storage)];
    for (const r of rigs) await r.run();
    const { fences, orphans } = sqlRuntimePorts(storage.storage.db, rig.scheduler);
    expect(orphans).toBeDefined();
    const seen: string[] = [];
    for await (const scope of sqlFenceScopes(storage.storage.db, 1)) seen.push(scope.sessionId);
    expect(seen).toEqual(expect.arrayContaining(rigs.map((r) => r.scope.sessionId)));
    expect(new Set(seen).size).toBe(seen.length);
    const all: string[] = [];
    for await (const scope of sqlFenceScopes(storage.storage.db)) all.push(scope.sessionId);
    expect(all).toEqual(seen);
    expect(await fences.active({ scope: rigs[0]!.scope, signal })).toMatchObject({ revision: 1 });
  });
});
