/**
 * The stand-in's buckets and objects, in memory or under a directory. Keys
 * are kept sorted by their UTF-8 bytes, the order S3 lists them in; metadata
 * is always indexed in memory, object bytes live in memory or in files. With a
 * directory, a restarted stand-in finds its buckets and objects again.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ChecksumAlgorithm } from "./checksums.ts";

export interface ObjectMeta {
  key: string;
  size: number;
  /** Hex MD5 of the bytes, without quotes. */
  etag: string;
  /** Epoch ms, whole seconds as S3 reports it. */
  lastModified: number;
  contentType: string;
  checksum: { algorithm: ChecksumAlgorithm; value: string };
  /** `COMPOSITE` for a multipart object whose checksum is of its parts' checksums (`…-N`); else full-object. */
  checksumType?: "COMPOSITE" | undefined;
  /** `x-amz-meta-*` user metadata, names lower-cased without the prefix. */
  metadata: Record<string, string>;
}

interface Entry {
  bytes: Buffer;
  meta: ObjectMeta;
}

class Bucket {
  /** Sorted by `Buffer.compare` of the UTF-8 key. */
  readonly sorted: Entry[] = [];
  readonly byKey = new Map<string, Entry>();
  readonly data = new Map<string, Buffer>();
  constructor(
    readonly name: string,
    readonly createdAt: number,
  ) {}

  /** First index whose key is >= `bytes` (or > when `strict`). */
  bound(bytes: Buffer, strict: boolean): number {
    let lo = 0;
    let hi = this.sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const cmp = Buffer.compare(this.sorted[mid]!.bytes, bytes);
      if (cmp < 0 || (strict && cmp === 0)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  set(meta: ObjectMeta): void {
    const existing = this.byKey.get(meta.key);
    if (existing) {
      existing.meta = meta;
      return;
    }
    const entry = { bytes: Buffer.from(meta.key, "utf8"), meta };
    this.sorted.splice(this.bound(entry.bytes, false), 0, entry);
    this.byKey.set(meta.key, entry);
  }

  remove(key: string): boolean {
    const entry = this.byKey.get(key);
    if (!entry) return false;
    this.byKey.delete(key);
    this.sorted.splice(this.bound(entry.bytes, false), 1);
    this.data.delete(key);
    return true;
  }
}

export interface ListOptions {
  prefix: string;
  /** List keys strictly after this one. */
  after?: string | undefined;
}

export class ObjectStore {
  private readonly buckets = new Map<string, Bucket>();
  // Per-object serialisation so a file write and a read of the same key never interleave.
  private readonly locks = new Map<string, Promise<unknown>>();

  private constructor(private readonly dir: string | undefined) {}

  static async open(dir?: string): Promise<ObjectStore> {
    const store = new ObjectStore(dir);
    if (dir) await store.load(dir);
    return store;
  }

  private async load(dir: string): Promise<void> {
    await mkdir(dir, { recursive: true });
    for (const d of await readdir(dir, { withFileTypes: true })) {
      if (!d.isDirectory()) continue;
      const info = await readFile(join(dir, d.name, "bucket.json"), "utf8").catch(() => null);
      if (info === null) continue;
      const bucket = new Bucket(d.name, (JSON.parse(info) as { createdAt: number }).createdAt);
      this.buckets.set(d.name, bucket);
      const objects = join(dir, d.name, "objects");
      for (const shard of await readdir(objects).catch(() => [] as string[])) {
        for (const f of await readdir(join(objects, shard))) {
          if (f.endsWith(".json")) bucket.set(JSON.parse(await readFile(join(objects, shard, f), "utf8")) as ObjectMeta);
        }
      }
    }
  }

  private async locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(id) ?? Promise.resolve();
    const run = previous.then(fn, fn);
    const tail = run.catch(() => undefined);
    this.locks.set(id, tail);
    try {
      return await run;
    } finally {
      if (this.locks.get(id) === tail) this.locks.delete(id);
    }
  }

  private objectPath(bucket: string, key: string): string {
    const h = createHash("sha256").update(key).digest("hex");
    return join(this.dir!, bucket, "objects", h.slice(0, 2), h);
  }

  private async writeAtomic(path: string, data: Uint8Array | string): Promise<void> {
    const tmp = `${path}.tmp-${randomBytes(6).toString("hex")}`;
    await writeFile(tmp, data);
    await rename(tmp, path);
  }

  listBuckets(): { name: string; createdAt: number }[] {
    return [...this.buckets.values()].map((b) => ({ name: b.name, createdAt: b.createdAt })).sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  hasBucket(name: string): boolean {
    return this.buckets.has(name);
  }

  /** `false` when it already exists. */
  async createBucket(name: string, now: number): Promise<boolean> {
    if (this.buckets.has(name)) return false;
    const bucket = new Bucket(name, now);
    this.buckets.set(name, bucket);
    if (this.dir) {
      await mkdir(join(this.dir, name, "objects"), { recursive: true });
      await this.writeAtomic(join(this.dir, name, "bucket.json"), JSON.stringify({ createdAt: now }));
    }
    return true;
  }

  async deleteBucket(name: string): Promise<"deleted" | "missing" | "not_empty"> {
    const bucket = this.buckets.get(name);
    if (!bucket) return "missing";
    if (bucket.sorted.length > 0) return "not_empty";
    this.buckets.delete(name);
    if (this.dir) await rm(join(this.dir, name), { recursive: true, force: true });
    return "deleted";
  }

  head(bucket: string, key: string): ObjectMeta | undefined {
    return this.buckets.get(bucket)?.byKey.get(key)?.meta;
  }

  async read(bucket: string, key: string): Promise<{ meta: ObjectMeta; data: Buffer } | undefined> {
    return this.locked(`${bucket}/${key}`, async () => {
      const b = this.buckets.get(bucket);
      const meta = b?.byKey.get(key)?.meta;
      if (!b || !meta) return undefined;
      const data = this.dir ? await readFile(`${this.objectPath(bucket, key)}.bin`) : b.data.get(key);
      return data ? { meta, data } : undefined;
    });
  }

  async put(bucket: string, meta: ObjectMeta, data: Buffer): Promise<void> {
    await this.locked(`${bucket}/${meta.key}`, async () => {
      const b = this.buckets.get(bucket);
      if (!b) throw new Error(`no bucket ${bucket}`);
      if (this.dir) {
        const path = this.objectPath(bucket, meta.key);
        await mkdir(join(path, ".."), { recursive: true });
        // Under the lock readers always see a matching pair; a crash between the two renames could
        // pair new bytes with old metadata, which is acceptable for a test tool.
        await this.writeAtomic(`${path}.bin`, data);
        await this.writeAtomic(`${path}.json`, JSON.stringify(meta));
      } else {
        b.data.set(meta.key, data);
      }
      b.set(meta);
    });
  }

  async delete(bucket: string, key: string): Promise<void> {
    await this.locked(`${bucket}/${key}`, async () => {
      const b = this.buckets.get(bucket);
      if (!b?.remove(key) || !this.dir) return;
      const path = this.objectPath(bucket, key);
      await rm(`${path}.json`, { force: true });
      await rm(`${path}.bin`, { force: true });
    });
  }

  /** Objects in key order, starting after `after`, while their keys start with `prefix`. */
  *list(bucket: string, opts: ListOptions): Generator<ObjectMeta> {
    const b = this.buckets.get(bucket);
    if (!b) return;
    const prefix = Buffer.from(opts.prefix, "utf8");
    let i = b.bound(prefix, false);
    if (opts.after !== undefined) i = Math.max(i, b.bound(Buffer.from(opts.after, "utf8"), true));
    for (; i < b.sorted.length; i++) {
      const entry = b.sorted[i]!;
      if (!entry.bytes.subarray(0, prefix.length).equals(prefix)) return;
      yield entry.meta;
    }
  }
}
