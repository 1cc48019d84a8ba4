/**
 * Content-defined chunking with a gear rolling hash and normalized cut points
 * (FastCDC style). Boundaries depend on the bytes near them, not on offsets, so
 * inserting or changing a few bytes moves only the neighbouring boundaries and
 * every other chunk keeps its hash: that is what makes checkpoints incremental.
 */

export interface ChunkParams {
  /** No boundary before this many bytes (cut-point skipping: also saves hashing work). */
  min: number;
  /** Target average; must be a power of two. */
  avg: number;
  /** Forced boundary; also the largest chunk a manifest may reference. */
  max: number;
}

export const CHUNKING_ALGORITHM = "gear-cdc-v1";
export const DEFAULT_CHUNKING: ChunkParams = { min: 16 * 1024, avg: 64 * 1024, max: 256 * 1024 };
/** Upper bound accepted from a manifest, so a hostile manifest cannot demand giant buffers. */
export const MAX_CHUNK_LIMIT = 16 * 1024 * 1024;

/**
 * The gear table is part of the on-disk format (`gear-cdc-v1`): changing it
 * changes every boundary and defeats deduplication against older checkpoints,
 * so it is generated from a fixed seed rather than from a runtime RNG.
 */
const GEAR: Int32Array = (() => {
  const table = new Int32Array(256);
  let state = 0x9e3779b9;
  for (let i = 0; i < 256; i++) {
    // mulberry32: small, well-mixed and trivially reproducible.
    state = (state + 0x6d2b79f5) | 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    table[i] = t ^ (t >>> 14);
  }
  return table;
})();

export function validateChunkParams(p: ChunkParams): string | null {
  const ints = [p.min, p.avg, p.max].every((n) => Number.isSafeInteger(n) && n > 0);
  if (!ints) return "chunk sizes must be positive integers";
  if (!(p.min < p.avg && p.avg < p.max)) return "chunk sizes must satisfy min < avg < max";
  if ((p.avg & (p.avg - 1)) !== 0 || p.avg < 256) return "average chunk size must be a power of two >= 256";
  if (p.max > MAX_CHUNK_LIMIT) return `max chunk size must be <= ${MAX_CHUNK_LIMIT}`;
  return null;
}

/**
 * Masks test the high bits of the 32-bit hash: with a shift-by-one gear hash,
 * bit k depends on the last k+1 bytes, so high bits see the widest window.
 * Normalization: a stricter mask (2 extra bits) before the average size and a
 * looser one after it pulls chunk sizes towards the average.
 */
function masks(avg: number): { strict: number; loose: number } {
  const bits = Math.log2(avg);
  const high = (n: number) => (n >= 32 ? -1 : ~((1 << (32 - n)) - 1) | 0);
  return { strict: high(bits + 2), loose: high(bits - 2) };
}

/**
 * Length of the chunk starting at `start`. The caller passes at least `max`
 * bytes unless the input ends earlier, in which case the tail becomes the last chunk.
 */
export function findCut(buf: Uint8Array, start: number, end: number, p: ChunkParams): number {
  const n = Math.min(end - start, p.max);
  if (n <= p.min) return n;
  const { strict, loose } = masks(p.avg);
  const normal = start + Math.min(p.avg, n);
  const stop = start + n;
  let h = 0;
  let i = start + p.min;
  for (; i < normal; i++) {
    h = ((h << 1) + GEAR[buf[i]!]!) | 0;
    if ((h & strict) === 0) return i - start + 1;
  }
  for (; i < stop; i++) {
    h = ((h << 1) + GEAR[buf[i]!]!) | 0;
    if ((h & loose) === 0) return i - start + 1;
  }
  return n;
}

/** Chunks of an in-memory buffer (views, not copies). */
export function* chunkBuffer(data: Uint8Array, p: ChunkParams = DEFAULT_CHUNKING): Generator<Uint8Array> {
  let start = 0;
  while (start < data.length) {
    const len = findCut(data, start, data.length, p);
    yield data.subarray(start, start + len);
    start += len;
  }
}

/** Reads into `buf` at `offset`, at most `length` bytes; 0 means end of input. */
export type ReadInto = (buf: Uint8Array, offset: number, length: number) => Promise<number>;

/** The read buffer `chunkStream` needs for chunking parameters `p`: room for several maximal chunks. */
export function chunkBufferBytes(p: ChunkParams): number {
  return Math.max(p.max * 4, 1 << 20);
}

/**
 * Chunks a stream with a bounded buffer (4 x max), so a multi-gigabyte file
 * never has to fit in memory. Each yielded chunk is a fresh copy the caller
 * may keep, unless `copy` is false: then it is a view of the buffer, valid
 * only until the next chunk is asked for (the checkpoint writer copies it
 * into a pack at once, so a second copy would be wasted work).
 *
 * `buffer` (at least `chunkBufferBytes(p)`) lets a caller reuse one buffer
 * across many files: fresh memory costs a page fault per 4 KiB on first
 * touch, which on a virtualized host was most of a many-file checkpoint's time.
 */
export async function* chunkStream(
  read: ReadInto,
  p: ChunkParams = DEFAULT_CHUNKING,
  sizeHint?: number,
  copy = true,
  buffer?: Buffer,
): AsyncGenerator<Buffer> {
  const full = chunkBufferBytes(p);
  if (buffer && buffer.length < full) throw new Error(`chunk buffer of ${buffer.length} bytes is below the ${full} these parameters need`);
  // Without a reusable buffer, small files get a small one: a 1 MiB allocation per 2 KB file dominates a
  // many-file checkpoint. A hint that turns out too small still yields correct chunks, just not content-defined ones.
  const buf = buffer ?? Buffer.allocUnsafe(sizeHint === undefined ? full : Math.min(full, Math.max(sizeHint + 1, 4096)));
  let start = 0;
  let end = 0;
  let eof = false;
  for (;;) {
    if (!eof && end - start < p.max) {
      if (start > 0) {
        buf.copy(buf, 0, start, end);
        end -= start;
        start = 0;
      }
      while (!eof && end < buf.length) {
        const got = await read(buf, end, buf.length - end);
        if (got === 0) eof = true;
        else end += got;
      }
    }
    if (start === end) return;
    const len = findCut(buf, start, end, p);
    const view = buf.subarray(start, start + len);
    yield copy ? Buffer.from(view) : view;
    start += len;
  }
}
