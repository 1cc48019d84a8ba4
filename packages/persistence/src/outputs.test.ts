import { execFileSync } from "node:child_process";
import { appendFile, mkdir, rename, symlink, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { sha256Hex } from "@openma/storage/blobs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { collectOutputs, outputBlobKey, outputManifestKey, parseOutputManifest } from "./outputs.ts";
import { checkLogicalPath } from "./paths.ts";
import { blobFile, seededBytes, type TempDirs, tempDirs, truncateFile } from "./testkit.ts";

let t: TempDirs;
let out: string;
beforeEach(async () => {
  t = await tempDirs();
  out = t.path("outputs");
  await mkdir(out);
});
afterEach(async () => t.cleanup());

describe("final_collect", () => {
  it("uploads content-addressed blobs and an immutable manifest", async () => {
    await mkdir(join(out, "report/img"), { recursive: true });
    await writeFile(join(out, "report/summary.md"), "# Summary\n");
    await writeFile(join(out, "report/img/chart.png"), Buffer.from([0x89, 0x50, 0x4e, 0x47, 1, 2, 3]));
    await writeFile(join(out, "data"), seededBytes("data", 10_000));
    await writeFile(join(out, "notes"), "plain words");
    await writeFile(join(out, "copy.md"), "# Summary\n");
    const r = await collectOutputs(t.store, out);
    if (!r.ok) throw new Error(JSON.stringify(r.refused));
    expect(r.manifest.entries.map((e) => [e.path, e.mimeType])).toEqual([
      ["copy.md", "text/markdown"],
      ["data", "application/octet-stream"],
      ["notes", "text/plain"],
      ["report/img/chart.png", "image/png"],
      ["report/summary.md", "text/markdown"],
    ]);
    // Identical content is stored once.
    expect(r.stats).toMatchObject({ files: 5, uploadedBlobs: 4 });
    for (const e of r.manifest.entries) {
      const blob = await t.store.get(e.blobKey);
      expect(blob && sha256Hex(blob)).toBe(e.sha256);
      expect(e.blobKey).toBe(outputBlobKey(e.sha256));
    }
    const stored = await t.store.get(outputManifestKey(r.id));
    expect(stored && sha256Hex(stored)).toBe(r.id);
    expect(parseOutputManifest(stored!)).toMatchObject({ ok: true, manifest: { entries: r.manifest.entries, refused: [] } });

    t.store.reset();
    const again = await collectOutputs(t.store, out);
    expect(again).toMatchObject({ ok: true, id: r.id, stats: { uploadedBlobs: 0, reusedBlobs: 5 } });
    expect(t.store.traffic.puts).toBe(0);
  });

  it("accepts an existing blob only when its bytes match the expected hash", async () => {
    await writeFile(join(out, "a.txt"), "deliverable");
    const first = await collectOutputs(t.store, out);
    if (!first.ok) throw new Error("collect");
    const key = first.manifest.entries[0]!.blobKey;
    await truncateFile(blobFile(t.storeRoot, key), 3);
    const second = await collectOutputs(t.store, out);
    expect(second).toMatchObject({ ok: true, id: first.id, stats: { repairedBlobs: 1, reusedBlobs: 0 } });
    expect((await t.store.get(key))?.toString()).toBe("deliverable");
  });

  it("refuses a symlink, even one pointing at a host secret, and never reads through it", async () => {
    await writeFile(t.path("host-secret"), "do not leak");
    await symlink(t.path("host-secret"), join(out, "escape"));
    await mkdir(t.path("elsewhere"));
    await writeFile(t.path("elsewhere/f"), "outside");
    await symlink(t.path("elsewhere"), join(out, "dir-link"));
    const r = await collectOutputs(t.store, out);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.refused.map((i) => [i.code, i.path]).sort()).toEqual([
      ["symlink", "dir-link"],
      ["symlink", "escape"],
    ]);
    expect(r.error.message).toMatch(/symbolic links are not allowed/);
    expect(t.store.traffic.puts).toBe(0);
  });

  it("refuses FIFOs without blocking on them", async () => {
    execFileSync("mkfifo", [join(out, "pipe")]);
    const r = await collectOutputs(t.store, out);
    expect(r).toMatchObject({ ok: false, error: { code: "special_file", path: "pipe", message: expect.stringMatching(/FIFO/) } });
  });

  it("skips refused files when asked, listing each with its reason in the manifest", async () => {
    await writeFile(join(out, "good.txt"), "ok");
    await symlink("/etc/passwd", join(out, "bad"));
    const r = await collectOutputs(t.store, out, { onRefusal: "skip" });
    if (!r.ok) throw new Error("collect");
    expect(r.manifest.entries.map((e) => e.path)).toEqual(["good.txt"]);
    expect(r.manifest.refused).toEqual([{ code: "symlink", path: "bad", message: "symbolic links are not allowed (-> /etc/passwd)" }]);
  });

  it("refuses a file that grows while being collected instead of truncating it", async () => {
    await writeFile(join(out, "stream.log"), "0123456789");
    const r = await collectOutputs(t.store, out, {
      afterRead: (path) => appendFile(join(out, path), "more"),
    });
    expect(r).toMatchObject({
      ok: false,
      error: { code: "changed", path: "stream.log", message: "file grew from 10 to 14 bytes while being read" },
    });
    expect(t.store.traffic.puts).toBe(0);
  });

  it("refuses files that shrink, are rewritten or are replaced under the reader", async () => {
    await writeFile(join(out, "f"), "0123456789");
    const shrink = await collectOutputs(t.store, out, { afterRead: (p) => truncate(join(out, p), 2) });
    expect(shrink).toMatchObject({ ok: false, error: { code: "changed", message: "file shrank from 10 to 2 bytes while being read" } });
    await writeFile(join(out, "f"), "0123456789");
    const rewrite = await collectOutputs(t.store, out, { afterRead: (p) => writeFile(join(out, p), "abcdefghij") });
    // Stamps catch it when the rewrite lands in a later timestamp tick; the automatic re-read of a
    // just-written file catches it when it lands in the same tick.
    expect(rewrite).toMatchObject({
      ok: false,
      error: { code: "changed", message: expect.stringMatching(/^file (was modified|content changed) while being read$/) },
    });
    await writeFile(join(out, "f"), "0123456789");
    const replace = await collectOutputs(t.store, out, {
      afterRead: async (p) => {
        await writeFile(t.path("other"), "0123456789");
        await rename(t.path("other"), join(out, p));
      },
    });
    expect(replace).toMatchObject({ ok: false, error: { code: "changed", message: "file was replaced while being read" } });
    // A stable file passes with and without the re-read.
    expect(await collectOutputs(t.store, out, { reread: true })).toMatchObject({ ok: true, stats: { files: 1 } });
    expect(await collectOutputs(t.store, out, { reread: false })).toMatchObject({ ok: true, stats: { files: 1 } });
  });

  it("refuses size bombs before reading a byte", async () => {
    await writeFile(join(out, "sparse"), "");
    await truncate(join(out, "sparse"), 50 * 1024 ** 3);
    const bomb = await collectOutputs(t.store, out);
    expect(bomb).toMatchObject({ ok: false, error: { code: "file_too_large", path: "sparse" } });
    expect(t.store.traffic.gets + t.store.traffic.puts).toBe(0);

    await truncate(join(out, "sparse"), 0);
    for (let i = 0; i < 5; i++) await writeFile(join(out, `part${i}`), seededBytes(`p${i}`, 1000));
    const total = await collectOutputs(t.store, out, { limits: { maxTotalBytes: 3000 } });
    expect(total).toMatchObject({ ok: false, error: { code: "total_too_large" } });
    expect(t.store.traffic.puts).toBe(0);
  });

  it("enforces path length and depth", async () => {
    await mkdir(join(out, "a/b/c/d"), { recursive: true });
    await writeFile(join(out, "a/b/c/d/deep.txt"), "x");
    expect(await collectOutputs(t.store, out, { limits: { maxDepth: 4 } })).toMatchObject({
      ok: false,
      error: { code: "invalid_path", path: "a/b/c/d/deep.txt", message: "path is deeper than 4 levels" },
    });
    expect(await collectOutputs(t.store, out, { limits: { maxPathBytes: 10 } })).toMatchObject({
      ok: false,
      error: { code: "invalid_path" },
    });
  });

  it("collects 10,000 files and refuses 10,001 without reading any", async () => {
    for (let d = 0; d < 100; d++) {
      await mkdir(join(out, `d${d}`));
      await Promise.all(Array.from({ length: 100 }, (_, f) => writeFile(join(out, `d${d}`, `f${f}`), `${d}/${f}`)));
    }
    const ok = await collectOutputs(t.store, out, { concurrency: 16 });
    expect(ok).toMatchObject({ ok: true, stats: { files: 10_000 } });
    await writeFile(join(out, "one-too-many"), "x");
    t.store.reset();
    const refused = await collectOutputs(t.store, out);
    expect(refused).toMatchObject({ ok: false, error: { code: "too_many_entries", message: "more than 10000 files" } });
    expect(t.store.traffic.gets + t.store.traffic.puts).toBe(0);
  }, 180_000); // 10,000 real files and fsynced blobs: slow on a loaded shared disk, never timing-dependent
});

describe("hostile output manifests and paths", () => {
  const limits = { maxPathBytes: 1024, maxDepth: 32 };
  it("rejects absolute paths, .., empty segments and NUL bytes", () => {
    expect(checkLogicalPath("/etc/passwd", limits)).toMatch(/absolute/);
    expect(checkLogicalPath("a/../../etc", limits)).toMatch(/'\.\.'/);
    expect(checkLogicalPath("..", limits)).toMatch(/'\.\.'/);
    expect(checkLogicalPath("a//b", limits)).toMatch(/empty segment/);
    expect(checkLogicalPath("./a", limits)).toMatch(/'\.'/);
    expect(checkLogicalPath("a\0b", limits)).toMatch(/NUL/);
    expect(checkLogicalPath("ok/path.txt", limits)).toBeNull();
  });

  it("rejects a stored manifest that names paths outside the tree or mismatched blobs", () => {
    const sha = "a".repeat(64);
    const entry = (path: string, blobKey = outputBlobKey(sha)) => ({ path, size: 1, sha256: sha, mimeType: "text/plain", blobKey });
    const doc = (entries: unknown[]) => Buffer.from(JSON.stringify({ format: "openma.session-outputs", version: 1, entries, refused: [] }));
    expect(parseOutputManifest(doc([entry("../x")]))).toMatchObject({ ok: false });
    expect(parseOutputManifest(doc([entry("/abs")]))).toMatchObject({ ok: false, message: expect.stringMatching(/absolute/) });
    expect(parseOutputManifest(doc([entry("x"), entry("x")]))).toMatchObject({ ok: false, message: "duplicate path x" });
    expect(parseOutputManifest(doc([entry("x", "checkpoint/chunks/aa/other")]))).toMatchObject({ ok: false });
    expect(parseOutputManifest(Buffer.from("{not json"))).toMatchObject({ ok: false });
    expect(parseOutputManifest(doc([entry("fine")]))).toMatchObject({ ok: true });
  });
});
