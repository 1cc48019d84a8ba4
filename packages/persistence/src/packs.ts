/**
 * Pack objects (checkpoint format v2, ADR 0029): many chunks in one immutable
 * blob, so a checkpoint costs one durable write per pack instead of one per
 * chunk. Layout: the chunk bytes back to back, then the index (JSON: the
 * chunks' SHA-256 and sizes in order), then the index length (8 bytes, big
 * endian) and an 8-byte magic. The pack id is the SHA-256 of the index, and
 * the index names every byte by hash, so the id pins the whole pack without
 * hashing its bytes a second time (the chunk hashes already cover them).
 *
 * A pack that GC rewrote leaves a forward behind: a small object under the
 * old id mapping each chunk it still held to its new pack and offset. Restore
 * follows forwards, so a manifest never has to change when GC repacks.
 */
import type { BlobStore } from "@openma/storage/blobs";
import { sha256Hex } from "@openma/storage/blobs";
import { issue } from "./issues.ts";
import { HEX64 } from "./paths.ts";

export const PACK_PREFIX = "checkpoint/packs";
export const PACK_FORWARD_PREFIX = "checkpoint/pack-forwards";
export const PACK_FORMAT = "openma.checkpoint-pack";
export const PACK_FORWARD_FORMAT = "openma.checkpoint-pack-forward";
const MAGIC = Buffer.from("OMAPACK1");
const TRAILER = 16;
/** Packs are sealed at about this size: big enough that fsync and PUT overheads vanish, small enough to buffer. */
export const DEFAULT_PACK_BYTES = 16 * 1024 * 1024;
/** Forwards may chain (a pack repacked twice); a cycle or a hostile chain stops here. */
const MAX_FORWARD_DEPTH = 16;

export function packKey(id: string): string {
  return `${PACK_PREFIX}/${id.slice(0, 2)}/${id}`;
}

export function packForwardKey(id: string): string {
  return `${PACK_FORWARD_PREFIX}/${id.slice(0, 2)}/${id}`;
}

/** Where a chunk lives: a pack and the byte offset inside it. */
export interface ChunkLocation {
  sha256: string;
  size: number;
  pack: string;
  offset: number;
}

export interface SealedPack {
  id: string;
  bytes: Buffer;
  chunks: Array<{ sha256: string; size: number; offset: number }>;
}

/** Accumulates chunks into one pack buffer; `seal` appends the index and names the pack. */
export class PackBuilder {
  private buf: Buffer;
  private used = 0;
  readonly chunks: Array<{ sha256: string; size: number; offset: number }> = [];

  /** A capacity, or a buffer to fill (e.g. from a pool: see `backing`). */
  constructor(capacity: number | Buffer) {
    this.buf = typeof capacity === "number" ? Buffer.allocUnsafe(capacity) : capacity;
  }

  get bytes(): number {
    return this.used;
  }

  /** The buffer the chunks are in; a sealed pack's bytes may be a view of it, so reuse it only once they are written. */
  get backing(): Buffer {
    return this.buf;
  }

  /** Copies `data` in and returns its offset. */
  add(sha256: string, data: Uint8Array): number {
    if (this.used + data.length > this.buf.length) {
      const grown = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.used + data.length));
      this.buf.copy(grown, 0, 0, this.used);
      this.buf = grown;
    }
    const offset = this.used;
    this.buf.set(data, offset);
    this.used += data.length;
    this.chunks.push({ sha256, size: data.length, offset });
    return offset;
  }

  seal(): SealedPack {
    const index = serializeIndex(this.chunks);
    const total = this.used + index.length + TRAILER;
    // In place when the index fits after the chunks (a pool's buffers leave room), else one copy.
    const inPlace = total <= this.buf.length;
    const bytes = inPlace ? this.buf.subarray(0, total) : Buffer.allocUnsafe(total);
    if (!inPlace) this.buf.copy(bytes, 0, 0, this.used);
    index.copy(bytes, this.used);
    bytes.writeBigUInt64BE(BigInt(index.length), this.used + index.length);
    MAGIC.copy(bytes, this.used + index.length + 8);
    return { id: sha256Hex(index), bytes, chunks: this.chunks };
  }
}

function serializeIndex(chunks: ReadonlyArray<{ sha256: string; size: number }>): Buffer {
  return Buffer.from(JSON.stringify({ format: PACK_FORMAT, version: 1, chunks: chunks.map((c) => [c.sha256, c.size]) }));
}

/**
 * Reads a pack's index and checks it names the pack (hash = id) and accounts
 * for exactly the bytes before it. Chunk bytes are not hashed here; whoever
 * uses a chunk verifies it against its own hash.
 */
export function parsePack(id: string, bytes: Buffer): SealedPack {
  const bad = (why: string) => issue("chunk_corrupt", "", `pack ${id}: ${why}`);
  if (bytes.length < TRAILER || !bytes.subarray(bytes.length - 8).equals(MAGIC)) throw bad("no pack trailer");
  const indexLength = Number(bytes.readBigUInt64BE(bytes.length - TRAILER));
  const indexStart = bytes.length - TRAILER - indexLength;
  if (indexStart < 0) throw bad("index length out of range");
  const index = bytes.subarray(indexStart, bytes.length - TRAILER);
  if (sha256Hex(index) !== id) throw bad("index does not hash to the pack id");
  let doc: { format?: unknown; version?: unknown; chunks?: unknown };
  try {
    doc = JSON.parse(index.toString("utf8"));
  } catch {
    throw bad("index is not valid JSON");
  }
  if (doc.format !== PACK_FORMAT || doc.version !== 1 || !Array.isArray(doc.chunks)) throw bad("unsupported index");
  const chunks: SealedPack["chunks"] = [];
  let offset = 0;
  for (const c of doc.chunks as unknown[]) {
    const [sha256, size] = Array.isArray(c) ? c : [];
    if (typeof sha256 !== "string" || !HEX64.test(sha256) || !Number.isSafeInteger(size) || (size as number) <= 0) {
      throw bad("invalid index entry");
    }
    chunks.push({ sha256, size: size as number, offset });
    offset += size as number;
  }
  if (offset !== indexStart) throw bad("index does not account for the pack's bytes");
  return { id, bytes, chunks };
}

/** The bytes of one chunk from a whole pack, proven against the chunk's hash. */
export function chunkFromPack(pack: Buffer, loc: ChunkLocation, path: string): Buffer {
  if (loc.offset + loc.size > pack.length) {
    throw issue("chunk_corrupt", path, `chunk ${loc.sha256} lies beyond the end of pack ${loc.pack} (truncated?)`);
  }
  const data = pack.subarray(loc.offset, loc.offset + loc.size);
  if (sha256Hex(data) !== loc.sha256) throw issue("chunk_corrupt", path, `chunk ${loc.sha256} does not match its hash`);
  return data;
}

export interface PackForward {
  from: string;
  /** sha256 → new location, for every chunk of `from` that was still referenced when it was rewritten. */
  to: Map<string, ChunkLocation>;
}

export function serializeForward(from: string, to: Iterable<ChunkLocation>): Buffer {
  const list = [...to].map((l) => [l.sha256, l.size, l.pack, l.offset]);
  return Buffer.from(JSON.stringify({ format: PACK_FORWARD_FORMAT, version: 1, from, chunks: list }));
}

export function parseForward(from: string, bytes: Buffer): PackForward {
  const bad = (why: string) => issue("chunk_missing", "", `forward of pack ${from}: ${why}`);
  let doc: { format?: unknown; version?: unknown; from?: unknown; chunks?: unknown };
  try {
    doc = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw bad("not valid JSON");
  }
  if (doc.format !== PACK_FORWARD_FORMAT || doc.version !== 1 || doc.from !== from || !Array.isArray(doc.chunks)) {
    throw bad("unsupported or mismatched forward");
  }
  const to = new Map<string, ChunkLocation>();
  for (const c of doc.chunks as unknown[]) {
    const [sha256, size, pack, offset] = Array.isArray(c) ? c : [];
    const ok =
      typeof sha256 === "string" &&
      HEX64.test(sha256) &&
      typeof pack === "string" &&
      HEX64.test(pack) &&
      Number.isSafeInteger(size) &&
      (size as number) > 0 &&
      Number.isSafeInteger(offset) &&
      (offset as number) >= 0;
    if (!ok) throw bad("invalid entry");
    to.set(sha256, { sha256, size: size as number, pack, offset: offset as number });
  }
  return { from, to };
}

/**
 * Follows forwards from `loc` until it names a pack that exists. `exists`
 * answers for a pack id; missing packs without a forward mean the chunk is gone.
 */
export async function resolveLocation(
  store: BlobStore,
  loc: ChunkLocation,
  exists: (pack: string) => Promise<boolean>,
  forwards: Map<string, Promise<PackForward | null>>,
  path = "",
): Promise<{ loc: ChunkLocation; via: string[] }> {
  const via: string[] = [];
  let at = loc;
  for (let depth = 0; depth <= MAX_FORWARD_DEPTH; depth++) {
    if (await exists(at.pack)) return { loc: at, via };
    const fwd = await loadForward(store, at.pack, forwards);
    const next = fwd?.to.get(at.sha256);
    if (!next || next.size !== at.size) throw issue("chunk_missing", path, `chunk ${at.sha256}: pack ${at.pack} is missing from the store`);
    via.push(at.pack);
    at = next;
  }
  throw issue("chunk_missing", path, `chunk ${loc.sha256}: more than ${MAX_FORWARD_DEPTH} pack forwards`);
}

function loadForward(store: BlobStore, pack: string, forwards: Map<string, Promise<PackForward | null>>): Promise<PackForward | null> {
  let p = forwards.get(pack);
  if (!p) {
    p = store.get(packForwardKey(pack)).then((b) => (b === null ? null : parseForward(pack, b)));
    forwards.set(pack, p);
  }
  return p;
}
