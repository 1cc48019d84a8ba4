/**
 * The BlobStore contract as tests: every implementation registers this suite
 * with a factory, so the local store and the S3 store are held to exactly the
 * same behaviour (round trips, missing keys, overwrite, idempotent delete,
 * key validation, listing by directory prefix).
 */
import { randomBytes } from "node:crypto";
import { readdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { text } from "node:stream/consumers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { BlobListing, BlobStore } from "./blobs.ts";
import { BlobTooLargeError, discardStaged, openBlob, putStagedBlob, stageBlob } from "./transfers.ts";

export interface BlobStoreHandle {
  store: BlobStore;
  close(): Promise<void>;
}

/** Keys every store must refuse, whatever the operation: traversal, absolute, empty segments, bad characters. */
export const INVALID_BLOB_KEYS = ["", "../x", "ns/../x", "ns/./x", "/abs", "ns//x", "ns/x/", "Upper/x", "ns/x y", "ns\\x", "ns/x?y"];

const byKey = (a: BlobListing, b: BlobListing) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);

/** Runs `fn` over `items` with at most `limit` in flight. */
async function inBatches<T>(items: T[], limit: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += limit) await Promise.all(items.slice(i, i + limit).map(fn));
}

export function describeBlobStore(name: string, open: () => Promise<BlobStoreHandle>): void {
  describe(`BlobStore contract: ${name}`, () => {
    let handle: BlobStoreHandle;
    let store: BlobStore;
    beforeEach(async () => {
      handle = await open();
      store = handle.store;
    });
    afterEach(async () => handle?.close());

    it("streams: a staged upload is placed without being consumed, read back whole and by range", async () => {
      const dir = store.stagingDir ?? join(tmpdir(), "openma-blob-suite");
      const chunks = ["alpha-", "beta-", "gamma"].map((t) => Buffer.from(t));
      const staged = await stageBlob(Readable.from(chunks), { dir, maxBytes: 1024 });
      try {
        expect(staged.size).toBe(16);
        await putStagedBlob(store, "ns/streamed", staged);
        // Placing again (around a row's commit) is harmless.
        await putStagedBlob(store, "ns/streamed", staged);
      } finally {
        await discardStaged(staged);
      }
      expect((await store.get("ns/streamed"))?.toString()).toBe("alpha-beta-gamma");
      const whole = await openBlob(store, "ns/streamed");
      expect(whole?.size).toBe(16);
      expect(await text(whole!.body)).toBe("alpha-beta-gamma");
      const part = await openBlob(store, "ns/streamed", { start: 6, end: 9 });
      expect(part?.size).toBe(16);
      expect(await text(part!.body)).toBe("beta");
      expect(await openBlob(store, "ns/absent")).toBeNull();
      // Over the limit: refused, and nothing is left behind in the staging directory.
      await expect(stageBlob(Readable.from(chunks), { dir, maxBytes: 8 })).rejects.toBeInstanceOf(BlobTooLargeError);
      expect((await readdir(dir)).filter((n) => n.startsWith("upload-"))).toEqual([]);
    });

    it("round-trips every byte value and returns a Buffer", async () => {
      const data = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), randomBytes(100_000)]);
      await store.put("ns/bytes", data);
      const got = await store.get("ns/bytes");
      expect(Buffer.isBuffer(got)).toBe(true);
      expect(got?.equals(data)).toBe(true);
      expect(await store.exists("ns/bytes")).toBe(true);
    });

    it("stores an empty blob and a multi-megabyte blob exactly", async () => {
      const big = randomBytes(3 * 1024 * 1024 + 17);
      await store.put("ns/empty", new Uint8Array());
      await store.put("ns/big", big);
      expect((await store.get("ns/empty"))?.length).toBe(0);
      expect(await store.exists("ns/empty")).toBe(true);
      expect((await store.get("ns/big"))?.equals(big)).toBe(true);
    });

    it("answers null and false for a key never written", async () => {
      expect(await store.get("ns/missing")).toBeNull();
      expect(await store.exists("ns/missing")).toBe(false);
    });

    it("overwrites a key with the latest bytes", async () => {
      await store.put("ns/k", Buffer.from("first version, longer"));
      await store.put("ns/k", Buffer.from("second"));
      expect((await store.get("ns/k"))?.toString()).toBe("second");
    });

    it("deletes, and deleting a missing key is a no-op", async () => {
      await store.put("ns/d", Buffer.from("x"));
      await store.delete("ns/d");
      expect(await store.get("ns/d")).toBeNull();
      expect(await store.exists("ns/d")).toBe(false);
      await expect(store.delete("ns/d")).resolves.toBeUndefined();
      await expect(store.delete("ns/never-written")).resolves.toBeUndefined();
    });

    it("keeps what was stored when the caller later reuses its buffer", async () => {
      const data = Buffer.from("immutable once stored");
      await store.put("ns/alias", data);
      data.fill(0);
      expect((await store.get("ns/alias"))?.toString()).toBe("immutable once stored");
    });

    it("keeps keys that share a prefix apart", async () => {
      const keys = ["ns/x/a", "ns/x/ab", "ns/x/a.b", "ns/x/A", "ns/x/a_b", "ns/x/a-b"];
      await Promise.all(keys.map((k) => store.put(k, Buffer.from(k))));
      for (const k of keys) expect((await store.get(k))?.toString()).toBe(k);
    });

    it.each(INVALID_BLOB_KEYS)("refuses the invalid key %j for put, get and delete", async (key) => {
      await expect(store.put(key, Buffer.from("x"))).rejects.toThrow(/invalid blob key/);
      await expect(store.get(key)).rejects.toThrow(/invalid blob key/);
      await expect(store.delete(key)).rejects.toThrow(/invalid blob key/);
      // FsBlobStore answers false rather than throwing; either way it is never reported present.
      expect(await store.exists(key).catch(() => false)).toBe(false);
    });

    it("lets concurrent writers of one key leave one complete value", async () => {
      const values = Array.from({ length: 8 }, (_, i) => Buffer.alloc(64 * 1024, i + 1));
      await Promise.all(values.map((v) => store.put("ns/race", v)));
      const got = await store.get("ns/race");
      expect(values.some((v) => v.equals(got!))).toBe(true);
    });

    describe("list", () => {
      it("lists the keys under a directory prefix with size and modification time", async () => {
        expect(typeof store.list).toBe("function");
        const before = Date.now();
        await store.put("ns/p/a", Buffer.from("abc"));
        await store.put("ns/p/sub/b", Buffer.from("hello"));
        await store.put("ns/pq/c", Buffer.from("not under ns/p"));
        await store.put("ns/other", Buffer.from("nor this"));
        const after = Date.now();
        const listed = (await store.list!("ns/p")).sort(byKey);
        expect(listed.map((l) => [l.key, l.size])).toEqual([
          ["ns/p/a", 3],
          ["ns/p/sub/b", 5],
        ]);
        // S3 reports whole seconds; a local filesystem's clock granularity is coarse too.
        for (const l of listed) {
          expect(l.modifiedAt).toBeGreaterThanOrEqual(before - 2000);
          expect(l.modifiedAt).toBeLessThanOrEqual(after + 2000);
        }
        expect((await store.list!("ns/p/")).sort(byKey)).toEqual(listed);
      });

      it("lists nothing under a prefix never written", async () => {
        expect(await store.list!("ns/nothing-here")).toEqual([]);
      });

      it("reflects deletes and overwrites", async () => {
        await store.put("ns/l/a", Buffer.from("12345"));
        await store.put("ns/l/b", Buffer.from("1"));
        await store.delete("ns/l/b");
        await store.put("ns/l/a", Buffer.from("12"));
        expect((await store.list!("ns/l")).map((l) => [l.key, l.size])).toEqual([["ns/l/a", 2]]);
      });

      it("lists more keys than one S3 page holds", async () => {
        const keys = Array.from({ length: 1050 }, (_, i) => `ns/many/${String(i).padStart(4, "0")}`);
        await inBatches(keys, 50, (k) => store.put(k, Buffer.from(k)));
        const listed = (await store.list!("ns/many")).map((l) => l.key).sort();
        expect(listed).toEqual(keys);
      });

      it("refuses an invalid prefix", async () => {
        await expect(store.list!("../etc")).rejects.toThrow(/invalid blob key/);
      });
    });
  });
}
