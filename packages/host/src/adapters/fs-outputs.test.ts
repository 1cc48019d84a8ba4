import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FenceIdentity, OutputStrategy, SessionOutputBinding } from "@openma/contract";
import { OUTPUTS_FORMAT, outputManifestKey } from "@openma/persistence";
import { FsBlobStore } from "@openma/storage/blobs";
import { ManualScheduler } from "@openma/time";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { until } from "../testing/rig.ts";
import { FsSessionOutputs } from "./fs-outputs.ts";

const scope = { environmentId: "env_1", sessionId: "sesn_1" };
const fence: FenceIdentity = { scope, ownerId: "o#1", generation: 1, expiresAt: 0 };
const signal = new AbortController().signal;
const sandbox = { provider: "fake", runtimeId: "rt_1" };

describe("FsSessionOutputs", () => {
  let dir: string;
  let store: FsBlobStore;
  let scheduler: ManualScheduler;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-fsout-"));
    store = new FsBlobStore(join(dir, "blobs"));
    scheduler = new ManualScheduler(0);
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  function port(extra: Partial<ConstructorParameters<typeof FsSessionOutputs>[0]> = {}) {
    return new FsSessionOutputs({ root: join(dir, "outputs"), store, scheduler, ...extra });
  }

  const base = (binding: SessionOutputBinding) => ({ scope, fence, binding, signal });

  async function prepare(outputs: FsSessionOutputs, strategy: OutputStrategy = "final_collect", key = "k1") {
    const binding = await outputs.prepare({ scope, fence, strategy, idempotencyKey: key, signal });
    await outputs.attach({ ...base(binding), sandbox });
    return binding;
  }

  it("collects hashed, content-addressed entries into an immutable manifest", async () => {
    const outputs = port();
    const binding = await prepare(outputs);
    const dirPath = outputs.hostPath(binding);
    expect(binding.metadata).toEqual({ hostPath: dirPath });
    await writeFile(join(dirPath, "report.md"), "# report");
    await writeFile(join(dirPath, "data.json"), "{}");
    const collected = await outputs.collect({ ...base(binding), sandbox });
    expect(collected).toMatchObject({
      type: "collected",
      entries: [
        { logicalPath: "data.json", size: 2, mediaType: "application/json" },
        { logicalPath: "report.md", size: 8 },
      ],
      rejected: [],
    });
    const manifest = await outputs.finalize({ ...base(binding), entries: collected.entries, idempotencyKey: "f" });
    expect(manifest).toMatchObject({ contentHash: `sha256:${manifest.id}`, entryCount: 2, metadata: { format: OUTPUTS_FORMAT } });
    expect(await outputs.discard({ scope, manifest, signal })).toEqual({ type: "discarded" });
    expect(await outputs.discard({ scope, manifest, signal })).toEqual({ type: "not_found" });
  });

  it("refuses symlinks and size bombs with a reason, and keeps the rest", async () => {
    const outputs = port({ limits: { maxFileBytes: 100 } });
    const binding = await prepare(outputs);
    const dirPath = outputs.hostPath(binding);
    await symlink("/etc/passwd", join(dirPath, "escape"));
    await writeFile(join(dirPath, "bomb.bin"), Buffer.alloc(1000));
    await writeFile(join(dirPath, "ok.txt"), "fine");
    const collected = await outputs.collect({ ...base(binding), sandbox });
    expect(collected.entries.map((e) => e.logicalPath)).toEqual(["ok.txt"]);
    expect(collected.rejected).toEqual(
      expect.arrayContaining([
        { path: "escape", reason: "symlink" },
        { path: "bomb.bin", reason: "file_too_large" },
      ]),
    );
  });

  it("fails a collection that cannot be bounded", async () => {
    const outputs = port({ limits: { maxFiles: 2 } });
    const binding = await prepare(outputs);
    for (const name of ["a", "b", "c"]) await writeFile(join(outputs.hostPath(binding), name), name);
    await expect(outputs.collect({ ...base(binding), sandbox })).rejects.toThrow(/too_many_entries/);
  });

  it("finalizes only the entries of its last collection", async () => {
    const outputs = port();
    const binding = await prepare(outputs);
    await expect(outputs.finalize({ ...base(binding), entries: [], idempotencyKey: "f" })).rejects.toThrow(/do not match/);
    await writeFile(join(outputs.hostPath(binding), "a.txt"), "a");
    const collected = await outputs.collect({ ...base(binding), sandbox });
    const forged = [{ ...collected.entries[0]!, contentHash: `sha256:${"0".repeat(64)}` }];
    await expect(outputs.finalize({ ...base(binding), entries: forged, idempotencyKey: "f" })).rejects.toThrow(/do not match/);
  });

  it("uploads stable files in the background with watch_and_upload", async () => {
    const errors: unknown[] = [];
    const outputs = port({ watchIntervalMs: 1_000, onWatchError: (err) => errors.push(err) });
    const binding = await prepare(outputs, "watch_and_upload");
    await writeFile(join(outputs.hostPath(binding), "log.txt"), "line");
    for (let scan = 0; scan < 2; scan++) {
      await until(() => scheduler.pending.includes(1_000), "watch loop");
      scheduler.advance(1_000);
    }
    await until(() => scheduler.pending.includes(1_000), "second scan");
    expect(await store.list("session-outputs/blobs")).toHaveLength(1);
    // A scan that cannot list the directory is reported, and the loop goes on.
    await rm(outputs.hostPath(binding), { recursive: true });
    scheduler.advance(1_000);
    await until(() => errors.length === 1, "scan error");
    await until(() => scheduler.pending.includes(1_000), "loop continues");
    await outputs.abort({ ...base(binding), reason: "failed" });
    expect(scheduler.pending).toEqual([]);
  });

  it("ignores watcher errors when nobody listens, with the default interval", async () => {
    const outputs = port();
    const binding = await prepare(outputs, "watch_and_upload");
    await rm(outputs.hostPath(binding), { recursive: true });
    await until(() => scheduler.pending.includes(5_000), "watch loop");
    scheduler.advance(5_000);
    await until(() => scheduler.pending.includes(5_000), "loop continues");
    await outputs.release(base(binding));
    await expect(outputs.collect({ ...base(binding), sandbox })).rejects.toThrow(/unknown output binding/);
  });

  it("restarts a retried key from an empty directory and refuses durable_mount", async () => {
    const outputs = port();
    const binding = await prepare(outputs);
    await writeFile(join(outputs.hostPath(binding), "stale"), "x");
    const again = await prepare(outputs);
    await expect(stat(join(outputs.hostPath(again), "stale"))).rejects.toThrow();
    await expect(outputs.prepare({ scope, fence, strategy: "durable_mount", idempotencyKey: "k", signal })).rejects.toThrow(/not offered/);
  });

  describe("a binding seeded with the previous manifest", () => {
    async function published(outputs: FsSessionOutputs) {
      const first = await prepare(outputs, "final_collect", "first");
      await mkdir(join(outputs.hostPath(first), "deep"), { recursive: true });
      await writeFile(join(outputs.hostPath(first), "deep", "report.md"), "# q3");
      const collected = await outputs.collect({ ...base(first), sandbox });
      return outputs.finalize({ ...base(first), entries: collected.entries, idempotencyKey: "f1" });
    }

    it("starts with the earlier deliverables, so the next manifest still lists them", async () => {
      const outputs = port();
      const previous = await published(outputs);
      const next = await outputs.prepare({ scope, fence, strategy: "final_collect", idempotencyKey: "second", previous, signal });
      expect(await readFile(join(outputs.hostPath(next), "deep", "report.md"), "utf8")).toBe("# q3");
      await writeFile(join(outputs.hostPath(next), "more.txt"), "more");
      const collected = await outputs.collect({ ...base(next), sandbox });
      expect(collected.entries.map((e) => e.logicalPath)).toEqual(["deep/report.md", "more.txt"]);
    });

    it("fails the placement rather than silently dropping a deliverable it cannot restore", async () => {
      const outputs = port();
      const previous = await published(outputs);
      const manifest = JSON.parse(String(await store.get(outputManifestKey(previous.id))));
      const blobKey = manifest.entries[0].blobKey as string;
      const again = (key: string) => outputs.prepare({ scope, fence, strategy: "final_collect", idempotencyKey: key, previous, signal });

      await store.put(blobKey, Buffer.from("tampered"));
      await expect(again("tampered")).rejects.toThrow(/deep\/report.md cannot be restored/);
      await store.delete(blobKey);
      await expect(again("missing-blob")).rejects.toThrow(/deep\/report.md cannot be restored/);
      await store.put(outputManifestKey(previous.id), Buffer.from("{}"));
      await expect(again("invalid")).rejects.toThrow(/is invalid/);
      await store.delete(outputManifestKey(previous.id));
      await expect(again("gone")).rejects.toThrow(/is missing from the blob store/);
    });
  });
});
