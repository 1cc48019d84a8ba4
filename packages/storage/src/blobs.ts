/**
 * Blob storage behind one small interface. The embedded default keeps blobs in
 * a local directory; S3-compatible storage is the scale-out option.
 * Keys are relative slash-separated names chosen by the server, never by users.
 */
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { link, mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, resolve, sep } from "node:path";
import { pipeline } from "node:stream/promises";
import { type BlobReader, type ByteRange, DEFAULT_TRANSFER_BUFFER_BYTES, readFileRange, type StagedBlob } from "./transfers.ts";

export interface BlobStore {
  /** `data` is only lent for the call: a store that keeps bytes copies them (checkpoints reuse their pack buffers). */
  put(key: string, data: Uint8Array): Promise<void>;
  /** `null` when absent. */
  get(key: string): Promise<Buffer | null>;
  delete(key: string): Promise<void>;
  exists(key: string): Promise<boolean>;
  /** Keys under a `/`-separated prefix, for garbage collection. Optional: not every store can enumerate. */
  list?(prefix: string): Promise<BlobListing[]>;
  /**
   * Streaming (see transfers.ts): where uploads are spooled before they have a
   * key, placing a spooled file under a key without consuming it, and reading a
   * blob (or a byte range of it) as a stream. Optional: `putStagedBlob` and
   * `openBlob` fall back to whole byte arrays for stores without them.
   */
  readonly stagingDir?: string | undefined;
  /**
   * A whole blob read into `into` (a view of it) when it fits, else into a
   * fresh buffer; `null` when absent. Lets a hot loop (restore, pack by pack)
   * reuse one buffer instead of touching fresh memory per blob. Optional:
   * `get` is the fallback.
   */
  readInto?(key: string, into: Buffer): Promise<Buffer | null>;
  /**
   * `put` in two steps, for a writer with many objects that must all be durable before one last
   * write (a checkpoint's packs before its manifest): the bytes are handed to the store now
   * (`data` may be reused once this resolves) but nothing is under `key` until `commit`, which
   * makes them durable and then places them. `discard` drops an uncommitted write. Optional: `put`
   * is the fallback. Lets a store flush many objects together instead of stalling on each.
   */
  putPending?(key: string, data: Uint8Array): Promise<PendingPut>;
  /** `signal`: the caller gave up (a client gone); a store may stop and leave nothing under the key. */
  putFile?(key: string, staged: StagedBlob, opts?: { signal?: AbortSignal | undefined }): Promise<void>;
  openRead?(key: string, range?: ByteRange): Promise<BlobReader | null>;
}

/** A write made by `putPending`: not under its key until `commit` resolves. */
export interface PendingPut {
  commit(): Promise<void>;
  discard(): Promise<void>;
}

export interface BlobListing {
  key: string;
  size: number;
  /** Last write, epoch ms: GC keeps young objects so in-flight writers are not swept. */
  modifiedAt: number;
}

export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

/** Content-addressed key: the same bytes are stored once. */
export function contentKey(namespace: string, data: Uint8Array): { key: string; sha256: string } {
  const sha256 = sha256Hex(data);
  return { key: contentKeyOf(namespace, sha256), sha256 };
}

/** The content key of bytes whose SHA-256 (hex) is already known, e.g. from streaming them. */
export function contentKeyOf(namespace: string, sha256: string): string {
  return `${namespace}/sha256/${sha256.slice(0, 2)}/${sha256}`;
}

export const KEY_PATTERN = /^[a-z0-9_-]+(\/[A-Za-z0-9._-]+)*$/;

export class FsBlobStore implements BlobStore {
  private readonly root: string;
  /** Inside the root so a staged upload is placed by a hard link; `.staging` can never be a key. */
  readonly stagingDir: string;
  private readonly bufferBytes: number;
  constructor(root: string, opts: { bufferBytes?: number | undefined } = {}) {
    this.root = resolve(root);
    this.stagingDir = join(this.root, ".staging");
    this.bufferBytes = opts.bufferBytes ?? DEFAULT_TRANSFER_BUFFER_BYTES;
  }

  private pathOf(key: string): string {
    if (!KEY_PATTERN.test(key) || key.split("/").some((s) => s === "." || s === "..")) {
      throw new Error(`invalid blob key: ${key}`);
    }
    const full = join(this.root, ...key.split("/"));
    if (!full.startsWith(this.root + sep)) throw new Error(`invalid blob key: ${key}`);
    return full;
  }

  async put(key: string, data: Uint8Array): Promise<void> {
    const target = this.pathOf(key);
    await mkdir(dirname(target), { recursive: true });
    // Write-then-rename so a crash never leaves a truncated blob under its key.
    const tmp = `${target}.tmp-${randomBytes(6).toString("hex")}`;
    await writeFile(tmp, data, { flush: true });
    await rename(tmp, target);
  }

  /**
   * The temporary is written now without waiting for the disk; `commit` fsyncs it and only then
   * renames it under its key, so a key never names bytes that are not durable (same as `put`).
   * Commits of many pending writes run together: the disk flushes them as one stream instead of
   * the writer stalling on each fsync.
   */
  async putPending(key: string, data: Uint8Array): Promise<PendingPut> {
    const target = this.pathOf(key);
    await mkdir(dirname(target), { recursive: true });
    const tmp = `${target}.tmp-${randomBytes(6).toString("hex")}`;
    await writeFile(tmp, data);
    return {
      commit: async () => {
        const fh = await open(tmp, "r+");
        try {
          await fh.sync();
        } finally {
          await fh.close();
        }
        await rename(tmp, target);
      },
      discard: () => rm(tmp, { force: true }),
    };
  }

  async putFile(key: string, staged: StagedBlob): Promise<void> {
    const target = this.pathOf(key);
    await mkdir(dirname(target), { recursive: true });
    try {
      // Atomic and copy-free; the staged file was fsynced when it was spooled.
      await link(staged.path, target);
    } catch (err) {
      // Content-addressed: an existing blob under this key holds the same bytes.
      if ((err as NodeJS.ErrnoException).code === "EEXIST") return;
      if ((err as NodeJS.ErrnoException).code !== "EXDEV") throw err;
      // A staged file elsewhere (another filesystem): copy it in through a temporary, never whole in memory.
      const tmp = `${target}.tmp-${randomBytes(6).toString("hex")}`;
      try {
        await pipeline(readFileRange(staged.path, undefined, this.bufferBytes), createWriteStream(tmp, { flush: true }));
        await rename(tmp, target);
      } finally {
        await rm(tmp, { force: true });
      }
    }
  }

  async openRead(key: string, range?: ByteRange): Promise<BlobReader | null> {
    const path = this.pathOf(key);
    try {
      const { size } = await stat(path);
      return { body: readFileRange(path, range, this.bufferBytes), size };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw err;
    }
  }

  async get(key: string): Promise<Buffer | null> {
    try {
      return await readFile(this.pathOf(key));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw err;
    }
  }

  async readInto(key: string, into: Buffer): Promise<Buffer | null> {
    let fh: import("node:fs/promises").FileHandle;
    try {
      fh = await open(this.pathOf(key), "r");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw err;
    }
    try {
      const { size } = await fh.stat();
      if (size > into.length) return await fh.readFile();
      let got = 0;
      while (got < size) {
        const { bytesRead } = await fh.read(into, got, size - got, got);
        if (bytesRead === 0) break;
        got += bytesRead;
      }
      return into.subarray(0, got);
    } finally {
      await fh.close();
    }
  }

  async delete(key: string): Promise<void> {
    await rm(this.pathOf(key), { force: true });
  }

  async exists(key: string): Promise<boolean> {
    try {
      await stat(this.pathOf(key));
      return true;
    } catch {
      return false;
    }
  }

  async list(prefix: string): Promise<BlobListing[]> {
    const out: BlobListing[] = [];
    const walk = async (dir: string, keyPrefix: string): Promise<void> => {
      let names: import("node:fs").Dirent[];
      try {
        names = await readdir(dir, { withFileTypes: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
        throw err;
      }
      for (const d of names) {
        const key = `${keyPrefix}/${d.name}`;
        if (d.isDirectory()) await walk(join(dir, d.name), key);
        // Skip in-flight `put` temporaries: they are not blobs yet.
        else if (d.isFile() && !d.name.includes(".tmp-")) {
          const st = await stat(join(dir, d.name)).catch(() => null);
          if (st) out.push({ key, size: st.size, modifiedAt: st.mtimeMs });
        }
      }
    };
    const clean = prefix.replace(/\/+$/, "");
    await walk(this.pathOf(clean), clean);
    return out;
  }
}
