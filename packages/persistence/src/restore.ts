/**
 * `checkpoint_restore`, read side. A candidate is trusted only after every
 * byte is proven: the manifest must hash to its id and pass hostile-input
 * validation, every chunk must hash to its reference, every file to its
 * recorded SHA-256. The tree is built in a fresh staging directory beside the
 * target and swapped in only when complete, so a rejected candidate leaves
 * the target exactly as it was. `restoreLatestVerified` walks candidates
 * newest-first and stops at the first one that verifies: a corrupt revision
 * falls back to the previous one, never to an empty workspace.
 */
import { randomBytes } from "node:crypto";
import { constants, fchmodSync } from "node:fs";
import { chmod, type FileHandle, lstat, mkdir, mkdtemp, open, rename, rm, symlink } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { type BlobStore, sha256Hex } from "@openma/storage/blobs";
import { BufferPool } from "./buffer-pool.ts";
import { DEFAULT_CHUNKING } from "./chunker.ts";
import { DEFAULT_CONCURRENCY, forEachLimit, getOrMake } from "./concurrency.ts";
import { FileDigest } from "./digest.ts";
import { type Issue, type IssueCode, IssueError, issue, toIssue } from "./issues.ts";
import {
  type CheckpointEntry,
  type CheckpointLimits,
  type CheckpointManifest,
  type ChunkRef,
  checkpointManifestKey,
  chunkKey,
  DEFAULT_CHECKPOINT_LIMITS,
  LEGACY_CHECKPOINT_VERSION,
  parseCheckpointManifest,
  type SymlinkPolicy,
} from "./manifest.ts";
import { type ChunkLocation, chunkFromPack, DEFAULT_PACK_BYTES, type PackForward, packKey, resolveLocation } from "./packs.ts";
import { HEX64 } from "./paths.ts";

export interface RestoreOptions {
  limits?: Partial<CheckpointLimits>;
  symlinks?: SymlinkPolicy;
  /** Files written in parallel (each also prefetches a few chunks). */
  concurrency?: number;
}

export interface RestoreStats {
  entries: number;
  files: number;
  bytes: number;
  chunks: number;
}

export type RestoreResult = { ok: true; id: string; stats: RestoreStats } | { ok: false; id: string; error: Issue };

/** Errors that say nothing about the candidate itself: trying an older one would not help. */
const INFRASTRUCTURE: ReadonlySet<IssueCode> = new Set(["store_error", "target_error"]);

const PREFETCH = 4;

export async function loadCheckpointManifest(
  store: BlobStore,
  id: string,
  opts: Pick<RestoreOptions, "limits" | "symlinks"> = {},
): Promise<{ ok: true; manifest: CheckpointManifest } | { ok: false; error: Issue }> {
  const limits = { ...DEFAULT_CHECKPOINT_LIMITS, ...opts.limits };
  if (typeof id !== "string" || !HEX64.test(id)) {
    return { ok: false, error: { code: "invalid_id", path: "", message: "candidate id must be 64 lowercase hex characters" } };
  }
  let bytes: Buffer | null;
  try {
    bytes = await store.get(checkpointManifestKey(id));
  } catch (err) {
    return { ok: false, error: toIssue(err, "store_error") };
  }
  if (bytes === null) return { ok: false, error: { code: "manifest_missing", path: "", message: `checkpoint ${id} has no manifest` } };
  if (bytes.length > limits.maxManifestBytes) {
    return {
      ok: false,
      error: { code: "manifest_invalid", path: "", message: `manifest is larger than ${limits.maxManifestBytes} bytes` },
    };
  }
  if (sha256Hex(bytes) !== id) {
    return { ok: false, error: { code: "manifest_corrupt", path: "", message: "manifest bytes do not hash to the candidate id" } };
  }
  const parsed = parseCheckpointManifest(bytes, limits, opts.symlinks ?? "contained");
  if (!parsed.ok) return { ok: false, error: { code: "manifest_invalid", path: "", message: parsed.message } };
  return parsed;
}

export async function restoreCheckpoint(store: BlobStore, id: string, target: string, opts: RestoreOptions = {}): Promise<RestoreResult> {
  const loaded = await loadCheckpointManifest(store, id, opts);
  if (!loaded.ok) return { ok: false, id, error: loaded.error };
  const { manifest } = loaded;
  const abs = resolve(target);
  let staging: string;
  try {
    staging = await mkdtemp(join(dirname(abs), `.${basename(abs)}.restore-`));
  } catch (err) {
    return { ok: false, id, error: toIssue(err, "target_error") };
  }
  try {
    await materialize(store, manifest, staging, opts.concurrency ?? DEFAULT_CONCURRENCY);
    await swapInto(staging, abs);
  } catch (err) {
    await rm(staging, { recursive: true, force: true });
    return { ok: false, id, error: toIssue(err, "target_error") };
  }
  const files = manifest.entries.filter((e) => e.type === "file");
  return {
    ok: true,
    id,
    stats: {
      entries: manifest.entries.length,
      files: files.length,
      bytes: files.reduce((n, f) => n + f.size, 0),
      chunks: files.reduce((n, f) => n + f.chunks.length, 0),
    },
  };
}

export type LatestVerifiedResult =
  | { ok: true; id: string; stats: RestoreStats; rejected: Array<{ id: string; error: Issue }> }
  | { ok: false; error: Issue; rejected: Array<{ id: string; error: Issue }> };

/**
 * Restores the newest candidate that verifies. Candidate faults (missing,
 * corrupt, truncated, hostile) move on to the next; infrastructure faults
 * (store or target unusable) stop at once, because an older candidate would
 * be "chosen" only because the newer one could not be read right now.
 */
export async function restoreLatestVerified(
  store: BlobStore,
  candidatesNewestFirst: readonly string[],
  target: string,
  opts: RestoreOptions = {},
): Promise<LatestVerifiedResult> {
  const rejected: Array<{ id: string; error: Issue }> = [];
  for (const id of candidatesNewestFirst) {
    const r = await restoreCheckpoint(store, id, target, opts);
    if (r.ok) return { ok: true, id, stats: r.stats, rejected };
    if (INFRASTRUCTURE.has(r.error.code)) return { ok: false, error: r.error, rejected };
    rejected.push({ id, error: r.error });
  }
  const message =
    candidatesNewestFirst.length === 0
      ? "no checkpoint candidates to restore"
      : `none of ${candidatesNewestFirst.length} candidates verified; the target was left unchanged`;
  return { ok: false, error: { code: "no_verified_candidate", path: "", message }, rejected };
}

/**
 * Builds the tree: directories first (owner-writable until the end), then
 * files (exclusive create, never through a link), then symlinks last, so no
 * write can ever be redirected by a link the manifest itself created.
 */
async function materialize(store: BlobStore, manifest: CheckpointManifest, staging: string, concurrency: number): Promise<void> {
  const dirs = manifest.entries.filter((e) => e.type === "dir");
  const depth = (p: string) => p.split("/").length;
  dirs.sort((a, b) => depth(a.path) - depth(b.path));
  for (const d of dirs) await mkdir(join(staging, d.path), { mode: 0o700 });
  const files = manifest.entries.filter((e) => e.type === "file");
  if (manifest.version === LEGACY_CHECKPOINT_VERSION) await forEachLimit(files, concurrency, (f) => writeVerifiedFile(store, staging, f));
  else await writePackedFiles(store, files, staging, concurrency);
  for (const e of manifest.entries) if (e.type === "symlink") await symlink(e.target, join(staging, e.path));
  for (const d of dirs.reverse()) await chmod(join(staging, d.path), d.mode);
}

async function writeVerifiedFile(store: BlobStore, staging: string, f: Extract<CheckpointEntry, { type: "file" }>): Promise<void> {
  const fh = await open(join(staging, f.path), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    const hash = new FileDigest();
    const queue: Promise<{ data: Buffer; sha256: string }>[] = [];
    let next = 0;
    const refill = () => {
      while (queue.length < PREFETCH && next < f.chunks.length) {
        const ref = f.chunks[next++]!;
        const p = fetchChunk(store, f.path, ref).then((data) => ({ data, sha256: ref.sha256 }));
        p.catch(() => undefined); // awaited in order below; avoids an unhandled rejection if an earlier one fails first
        queue.push(p);
      }
    };
    refill();
    while (queue.length > 0) {
      const { data, sha256 } = await queue.shift()!;
      refill();
      hash.add(data, sha256);
      await writeAll(fh, data);
    }
    if (hash.digest() !== f.sha256) throw issue("file_corrupt", f.path, "restored bytes do not match the file's recorded sha256");
    await fh.chmod(f.mode);
  } finally {
    await fh.close();
  }
}

type FileEntry = Extract<CheckpointEntry, { type: "file" }>;
interface Placement {
  file: FileEntry;
  /** Offset of the chunk inside the file. */
  at: number;
  loc: ChunkLocation;
}

/** Packs read at once: each is held whole while its chunks are verified and written. */
const PACKS_IN_FLIGHT = 2;
/** Room for a pack's index and trailer after its chunks. */
const PACK_READ_ROOM = 2 * 1024 * 1024;
/** Forwards followed from one pack before the chain is refused (a cycle, or a hostile store). */
const MAX_HOPS = 16;

/**
 * Writes verified chunks at their offsets. The first write to a file creates
 * it (exclusive, never through a link); writes to one file are serialized.
 */
class PlacementWriter {
  private readonly chains = new Map<FileEntry, Promise<void>>();
  private readonly bytes = new Map<FileEntry, number>();

  constructor(private readonly staging: string) {}

  written(f: FileEntry): number {
    return this.bytes.get(f) ?? 0;
  }

  write(file: FileEntry, parts: Array<{ at: number; data: Buffer }>): Promise<void> {
    const prev = this.chains.get(file);
    const next = (prev ?? Promise.resolve()).then(() => this.writeNow(file, parts, prev === undefined));
    this.chains.set(
      file,
      next.catch(() => undefined),
    );
    return next;
  }

  private async writeNow(file: FileEntry, parts: Array<{ at: number; data: Buffer }>, create: boolean): Promise<void> {
    const flags = constants.O_WRONLY | constants.O_NOFOLLOW | (create ? constants.O_CREAT | constants.O_EXCL : 0);
    const fh = await open(join(this.staging, file.path), flags, 0o600);
    try {
      for (const { at, data } of parts) {
        let off = 0;
        while (off < data.length) off += (await fh.write(data, off, data.length - off, at + off)).bytesWritten;
        this.bytes.set(file, this.written(file) + data.length);
      }
      // The last placement sets the mode on the open descriptor: a separate pass of path-based chmods
      // was one more thread-pool round trip per file (fchmod only touches the in-memory inode).
      if (this.written(file) === file.size) fchmodSync(fh.fd, file.mode);
    } finally {
      await fh.close();
    }
  }
}

/**
 * v2: pack by pack rather than file by file, so each pack is read once (one
 * large read or GET) however many files it feeds. Every chunk is proven
 * against its hash before a byte of it is written, at its offset in its file;
 * the manifest (hash-checked) fixes which chunk goes where, so the files are
 * exactly the checkpointed bytes once every placement is written.
 */
async function writePackedFiles(store: BlobStore, files: FileEntry[], staging: string, concurrency: number): Promise<void> {
  const groups = new Map<string, Placement[]>();
  const files0: FileEntry[] = [];
  for (const file of files) {
    if (file.chunks.length === 0) files0.push(file);
    let at = 0;
    for (const c of file.chunks) {
      const loc = c as ChunkLocation;
      getOrMake(groups, loc.pack, () => []).push({ file, at, loc });
      at += c.size;
    }
  }
  const writer = new PlacementWriter(staging);
  for (const f of files0) await writer.write(f, []);
  const forwards = new Map<string, Promise<PackForward | null>>();
  // One buffer per pack in flight, reused from pack to pack (see BufferPool); a bigger pack gets a fresh one.
  const buffers = new BufferPool(DEFAULT_PACK_BYTES + DEFAULT_CHUNKING.max + PACK_READ_ROOM);
  await forEachLimit([...groups], PACKS_IN_FLIGHT, ([pack, placements]) =>
    restorePack(store, pack, placements, writer, forwards, concurrency, buffers),
  );
  for (const f of files) if (writer.written(f) !== f.size) throw issue("file_corrupt", f.path, "not every chunk of the file was restored");
}

async function restorePack(
  store: BlobStore,
  pack: string,
  placements: Placement[],
  writer: PlacementWriter,
  forwards: Map<string, Promise<PackForward | null>>,
  concurrency: number,
  buffers: BufferPool,
  depth = 0,
): Promise<void> {
  const buffer = store.readInto ? buffers.take() : null;
  try {
    let bytes: Buffer | null;
    try {
      bytes = buffer ? await store.readInto!(packKey(pack), buffer) : await store.get(packKey(pack));
    } catch (err) {
      throw new IssueError(toIssue(err, "store_error", placements[0]!.file.path));
    }
    if (bytes === null) {
      // Rewritten by GC: follow the forward to where each chunk lives now.
      if (depth >= MAX_HOPS) throw issue("chunk_missing", placements[0]!.file.path, `pack ${pack}: too many forwards`);
      const moved = new Map<string, Placement[]>();
      for (const p of placements) {
        const { loc } = await resolveLocation(store, p.loc, async (at) => at !== pack, forwards, p.file.path);
        getOrMake(moved, loc.pack, () => []).push({ ...p, loc });
      }
      for (const [to, group] of moved) await restorePack(store, to, group, writer, forwards, concurrency, buffers, depth + 1);
      return;
    }
    const byFile = new Map<FileEntry, Array<{ at: number; data: Buffer }>>();
    for (const p of placements) {
      const data = chunkFromPack(bytes, p.loc, p.file.path);
      getOrMake(byFile, p.file, () => []).push({ at: p.at, data });
    }
    await forEachLimit([...byFile], concurrency, ([file, parts]) => writer.write(file, parts));
  } finally {
    // Every write from this pack's bytes has finished (or failed) by now.
    if (buffer) buffers.give(buffer);
  }
}

async function fetchChunk(store: BlobStore, path: string, ref: ChunkRef): Promise<Buffer> {
  let data: Buffer | null;
  try {
    data = await store.get(chunkKey(ref.sha256));
  } catch (err) {
    throw new IssueError(toIssue(err, "store_error", path));
  }
  if (data === null) throw issue("chunk_missing", path, `chunk ${ref.sha256} is missing from the store`);
  if (data.length !== ref.size)
    throw issue("chunk_corrupt", path, `chunk ${ref.sha256} is ${data.length} bytes, expected ${ref.size} (truncated?)`);
  if (sha256Hex(data) !== ref.sha256) throw issue("chunk_corrupt", path, `chunk ${ref.sha256} does not match its hash`);
  return data;
}

async function writeAll(fh: FileHandle, data: Buffer): Promise<void> {
  let off = 0;
  while (off < data.length) {
    const { bytesWritten } = await fh.write(data, off, data.length - off);
    off += bytesWritten;
  }
}

/**
 * Moves the finished tree into place. With no existing target this is one
 * atomic rename. Otherwise the old tree is renamed aside first (POSIX rename
 * cannot replace a non-empty directory): a crash between the two renames
 * leaves the old tree intact under `.<name>.old-*`, never a half-written one.
 */
async function swapInto(staging: string, target: string): Promise<void> {
  const present = await lstat(target).then(
    () => true,
    (err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return false;
      throw err;
    },
  );
  if (!present) {
    await rename(staging, target);
    return;
  }
  const aside = join(dirname(target), `.${basename(target)}.old-${randomBytes(6).toString("hex")}`);
  await rename(target, aside);
  try {
    await rename(staging, target);
  } catch (err) {
    await rename(aside, target);
    throw err;
  }
  await rm(aside, { recursive: true, force: true });
}
