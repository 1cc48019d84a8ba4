/**
 * `checkpoint_restore`, write side: walk the workspace, split every file into
 * content-defined chunks, pack the chunks the store does not already hold
 * into pack objects (one durable write each, ADR 0029), then write the
 * immutable manifest whose SHA-256 is the candidate id. A checkpoint after a
 * small change therefore writes roughly that change. Nothing here makes a
 * candidate active: publication is the fence's job, and until the manifest
 * exists no revision refers to the new packs, so a crash at any point leaves
 * every published revision as it was.
 */
import { type BlobStore, type PendingPut, sha256Hex } from "@openma/storage/blobs";
import { BufferPool } from "./buffer-pool.ts";
import { CHUNKING_ALGORITHM, type ChunkParams, chunkBufferBytes, chunkStream, DEFAULT_CHUNKING, validateChunkParams } from "./chunker.ts";
import { DEFAULT_CONCURRENCY, forEachLimit, getOrMake } from "./concurrency.ts";
import { type Issue, IssueError, issue, toIssue } from "./issues.ts";
import {
  CHECKPOINT_FORMAT,
  CHECKPOINT_VERSION,
  type CheckpointEntry,
  type CheckpointLimits,
  type CheckpointManifest,
  type ChunkRef,
  checkpointManifestKey,
  DEFAULT_CHECKPOINT_LIMITS,
  type SymlinkPolicy,
  serializeManifest,
} from "./manifest.ts";
import { type ChunkLocation, DEFAULT_PACK_BYTES, PackBuilder, type PackForward, packKey, parsePack, resolveLocation } from "./packs.ts";
import { symlinkStaysInside } from "./paths.ts";
import { loadCheckpointManifest } from "./restore.ts";
import {
  describeChange,
  type FileStamp,
  fsIssue,
  openVerifiedFile,
  sameStamp,
  type TreeEntry,
  type VerifiedFile,
  walkTree,
} from "./walk.ts";

export interface CheckpointOptions {
  limits?: Partial<CheckpointLimits>;
  chunking?: ChunkParams;
  /** Files processed in parallel. */
  concurrency?: number;
  symlinks?: SymlinkPolicy;
  /**
   * Read the packs holding reused chunks and pack again any chunk whose bytes
   * do not match (repairs a damaged store). Off by default: restore verifies
   * every byte anyway, and reading back is what incremental avoids.
   */
  verifyExisting?: boolean;
  /** Test seam: runs after a file's bytes are read and before it is re-checked. */
  afterFileRead?: (path: string) => Promise<void> | void;
  /**
   * The previous checkpoint's cache (host-side, never from the sandbox). A
   * file whose inode, size, mtime and ctime are unchanged is taken from it
   * without being read; ctime cannot be set from user space, so a rewrite
   * always shows. Its chunk locations also let read files reuse stored chunks.
   * Without a cache every file is read (same result, slower).
   */
  cache?: CheckpointCache;
  /**
   * A stored checkpoint (e.g. the one the workspace was restored from) whose
   * chunks may be reused: without it or a cache, every chunk is packed anew.
   */
  base?: string | undefined;
  /** Packs are sealed once they hold this many bytes (default 16 MiB). */
  packBytes?: number;
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
  files: Map<string, { stamp: FileStamp; chunks: ChunkRef[] }>;
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
  /** Pack objects written (each one durable write). */
  packs: number;
  /** Files taken from the cache without being read. */
  cachedFiles: number;
  manifestBytes: number;
}

export type CheckpointResult =
  | { ok: true; id: string; manifestKey: string; stats: CheckpointStats; cache: CheckpointCache }
  | { ok: false; error: Issue; issues: Issue[] };

type FileEntry = Extract<TreeEntry, { type: "file" }>;
type StoredFile = Extract<CheckpointEntry, { type: "file" }>;

export async function createCheckpoint(store: BlobStore, root: string, opts: CheckpointOptions = {}): Promise<CheckpointResult> {
  const limits = { ...DEFAULT_CHECKPOINT_LIMITS, ...opts.limits };
  const chunking = opts.chunking ?? DEFAULT_CHUNKING;
  const badChunking = validateChunkParams(chunking);
  if (badChunking) throw new Error(`invalid chunking parameters: ${badChunking}`);
  const startedNs = BigInt(Date.now()) * 1_000_000n;
  const walked = await walkTree(root, { limits, symlinks: "record" });
  const issues = [...walked.issues, ...symlinkIssues(walked.entries, limits, opts.symlinks ?? "contained")];
  if (issues.length > 0) return { ok: false, error: issues[0]!, issues };

  const writer = new PackWriter(store, opts.packBytes ?? DEFAULT_PACK_BYTES, chunking.max, opts.verifyExisting ?? false);
  // One read buffer per file in flight, reused from file to file.
  const readBuffers = new BufferPool(chunkBufferBytes(chunking));
  const files = walked.entries.filter((e): e is FileEntry => e.type === "file");
  const stored = new Map<string, StoredFile>();
  let cachedFiles = 0;
  try {
    const sameChunking = opts.cache && sameParams(opts.cache.chunking, chunking);
    if (sameChunking) for (const f of opts.cache!.files.values()) writer.learn(f.chunks);
    if (opts.base !== undefined) await learnBase(store, opts.base, chunking, writer);
    await forEachLimit(files, opts.concurrency ?? DEFAULT_CONCURRENCY, async (entry) => {
      // A cached chunk list is used only if its packs are still stored (GC may have swept an
      // unpublished candidate's packs); otherwise the file is simply read again.
      const hit = sameChunking ? cacheHit(opts.cache!, entry) : undefined;
      const chunks = hit ? await writer.reuseAll(hit.chunks) : null;
      if (chunks) {
        cachedFiles++;
        stored.set(entry.path, { type: "file", path: entry.path, mode: entry.mode, size: entry.size, chunks });
      } else {
        stored.set(entry.path, await storeFile(walked.root, entry, chunking, writer, readBuffers, opts.afterFileRead));
      }
    });
    await writer.finish();
  } catch (err) {
    await writer.settle();
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
    // A GC sweep may have deleted a pack we reused before our manifest existed
    // to protect it; catch that here rather than at restore.
    await writer.confirmReused();
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
    ...writer.stats,
    cachedFiles,
    manifestBytes: bytes.length,
  };
  const trustBeforeNs = startedNs - BigInt(opts.racyWindowMs ?? 2000) * 1_000_000n;
  return { ok: true, id, manifestKey, stats, cache: nextCache(files, stored, chunking, trustBeforeNs) };
}

function sameParams(a: ChunkParams, b: ChunkParams): boolean {
  return a.min === b.min && a.avg === b.avg && a.max === b.max;
}

/** Chunk locations of a stored v2 checkpoint made with the same chunking; anything else is simply not reused. */
async function learnBase(store: BlobStore, id: string, chunking: ChunkParams, writer: PackWriter): Promise<void> {
  const loaded = await loadCheckpointManifest(store, id, { symlinks: "any" });
  if (!loaded.ok) {
    if (loaded.error.code === "store_error") throw new IssueError(loaded.error);
    return;
  }
  if (!sameParams(loaded.manifest.chunking, chunking)) return;
  for (const e of loaded.manifest.entries) if (e.type === "file") writer.learn(e.chunks);
}

function nextCache(files: FileEntry[], stored: Map<string, StoredFile>, chunking: ChunkParams, trustBeforeNs: bigint) {
  const cache: CheckpointCache = { chunking, trustBeforeNs, files: new Map() };
  for (const f of files) {
    const m = stored.get(f.path);
    if (m) cache.files.set(f.path, { stamp: f.stamp, chunks: m.chunks });
  }
  return cache;
}

function cacheHit(cache: CheckpointCache, entry: FileEntry) {
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

/** Seals written at once; more wait, which bounds memory to a few packs. */
const SEALS_IN_FLIGHT = 2;
/** Room left after a pack's chunks for its index (about 75 bytes per chunk), so sealing needs no copy. */
const PACK_INDEX_ROOM = 2 * 1024 * 1024;

/**
 * Packs new chunks and remembers where every known chunk lives. Chunks are
 * copied into the open pack synchronously, so files processed in parallel
 * interleave freely; a full pack is sealed and written in the background.
 * A chunk's location gets its pack id when its pack is sealed, before the
 * manifest is serialized.
 */
class PackWriter {
  readonly stats = { uploadedChunks: 0, uploadedBytes: 0, reusedChunks: 0, reusedBytes: 0, packs: 0 };
  /** Chunks already in stored packs (not yet checked), by hash. */
  private readonly learned = new Map<string, ChunkRef>();
  /** Chunks this run will reference, by hash: checked stored locations or chunks in this run's packs. */
  private readonly placed = new Map<string, ChunkRef>();
  /** Reused chunk hashes by the pack they were found in, confirmed again once the manifest exists. */
  private readonly reusedPacks = new Map<string, Set<string>>();
  private readonly packChecks = new Map<string, Promise<Set<string> | "present" | null>>();
  private readonly forwards = new Map<string, Promise<PackForward | null>>();
  private open: { builder: PackBuilder; refs: ChunkRef[] } | null = null;
  /** Pack buffers come back here once their pack is written: at most the open pack plus those in flight exist. */
  private readonly packBuffers: BufferPool;
  private readonly seals: Promise<void>[] = [];
  /** Packs handed to a store with `putPending`, made durable together by `finish` before the manifest is written. */
  private readonly pending: PendingPut[] = [];
  private failure: unknown = null;

  constructor(
    private readonly store: BlobStore,
    private readonly packBytes: number,
    maxChunk: number,
    private readonly verifyExisting: boolean,
  ) {
    this.packBuffers = new BufferPool(packBytes + maxChunk + PACK_INDEX_ROOM);
  }

  learn(chunks: readonly ChunkRef[]): void {
    for (const c of chunks) if (c.pack !== undefined && !this.learned.has(c.sha256)) this.learned.set(c.sha256, c);
  }

  /** The reference for `data`: a stored copy when one is known and present, else a new place in the open pack. */
  async place(sha256: string, data: Buffer): Promise<ChunkRef> {
    const known = this.placed.get(sha256) ?? (await this.reuse(this.learned.get(sha256)));
    if (known) return known;
    // Placed while we awaited the check above.
    const raced = this.placed.get(sha256);
    if (raced) return raced;
    if (this.failure) throw this.failure;
    if (!this.open) this.open = { builder: new PackBuilder(this.packBuffers.take()), refs: [] };
    const ref: ChunkRef = { sha256, size: data.length, pack: "", offset: this.open.builder.add(sha256, data) };
    this.open.refs.push(ref);
    this.placed.set(sha256, ref);
    this.stats.uploadedChunks++;
    this.stats.uploadedBytes += data.length;
    if (this.open.builder.bytes >= this.packBytes) await this.seal();
    return ref;
  }

  /** All of a cached file's chunks at their current locations, or `null` if any is gone. */
  async reuseAll(chunks: readonly ChunkRef[]): Promise<ChunkRef[] | null> {
    const out: ChunkRef[] = [];
    for (const c of chunks) {
      const ref = this.placed.get(c.sha256) ?? (await this.reuse(c));
      if (!ref) return null;
      out.push(ref);
    }
    return out;
  }

  private async reuse(c: ChunkRef | undefined): Promise<ChunkRef | null> {
    if (!c?.pack) return null;
    let found: ChunkLocation;
    try {
      found = (await resolveLocation(this.store, c as ChunkLocation, (p) => this.packPresent(p, c.sha256), this.forwards)).loc;
    } catch (err) {
      if (err instanceof IssueError && err.issue.code === "chunk_missing") return null;
      throw new IssueError(toIssue(err, "store_error"));
    }
    const ref = this.placed.get(found.sha256) ?? found;
    this.placed.set(found.sha256, ref);
    getOrMake(this.reusedPacks, found.pack, () => new Set<string>()).add(found.sha256);
    this.stats.reusedChunks++;
    this.stats.reusedBytes += found.size;
    return ref;
  }

  /** Whether `pack` holds `sha256`: existence, or with `verifyExisting` the chunk's bytes proven once per pack. */
  private async packPresent(pack: string, sha256: string): Promise<boolean> {
    let check = this.packChecks.get(pack);
    if (!check) {
      check = this.verifyExisting ? this.verifiedChunks(pack) : this.store.exists(packKey(pack)).then((ok) => (ok ? "present" : null));
      this.packChecks.set(pack, check);
    }
    const result = await check;
    return result === "present" || (result?.has(sha256) ?? false);
  }

  private async verifiedChunks(pack: string): Promise<Set<string> | null> {
    const bytes = await this.store.get(packKey(pack));
    if (bytes === null) return null;
    const good = new Set<string>();
    try {
      for (const c of parsePack(pack, bytes).chunks) {
        if (sha256Hex(bytes.subarray(c.offset, c.offset + c.size)) === c.sha256) good.add(c.sha256);
      }
    } catch {
      // A pack whose index is damaged offers nothing; its chunks are packed again.
    }
    return good;
  }

  private async seal(): Promise<void> {
    const open = this.open!;
    this.open = null;
    const sealed = open.builder.seal();
    for (const r of open.refs) r.pack = sealed.id;
    this.stats.packs++;
    const write = this.writePack(packKey(sealed.id), sealed.bytes).then(
      () => this.packBuffers.give(open.builder.backing),
      (err) => {
        this.failure ??= new IssueError(toIssue(err, "store_error"));
      },
    );
    this.seals.push(write);
    if (this.seals.length >= SEALS_IN_FLIGHT) await this.seals.shift();
    if (this.failure) throw this.failure;
  }

  /**
   * Where the store can take a write now and make it durable later (`putPending`), a pack's
   * buffer returns to the pool as soon as the store has its bytes, and no pack's fsync stalls the
   * reading of the next: `finish` commits them all together. Every pack is durable under its key
   * before the manifest is written either way, so a crash still leaves no revision naming a
   * pack that is not.
   */
  private async writePack(key: string, bytes: Buffer): Promise<void> {
    if (!this.store.putPending) {
      await putImmutable(this.store, key, bytes);
      return;
    }
    const existing = await this.store.get(key);
    if (existing?.equals(bytes)) return;
    this.pending.push(await this.store.putPending(key, bytes));
  }

  /** Seals the last pack and waits until every pack is durable. */
  async finish(): Promise<void> {
    if (this.open && this.open.refs.length > 0) await this.seal();
    await Promise.all(this.seals.splice(0));
    if (this.failure) throw this.failure;
    const commits = await Promise.allSettled(this.pending.map((p) => p.commit()));
    const failed = commits.find((c) => c.status === "rejected");
    // Discarding a committed write finds nothing to remove; the failed ones leave no temporary behind.
    if (failed) throw new IssueError(toIssue(failed.reason, "store_error"));
    this.pending.length = 0;
  }

  /** Waits for writes still in flight and drops uncommitted ones, so nothing writes after the caller has returned. */
  async settle(): Promise<void> {
    await Promise.all(this.seals.splice(0));
    await Promise.all(this.pending.splice(0).map((p) => p.discard()));
  }

  /** Every reused chunk must still be reachable: in its pack, or through the forward GC left when it repacked. */
  async confirmReused(): Promise<void> {
    const forwards = new Map<string, Promise<PackForward | null>>();
    const exists = (pack: string) => this.store.exists(packKey(pack));
    await forEachLimit([...this.reusedPacks], 16, async ([pack, shas]) => {
      if (await exists(pack)) return;
      for (const sha256 of shas) {
        const ref = this.placed.get(sha256)!;
        await resolveLocation(this.store, ref as ChunkLocation, exists, forwards).catch((err) => {
          throw issue(
            "chunk_vanished",
            "",
            `pack ${pack} was deleted during the checkpoint (${toIssue(err, "store_error").message}); retry it`,
          );
        });
      }
    });
  }
}

async function storeFile(
  root: string,
  entry: FileEntry,
  chunking: ChunkParams,
  writer: PackWriter,
  buffers: BufferPool,
  afterRead: CheckpointOptions["afterFileRead"],
): Promise<StoredFile> {
  const fh = await openVerifiedFile(root, entry);
  const buffer = buffers.take();
  try {
    const chunks: ChunkRef[] = [];
    const counter = { read: 0 };
    // Views, not copies: `place` copies a new chunk into the open pack before the next one is read.
    for await (const chunk of chunkStream(boundedReader(fh, entry.size, counter), chunking, entry.size, false, buffer)) {
      chunks.push(await writer.place(sha256Hex(chunk), chunk));
    }
    await afterRead?.(entry.path);
    // Growth, truncation and rewrites all change the stamp (size or kernel-set ctime).
    const after = fh.stamp();
    if (!sameStamp(entry.stamp, after)) throw issue("changed", entry.path, describeChange(entry.stamp, after));
    if (counter.read !== entry.size) throw issue("changed", entry.path, `read ${counter.read} of ${entry.size} bytes`);
    return { type: "file", path: entry.path, mode: entry.mode, size: entry.size, chunks };
  } catch (err) {
    if (err instanceof IssueError) throw err;
    throw new IssueError(fsIssue(entry.path, err));
  } finally {
    buffers.give(buffer);
    fh.close();
  }
}

/**
 * Reads no further than the listed size, so a runaway writer is never
 * followed; growth shows in the stamp check afterwards. Stopping exactly at
 * the size also spares the extra end-of-file read per file.
 */
function boundedReader(fh: VerifiedFile, size: number, counter: { read: number }) {
  return async (buf: Uint8Array, offset: number, length: number): Promise<number> => {
    const allowed = size - counter.read;
    if (allowed <= 0) return 0;
    const bytesRead = await fh.read(buf, offset, Math.min(length, allowed));
    counter.read += bytesRead;
    return bytesRead;
  };
}
