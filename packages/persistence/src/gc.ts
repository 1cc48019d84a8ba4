/**
 * Mark-and-sweep garbage collection of checkpoint chunks/manifests and output
 * blobs/manifests. Marked: everything reachable from the live (published)
 * manifests, plus everything reachable from any manifest younger than the
 * retention window, so candidates written but not yet published survive.
 * Swept: unmarked objects older than the window (young ones may belong to a
 * checkpoint still uploading). It fails closed: if a live manifest cannot be
 * read and verified, nothing is deleted, because its references are unknown.
 *
 * Concurrency caveat: a checkpoint that found a chunk "already present" just
 * before the sweep deletes it would reference a missing chunk. The writer
 * re-checks reused chunks after writing its manifest (`chunk_vanished`), and
 * restore falls back to the last verified revision; to rule the race out
 * entirely, run GC when no checkpoint writer is active.
 */
import type { BlobListing, BlobStore } from "@openma/storage/blobs";
import { sha256Hex } from "@openma/storage/blobs";
import { type Issue, issue, toIssue } from "./issues.ts";
import {
  CHECKPOINT_MANIFEST_PREFIX,
  CHUNK_PREFIX,
  checkpointManifestKey,
  chunkKey,
  DEFAULT_CHECKPOINT_LIMITS,
  parseCheckpointManifest,
} from "./manifest.ts";
import { OUTPUT_BLOB_PREFIX, OUTPUT_MANIFEST_PREFIX, outputManifestKey, parseOutputManifest } from "./outputs.ts";
import { HEX64 } from "./paths.ts";
import { loadCheckpointManifest } from "./restore.ts";

export interface GcOptions {
  /** Checkpoint ids currently published (every scope's active and retained revisions). */
  liveCheckpoints: Iterable<string>;
  /** Output manifest ids currently published. */
  liveOutputs: Iterable<string>;
  retentionMs: number;
  /** Epoch ms, injected so tests control age without sleeping. */
  now: number;
  /** Report what would be deleted without deleting. */
  dryRun?: boolean;
}

export interface GcReport {
  scanned: number;
  marked: number;
  keptYoung: number;
  deleted: string[];
  deletedBytes: number;
}

export type GcResult = { ok: true; report: GcReport } | { ok: false; error: Issue };

type ListableStore = BlobStore & { list: NonNullable<BlobStore["list"]> };

const PREFIXES = [CHECKPOINT_MANIFEST_PREFIX, CHUNK_PREFIX, OUTPUT_MANIFEST_PREFIX, OUTPUT_BLOB_PREFIX];

export async function collectGarbage(store: BlobStore, opts: GcOptions): Promise<GcResult> {
  if (typeof store.list !== "function") {
    return { ok: false, error: { code: "store_error", path: "", message: "this blob store cannot list keys, so it cannot be collected" } };
  }
  const listable = store as ListableStore;
  const cutoff = opts.now - opts.retentionMs;
  const marked = new Set<string>();
  try {
    for (const id of opts.liveCheckpoints) await markLiveCheckpoint(store, id, marked);
    for (const id of opts.liveOutputs) await markLiveOutputs(store, id, marked);
    const listings = (await Promise.all(PREFIXES.map((p) => listable.list(p)))).flat();
    await markYoungManifests(store, listings, cutoff, marked);
    const garbage = listings.filter((l) => !marked.has(l.key) && l.modifiedAt < cutoff);
    // Manifests written while we were marking protect their references too.
    const lateManifests = (await Promise.all([CHECKPOINT_MANIFEST_PREFIX, OUTPUT_MANIFEST_PREFIX].map((p) => listable.list(p)))).flat();
    await markYoungManifests(store, lateManifests, cutoff, marked);
    const deleted: string[] = [];
    let deletedBytes = 0;
    for (const g of garbage) {
      if (marked.has(g.key)) continue;
      if (!opts.dryRun) await store.delete(g.key);
      deleted.push(g.key);
      deletedBytes += g.size;
    }
    const keptYoung = listings.filter((l) => !marked.has(l.key) && l.modifiedAt >= cutoff).length;
    return { ok: true, report: { scanned: listings.length, marked: marked.size, keptYoung, deleted, deletedBytes } };
  } catch (err) {
    return { ok: false, error: toIssue(err, "store_error") };
  }
}

async function markLiveCheckpoint(store: BlobStore, id: string, marked: Set<string>): Promise<void> {
  // Symlink policy does not matter for marking; limits are the format's own.
  const loaded = await loadCheckpointManifest(store, id, { symlinks: "any" });
  if (!loaded.ok) throw issue(loaded.error.code, "", `live checkpoint ${id}: ${loaded.error.message}; refusing to sweep`);
  marked.add(checkpointManifestKey(id));
  for (const e of loaded.manifest.entries) if (e.type === "file") for (const c of e.chunks) marked.add(chunkKey(c.sha256));
}

async function markLiveOutputs(store: BlobStore, id: string, marked: Set<string>): Promise<void> {
  const fail = (message: string) => issue("manifest_invalid", "", `live outputs ${id}: ${message}; refusing to sweep`);
  if (!HEX64.test(id)) throw fail("invalid id");
  const bytes = await store.get(outputManifestKey(id));
  if (bytes === null) throw fail("manifest is missing");
  if (sha256Hex(bytes) !== id) throw fail("manifest does not hash to its id");
  const parsed = parseOutputManifest(bytes);
  if (!parsed.ok) throw fail(parsed.message);
  marked.add(outputManifestKey(id));
  for (const e of parsed.manifest.entries) marked.add(e.blobKey);
}

/** Best effort: an unreadable young manifest cannot be restored anyway, so its references do not matter. */
async function markYoungManifests(store: BlobStore, listings: BlobListing[], cutoff: number, marked: Set<string>): Promise<void> {
  for (const l of listings) {
    if (l.modifiedAt < cutoff || marked.has(l.key)) continue;
    const isCheckpoint = l.key.startsWith(`${CHECKPOINT_MANIFEST_PREFIX}/`);
    if (!isCheckpoint && !l.key.startsWith(`${OUTPUT_MANIFEST_PREFIX}/`)) continue;
    const bytes = await store.get(l.key);
    if (bytes === null) continue;
    if (isCheckpoint) {
      const parsed = parseCheckpointManifest(bytes, DEFAULT_CHECKPOINT_LIMITS, "any");
      if (parsed.ok)
        for (const e of parsed.manifest.entries) if (e.type === "file") for (const c of e.chunks) marked.add(chunkKey(c.sha256));
    } else {
      const parsed = parseOutputManifest(bytes);
      if (parsed.ok) for (const e of parsed.manifest.entries) marked.add(e.blobKey);
    }
  }
}
