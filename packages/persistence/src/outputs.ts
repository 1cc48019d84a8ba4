/**
 * Session outputs, `final_collect`: enumerate the outputs directory, validate
 * limits before reading anything, read and hash each file, prove it did not
 * change while being read, upload content-addressed blobs (an existing blob is
 * accepted only if its bytes hash to the key), and write an immutable manifest
 * whose SHA-256 is the candidate id. The manifest becomes visible to users only
 * through a fenced publication, which is not this module's job.
 */
import { lstat } from "node:fs/promises";
import { join } from "node:path";
import { type BlobStore, sha256Hex } from "@openma/storage/blobs";
import { putImmutable } from "./checkpoint.ts";
import { forEachLimit } from "./concurrency.ts";
import { type Issue, type IssueCode, IssueError, issue, toIssue } from "./issues.ts";
import { guessMimeType } from "./mime.ts";
import { checkLogicalPath, HEX64, type PathLimits } from "./paths.ts";
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

/** Generous against coarse timestamps (one tick is 1-10 ms) and small clock steps. */
export const RACY_WINDOW_MS = 2_000;
export const OUTPUTS_FORMAT = "openma.session-outputs";
export const OUTPUTS_VERSION = 1;
export const OUTPUT_BLOB_PREFIX = "session-outputs/blobs";
export const OUTPUT_MANIFEST_PREFIX = "session-outputs/manifests";

export interface OutputEntry {
  path: string;
  size: number;
  sha256: string;
  mimeType: string;
  blobKey: string;
}

export interface OutputManifest {
  format: typeof OUTPUTS_FORMAT;
  version: typeof OUTPUTS_VERSION;
  /** Sorted by path. */
  entries: OutputEntry[];
  /** Files left out under `onRefusal: "skip"`, with the reason: never silently dropped. */
  refused: Issue[];
}

export interface OutputLimits extends PathLimits {
  maxFiles: number;
  maxFileBytes: number;
  maxTotalBytes: number;
}

export const DEFAULT_OUTPUT_LIMITS: OutputLimits = {
  maxFiles: 10_000,
  maxFileBytes: 256 * 1024 ** 2,
  maxTotalBytes: 4 * 1024 ** 3,
  maxPathBytes: 1024,
  maxDepth: 32,
};

export interface CollectOptions {
  limits?: Partial<OutputLimits>;
  /** `fail` (default): any refused file fails the collection. `skip`: refused files are listed in the manifest. */
  onRefusal?: "fail" | "skip";
  concurrency?: number;
  /**
   * Re-read and compare each file after the stat check. Stamps alone miss a
   * same-size rewrite within one filesystem timestamp tick, which can only
   * happen to a file changed moments ago, so `auto` (default) re-reads exactly
   * the files whose ctime is within `RACY_WINDOW_MS` of the read.
   */
  reread?: boolean | "auto";
  /** Test seam: runs between reading a file and re-checking it. */
  afterRead?: (path: string) => Promise<void> | void;
  /** Watcher seam: an entry already uploaded for exactly this file version. */
  reuse?: (path: string, stamp: FileStamp) => OutputEntry | undefined;
}

export interface CollectStats {
  files: number;
  bytes: number;
  uploadedBlobs: number;
  reusedBlobs: number;
  repairedBlobs: number;
}

export type CollectResult =
  | { ok: true; id: string; manifestKey: string; manifest: OutputManifest; stats: CollectStats }
  | { ok: false; error: Issue; refused: Issue[] };

/** Refusals that concern the whole collection: skipping a file cannot fix them. */
const FATAL: ReadonlySet<IssueCode> = new Set(["too_many_entries", "total_too_large", "not_a_directory", "store_error"]);

export function outputBlobKey(sha256: string): string {
  return `${OUTPUT_BLOB_PREFIX}/sha256/${sha256.slice(0, 2)}/${sha256}`;
}

export function outputManifestKey(id: string): string {
  return `${OUTPUT_MANIFEST_PREFIX}/${id.slice(0, 2)}/${id}`;
}

type FileEntry = Extract<TreeEntry, { type: "file" }>;

/** Walks the outputs directory; symlinks and special files are refusals, never followed. */
export async function listOutputs(dir: string, limits: OutputLimits): Promise<{ root: string; files: FileEntry[]; issues: Issue[] }> {
  const walked = await walkTree(dir, {
    // Directories are bounded too (one per file at most is plenty), so a tree of empty dirs is no bomb either.
    limits: { ...limits, maxEntries: limits.maxFiles * 2 + 16 },
    symlinks: "refuse",
  });
  const files = walked.entries.filter((e): e is FileEntry => e.type === "file");
  const issues = [...walked.issues];
  if (files.length > limits.maxFiles) {
    issues.push({ code: "too_many_entries", path: "", message: `more than ${limits.maxFiles} files` });
  }
  return { root: walked.root, files, issues };
}

export async function collectOutputs(store: BlobStore, dir: string, opts: CollectOptions = {}): Promise<CollectResult> {
  const limits = { ...DEFAULT_OUTPUT_LIMITS, ...opts.limits };
  const listed = await listOutputs(dir, limits);
  const refused = [...listed.issues];
  const uploader = new OutputUploader(store);
  const stats = uploader.stats;
  const entries: OutputEntry[] = [];
  if (!shouldStop(refused, opts)) {
    try {
      await forEachLimit(listed.files, opts.concurrency ?? 4, async (file) => {
        const reused = opts.reuse?.(file.path, file.stamp);
        // The blob may have been swept since the watcher uploaded it: then read the file again.
        if (reused && (await existsOrFail(store, reused.blobKey))) {
          stats.reusedBlobs++;
          entries.push(reused);
          return;
        }
        try {
          entries.push(await uploader.upload(listed.root, file, opts));
        } catch (err) {
          const refusal = toIssue(err, "unreadable", file.path);
          if (FATAL.has(refusal.code)) throw err;
          refused.push(refusal);
          if (shouldStop(refused, opts)) throw err;
        }
      });
    } catch (err) {
      if (!(err instanceof IssueError)) refused.push(toIssue(err, "store_error"));
      else if (!refused.includes(err.issue)) refused.push(err.issue);
    }
  }
  if (shouldStop(refused, opts)) return { ok: false, error: refused.find((r) => FATAL.has(r.code)) ?? refused[0]!, refused };
  return writeOutputManifest(store, entries, refused, stats);
}

async function existsOrFail(store: BlobStore, key: string): Promise<boolean> {
  try {
    return await store.exists(key);
  } catch (err) {
    throw new IssueError(toIssue(err, "store_error"));
  }
}

function shouldStop(refused: Issue[], opts: CollectOptions): boolean {
  if (refused.length === 0) return false;
  return (opts.onRefusal ?? "fail") === "fail" || refused.some((r) => FATAL.has(r.code));
}

export async function writeOutputManifest(
  store: BlobStore,
  entries: OutputEntry[],
  refused: Issue[],
  stats: CollectStats,
): Promise<CollectResult> {
  const byPath = (a: { path: string }, b: { path: string }) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0);
  const manifest: OutputManifest = {
    format: OUTPUTS_FORMAT,
    version: OUTPUTS_VERSION,
    entries: [...entries].sort(byPath),
    refused: [...refused].sort(byPath),
  };
  const bytes = Buffer.from(`${JSON.stringify(manifest)}\n`);
  const id = sha256Hex(bytes);
  const manifestKey = outputManifestKey(id);
  try {
    await putImmutable(store, manifestKey, bytes);
  } catch (err) {
    const error = toIssue(err, "store_error");
    return { ok: false, error, refused: [error] };
  }
  stats.files = manifest.entries.length;
  stats.bytes = manifest.entries.reduce((n, e) => n + e.size, 0);
  return { ok: true, id, manifestKey, manifest, stats };
}

/**
 * Uploads verified output blobs for one collection or watcher, deduplicating
 * identical files collected concurrently (both would otherwise see "absent"
 * and upload twice).
 */
export class OutputUploader {
  readonly stats: CollectStats = { files: 0, bytes: 0, uploadedBlobs: 0, reusedBlobs: 0, repairedBlobs: 0 };
  private readonly inflight = new Map<string, Promise<void>>();

  constructor(private readonly store: BlobStore) {}

  /** Reads one file, proves it is stable, uploads its blob. Throws IssueError with a reason. */
  async upload(root: string, file: FileEntry, opts: Pick<CollectOptions, "reread" | "afterRead">): Promise<OutputEntry> {
    const bytes = await readStable(root, file, opts);
    const sha256 = sha256Hex(bytes);
    const blobKey = outputBlobKey(sha256);
    const running = this.inflight.get(blobKey);
    if (running) {
      await running;
      this.stats.reusedBlobs++;
    } else {
      const p = this.storeBlob(blobKey, sha256, bytes, file.path);
      // Settled entries leave the map: a later identical file re-checks the store itself.
      this.inflight.set(blobKey, p);
      await p.finally(() => this.inflight.delete(blobKey));
    }
    return { path: file.path, size: bytes.length, sha256, mimeType: guessMimeType(file.path, bytes.subarray(0, 8192)), blobKey };
  }

  private async storeBlob(blobKey: string, sha256: string, bytes: Buffer, path: string): Promise<void> {
    try {
      const existing = await this.store.get(blobKey);
      if (existing !== null && sha256Hex(existing) === sha256) {
        this.stats.reusedBlobs++;
        return;
      }
      // A damaged blob under this key can only be replaced by the bytes its name promises.
      await this.store.put(blobKey, bytes);
      if (existing === null) this.stats.uploadedBlobs++;
      else this.stats.repairedBlobs++;
    } catch (err) {
      throw new IssueError(toIssue(err, "store_error", path));
    }
  }
}

async function readStable(root: string, file: FileEntry, opts: Pick<CollectOptions, "reread" | "afterRead">): Promise<Buffer> {
  const fh = await openVerifiedFile(root, file);
  try {
    // Never more than the listed size, so a runaway writer is not followed; growth shows in the stamps below.
    const first = await readUpTo(fh, file.size);
    await opts.afterRead?.(file.path);
    // Path first: unlinking the old inode also bumps its ctime, which would read as a mere "modified".
    const now = await lstat(join(root, file.path), { bigint: true });
    if (!now.isFile() || now.ino !== file.stamp.ino) throw issue("changed", file.path, "file was replaced while being read");
    const after = fh.stamp();
    if (!sameStamp(file.stamp, after)) throw issue("changed", file.path, describeChange(file.stamp, after));
    if (first.length !== file.size) throw issue("changed", file.path, `read ${first.length} of ${file.size} bytes`);
    const recent = file.stamp.ctimeNs >= BigInt(Date.now() - RACY_WINDOW_MS) * 1_000_000n;
    if (opts.reread === true || (opts.reread !== false && recent)) {
      const again = await readUpTo(fh, file.size + 1, 0);
      if (!again.equals(first)) throw issue("changed", file.path, "file content changed while being read");
    }
    return first;
  } catch (err) {
    throw err instanceof IssueError ? err : new IssueError(fsIssue(file.path, err));
  } finally {
    fh.close();
  }
}

async function readUpTo(fh: VerifiedFile, max: number, position = 0): Promise<Buffer> {
  const buf = Buffer.allocUnsafe(max);
  let off = 0;
  while (off < max) {
    const bytesRead = await fh.read(buf, off, max - off, position + off);
    if (bytesRead === 0) break;
    off += bytesRead;
  }
  return buf.subarray(0, off);
}

export type OutputManifestParse = { ok: true; manifest: OutputManifest } | { ok: false; message: string };

/** Validates a stored output manifest (used by GC and by readers that must not trust stored bytes). */
export function parseOutputManifest(bytes: Uint8Array, limits: OutputLimits = DEFAULT_OUTPUT_LIMITS): OutputManifestParse {
  let m: Partial<OutputManifest> | null;
  try {
    m = JSON.parse(Buffer.from(bytes).toString("utf8"));
  } catch {
    return { ok: false, message: "manifest is not valid JSON" };
  }
  if (!m || m.format !== OUTPUTS_FORMAT || m.version !== OUTPUTS_VERSION) return { ok: false, message: "unsupported manifest format" };
  if (!Array.isArray(m.entries) || !Array.isArray(m.refused)) return { ok: false, message: "entries and refused must be arrays" };
  if (m.entries.length > limits.maxFiles) return { ok: false, message: `more than ${limits.maxFiles} entries` };
  const seen = new Set<string>();
  for (const e of m.entries as Partial<OutputEntry>[]) {
    const bad = checkLogicalPath(e?.path, limits);
    if (bad) return { ok: false, message: bad };
    if (seen.has(e.path!)) return { ok: false, message: `duplicate path ${e.path}` };
    seen.add(e.path!);
    if (typeof e.sha256 !== "string" || !HEX64.test(e.sha256)) return { ok: false, message: `${e.path}: invalid sha256` };
    if (e.blobKey !== outputBlobKey(e.sha256)) return { ok: false, message: `${e.path}: blob key does not match its hash` };
    if (!Number.isSafeInteger(e.size) || e.size! < 0) return { ok: false, message: `${e.path}: invalid size` };
    if (typeof e.mimeType !== "string") return { ok: false, message: `${e.path}: invalid mime type` };
  }
  return { ok: true, manifest: m as OutputManifest };
}
