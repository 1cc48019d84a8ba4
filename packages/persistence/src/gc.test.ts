import { mkdir, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createCheckpoint } from "./checkpoint.ts";
import { collectGarbage } from "./gc.ts";
import { CountingBlobStore } from "./instrument.ts";
import { checkpointManifestKey } from "./manifest.ts";
import { collectOutputs, OUTPUT_BLOB_PREFIX } from "./outputs.ts";
import { PACK_FORWARD_PREFIX, PACK_PREFIX } from "./packs.ts";
import { restoreCheckpoint } from "./restore.ts";
import { blobFile, flipByte, seededBytes, type TempDirs, tempDirs } from "./testkit.ts";

let t: TempDirs;
beforeEach(async () => {
  t = await tempDirs();
});
afterEach(async () => t.cleanup());

const HOUR = 3_600_000;

async function checkpointOf(files: Record<string, Buffer | string>, base?: string): Promise<string> {
  const ws = t.path(`ws-${Math.random().toString(36).slice(2)}`);
  await mkdir(ws);
  for (const [name, data] of Object.entries(files)) await writeFile(join(ws, name), data);
  const r = await createCheckpoint(t.store, ws, { base });
  if (!r.ok) throw new Error("checkpoint");
  return r.id;
}

async function outputsOf(files: Record<string, string>): Promise<string> {
  const dir = t.path(`out-${Math.random().toString(36).slice(2)}`);
  await mkdir(dir);
  for (const [name, data] of Object.entries(files)) await writeFile(join(dir, name), data);
  const r = await collectOutputs(t.store, dir);
  if (!r.ok) throw new Error("collect");
  return r.id;
}

/** Ages every stored object so only the retention window, not the wall clock, decides. */
async function ageEverything(ms: number): Promise<void> {
  const when = new Date(Date.now() - ms);
  for (const l of await t.store.list!("checkpoint")) await utimes(blobFile(t.storeRoot, l.key), when, when);
  for (const l of await t.store.list!("session-outputs")) await utimes(blobFile(t.storeRoot, l.key), when, when);
}

describe("garbage collection", () => {
  it("sweeps unreferenced chunks, manifests and blobs older than the window and keeps everything live", async () => {
    const shared = seededBytes("shared", 100_000);
    const v1 = await checkpointOf({ shared, old: seededBytes("old", 50_000) });
    const v2 = await checkpointOf({ shared, fresh: seededBytes("fresh", 50_000) });
    const abandoned = await checkpointOf({ partial: seededBytes("abandoned", 30_000) });
    const liveOut = await outputsOf({ "keep.txt": "keep" });
    await outputsOf({ "drop.txt": "drop" });
    await ageEverything(2 * HOUR);

    const r = await collectGarbage(t.store, { liveCheckpoints: [v2], liveOutputs: [liveOut], retentionMs: HOUR, now: Date.now() });
    if (!r.ok) throw new Error(r.error.message);
    const deleted = r.report.deleted;
    expect(deleted).toContain(checkpointManifestKey(v1));
    expect(deleted).toContain(checkpointManifestKey(abandoned));
    expect(deleted.filter((k) => k.startsWith(`${PACK_PREFIX}/`))).toHaveLength(2); // v1's pack and the abandoned one
    expect(r.report.repacked).toEqual([]);
    expect(deleted.filter((k) => k.startsWith(`${OUTPUT_BLOB_PREFIX}/`))).toHaveLength(1); // drop.txt
    expect(deleted.filter((k) => k.startsWith("session-outputs/manifests/"))).toHaveLength(1);
    expect(r.report.deletedBytes).toBeGreaterThan(80_000);

    expect((await restoreCheckpoint(t.store, v2, t.path("r2"))).ok).toBe(true);
    expect(await restoreCheckpoint(t.store, v1, t.path("r1"))).toMatchObject({ ok: false, error: { code: "manifest_missing" } });
    const again = await collectGarbage(t.store, { liveCheckpoints: [v2], liveOutputs: [liveOut], retentionMs: HOUR, now: Date.now() });
    expect(again).toMatchObject({ ok: true, report: { deleted: [] } });
  });

  it("repacks a pack live revisions use only partly, and every revision still restores through the forward", async () => {
    const shared = seededBytes("shared", 100_000);
    const v1 = await checkpointOf({ shared, old: seededBytes("old", 300_000) });
    // v2 reuses `shared` from v1's pack: once v1 is gone, a quarter of that pack is live.
    const v2 = await checkpointOf({ shared, fresh: seededBytes("fresh", 50_000) }, v1);
    await ageEverything(2 * HOUR);
    const gc = (store = t.store) => collectGarbage(store, { liveCheckpoints: [v2], liveOutputs: [], retentionMs: HOUR, now: Date.now() });

    // A crash between writing the new pack and its forward: the GC stops before the old pack is deleted, v2 restores.
    const crashing = new CountingBlobStore(t.store);
    crashing.put = async (key, data) => {
      if (key.startsWith(`${PACK_FORWARD_PREFIX}/`)) throw new Error("killed");
      await t.store.put(key, data);
    };
    expect(await gc(crashing)).toMatchObject({ ok: false, error: { code: "store_error" } });
    expect((await t.store.list!(PACK_PREFIX)).length).toBe(3); // v1's, v2's and the unfinished new one
    expect((await restoreCheckpoint(t.store, v2, t.path("r0"))).ok).toBe(true);

    const r = await gc();
    if (!r.ok) throw new Error(r.error.message);
    expect(r.report.repacked).toHaveLength(1);
    expect(r.report.deleted).toEqual(r.report.repacked);
    expect(await restoreCheckpoint(t.store, v1, t.path("gone"))).toMatchObject({ ok: false, error: { code: "manifest_missing" } });
    expect((await restoreCheckpoint(t.store, v2, t.path("r1"))).ok).toBe(true);
    expect((await t.store.list!(PACK_FORWARD_PREFIX)).length).toBe(1);

    // Later sweeps keep the forward and the new pack (v2 still needs both), and a new checkpoint
    // based on v2 reuses `shared` at its new place and restores.
    await ageEverything(2 * HOUR);
    expect(await gc()).toMatchObject({ ok: true, report: { deleted: [], repacked: [] } });
    const v3 = await checkpointOf({ shared, third: "3" }, v2);
    expect((await restoreCheckpoint(t.store, v3, t.path("r3"))).ok).toBe(true);
    expect((await restoreCheckpoint(t.store, v2, t.path("r2"))).ok).toBe(true);
  });

  it("keeps young objects and everything reachable from young unpublished manifests", async () => {
    const v1 = await checkpointOf({ a: seededBytes("a", 40_000) });
    const young = await collectGarbage(t.store, { liveCheckpoints: [], liveOutputs: [], retentionMs: HOUR, now: Date.now() });
    expect(young).toMatchObject({ ok: true, report: { deleted: [], keptYoung: 1, marked: 1 } }); // the manifest by age, its chunk by reference

    // Old chunk, young manifest (a candidate written but not yet published): the chunk survives.
    await ageEverything(2 * HOUR);
    const now = new Date();
    await utimes(blobFile(t.storeRoot, checkpointManifestKey(v1)), now, now);
    const r = await collectGarbage(t.store, { liveCheckpoints: [], liveOutputs: [], retentionMs: HOUR, now: Date.now() });
    expect(r).toMatchObject({ ok: true, report: { deleted: [] } });
    expect((await restoreCheckpoint(t.store, v1, t.path("r"))).ok).toBe(true);
  });

  it("fails closed when a live manifest cannot be verified", async () => {
    const v1 = await checkpointOf({ a: "x" });
    await checkpointOf({ b: "garbage" });
    await ageEverything(2 * HOUR);
    await flipByte(blobFile(t.storeRoot, checkpointManifestKey(v1)));
    const before = (await t.store.list!("checkpoint")).length;
    const r = await collectGarbage(t.store, { liveCheckpoints: [v1], liveOutputs: [], retentionMs: HOUR, now: Date.now() });
    expect(r).toMatchObject({ ok: false, error: { code: "manifest_corrupt", message: expect.stringMatching(/refusing to sweep/) } });
    expect(await t.store.list!("checkpoint")).toHaveLength(before);
    const missingOut = await collectGarbage(t.store, {
      liveCheckpoints: [],
      liveOutputs: ["f".repeat(64)],
      retentionMs: HOUR,
      now: Date.now(),
    });
    expect(missingOut).toMatchObject({ ok: false, error: { code: "manifest_invalid", message: expect.stringMatching(/missing/) } });
  });

  it("reports without deleting in a dry run, and refuses a store that cannot list", async () => {
    await checkpointOf({ a: "x" });
    await ageEverything(2 * HOUR);
    const dry = await collectGarbage(t.store, { liveCheckpoints: [], liveOutputs: [], retentionMs: HOUR, now: Date.now(), dryRun: true });
    expect(dry).toMatchObject({ ok: true, report: { deleted: expect.arrayContaining([expect.stringMatching(/^checkpoint\//)]) } });
    expect(t.store.traffic.deletes).toBe(0);
    const unlisted = new CountingBlobStore(t.store);
    unlisted.list = undefined;
    expect(await collectGarbage(unlisted, { liveCheckpoints: [], liveOutputs: [], retentionMs: 0, now: Date.now() })).toMatchObject({
      ok: false,
      error: { code: "store_error" },
    });
  });
});
