/**
 * Test and benchmark helpers: temp dirs, deterministic pseudo-random bytes,
 * tree snapshots for exact comparison, and direct access to a blob's file so
 * tests can corrupt or truncate it the way a failing disk would.
 */
import { createCipheriv, createHash } from "node:crypto";
import { mkdtemp, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BlobStore, FsBlobStore, sha256Hex } from "@openma/storage/blobs";
import { CHUNKING_ALGORITHM, chunkBuffer, DEFAULT_CHUNKING } from "./chunker.ts";
import { CountingBlobStore } from "./instrument.ts";
import { CHECKPOINT_FORMAT, checkpointManifestKey, chunkKey } from "./manifest.ts";
import { walkTree } from "./walk.ts";

/** Deterministic bytes (AES-CTR keystream of a seed): fast, incompressible, reproducible. */
export function seededBytes(seed: string, length: number): Buffer {
  const key = createHash("sha256").update(seed).digest();
  const cipher = createCipheriv("aes-256-ctr", key, Buffer.alloc(16));
  return cipher.update(Buffer.alloc(length));
}

export interface TempDirs {
  base: string;
  store: CountingBlobStore;
  storeRoot: string;
  path(...parts: string[]): string;
  cleanup(): Promise<void>;
}

export async function tempDirs(prefix = "openma-persistence-"): Promise<TempDirs> {
  const base = await mkdtemp(join(tmpdir(), prefix));
  const storeRoot = join(base, "blobs");
  return {
    base,
    storeRoot,
    store: new CountingBlobStore(new FsBlobStore(storeRoot)),
    path: (...parts) => join(base, ...parts),
    cleanup: () => rm(base, { recursive: true, force: true }),
  };
}

/** Where FsBlobStore keeps `key`, so a test can damage it directly. */
export function blobFile(storeRoot: string, key: string): string {
  return join(storeRoot, ...key.split("/"));
}

export async function flipByte(file: string, at = 0): Promise<void> {
  const data = await readFile(file);
  data[at % data.length] = data[at % data.length]! ^ 0xff;
  await writeFile(file, data);
}

export async function truncateFile(file: string, keep: number): Promise<void> {
  const data = await readFile(file);
  await writeFile(file, data.subarray(0, keep));
}

/** A comparable picture of a tree: type, mode, content hash or link target per path. */
export async function snapshotTree(root: string): Promise<Record<string, string>> {
  const limits = { maxEntries: 1e6, maxFileBytes: 2 ** 40, maxTotalBytes: 2 ** 50, maxPathBytes: 4096, maxDepth: 256 };
  const walked = await walkTree(root, { limits, symlinks: "record" });
  if (walked.issues.length > 0) throw new Error(`snapshot: ${JSON.stringify(walked.issues)}`);
  const out: Record<string, string> = {};
  for (const e of walked.entries) {
    const abs = join(walked.root, e.path);
    if (e.type === "dir") out[e.path] = `dir ${e.mode.toString(8)}`;
    else if (e.type === "symlink") out[e.path] = `symlink ${await readlink(abs)}`;
    else
      out[e.path] = `file ${e.mode.toString(8)} ${createHash("sha256")
        .update(await readFile(abs))
        .digest("hex")}`;
  }
  return out;
}

/**
 * Stores a checkpoint in format v1 (one blob per chunk, whole-file hashes), the
 * way revisions written before ADR 0029 sit in existing stores, so tests can
 * prove they still restore and are still collected correctly.
 */
export async function writeV1Checkpoint(store: BlobStore, tree: Record<string, Buffer | { symlink: string } | "dir">): Promise<string> {
  const entries: unknown[] = [];
  for (const path of Object.keys(tree).sort()) {
    const node = tree[path]!;
    if (node === "dir") entries.push({ type: "dir", path, mode: 0o755 });
    else if (!Buffer.isBuffer(node)) entries.push({ type: "symlink", path, target: node.symlink });
    else {
      const chunks = [];
      for (const c of chunkBuffer(node)) {
        const sha256 = sha256Hex(c);
        await store.put(chunkKey(sha256), c);
        chunks.push({ sha256, size: c.length });
      }
      entries.push({ type: "file", path, mode: 0o644, size: node.length, sha256: sha256Hex(node), chunks });
    }
  }
  const doc = { format: CHECKPOINT_FORMAT, version: 1, chunking: { algorithm: CHUNKING_ALGORITHM, ...DEFAULT_CHUNKING }, entries };
  const bytes = Buffer.from(`${JSON.stringify(doc)}\n`);
  const id = sha256Hex(bytes);
  await store.put(checkpointManifestKey(id), bytes);
  return id;
}
