import { appendFile, mkdir, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Issue } from "./issues.ts";
import { collectOutputs } from "./outputs.ts";
import { type TempDirs, tempDirs } from "./testkit.ts";
import { ManualScheduler, OutputWatcher } from "./watch.ts";

let t: TempDirs;
let out: string;
let scheduler: ManualScheduler;
beforeEach(async () => {
  t = await tempDirs();
  out = t.path("outputs");
  await mkdir(out);
  scheduler = new ManualScheduler();
});
afterEach(async () => t.cleanup());

describe("watch_and_upload", () => {
  it("uploads a file once it is unchanged across two scans, and again after it changes", async () => {
    const w = new OutputWatcher(t.store, out, { scheduler, intervalMs: 1000 });
    await writeFile(join(out, "a.txt"), "v1");
    expect(await w.scan()).toEqual({ uploaded: [], pending: ["a.txt"], refused: [] });
    expect(t.store.traffic.puts).toBe(0);
    expect(await w.scan()).toEqual({ uploaded: ["a.txt"], pending: [], refused: [] });
    expect(t.store.traffic.puts).toBe(1);
    expect(await w.scan()).toEqual({ uploaded: [], pending: [], refused: [] });

    await appendFile(join(out, "a.txt"), " and v2");
    expect((await w.scan()).pending).toEqual(["a.txt"]);
    expect((await w.scan()).uploaded).toEqual(["a.txt"]);
    expect(t.store.traffic.puts).toBe(2);
  });

  it("never uploads a file that keeps changing; finalize collects its final bytes", async () => {
    const w = new OutputWatcher(t.store, out, { scheduler });
    for (let i = 0; i < 4; i++) {
      await appendFile(join(out, "growing.log"), `line ${i}\n`);
      const r = await w.scan();
      expect(r.uploaded).toEqual([]);
    }
    const final = await w.finalize();
    expect(final).toMatchObject({ ok: true, manifest: { entries: [{ path: "growing.log", size: 28 }] } });
  });

  it("runs on the injected scheduler, and finalize stops it and matches final_collect exactly", async () => {
    const w = new OutputWatcher(t.store, out, { scheduler, intervalMs: 250 });
    w.start();
    await writeFile(join(out, "early.txt"), "early");
    expect(await scheduler.runDue()).toBe(1);
    expect(await scheduler.runDue()).toBe(1);
    expect(t.store.traffic.puts).toBe(1);
    await writeFile(join(out, "late.txt"), "late");
    t.store.reset();
    const final = await w.finalize();
    expect(scheduler.pending).toBe(0);
    if (!final.ok) throw new Error("finalize");
    // early.txt was reused from the watcher's upload; only late.txt was read and stored.
    expect(final.stats).toMatchObject({ files: 2, reusedBlobs: 1, uploadedBlobs: 1 });
    expect(t.store.traffic.puts).toBe(2); // late.txt's blob and the manifest
    const direct = await collectOutputs(t.store, out);
    expect(direct).toMatchObject({ ok: true, id: final.id });
    w.start();
    expect(scheduler.pending).toBe(0);
  });

  it("re-reads at finalize when an uploaded blob was swept meanwhile", async () => {
    const w = new OutputWatcher(t.store, out, { scheduler });
    await writeFile(join(out, "a.txt"), "kept");
    await w.scan();
    await w.scan();
    const final1 = await collectOutputs(t.store, out);
    if (!final1.ok) throw new Error("collect");
    await t.store.delete(final1.manifest.entries[0]!.blobKey);
    const final = await w.finalize();
    expect(final).toMatchObject({ ok: true, stats: { uploadedBlobs: 1, reusedBlobs: 0 } });
    expect((await t.store.get(final1.manifest.entries[0]!.blobKey))?.toString()).toBe("kept");
  });

  it("reports refusals per scan and leaves the decision to finalize", async () => {
    const w = new OutputWatcher(t.store, out, { scheduler });
    await writeFile(join(out, "ok.txt"), "fine");
    await symlink("/etc/hostname", join(out, "link"));
    expect((await w.scan()).refused).toMatchObject([{ code: "symlink", path: "link" }]);
    expect(await w.finalize()).toMatchObject({ ok: false, error: { code: "symlink" } });
    expect(await w.finalize({ onRefusal: "skip" })).toMatchObject({ ok: true, manifest: { refused: [{ path: "link" }] } });
  });

  it("reports a failed background scan and keeps polling", async () => {
    const errors: Issue[] = [];
    const w = new OutputWatcher(t.store, out, { scheduler, onError: (e) => errors.push(e) });
    w.start();
    await rm(out, { recursive: true });
    await scheduler.runDue();
    expect(errors).toHaveLength(1);
    expect(errors[0]!.message).toMatch(/ENOENT/);
    expect(scheduler.pending).toBe(1);
    await mkdir(out);
    await writeFile(join(out, "back.txt"), "x");
    await scheduler.runDue();
    await scheduler.runDue();
    expect(errors).toHaveLength(1);
    expect(t.store.traffic.puts).toBe(1);
  });
});
