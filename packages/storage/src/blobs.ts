/**
 * Blob storage behind one small interface. The embedded default keeps blobs in
 * a local directory; S3-compatible storage is the scale-out option.
 * Keys are relative slash-separated names chosen by the server, never by users.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, resolve, sep } from "node:path";

export interface BlobStore {
  put(key: string, data: Uint8Array): Promise<void>;
  /** `null` when absent. */
  get(key: string): Promise<Buffer | null>;
  delete(key: string): Promise<void>;
  exists(key: string): Promise<boolean>;
  /** Keys under a `/`-separated prefix, for garbage collection. Optional: not every store can enumerate. */
  list?(prefix: string): Promise<BlobListing[]>;
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
  return { key: `${namespace}/sha256/${sha256.slice(0, 2)}/${sha256}`, sha256 };
}

export const KEY_PATTERN = /^[a-z0-9_-]+(\/[A-Za-z0-9._-]+)*$/;

export class FsBlobStore implements BlobStore {
  private readonly root: string;
  constructor(root: string) {
    this.root = resolve(root);
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

  async get(key: string): Promise<Buffer | null> {
    try {
      return await readFile(this.pathOf(key));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw err;
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
