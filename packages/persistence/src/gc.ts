/**
 * Mark-and-sweep garbage collection of checkpoint chunks/manifests and output
 * blobs/manifests. Marked: everything reachable from the live (published)
 * manifests, plus everything reachable from any manifest younger than the
 * retention window, so candidates written but not yet published survive.
 * Swept: unmarked objects older than the window (young ones may belong to a
 * checkpoint still uploading). It fails closed: if a live manifest cannot be
 * read and verified, nothing is deleted, because its references are unknown.
 *
 * Packs (ADR 0029) are marked chunk by chunk. A pack no retained manifest
 * uses is deleted; a pack only partly used (less than half its chunk bytes)
 * is repacked: its live chunks, each proven against its hash, are written to
 * a new pack, then a forward from the old id to the new locations, and only
 * then is the old pack deleted. Manifests never change, and a crash between
 * any two of these steps leaves every chunk reachable.
 *
 * Concurrency caveat: a checkpoint that found a chunk "already present" just
 * before the sweep deletes it would reference a missing chunk. The writer
 * re-checks reused chunks after writing its manifest (`chunk_vanished`), and
 * restore falls back to the last verified revision; to rule the race out
 * entirely, run GC when no checkpoint writer is active.
 */
import type { BlobListing, BlobStore } from "@openma/storage/blobs";
import { sha256Hex } from "@openma/storage/blobs";
import { getOrMake } from "./concurrency.ts";
import { type Issue, issue, toIssue } from "./issues.ts";
import {
  CHECKPOINT_MANIFEST_PREFIX,
  CHUNK_PREFIX,
  type ChunkRef,
  checkpointManifestKey,
  chunkKey,
  DEFAULT_CHECKPOINT_LIMITS,
  parseCheckpointManifest,
} from "./manifest.ts";
import { OUTPUT_BLOB_PREFIX, OUTPUT_MANIFEST_PREFIX, outputManifestKey, parseOutputManifest } from "./outputs.ts";
import {
  type ChunkLocation,
  PACK_FORWARD_PREFIX,
  PACK_PREFIX,
  PackBuilder,
  packForwardKey,
  packKey,
  parseForward,
  parsePack,
  serializeForward,
} from "./packs.ts";
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
  /** A pack whose live chunks fill less than this share of it is rewritten; default 0.5. */
  repackBelow?: number;
}

export interface GcReport {
  scanned: number;
  marked: number;
  keptYoung: number;
  deleted: string[];
  deletedBytes: number;
  /** Packs rewritten into smaller ones (their keys are also in `deleted`). */
  repacked: string[];
}

export type GcResult = { ok: true; report: GcReport } | { ok: false; error: Issue };

type ListableStore = BlobStore & { list: NonNullable<BlobStore["list"]> };

const PREFIXES = [CHECKPOINT_MANIFEST_PREFIX, CHUNK_PREFIX, PACK_PREFIX, PACK_FORWARD_PREFIX, OUTPUT_MANIFEST_PREFIX, OUTPUT_BLOB_PREFIX];

/**
 * What marking found: whole keys to keep, and for packs the chunks still in
 * use. A chunk in a pack that is gone is followed through the pack's forward.
 */
class Marks {
  readonly keys = new Set<string>();
  readonly liveChunks = new Map<string, Set<string>>();
  private readonly forwards = new Map<string, Promise<Map<string, ChunkLocation> | null>>();

  constructor(
    private readonly store: BlobStore,
    readonly present: Set<string>,
  ) {}

  async chunk(ref: ChunkRef): Promise<void> {
    if (ref.pack === undefined) {
      this.keys.add(chunkKey(ref.sha256));
      return;
    }
    let at: ChunkLocation | undefined = ref as ChunkLocation;
    for (let hop = 0; at && hop < 16; hop++) {
      const key = packKey(at.pack);
      if (this.present.has(key)) {
        this.keys.add(key);
        getOrMake(this.liveChunks, at.pack, () => new Set<string>()).add(at.sha256);
        return;
      }
      const forward = await this.forward(at.pack);
      if (!forward) return; // gone with no forward: nothing left to protect
      this.keys.add(packForwardKey(at.pack));
      at = forward.get(at.sha256);
    }
  }

  private forward(pack: string): Promise<Map<string, ChunkLocation> | null> {
    let p = this.forwards.get(pack);
    if (!p) {
      const key = packForwardKey(pack);
      p = this.present.has(key) ? this.store.get(key).then((b) => (b === null ? null : parseForward(pack, b).to)) : Promise.resolve(null);
      this.forwards.set(pack, p);
    }
    return p;
  }
}

export async function collectGarbage(store: BlobStore, opts: GcOptions): Promise<GcResult> {
  if (typeof store.list !== "function") {
    return { ok: false, error: { code: "store_error", path: "", message: "this blob store cannot list keys, so it cannot be collected" } };
  }
  const listable = store as ListableStore;
  const cutoff = opts.now - opts.retentionMs;
  try {
    const listings = (await Promise.all(PREFIXES.map((p) => listable.list(p)))).flat();
    const marks = new Marks(store, new Set(listings.map((l) => l.key)));
    for (const id of opts.liveCheckpoints) await markLiveCheckpoint(store, id, marks);
    for (const id of opts.liveOutputs) await markLiveOutputs(store, id, marks.keys);
    await markYoungManifests(store, listings, cutoff, marks);
    // Manifests written while we were marking protect their references too.
    const lateManifests = (await Promise.all([CHECKPOINT_MANIFEST_PREFIX, OUTPUT_MANIFEST_PREFIX].map((p) => listable.list(p)))).flat();
    await markYoungManifests(store, lateManifests, cutoff, marks);
    const deleted: string[] = [];
    const repacked: string[] = [];
    let deletedBytes = 0;
    for (const g of listings) {
      if (g.modifiedAt >= cutoff) continue;
      if (marks.keys.has(g.key)) {
        const pack = g.key.startsWith(`${PACK_PREFIX}/`) ? g.key.slice(g.key.lastIndexOf("/") + 1) : null;
        if (pack === null || !(await repack(store, pack, marks.liveChunks.get(pack)!, opts))) continue;
        repacked.push(g.key);
      }
      if (!opts.dryRun) await store.delete(g.key);
      deleted.push(g.key);
      deletedBytes += g.size;
    }
    const keptYoung = listings.filter((l) => !marks.keys.has(l.key) && l.modifiedAt >= cutoff).length;
    return { ok: true, report: { scanned: listings.length, marked: marks.keys.size, keptYoung, deleted, deletedBytes, repacked } };
  } catch (err) {
    return { ok: false, error: toIssue(err, "store_error") };
  }
}

/**
 * Rewrites `pack` if its live chunks fill less than the threshold. The new
 * pack and the forward are durable before the caller deletes the old pack.
 * Returns whether the old pack may now be deleted.
 */
async function repack(store: BlobStore, pack: string, live: Set<string>, opts: GcOptions): Promise<boolean> {
  const bytes = await store.get(packKey(pack));
  if (bytes === null) return false;
  const parsed = parsePack(pack, bytes);
  const total = parsed.chunks.reduce((n, c) => n + c.size, 0);
  const kept = parsed.chunks.filter((c) => live.has(c.sha256));
  const keptBytes = kept.reduce((n, c) => n + c.size, 0);
  if (keptBytes >= total * (opts.repackBelow ?? 0.5)) return false;
  if (opts.dryRun) return true;
  const builder = new PackBuilder(keptBytes);
  for (const c of kept) {
    const data = bytes.subarray(c.offset, c.offset + c.size);
    // A chunk already damaged is not copied: the forward omits it, so restore reports it missing, as it is.
    if (sha256Hex(data) === c.sha256) builder.add(c.sha256, data);
  }
  const sealed = builder.seal();
  await store.put(packKey(sealed.id), sealed.bytes);
  const to = sealed.chunks.map((c) => ({ sha256: c.sha256, size: c.size, pack: sealed.id, offset: c.offset }));
  await store.put(packForwardKey(pack), serializeForward(pack, to));
  return true;
}

async function markLiveCheckpoint(store: BlobStore, id: string, marks: Marks): Promise<void> {
  // Symlink policy does not matter for marking; limits are the format's own.
  const loaded = await loadCheckpointManifest(store, id, { symlinks: "any" });
  if (!loaded.ok) throw issue(loaded.error.code, "", `live checkpoint ${id}: ${loaded.error.message}; refusing to sweep`);
  marks.keys.add(checkpointManifestKey(id));
  for (const e of loaded.manifest.entries) if (e.type === "file") for (const c of e.chunks) await marks.chunk(c);
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
async function markYoungManifests(store: BlobStore, listings: BlobListing[], cutoff: number, marks: Marks): Promise<void> {
  const marked = marks.keys;
  for (const l of listings) {
    if (l.modifiedAt < cutoff || marked.has(l.key)) continue;
    const isCheckpoint = l.key.startsWith(`${CHECKPOINT_MANIFEST_PREFIX}/`);
    if (!isCheckpoint && !l.key.startsWith(`${OUTPUT_MANIFEST_PREFIX}/`)) continue;
    const bytes = await store.get(l.key);
    if (bytes === null) continue;
    if (isCheckpoint) {
      const parsed = parseCheckpointManifest(bytes, DEFAULT_CHECKPOINT_LIMITS, "any");
      if (parsed.ok) for (const e of parsed.manifest.entries) if (e.type === "file") for (const c of e.chunks) await marks.chunk(c);
    } else {
      const parsed = parseOutputManifest(bytes);
      if (parsed.ok) for (const e of parsed.manifest.entries) marked.add(e.blobKey);
    }
  }
}
