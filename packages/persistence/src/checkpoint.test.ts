import { execFileSync } from "node:child_process";
import { chmod, mkdir, readdir, readFile, symlink, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { FsBlobStore } from "@openma/storage/blobs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type CheckpointCache, createCheckpoint } from "./checkpoint.ts";
import { CountingBlobStore } from "./instrument.ts";
import { type ChunkRef, checkpointManifestKey } from "./manifest.ts";
import { packKey } from "./packs.ts";
import { loadCheckpointManifest, restoreCheckpoint, restoreLatestVerified } from "./restore.ts";
import { blobFile, flipByte, seededBytes, snapshotTree, type TempDirs, tempDirs, truncateFile } from "./testkit.ts";

let t: TempDirs;
beforeEach(async () => {
  t = await tempDirs();
});
afterEach(async () => t.cleanup());

async function buildWorkspace(root: string): Promise<void> {
  await mkdir(join(root, "src/lib"), { recursive: true });
  await mkdir(join(root, "empty"));
  await mkdir(join(root, "readonly"));
  await writeFile(join(root, "README.md"), "# hello\n");
  await writeFile(join(root, "src/main.ts"), "console.log(1);\n");
  await writeFile(join(root, "src/lib/big.bin"), seededBytes("big", 1_500_000));
  await writeFile(join(root, "src/empty.txt"), "");
  await writeFile(join(root, "run.sh"), "#!/bin/sh\necho hi\n", { mode: 0o755 });
  await writeFile(join(root, "readonly/secret"), "s", { mode: 0o600 });
  await chmod(join(root, "readonly"), 0o555);
  await symlink("src/main.ts", join(root, "link-to-main"));
  await symlink("../README.md", join(root, "src/lib/up-link"));
  await symlink("missing-but-inside", join(root, "dangling"));
}

async function checkpoint(root: string, opts: Parameters<typeof createCheckpoint>[2] = {}) {
  const r = await createCheckpoint(t.store, root, opts);
  if (!r.ok) throw new Error(`checkpoint failed: ${JSON.stringify(r.issues)}`);
  return r;
}

describe("checkpoint and restore round trip", () => {
  it("restores files, modes, empty dirs and symlinks exactly", async () => {
    const ws = t.path("ws");
    await buildWorkspace(ws);
    const cp = await checkpoint(ws);
    expect(cp.id).toMatch(/^[0-9a-f]{64}$/);
    expect(cp.stats.files).toBe(6);
    const restored = await restoreCheckpoint(t.store, cp.id, t.path("restored"));
    expect(restored).toMatchObject({ ok: true, id: cp.id, stats: { files: 6, bytes: cp.stats.bytes } });
    expect(await snapshotTree(t.path("restored"))).toEqual(await snapshotTree(ws));
    expect(await readdir(t.base)).toEqual(expect.arrayContaining(["restored"]));
    expect((await readdir(t.base)).filter((n) => n.includes(".restore-") || n.includes(".old-"))).toEqual([]);
  });

  it("replaces an existing target in one swap and leaves no staging behind", async () => {
    const ws = t.path("ws");
    await buildWorkspace(ws);
    const cp = await checkpoint(ws);
    const target = t.path("target");
    await mkdir(target);
    await writeFile(join(target, "stale.txt"), "old");
    expect((await restoreCheckpoint(t.store, cp.id, target)).ok).toBe(true);
    expect(await snapshotTree(target)).toEqual(await snapshotTree(ws));
    expect((await readdir(t.base)).sort()).toEqual(["blobs", "target", "ws"]);
  });

  it("gives the same tree the same id and uploads nothing the second time", async () => {
    const ws = t.path("ws");
    await buildWorkspace(ws);
    const first = await checkpoint(ws);
    t.store.reset();
    // The previous checkpoint says where its chunks are (its cache, or its id as `base` after a restart).
    for (const index of [{ cache: first.cache }, { base: first.id }]) {
      const second = await checkpoint(ws, index);
      expect(second.id).toBe(first.id);
      expect(second.stats).toMatchObject({ uploadedChunks: 0, uploadedBytes: 0, packs: 0, reusedChunks: first.stats.uploadedChunks });
    }
    expect(t.store.traffic.putBytes).toBe(0);
  });

  it("round-trips 10,000 files", async () => {
    const ws = t.path("many");
    for (let d = 0; d < 100; d++) {
      await mkdir(join(ws, `d${d}`), { recursive: true });
      await Promise.all(Array.from({ length: 100 }, (_, f) => writeFile(join(ws, `d${d}`, `f${f}.txt`), `file ${d}/${f}\n`)));
    }
    const cp = await checkpoint(ws, { concurrency: 16 });
    expect(cp.stats.files).toBe(10_000);
    expect((await restoreCheckpoint(t.store, cp.id, t.path("many-restored"), { concurrency: 16 })).ok).toBe(true);
    expect(await snapshotTree(t.path("many-restored"))).toEqual(await snapshotTree(ws));
    const limited = await createCheckpoint(t.store, ws, { limits: { maxEntries: 5_000 } });
    expect(limited).toMatchObject({ ok: false, error: { code: "too_many_entries" } });
  }, 180_000); // 10,000 real files and fsynced blobs: slow on a loaded shared disk, never timing-dependent
});

describe("incremental checkpoints", () => {
  it("uploads in proportion to a 1% change, not to the workspace", async () => {
    const ws = t.path("ws");
    await mkdir(join(ws, "files"), { recursive: true });
    for (let i = 0; i < 100; i++) await writeFile(join(ws, "files", `f${i}.bin`), seededBytes(`f${i}`, 40_000));
    const large = seededBytes("large", 4_000_000);
    await writeFile(join(ws, "large.bin"), large);
    const full = await checkpoint(ws, { packBytes: 1024 * 1024 });
    const total = full.stats.bytes;
    expect(full.stats.uploadedBytes).toBe(total);
    // One durable write per pack (about 1 MiB each here) and one for the manifest, not one per chunk.
    expect(full.stats.packs).toBeGreaterThanOrEqual(5);
    expect(t.store.traffic.puts).toBe(full.stats.packs + 1);

    // ~1%: one small file rewritten, 40 KB inserted in the middle of the large one.
    await writeFile(join(ws, "files", "f7.bin"), seededBytes("f7-v2", 40_000));
    const edited = Buffer.concat([large.subarray(0, 2_000_000), seededBytes("insert", 40_000), large.subarray(2_000_000)]);
    await writeFile(join(ws, "large.bin"), edited);
    t.store.reset();
    const inc = await checkpoint(ws, { base: full.id });
    const changed = 80_000;
    expect(inc.id).not.toBe(full.id);
    expect(inc.stats.uploadedBytes).toBeGreaterThanOrEqual(changed);
    // The edit in the large file costs the chunks around it, not the file.
    expect(inc.stats.uploadedBytes / inc.stats.bytes).toBeLessThan(0.04);
    // What was written beyond the manifest is the new chunks plus one pack index (a few bytes per chunk).
    const packed = t.store.traffic.putBytes - inc.stats.manifestBytes;
    expect(packed).toBeGreaterThanOrEqual(inc.stats.uploadedBytes);
    expect(packed).toBeLessThan(inc.stats.uploadedBytes + 200 * inc.stats.uploadedChunks + 1024);
    expect(t.store.traffic.puts).toBe(inc.stats.packs + 1);
    expect(inc.stats.reusedChunks).toBeGreaterThan(100);
    expect((await restoreCheckpoint(t.store, inc.id, t.path("r"))).ok).toBe(true);
    expect((await readFile(t.path("r", "large.bin"))).equals(edited)).toBe(true);
  });

  it("skips reading unchanged files with the previous checkpoint's cache, and still sees every change", async () => {
    const ws = t.path("ws");
    await buildWorkspace(ws);
    const reads: string[] = [];
    const afterFileRead = (path: string) => {
      reads.push(path);
    };
    // The files were written just now and the test must not wait for them to age past the racy
    // window, so it declares every recorded stamp trustworthy.
    const aged = (c: CheckpointCache): CheckpointCache => ({ ...c, trustBeforeNs: 2n ** 80n });
    const first = await checkpoint(ws);
    const cached = await checkpoint(ws, { cache: aged(first.cache), afterFileRead });
    expect(reads).toEqual([]);
    expect(cached.id).toBe(first.id);
    expect(cached.stats).toMatchObject({ cachedFiles: 6, uploadedBytes: 0 });

    // Same size, new bytes: the kernel-set ctime changes, so the cache misses exactly this file.
    // (Two checkpoints ran since the file was written, far more than one timestamp tick.)
    await writeFile(join(ws, "src/main.ts"), "console.log(2);\n");
    const changed = await checkpoint(ws, { cache: aged(cached.cache), afterFileRead });
    expect(reads).toEqual(["src/main.ts"]);
    // Reading every file against the first checkpoint's packs gives the same candidate: a pack is named by its index.
    expect(changed.id).toBe((await checkpoint(ws, { base: first.id })).id);
    expect(changed.id).not.toBe(first.id);

    // A cached pack that was swept from the store sends the files with chunks in it back to being read;
    // main.ts's new chunk lives in the second checkpoint's own pack, which is still there.
    const readme = changed.cache.files.get("README.md")!;
    await t.store.delete(packKey(readme.chunks[0]!.pack!));
    reads.length = 0;
    const healed = await checkpoint(ws, { cache: aged(changed.cache), afterFileRead });
    expect(reads.sort()).toEqual(["README.md", "readonly/secret", "run.sh", "src/lib/big.bin"]);
    expect(healed.stats).toMatchObject({ packs: 1, cachedFiles: 2 });
    expect((await restoreCheckpoint(t.store, healed.id, t.path("r"))).ok).toBe(true);
  });

  it("does not trust stamps from the racy window before a checkpoint", async () => {
    const ws = t.path("ws");
    await buildWorkspace(ws);
    const first = await checkpoint(ws, { racyWindowMs: 600_000 }); // every file was written well within the window
    const reads: string[] = [];
    const second = await checkpoint(ws, { cache: first.cache, afterFileRead: (p) => void reads.push(p) });
    expect(second.stats.cachedFiles).toBe(0);
    expect(reads).toHaveLength(6);
  });

  it("re-uploads a damaged existing chunk when asked to verify existing chunks", async () => {
    const ws = t.path("ws");
    await buildWorkspace(ws);
    const cp = await checkpoint(ws);
    const manifest = await loadCheckpointManifest(t.store, cp.id);
    if (!manifest.ok) throw new Error("manifest");
    const big = manifest.manifest.entries.find((e) => e.path === "src/lib/big.bin");
    if (big?.type !== "file") throw new Error("big.bin");
    await flipByte(blobFile(t.storeRoot, packKey(big.chunks[0]!.pack!)), big.chunks[0]!.offset! + 10);
    const trusting = await checkpoint(ws, { base: cp.id });
    expect(trusting.stats.uploadedChunks).toBe(0);
    const verifying = await checkpoint(ws, { base: cp.id, verifyExisting: true });
    expect(verifying.stats.uploadedChunks).toBe(1);
    // The repaired chunk lives in a new pack: the new revision restores, the damaged one is refused.
    expect((await restoreCheckpoint(t.store, verifying.id, t.path("r"))).ok).toBe(true);
    expect(await restoreCheckpoint(t.store, cp.id, t.path("r2"))).toMatchObject({ ok: false, error: { code: "chunk_corrupt" } });
  });
});

describe("corrupt and truncated candidates", () => {
  async function twoRevisions() {
    const ws = t.path("ws");
    await buildWorkspace(ws);
    const v1 = await checkpoint(ws);
    const v1Snapshot = await snapshotTree(ws);
    await writeFile(join(ws, "src/new.bin"), seededBytes("only-in-v2", 300_000));
    const v2 = await checkpoint(ws, { cache: v1.cache });
    const m = await loadCheckpointManifest(t.store, v2.id);
    if (!m.ok) throw new Error("manifest");
    const entry = m.manifest.entries.find((e) => e.path === "src/new.bin");
    if (entry?.type !== "file") throw new Error("new.bin");
    const chunk = entry.chunks[1] as Required<ChunkRef>;
    // new.bin's chunks are the only new ones, so they are alone in v2's pack.
    return { v1, v2, v1Snapshot, v2OnlyPack: packKey(chunk.pack), at: chunk.offset };
  }

  async function occupiedTarget(): Promise<string> {
    const target = t.path("target");
    await mkdir(target);
    await writeFile(join(target, "keep.txt"), "current work");
    return target;
  }

  it("rejects a chunk with a flipped byte and leaves the target untouched", async () => {
    const { v2, v2OnlyPack, at } = await twoRevisions();
    await flipByte(blobFile(t.storeRoot, v2OnlyPack), at + 1234);
    const target = await occupiedTarget();
    const r = await restoreCheckpoint(t.store, v2.id, target);
    expect(r).toMatchObject({ ok: false, error: { code: "chunk_corrupt", path: "src/new.bin" } });
    expect(await snapshotTree(target)).toEqual({ "keep.txt": expect.stringMatching(/^file /) });
    expect((await readdir(t.base)).filter((n) => n.startsWith("."))).toEqual([]);
  });

  it("rejects a truncated chunk and a missing chunk", async () => {
    const { v2, v2OnlyPack, at } = await twoRevisions();
    await truncateFile(blobFile(t.storeRoot, v2OnlyPack), at + 100);
    const truncated = await restoreCheckpoint(t.store, v2.id, t.path("a"));
    expect(truncated).toMatchObject({ ok: false, error: { code: "chunk_corrupt", message: expect.stringMatching(/truncated/) } });
    await t.store.delete(v2OnlyPack);
    expect(await restoreCheckpoint(t.store, v2.id, t.path("b"))).toMatchObject({ ok: false, error: { code: "chunk_missing" } });
  });

  it("rejects a corrupt, truncated or missing manifest and a malformed id", async () => {
    const { v2 } = await twoRevisions();
    const file = blobFile(t.storeRoot, checkpointManifestKey(v2.id));
    const original = await readFile(file);
    await flipByte(file, 40);
    expect(await restoreCheckpoint(t.store, v2.id, t.path("a"))).toMatchObject({ ok: false, error: { code: "manifest_corrupt" } });
    await writeFile(file, original.subarray(0, original.length / 2));
    expect(await restoreCheckpoint(t.store, v2.id, t.path("b"))).toMatchObject({ ok: false, error: { code: "manifest_corrupt" } });
    await t.store.delete(checkpointManifestKey(v2.id));
    expect(await restoreCheckpoint(t.store, v2.id, t.path("c"))).toMatchObject({ ok: false, error: { code: "manifest_missing" } });
    expect(await restoreCheckpoint(t.store, "../../etc", t.path("d"))).toMatchObject({ ok: false, error: { code: "invalid_id" } });
  });

  it("falls back to the last verified revision", async () => {
    const { v1, v2, v1Snapshot, v2OnlyPack } = await twoRevisions();
    await truncateFile(blobFile(t.storeRoot, v2OnlyPack), 10);
    const target = await occupiedTarget();
    const r = await restoreLatestVerified(t.store, [v2.id, v1.id], target);
    expect(r).toMatchObject({ ok: true, id: v1.id, rejected: [{ id: v2.id, error: { code: "chunk_corrupt" } }] });
    expect(await snapshotTree(target)).toEqual(v1Snapshot);
  });

  it("never falls back to an empty workspace when nothing verifies", async () => {
    const { v1, v2 } = await twoRevisions();
    await t.store.delete(checkpointManifestKey(v1.id));
    await flipByte(blobFile(t.storeRoot, checkpointManifestKey(v2.id)));
    const target = await occupiedTarget();
    const r = await restoreLatestVerified(t.store, [v2.id, v1.id], target);
    expect(r).toMatchObject({ ok: false, error: { code: "no_verified_candidate" }, rejected: [{ id: v2.id }, { id: v1.id }] });
    expect(Object.keys(await snapshotTree(target))).toEqual(["keep.txt"]);
    expect(await restoreLatestVerified(t.store, [], target)).toMatchObject({ ok: false, error: { code: "no_verified_candidate" } });
  });

  it("stops instead of falling back when the store itself fails", async () => {
    const { v1, v2 } = await twoRevisions();
    const broken = new CountingBlobStore(new FsBlobStore(t.storeRoot));
    broken.get = async () => {
      throw new Error("connection reset");
    };
    const r = await restoreLatestVerified(broken, [v2.id, v1.id], t.path("x"));
    expect(r).toMatchObject({
      ok: false,
      error: { code: "store_error", message: expect.stringMatching(/connection reset/) },
      rejected: [],
    });
  });
});

describe("hostile workspaces are refused at checkpoint time", () => {
  it("refuses a symlink escaping the workspace unless explicitly allowed, and never follows it", async () => {
    const ws = t.path("ws");
    await mkdir(ws);
    await writeFile(t.path("outside.txt"), "host secret");
    await symlink(t.path("outside.txt"), join(ws, "abs-escape"));
    await symlink("../outside.txt", join(ws, "rel-escape"));
    const r = await createCheckpoint(t.store, ws);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.issues.map((i) => [i.code, i.path]).sort()).toEqual([
      ["symlink_escape", "abs-escape"],
      ["symlink_escape", "rel-escape"],
    ]);
    const allowed = await checkpoint(ws, { symlinks: "any" });
    expect(allowed.stats.files).toBe(0);
    expect(t.store.traffic.putBytes).toBe(allowed.stats.manifestBytes);
    const restored = await restoreCheckpoint(t.store, allowed.id, t.path("r"), { symlinks: "any" });
    expect(restored.ok).toBe(true);
    expect(await snapshotTree(t.path("r"))).toEqual({
      "abs-escape": `symlink ${t.path("outside.txt")}`,
      "rel-escape": "symlink ../outside.txt",
    });
    // The default restore policy rejects that same candidate.
    expect(await restoreCheckpoint(t.store, allowed.id, t.path("r2"))).toMatchObject({ ok: false, error: { code: "manifest_invalid" } });
  });

  it("refuses FIFOs and sockets with a reason instead of hanging or skipping", async () => {
    const ws = t.path("ws");
    await mkdir(ws);
    execFileSync("mkfifo", [join(ws, "pipe")]);
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(join(ws, "sock"), resolve));
    try {
      const r = await createCheckpoint(t.store, ws);
      expect(r).toMatchObject({ ok: false });
      if (r.ok) return;
      expect(r.issues).toEqual(
        expect.arrayContaining([
          { code: "special_file", path: "pipe", message: "a FIFO is not a regular file or directory" },
          { code: "special_file", path: "sock", message: "a socket is not a regular file or directory" },
        ]),
      );
    } finally {
      server.close();
    }
  });

  it("refuses a file that grows while it is being checkpointed", async () => {
    const ws = t.path("ws");
    await mkdir(ws);
    await writeFile(join(ws, "log.txt"), "line 1\n");
    const r = await createCheckpoint(t.store, ws, {
      afterFileRead: async (path) => writeFile(join(ws, path), "line 1\nline 2\n"),
    });
    expect(r).toMatchObject({
      ok: false,
      error: { code: "changed", path: "log.txt", message: "file grew from 7 to 14 bytes while being read" },
    });
  });

  it("refuses names that are not UTF-8 and limits size before reading", async () => {
    const ws = t.path("ws");
    await mkdir(ws);
    await writeFile(Buffer.from(join(ws, "bad-\xff-name"), "latin1"), "x");
    const r = await createCheckpoint(t.store, ws);
    expect(r).toMatchObject({ ok: false, error: { code: "invalid_path", message: expect.stringMatching(/not valid UTF-8/) } });

    const ws2 = t.path("ws2");
    await mkdir(ws2);
    await writeFile(join(ws2, "sparse"), "");
    execFileSync("truncate", ["-s", "20G", join(ws2, "sparse")]);
    t.store.reset();
    const big = await createCheckpoint(t.store, ws2);
    expect(big).toMatchObject({ ok: false, error: { code: "file_too_large", path: "sparse" } });
    expect(t.store.traffic.puts).toBe(0);
  });

  it("reports a chunk deleted by a concurrent sweep after it was skipped as present", async () => {
    const ws = t.path("ws");
    await buildWorkspace(ws);
    const first = await checkpoint(ws);
    const m = await loadCheckpointManifest(t.store, first.id);
    if (!m.ok) throw new Error("manifest");
    const main = m.manifest.entries.find((e) => e.path === "src/main.ts");
    if (main?.type !== "file") throw new Error("main.ts");
    const victim = main.chunks[0]!;
    const racing = new CountingBlobStore(new FsBlobStore(t.storeRoot));
    const put = racing.put.bind(racing);
    racing.put = async (key, data) => {
      if (key.startsWith("checkpoint/manifests/")) await racing.delete(packKey(victim.pack!));
      await put(key, data);
    };
    await writeFile(join(ws, "README.md"), "# changed\n");
    const r = await createCheckpoint(racing, ws, { cache: first.cache });
    expect(r).toMatchObject({ ok: false, error: { code: "chunk_vanished" } });
    const retry = await createCheckpoint(t.store, ws);
    expect(retry.ok).toBe(true);
    if (retry.ok) expect((await restoreCheckpoint(t.store, retry.id, t.path("r"))).ok).toBe(true);
  });
});
