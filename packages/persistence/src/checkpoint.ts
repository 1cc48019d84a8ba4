/**
 * `checkpoint_restore`, write side: walk the workspace, split every file into
 * content-defined chunks, upload only the chunks the store does not already
 * hold, then write the immutable manifest whose SHA-256 is the candidate id.
 * A checkpoint after a small change therefore uploads roughly that change.
 * Nothing here makes a candidate active: publication is the fence's job.
 */
import type { FileHandle } from "node:fs/promises";
import { type BlobStore, sha256Hex } from "@openma/storage/blobs";
import { CHUNKING_ALGORITHM, type ChunkParams, chunkStream, DEFAULT_CHUNKING, validateChunkParams } from "./chunker.ts";
import { DEFAULT_CONCURRENCY, forEachLimit } from "./concurrency.ts";
import { FileDigest } from "./digest.ts";
import { type Issue, IssueError, issue, toIssue } from "./issues.ts";
import {
  CHECKPOINT_FORMAT,
  CHECKPOINT_VERSION,
  type CheckpointEntry,
  type CheckpointLimits,
  type CheckpointManifest,
  type ChunkRef,
  checkpointManifestKey,
  chunkKey,
  DEFAULT_CHECKPOINT_LIMITS,
  type SymlinkPolicy,
  serializeManifest,
} from "./manifest.ts";
import { symlinkStaysInside } from "./paths.ts";
import { describeChange, type FileStamp, fsIssue, openVerified, sameStamp, stampOf, type TreeEntry, walkTree } from "./walk.ts";

export interface CheckpointOptions {
  limits?: Partial<CheckpointLimits>;
  chunking?: ChunkParams;
  /** Files processed in parallel (each also keeps a few chunk uploads in flight). */
  concurrency?: number;
  symlinks?: SymlinkPolicy;
  /**
   * Re-read chunks that already exist and re-upload any whose bytes do not
   * match their key (repairs a damaged store). Off by default: restore
   * verifies every byte anyway, and reading back is what incremental avoids.
   */
  verifyExisting?: boolean;
  /** Test seam: runs after a file's bytes are read and before it is re-checked. */
  afterFileRead?: (path: string) => Promise<void> | void;
  /**
   * The previous checkpoint's cache (host-side, never from the sandbox). A
   * file whose inode, size, mtime and ctime are unchanged is taken from it
   * without being read; ctime cannot be set from user space, so a rewrite
   * always shows. Without a cache every file is read (same result, slower).
   */
  cache?: CheckpointCache;
  /**
   * Files whose ctime falls within this window before the checkpoint started
   * are not trusted by the next cache: filesystem timestamps are coarse, so a
   * same-size rewrite in the same tick could keep the stamp. Default 2000 ms.
   */
  racyWindowMs?: number;
}

/** What one checkpoint remembers so the next can skip unchanged files. Keep it in host memory or on host disk. */
export interface CheckpointCache {
  chunking: ChunkParams;
  /** Stamps with a ctime at or after this are never trusted. */
  trustBeforeNs: bigint;
  files: Map<string, { stamp: FileStamp; sha256: string; chunks: ChunkRef[] }>;
}

export interface CheckpointStats {
  entries: number;
  files: number;
  bytes: number;
  /** Chunk references in the manifest (with repeats). */
  chunks: number;
  uploadedChunks: number;
  uploadedBytes: number;
  reusedChunks: number;
  reusedBytes: number;
  /** Files taken from the cache without being read. */
  cachedFiles: number;
  manifestBytes: number;
}

export type CheckpointResult =
  | { ok: true; id: string; manifestKey: string; stats: CheckpointStats; cache: CheckpointCache }
  | { ok: false; error: Issue; issues: Issue[] };

const CHUNK_WINDOW = 4;

type FileEntry = Extract<TreeEntry, { type: "file" }>;

export async function createCheckpoint(store: BlobStore, root: string, opts: CheckpointOptions = {}): Promise<CheckpointResult> {
  const limits = { ...DEFAULT_CHECKPOINT_LIMITS, ...opts.limits };
  const chunking = opts.chunking ?? DEFAULT_CHUNKING;
  const badChunking = validateChunkParams(chunking);
  if (badChunking) throw new Error(`invalid chunking parameters: ${badChunking}`);
  const startedNs = BigInt(Date.now()) * 1_000_000n;
  const walked = await walkTree(root, { limits, symlinks: "record" });
  const issues = [...walked.issues, ...symlinkIssues(walked.entries, limits, opts.symlinks ?? "contained")];
  if (issues.length > 0) return { ok: false, error: issues[0]!, issues };

  const uploader = new ChunkUploader(store, opts.verifyExisting ?? false);
  const files = walked.entries.filter((e): e is FileEntry => e.type === "file");
  const stored = new Map<string, Extract<CheckpointEntry, { type: "file" }>>();
  let cachedFiles = 0;
  try {
    await forEachLimit(files, opts.concurrency ?? DEFAULT_CONCURRENCY, async (entry) => {
      // A cached chunk list is used only if its chunks are still stored (GC may have swept an
      // unpublished candidate's chunks); otherwise the file is simply read again.
      const hit = cacheHit(opts.cache, entry, chunking);
      if (hit && (await uploader.allPresent(hit.chunks))) {
        cachedFiles++;
        stored.set(entry.path, fromCache(entry, hit, uploader));
      } else {
        stored.set(entry.path, await storeFile(walked.root, entry, chunking, uploader, opts.afterFileRead));
      }
    });
  } catch (err) {
    const failure = toIssue(err, "store_error");
    return { ok: false, error: failure, issues: [failure] };
  }

  const manifest: CheckpointManifest = {
    format: CHECKPOINT_FORMAT,
    version: CHECKPOINT_VERSION,
    chunking: { algorithm: CHUNKING_ALGORITHM, ...chunking },
    entries: walked.entries.map((e) => stored.get(e.path) ?? toManifestEntry(e)),
  };
  const bytes = serializeManifest(manifest);
  const id = sha256Hex(bytes);
  const manifestKey = checkpointManifestKey(id);
  try {
    await putImmutable(store, manifestKey, bytes);
    // A GC sweep may have deleted a chunk we skipped as "already there" before
    // our manifest existed to protect it; catch that here rather than at restore.
    await uploader.confirmReused();
  } catch (err) {
    const failure = toIssue(err, "store_error");
    return { ok: false, error: failure, issues: [failure] };
  }
  const list = [...stored.values()];
  const stats: CheckpointStats = {
    entries: manifest.entries.length,
    files: list.length,
    bytes: list.reduce((n, f) => n + f.size, 0),
    chunks: list.reduce((n, f) => n + f.chunks.length, 0),
    ...uploader.stats,
    cachedFiles,
    manifestBytes: bytes.length,
  };
  const trustBeforeNs = startedNs - BigInt(opts.racyWindowMs ?? 2000) * 1_000_000n;
  return { ok: true, id, manifestKey, stats, cache: nextCache(files, stored, chunking, trustBeforeNs) };
}

function nextCache(
  files: FileEntry[],
  stored: Map<string, { sha256: string; chunks: ChunkRef[] }>,
  chunking: ChunkParams,
  trustBeforeNs: bigint,
) {
  const cache: CheckpointCache = { chunking, trustBeforeNs, files: new Map() };
  for (const f of files) {
    const m = stored.get(f.path);
    if (m) cache.files.set(f.path, { stamp: f.stamp, sha256: m.sha256, chunks: m.chunks });
  }
  return cache;
}

function fromCache(entry: FileEntry, hit: { sha256: string; chunks: ChunkRef[] }, uploader: ChunkUploader) {
  uploader.adopt(hit.chunks);
  return { type: "file" as const, path: entry.path, mode: entry.mode, size: entry.size, sha256: hit.sha256, chunks: hit.chunks };
}

function cacheHit(cache: CheckpointCache | undefined, entry: FileEntry, chunking: ChunkParams) {
  if (!cache || cache.chunking.min !== chunking.min || cache.chunking.avg !== chunking.avg || cache.chunking.max !== chunking.max) {
    return undefined;
  }
  const hit = cache.files.get(entry.path);
  if (!hit || !sameStamp(hit.stamp, entry.stamp) || hit.stamp.ctimeNs >= cache.trustBeforeNs) return undefined;
  return hit;
}

function symlinkIssues(entries: TreeEntry[], limits: CheckpointLimits, policy: SymlinkPolicy): Issue[] {
  const links = new Map<string, string>();
  for (const e of entries) if (e.type === "symlink") links.set(e.path, e.target);
  const out: Issue[] = [];
  for (const [path, target] of links) {
    if (Buffer.byteLength(target) > limits.maxSymlinkTargetBytes) {
      out.push({ code: "invalid_path", path, message: "symlink target is too long" });
    } else if (policy === "contained" && !symlinkStaysInside(path, target, links)) {
      out.push({ code: "symlink_escape", path, message: `symlink target ${target} points outside the workspace` });
    }
  }
  return out;
}

function toManifestEntry(e: TreeEntry): CheckpointEntry {
  if (e.type === "dir") return { type: "dir", path: e.path, mode: e.mode };
  if (e.type === "symlink") return { type: "symlink", path: e.path, target: e.target };
  throw new Error(`file ${e.path} was not stored`);
}

/** Writes an immutable, content-addressed object: identical bytes already present are left alone. */
export async function putImmutable(store: BlobStore, key: string, bytes: Uint8Array): Promise<"written" | "existing"> {
  const existing = await store.get(key);
  if (existing?.equals(bytes)) return "existing";
  // Absent, or damaged bytes under a hash-named key: only these bytes may ever
  // live there, so writing them is a repair, never an overwrite of another candidate.
  await store.put(key, bytes);
  return "written";
}

/** Deduplicates chunk uploads within a run and against the store. */
class ChunkUploader {
  readonly stats = { uploadedChunks: 0, uploadedBytes: 0, reusedChunks: 0, reusedBytes: 0 };
  private readonly inflight = new Map<string, Promise<void>>();
  private readonly reused = new Set<string>();

  constructor(
    private readonly store: BlobStore,
    private readonly verifyExisting: boolean,
  ) {}

  ensure(sha256: string, data: Buffer): Promise<void> {
    let p = this.inflight.get(sha256);
    if (!p) {
      p = this.upload(sha256, data);
      this.inflight.set(sha256, p);
    }
    return p;
  }

  private async upload(sha256: string, data: Buffer): Promise<void> {
    const key = chunkKey(sha256);
    try {
      if (await this.existsIntact(key, sha256)) {
        this.stats.reusedChunks++;
        this.stats.reusedBytes += data.length;
        this.reused.add(key);
        return;
      }
      await this.store.put(key, data);
    } catch (err) {
      throw new IssueError(toIssue(err, "store_error"));
    }
    this.stats.uploadedChunks++;
    this.stats.uploadedBytes += data.length;
  }

  private async existsIntact(key: string, sha256: string): Promise<boolean> {
    if (!this.verifyExisting) return this.store.exists(key);
    const existing = await this.store.get(key);
    return existing !== null && sha256Hex(existing) === sha256;
  }

  async allPresent(chunks: ChunkRef[]): Promise<boolean> {
    try {
      for (const c of chunks) if (!(await this.store.exists(chunkKey(c.sha256)))) return false;
      return true;
    } catch (err) {
      throw new IssueError(toIssue(err, "store_error"));
    }
  }

  /** Chunks referenced from the cache count as reused, and are confirmed like any other. */
  adopt(chunks: ChunkRef[]): void {
    for (const c of chunks) {
      this.stats.reusedChunks++;
      this.stats.reusedBytes += c.size;
      this.reused.add(chunkKey(c.sha256));
    }
  }

  async confirmReused(): Promise<void> {
    await forEachLimit([...this.reused], 16, async (key) => {
      if (!(await this.store.exists(key))) {
        throw issue("chunk_vanished", "", `chunk ${key} was deleted during the checkpoint; retry it`);
      }
    });
  }
}

async function storeFile(
  root: string,
  entry: FileEntry,
  chunking: ChunkParams,
  uploader: ChunkUploader,
  afterRead: CheckpointOptions["afterFileRead"],
): Promise<Extract<CheckpointEntry, { type: "file" }>> {
  const fh = await openVerified(root, entry);
  try {
    const fileHash = new FileDigest();
    const chunks: ChunkRef[] = [];
    const pending: Promise<void>[] = [];
    const counter = { read: 0 };
    for await (const chunk of chunkStream(boundedReader(fh, entry.size, counter), chunking, entry.size)) {
      const sha256 = sha256Hex(chunk);
      fileHash.add(chunk, sha256);
      chunks.push({ sha256, size: chunk.length });
      const p = uploader.ensure(sha256, chunk);
      p.catch(() => undefined); // awaited below; this only keeps an early failure from being "unhandled"
      pending.push(p);
      if (pending.length >= CHUNK_WINDOW) await pending.shift();
    }
    await Promise.all(pending);
    await afterRead?.(entry.path);
    // Growth, truncation and rewrites all change the stamp (size or kernel-set ctime).
    const after = stampOf(await fh.stat({ bigint: true }));
    if (!sameStamp(entry.stamp, after)) throw issue("changed", entry.path, describeChange(entry.stamp, after));
    if (counter.read !== entry.size) throw issue("changed", entry.path, `read ${counter.read} of ${entry.size} bytes`);
    return { type: "file", path: entry.path, mode: entry.mode, size: entry.size, sha256: fileHash.digest(), chunks };
  } catch (err) {
    if (err instanceof IssueError) throw err;
    throw new IssueError(fsIssue(entry.path, err));
  } finally {
    await fh.close();
  }
}

/**
 * Reads no further than the listed size, so a runaway writer is never
 * followed; growth shows in the stamp check afterwards. Stopping exactly at
 * the size also spares the extra end-of-file read per file.
 */
function boundedReader(fh: FileHandle, size: number, counter: { read: number }) {
  return async (buf: Uint8Array, offset: number, length: number): Promise<number> => {
    const allowed = size - counter.read;
    if (allowed <= 0) return 0;
    const { bytesRead } = await fh.read(buf, offset, Math.min(length, allowed), null);
    counter.read += bytesRead;
    return bytesRead;
  };
}
