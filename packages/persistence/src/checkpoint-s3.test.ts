/**
 * Workspace checkpoints on S3-compatible storage: the same candidates, through
 * the official AWS client, against the S3 stand-in (real HTTP, SigV4, checksums).
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type S3StandIn, startS3StandIn } from "@openma/s3-standin";
import { S3BlobStore } from "@openma/storage/s3-blobs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createCheckpoint } from "./checkpoint.ts";
import { restoreCheckpoint, restoreLatestVerified } from "./restore.ts";

const CREDENTIALS = { accessKeyId: "AKIACHECKPOINTTEST", secretAccessKey: "checkpoint-test-secret/0123456789+abc" };
const BUCKET = "openma-checkpoints";

describe("checkpoint_restore on S3", () => {
  let standIn: S3StandIn;
  let store: S3BlobStore;
  let dir: string;
  beforeAll(async () => {
    standIn = await startS3StandIn({ ...CREDENTIALS, buckets: [BUCKET] });
    store = new S3BlobStore({
      bucket: BUCKET,
      endpoint: standIn.endpoint,
      region: standIn.region,
      forcePathStyle: true,
      credentials: CREDENTIALS,
    });
    dir = await mkdtemp(join(tmpdir(), "openma-ckpt-s3-"));
  });
  afterAll(async () => {
    await standIn?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("stores chunks once in packs, restores byte for byte, and falls back past a corrupted pack", async () => {
    const ws = join(dir, "ws");
    await mkdir(join(ws, "src"), { recursive: true });
    const big = Buffer.alloc(600_000);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7919) % 251;
    await writeFile(join(ws, "src", "big.bin"), big);
    await writeFile(join(ws, "README.md"), "first\n");

    const first = await createCheckpoint(store, ws);
    if (!first.ok) throw new Error(first.error.message);
    expect(first.stats.packs).toBe(1);
    const packsAfterFirst = await store.list("checkpoint/packs");

    await writeFile(join(ws, "README.md"), "second\n");
    const second = await createCheckpoint(store, ws, { cache: first.cache });
    if (!second.ok) throw new Error(second.error.message);
    // Only the changed file's chunk is new, in one small pack: the big file's chunks were stored once.
    const packsAfterSecond = await store.list("checkpoint/packs");
    expect(packsAfterSecond).toHaveLength(packsAfterFirst.length + 1);
    expect(second.stats).toMatchObject({ uploadedChunks: 1, uploadedBytes: 7, packs: 1 });

    const target = join(dir, "restored");
    const restored = await restoreCheckpoint(store, second.id, target);
    expect(restored.ok).toBe(true);
    expect(await readFile(join(target, "README.md"), "utf8")).toBe("second\n");
    expect((await readFile(join(target, "src", "big.bin"))).equals(big)).toBe(true);

    // Corrupt the chunk only the newest candidate has: restore falls back to the previous revision.
    const before = new Set(packsAfterSecond.map((b) => b.key));
    await writeFile(join(ws, "README.md"), "third\n");
    const fourth = await createCheckpoint(store, ws, { base: second.id });
    if (!fourth.ok) throw new Error(fourth.error.message);
    const fresh = (await store.list("checkpoint/packs")).map((b) => b.key).filter((k) => !before.has(k));
    expect(fresh).toHaveLength(1);
    await store.put(fresh[0]!, Buffer.from("not the pack"));
    const fallback = await restoreLatestVerified(store, [fourth.id, second.id], join(dir, "fallback"));
    expect(fallback).toMatchObject({ ok: true, id: second.id });
    expect(await readFile(join(dir, "fallback", "README.md"), "utf8")).toBe("second\n");
  });
});
