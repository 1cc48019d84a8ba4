/**
 * `durable_mount` workspace and outputs on the real filesystem, unit-level
 * and through the host with the real SQL fence on both backends.
 */
import { execFileSync } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FenceIdentity, FlatMetadata } from "@openma/contract";
import { OUTPUTS_FORMAT, outputManifestKey, parseOutputManifest } from "@openma/persistence";
import { FsBlobStore } from "@openma/storage/blobs";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { gate } from "../testing/faults.ts";
import { openRig, type Rig, TEST_TIMINGS } from "../testing/rig.ts";
import type { HarnessRunInput, HarnessRunResult, TurnCommitResult } from "../types.ts";
import { DurableMountOutputs } from "./durable-mount-outputs.ts";
import { DURABLE_MOUNT_FORMAT, DurableMountWorkspace } from "./durable-mount-workspace.ts";

const signal = new AbortController().signal;
const hostPath = (binding: { metadata?: FlatMetadata } | null) => binding!.metadata!.hostPath as string;
const read = (input: HarnessRunInput, name: string) => readFile(join(hostPath(input.workspace), name), "utf8").catch(() => null);

describe("DurableMountOutputs", () => {
  const scope = { environmentId: "env_1", sessionId: "sesn_1" };
  const fence: FenceIdentity = { scope, ownerId: "o#1", generation: 2, expiresAt: 0 };
  const sandbox = { provider: "fake", runtimeId: "rt_1" };
  let dir: string;
  let outputs: DurableMountOutputs;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-dmout-"));
    outputs = new DurableMountOutputs({
      root: join(dir, "root"),
      store: new FsBlobStore(join(dir, "blobs")),
      durable: true,
      limits: { maxFileBytes: 100 },
    });
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  const prepare = async (key = "k1") => {
    const binding = await outputs.prepare({ scope, fence, strategy: "durable_mount", idempotencyKey: key, signal });
    await outputs.attach();
    return binding;
  };

  it("declares durability only for a durable root and refuses other strategies", async () => {
    expect(outputs.capabilities).toEqual([{ strategy: "durable_mount", durability: "durable" }]);
    const tmpfs = new DurableMountOutputs({ root: dir, store: new FsBlobStore(join(dir, "blobs")) });
    expect(tmpfs.capabilities).toEqual([{ strategy: "durable_mount", durability: "best_effort" }]);
    await expect(outputs.prepare({ scope, fence, strategy: "final_collect", idempotencyKey: "k", signal })).rejects.toThrow(/not offered/);
  });

  it("validates and freezes what was written, refusing hostile files with final_collect's reasons", async () => {
    const binding = await prepare();
    expect(binding).toMatchObject({
      strategy: "durable_mount",
      mountPath: "/mnt/session/outputs",
      metadata: { hostPath: outputs.hostPath(binding) },
    });
    const out = outputs.hostPath(binding);
    await writeFile(join(out, "report.md"), "# report");
    await symlink("/etc/passwd", join(out, "escape"));
    await symlink("..", join(out, "up"));
    execFileSync("mkfifo", [join(out, "pipe")]);
    await writeFile(join(out, "bomb.bin"), Buffer.alloc(1000));
    const collected = await outputs.collect({ scope, fence, binding, sandbox, signal });
    expect(collected.entries.map((e) => e.logicalPath)).toEqual(["report.md"]);
    expect(collected.rejected).toEqual(
      expect.arrayContaining([
        { path: "escape", reason: "symlink" },
        { path: "up", reason: "symlink" },
        { path: "pipe", reason: "not_regular_file" },
        { path: "bomb.bin", reason: "file_too_large" },
      ]),
    );
    const manifest = await outputs.finalize({ scope, fence, binding, entries: collected.entries, idempotencyKey: "f", signal });
    expect(manifest).toMatchObject({ contentHash: `sha256:${manifest.id}`, entryCount: 1, metadata: { format: OUTPUTS_FORMAT } });
    await outputs.release({ scope, fence, binding, signal });
    await expect(stat(out)).rejects.toThrow();
    expect(await outputs.discard({ scope, manifest, signal })).toEqual({ type: "discarded" });
    expect(await outputs.discard({ scope, manifest, signal })).toEqual({ type: "not_found" });
  });

  it("keeps the durable writes of an aborted run aside until a newer generation sweeps them", async () => {
    const binding = await prepare();
    await writeFile(join(outputs.hostPath(binding), "partial.csv"), "a,b");
    await outputs.abort({ scope, fence, binding, reason: "failed", signal });
    const kept = join(outputs.abortedPath(scope), `2.${binding.bindingId}`);
    expect(await readFile(join(kept, "partial.csv"), "utf8")).toBe("a,b");
    await expect(outputs.collect({ scope, fence, binding, sandbox, signal })).rejects.toThrow(/unknown output binding/);
    // An abort of a directory that is already gone keeps nothing and still forgets the binding.
    const gone = await prepare("k2");
    await rm(outputs.hostPath(gone), { recursive: true });
    await outputs.abort({ scope, fence, binding: gone, reason: "lease_lost", signal });
    expect(await outputs.sweep({ scope, staleBefore: 2 })).toEqual({ removed: 0 });
    expect(await outputs.sweep({ scope, staleBefore: 3 })).toEqual({ removed: 1 });
    expect(await readdir(outputs.abortedPath(scope))).toEqual([]);
    expect(await outputs.sweep({ scope: { ...scope, sessionId: "other" }, staleBefore: 3 })).toEqual({ removed: 0 });
  });
});

describe.each(BACKENDS)("durable_mount through the host on the %s fence", (dialect) => {
  let storage: TestStorage;
  let dir: string;
  let rig: Rig;
  let store: FsBlobStore;
  let workspace: DurableMountWorkspace;
  let outputs: DurableMountOutputs;

  beforeAll(async () => {
    storage = await openTestStorage(dialect);
  });
  afterAll(async () => storage?.cleanup());
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-dm-host-"));
    rig = openRig(storage);
    store = new FsBlobStore(join(dir, "blobs"));
    workspace = new DurableMountWorkspace({ root: join(dir, "volume/workspaces"), durable: true });
    outputs = new DurableMountOutputs({ root: join(dir, "volume/outputs"), store, durable: true });
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  const real = () => ({ workspace, outputs });
  const writing = (content: string) => async (input: HarnessRunInput) => {
    await writeFile(join(hostPath(input.workspace), "file.txt"), content);
    return { type: "completed" as const };
  };

  it("publishes a revision and an output manifest, and the next run restores the revision", async () => {
    rig.harness.script(async (input) => {
      await writeFile(join(hostPath(input.workspace), "main.ts"), "export {}\n");
      await writeFile(join(hostPath(input.outputs), "report.md"), "# report\n");
      await symlink("/etc/shadow", join(hostPath(input.outputs), "steal"));
      return { type: "completed" };
    });
    const first = await rig.run(undefined, real());
    expect(first).toMatchObject({
      type: "completed",
      publication: { revision: 1, workspace: { metadata: { format: DURABLE_MOUNT_FORMAT, files: 1 } }, outputs: { entryCount: 1 } },
    });
    const published = first.type === "completed" ? first.publication! : null;
    const bytes = await store.get(outputManifestKey(published!.outputs!.id));
    const manifest = parseOutputManifest(bytes!);
    expect(manifest.ok && manifest.manifest.refused.map((r) => [r.path, r.code])).toEqual([["steal", "symlink"]]);
    // Bindings are released: only the immutable revision stays on the volume.
    expect(await readdir(join(workspace.scopePath(rig.scope), "work"))).toEqual([]);

    let seen: string | null = null;
    rig.harness.script(async (input) => {
      seen = await read(input, "main.ts");
      return { type: "completed" };
    });
    const second = await rig.run(undefined, real());
    expect(second).toMatchObject({ type: "completed", generation: 2 });
    expect(rig.harness.runs[1]!.restored).toEqual(published!.workspace);
    expect(seen).toBe("export {}\n");
  });

  it("refuses admission when the root is not declared durable", async () => {
    const tmpfs = { workspace: new DurableMountWorkspace({ root: join(dir, "tmpfs") }), outputs };
    const result = await rig.run(undefined, tmpfs);
    expect(result).toMatchObject({ type: "admission_error" });
    expect(JSON.stringify(result)).toMatch(/workspace_durability/);
  });

  it("rejects a stale generation's late publication; its tree is never visible and GC removes it", async () => {
    const frozen = new ManualScheduler(rig.scheduler.now());
    const resume = gate();
    const committed = gate();
    let late: TurnCommitResult | undefined;
    rig.harness.script(async (input): Promise<HarnessRunResult> => {
      await writeFile(join(hostPath(input.workspace), "notes.md"), "published turn\n");
      expect(await input.commitTurn("turn_1")).toMatchObject({ type: "committed", revision: 1 });
      await writeFile(join(hostPath(input.workspace), "notes.md"), "zombie edit\n");
      committed.open();
      await resume.promise;
      late = await input.commitTurn("turn_2");
      return { type: "completed" };
    });
    const zombie = rig.run(undefined, { ...real(), scheduler: frozen });
    await committed.promise;
    rig.scheduler.advance(TEST_TIMINGS.leaseTtlMs + 1);

    let seen: string | null = null;
    rig.harness.script(async (input) => {
      seen = await read(input, "notes.md");
      await writeFile(join(hostPath(input.workspace), "notes.md"), "second owner\n");
      return { type: "completed" };
    });
    const successor = await rig.run(undefined, real());
    expect(successor).toMatchObject({ type: "completed", generation: 2, publication: { revision: 2 } });
    expect(seen).toBe("published turn\n");

    // The zombie's working tree is its own: nothing it writes there reaches the successor.
    const active = (await rig.sqlFence.active({ scope: rig.scope, signal }))!;
    const work = join(workspace.scopePath(rig.scope), "work");
    expect((await readdir(work)).map((n) => n.split(".")[0])).toEqual(["1"]);

    resume.open();
    expect(await zombie).toMatchObject({ type: "lease_lost", generation: 1 });
    expect(late).toEqual({ type: "rejected", reason: "lease_lost" });
    const after = await rig.sqlFence.active({ scope: rig.scope, signal });
    expect(after).toMatchObject({ revision: 2, generation: 2, workspace: active.workspace });
    // Its final checkpoint froze a revision that was never published: GC for generation 2 removes it
    // (and the superseded turn revision), keeping the active one.
    const revisions = join(workspace.scopePath(rig.scope), "revisions");
    expect(await readdir(revisions)).toHaveLength(3);
    const swept = await workspace.sweep({
      scope: rig.scope,
      staleBefore: 2,
      retain: [active.workspace!.id],
      olderThan: Date.now() + 60_000,
    });
    expect(swept).toEqual({ trees: 0, revisions: 2 });
    expect(await readdir(revisions)).toEqual([active.workspace!.id]);
    rig.harness.script(async (input) => {
      seen = await read(input, "notes.md");
      return { type: "completed" };
    });
    expect((await rig.run(undefined, real())).type).toBe("completed");
    expect(seen).toBe("second owner\n");
  });

  it("falls back to the previous revision when the newest one is corrupt", async () => {
    for (const content of ["first version", "second version"]) {
      rig.harness.script(writing(content));
      expect((await rig.run(undefined, real())).type).toBe("completed");
    }
    const newest = (await rig.sqlFence.active({ scope: rig.scope, signal }))!.workspace!;
    await writeFile(join(workspace.revisionPath(rig.scope, newest.id), "tree/file.txt"), "second versioN");
    let restored: string | null = null;
    rig.harness.script(async (input) => {
      restored = await read(input, "file.txt");
      return { type: "completed" };
    });
    const result = await rig.run(undefined, real());
    expect(result.type).toBe("completed");
    expect(result.trace[2]).toMatchObject({ step: "materialize_workspace", status: "rejected" });
    expect(result.trace[2]!.detail).toMatch(/differs from its manifest at \/file\.txt/);
    expect(restored).toBe("first version");
  });
});
