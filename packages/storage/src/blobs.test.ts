import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { describeBlobStore } from "./blob-suite.ts";
import { FsBlobStore } from "./blobs.ts";
import { S3BlobStore } from "./s3-blobs.ts";
import { openStandInBlobStore, openTestStorage } from "./testing.ts";

describeBlobStore("FsBlobStore", async () => {
  const dir = mkdtempSync(join(tmpdir(), "openma-blobs-"));
  return { store: new FsBlobStore(dir), close: async () => rmSync(dir, { recursive: true, force: true }) };
});

describeBlobStore("S3BlobStore on the S3 stand-in", openStandInBlobStore);

describe("openTestStorage blobs", () => {
  it.each([
    ["fs", FsBlobStore],
    ["s3", S3BlobStore],
  ] as const)("OPENMA_TEST_BLOBS=%s selects %o", async (mode, kind) => {
    const previous = process.env.OPENMA_TEST_BLOBS;
    process.env.OPENMA_TEST_BLOBS = mode;
    try {
      const t = await openTestStorage("sqlite");
      try {
        expect(t.storage.blobs).toBeInstanceOf(kind);
        await t.storage.blobs.put("ns/k", Buffer.from(mode));
        expect((await t.storage.blobs.get("ns/k"))?.toString()).toBe(mode);
      } finally {
        await t.cleanup();
      }
      process.env.OPENMA_TEST_BLOBS = "minio";
      await expect(openTestStorage("sqlite")).rejects.toThrow(/OPENMA_TEST_BLOBS must be fs or s3/);
    } finally {
      if (previous === undefined) delete process.env.OPENMA_TEST_BLOBS;
      else process.env.OPENMA_TEST_BLOBS = previous;
    }
  });
});

describe("FsBlobStore.readInto", () => {
  it("reads a blob into the caller's buffer when it fits, into a fresh one when not, and null when absent", async () => {
    const dir = mkdtempSync(join(tmpdir(), "openma-blobs-"));
    try {
      const store = new FsBlobStore(dir);
      const bytes = Buffer.from(Array.from({ length: 3000 }, (_, i) => i % 251));
      await store.put("ns/blob", bytes);
      const into = Buffer.alloc(4096, 0xee);
      const got = await store.readInto("ns/blob", into);
      expect(got?.equals(bytes)).toBe(true);
      expect(got?.buffer).toBe(into.buffer);
      const small = Buffer.alloc(100);
      const fresh = await store.readInto("ns/blob", small);
      expect(fresh?.equals(bytes)).toBe(true);
      expect(small.equals(Buffer.alloc(100))).toBe(true);
      expect(await store.readInto("ns/missing", into)).toBeNull();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("FsBlobStore.putPending", () => {
  it("places nothing under the key until commit, copies the bytes at once, and leaves no temporary on discard", async () => {
    const dir = mkdtempSync(join(tmpdir(), "openma-blobs-"));
    try {
      const store = new FsBlobStore(dir);
      const bytes = Buffer.from("pack bytes");
      const committed = await store.putPending("ns/committed", bytes);
      bytes.fill(0); // lent only for the call: the store already has its own copy
      expect(await store.exists("ns/committed")).toBe(false);
      await committed.commit();
      expect((await store.get("ns/committed"))?.toString()).toBe("pack bytes");
      const dropped = await store.putPending("ns/dropped", Buffer.from("never placed"));
      await dropped.discard();
      expect(await store.exists("ns/dropped")).toBe(false);
      expect(await store.list("ns")).toEqual([expect.objectContaining({ key: "ns/committed" })]);
      expect(readdirSync(join(dir, "ns"))).toEqual(["committed"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
