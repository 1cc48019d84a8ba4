/**
 * The workspace checkpoint manifest: an immutable JSON document whose SHA-256
 * is the candidate id. It holds no timestamps, so the same tree always yields
 * the same id (idempotent retries), and it is validated as hostile input on
 * every read: a manifest that would write outside the target, through a
 * symlink, or twice to one path is rejected before a single byte is written.
 */
import { CHUNKING_ALGORITHM, type ChunkParams, validateChunkParams } from "./chunker.ts";
import { ancestors, checkLogicalPath, HEX64, symlinkStaysInside } from "./paths.ts";
import type { WalkLimits } from "./walk.ts";

export const CHECKPOINT_FORMAT = "openma.workspace-checkpoint";
/** Written today: chunks live in packs (ADR 0029). Version 1 (one blob per chunk) is still read. */
export const CHECKPOINT_VERSION = 2;
export const LEGACY_CHECKPOINT_VERSION = 1;
/** A v2 manifest may name at most this many packs (a hostile manifest cannot demand unbounded lookups). */
const MAX_PACKS = 1_000_000;
export const CHUNK_PREFIX = "checkpoint/chunks";
export const CHECKPOINT_MANIFEST_PREFIX = "checkpoint/manifests";

/** A chunk of a file, in order. In v2 manifests it also says where it lives: `pack` and `offset`. */
export interface ChunkRef {
  sha256: string;
  size: number;
  pack?: string;
  offset?: number;
}

export type CheckpointEntry =
  | { type: "dir"; path: string; mode: number }
  /**
   * `sha256` (whole file) is in v1 only: in v2 the ordered chunk hashes in the
   * hash-checked manifest already pin every byte, so files are not hashed twice.
   */
  | { type: "file"; path: string; mode: number; size: number; sha256?: string; chunks: ChunkRef[] }
  | { type: "symlink"; path: string; target: string };

export interface CheckpointManifest {
  format: typeof CHECKPOINT_FORMAT;
  version: typeof CHECKPOINT_VERSION | typeof LEGACY_CHECKPOINT_VERSION;
  chunking: { algorithm: typeof CHUNKING_ALGORITHM } & ChunkParams;
  /** Sorted by path; parents are always listed explicitly as `dir` entries. */
  entries: CheckpointEntry[];
}

/**
 * `contained`: every symlink must resolve inside the workspace (default).
 * `any`: targets are kept verbatim; restore still never writes through a link,
 * so this only matters to whoever later uses the restored tree.
 */
export type SymlinkPolicy = "contained" | "any";

export interface CheckpointLimits extends WalkLimits {
  maxManifestBytes: number;
  maxSymlinkTargetBytes: number;
}

export const DEFAULT_CHECKPOINT_LIMITS: CheckpointLimits = {
  maxEntries: 200_000,
  maxFileBytes: 4 * 1024 ** 3,
  maxTotalBytes: 16 * 1024 ** 3,
  maxPathBytes: 4096,
  maxDepth: 256,
  maxManifestBytes: 256 * 1024 ** 2,
  maxSymlinkTargetBytes: 4096,
};

export function chunkKey(sha256: string): string {
  return `${CHUNK_PREFIX}/${sha256.slice(0, 2)}/${sha256}`;
}

export function checkpointManifestKey(id: string): string {
  return `${CHECKPOINT_MANIFEST_PREFIX}/${id.slice(0, 2)}/${id}`;
}

/**
 * v1 is written as it is held. v2 stores packs once in a table and each chunk
 * as a compact `[sha256, size, pack index, offset]` tuple.
 */
export function serializeManifest(m: CheckpointManifest): Buffer {
  if (m.version === LEGACY_CHECKPOINT_VERSION) return Buffer.from(`${JSON.stringify(m)}\n`);
  const packs: string[] = [];
  const slot = new Map<string, number>();
  const slotOf = (pack: string | undefined) => {
    if (pack === undefined) throw new Error("a v2 chunk reference needs a pack");
    let i = slot.get(pack);
    if (i === undefined) {
      i = packs.push(pack) - 1;
      slot.set(pack, i);
    }
    return i;
  };
  const entries = m.entries.map((e) =>
    e.type === "file"
      ? {
          type: e.type,
          path: e.path,
          mode: e.mode,
          size: e.size,
          chunks: e.chunks.map((c) => [c.sha256, c.size, slotOf(c.pack), c.offset]),
        }
      : e,
  );
  return Buffer.from(`${JSON.stringify({ format: m.format, version: m.version, chunking: m.chunking, packs, entries })}\n`);
}

export type ParseResult = { ok: true; manifest: CheckpointManifest } | { ok: false; message: string };

/** Parses and validates a manifest whose hash has already been checked. */
export function parseCheckpointManifest(bytes: Uint8Array, limits: CheckpointLimits, policy: SymlinkPolicy): ParseResult {
  let doc: unknown;
  try {
    doc = JSON.parse(Buffer.from(bytes).toString("utf8"));
  } catch {
    return { ok: false, message: "manifest is not valid JSON" };
  }
  const m = doc as Partial<CheckpointManifest> | null;
  if (!m || typeof m !== "object") return { ok: false, message: "manifest is not an object" };
  if (m.format !== CHECKPOINT_FORMAT || (m.version !== CHECKPOINT_VERSION && m.version !== LEGACY_CHECKPOINT_VERSION)) {
    return { ok: false, message: `unsupported manifest format ${String(m.format)} v${String(m.version)}` };
  }
  const c = m.chunking;
  if (!c || c.algorithm !== CHUNKING_ALGORITHM) return { ok: false, message: "unsupported chunking algorithm" };
  const badChunking = validateChunkParams(c);
  if (badChunking) return { ok: false, message: `chunking: ${badChunking}` };
  if (!Array.isArray(m.entries)) return { ok: false, message: "entries must be an array" };
  if (m.entries.length > limits.maxEntries) return { ok: false, message: `more than ${limits.maxEntries} entries` };
  if (m.version === CHECKPOINT_VERSION) {
    const unpacked = unpackV2(m as Partial<CheckpointManifest> & { packs?: unknown });
    if (typeof unpacked === "string") return { ok: false, message: unpacked };
    m.entries = unpacked;
  }
  const problem = validateEntries(m.entries, c.max, limits, policy, m.version === LEGACY_CHECKPOINT_VERSION);
  return problem ? { ok: false, message: problem } : { ok: true, manifest: m as CheckpointManifest };
}

function validateEntries(
  entries: unknown[],
  maxChunk: number,
  limits: CheckpointLimits,
  policy: SymlinkPolicy,
  fileHashes: boolean,
): string | null {
  const kinds = new Map<string, CheckpointEntry["type"]>();
  const links = new Map<string, string>();
  let total = 0;
  for (const raw of entries) {
    const bad = validateEntry(raw, maxChunk, limits, fileHashes);
    if (bad) return bad;
    const e = raw as CheckpointEntry;
    if (kinds.has(e.path)) return `duplicate path ${e.path}`;
    kinds.set(e.path, e.type);
    if (e.type === "symlink") links.set(e.path, e.target);
    if (e.type === "file") {
      total += e.size;
      if (total > limits.maxTotalBytes) return `total size exceeds ${limits.maxTotalBytes} bytes`;
    }
  }
  for (const e of entries as CheckpointEntry[]) {
    // Requiring every ancestor to be a listed directory rules out writing
    // through a symlink (or "into" a file) at restore time.
    for (const a of ancestors(e.path)) {
      const kind = kinds.get(a);
      if (kind === "symlink") return `${e.path}: path goes through symlink ${a}`;
      if (kind !== "dir") return `${e.path}: parent ${a} is not a directory in the manifest`;
    }
    if (e.type === "symlink" && policy === "contained" && !symlinkStaysInside(e.path, e.target, links)) {
      return `${e.path}: symlink target ${e.target} escapes the workspace`;
    }
  }
  return null;
}

/** Turns v2's compact chunk tuples back into located `ChunkRef`s, refusing any that do not fit. */
function unpackV2(m: { packs?: unknown; entries?: unknown[] }): CheckpointEntry[] | string {
  const packs = m.packs;
  if (!Array.isArray(packs) || packs.length > MAX_PACKS) return "packs must be an array";
  if (!packs.every((p) => typeof p === "string" && HEX64.test(p))) return "invalid pack id";
  if (new Set(packs).size !== packs.length) return "duplicate pack id";
  const out: CheckpointEntry[] = [];
  for (const raw of m.entries as unknown[]) {
    const e = raw as Record<string, unknown> | null;
    if (e?.type !== "file") {
      out.push(raw as CheckpointEntry);
      continue;
    }
    if ("sha256" in e) return `${String(e.path)}: v2 file entries carry no whole-file sha256`;
    if (!Array.isArray(e.chunks)) return `${String(e.path)}: chunks must be an array`;
    const chunks: ChunkRef[] = [];
    for (const t of e.chunks as unknown[]) {
      const [sha256, size, slot, offset] = Array.isArray(t) && t.length === 4 ? t : [];
      const pack = Number.isSafeInteger(slot) ? (packs[slot as number] as string | undefined) : undefined;
      if (pack === undefined || !isSize(offset, Number.MAX_SAFE_INTEGER)) return `${String(e.path)}: invalid chunk location`;
      chunks.push({ sha256: sha256 as string, size: size as number, pack, offset });
    }
    out.push({ ...(e as object), chunks } as CheckpointEntry);
  }
  return out;
}

function isMode(v: unknown): v is number {
  return Number.isInteger(v) && (v as number) >= 0 && (v as number) <= 0o777;
}

function isSize(v: unknown, max: number): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0 && (v as number) <= max;
}

function validateEntry(raw: unknown, maxChunk: number, limits: CheckpointLimits, fileHashes: boolean): string | null {
  if (!raw || typeof raw !== "object") return "entry is not an object";
  const e = raw as Record<string, unknown>;
  const badPath = checkLogicalPath(e.path, limits);
  if (badPath) return `entry ${JSON.stringify(e.path)}: ${badPath}`;
  const where = `${e.path as string}:`;
  switch (e.type) {
    case "dir":
      return isMode(e.mode) ? null : `${where} invalid mode`;
    case "symlink": {
      const t = e.target;
      if (typeof t !== "string" || t.length === 0 || t.includes("\0")) return `${where} invalid symlink target`;
      if (Buffer.byteLength(t) > limits.maxSymlinkTargetBytes) return `${where} symlink target too long`;
      return null;
    }
    case "file":
      return validateFileEntry(e, maxChunk, limits, fileHashes);
    default:
      return `${where} unknown entry type ${String(e.type)}`;
  }
}

function validateFileEntry(e: Record<string, unknown>, maxChunk: number, limits: CheckpointLimits, fileHash: boolean): string | null {
  const where = `${e.path as string}:`;
  if (!isMode(e.mode)) return `${where} invalid mode`;
  if (!isSize(e.size, limits.maxFileBytes)) return `${where} invalid or oversized file size`;
  if (fileHash && (typeof e.sha256 !== "string" || !HEX64.test(e.sha256))) return `${where} invalid sha256`;
  if (!Array.isArray(e.chunks)) return `${where} chunks must be an array`;
  let sum = 0;
  for (const c of e.chunks as unknown[]) {
    const ref = c as Partial<ChunkRef> | null;
    if (!ref || typeof ref.sha256 !== "string" || !HEX64.test(ref.sha256)) return `${where} invalid chunk hash`;
    if (!isSize(ref.size, maxChunk) || ref.size === 0) return `${where} invalid chunk size`;
    sum += ref.size;
  }
  if (sum !== e.size) return `${where} chunk sizes add up to ${sum}, not ${e.size}`;
  return null;
}
