/**
 * Large blobs move as streams with bounded buffers, never as whole byte arrays.
 *
 * An upload is *staged* first: spooled from the socket into a temporary file
 * while it is hashed and counted, and fsynced once at the end. Its content key
 * (the SHA-256) is only known then, so only then can it be placed: a hard link
 * into a local store (atomic, same filesystem), or into S3 one streamed
 * PutObject with the digests precomputed (a multipart upload of streamed file
 * ranges above one part, s3-blobs-multipart.ts). A failed or aborted upload is a temporary
 * file removed in `finally`: nothing ever appears under a key.
 *
 * Downloads open a readable stream (optionally a byte range) whose buffer is
 * the stream's high-water mark; the HTTP layer pulls from it only as fast as the
 * client reads.
 */
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, readdir, readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { BlobStore } from "./blobs.ts";

/** Default buffer of one transfer's stream stages (each of read, hash and write holds at most about this much). */
export const DEFAULT_TRANSFER_BUFFER_BYTES = 1024 * 1024;

/** Bytes spooled to a temporary file, hashed and counted, not yet under a key. */
export interface StagedBlob {
  readonly path: string;
  readonly size: number;
  readonly sha256: string;
  /** The same digests base64-encoded, as S3 wants them in headers. */
  readonly sha256Base64: string;
  readonly md5Base64: string;
}

/** An inclusive byte range, already checked against the blob's size. */
export interface ByteRange {
  start: number;
  end: number;
}

export interface BlobReader {
  body: Readable;
  /** The blob's full size (not the range's). */
  size: number;
}

/** The stream went past `maxBytes`; whatever was spooled is already removed. */
export class BlobTooLargeError extends Error {
  constructor(readonly maxBytes: number) {
    super(`blob exceeds ${maxBytes} bytes`);
    this.name = "BlobTooLargeError";
  }
}

export interface StageOptions {
  /** Directory of the temporary file (see `BlobStore.stagingDir`). */
  dir: string;
  /** Refused as soon as more bytes than this arrive. */
  maxBytes: number;
  /** Buffer of the write stage; default `DEFAULT_TRANSFER_BUFFER_BYTES`. */
  bufferBytes?: number | undefined;
}

/**
 * Spools `source` into a new file under `opts.dir` with one fsync at the end.
 * On any failure (source error or abort, limit crossed, disk full) the file is
 * removed before the error is rethrown.
 */
export async function stageBlob(source: Readable | AsyncIterable<Uint8Array>, opts: StageOptions): Promise<StagedBlob> {
  await mkdir(opts.dir, { recursive: true });
  const path = join(opts.dir, `upload-${randomBytes(8).toString("hex")}.tmp`);
  const sha256 = createHash("sha256");
  const md5 = createHash("md5");
  let size = 0;
  const meter = new Transform({
    transform(chunk: Buffer, _enc, done) {
      size += chunk.length;
      if (size > opts.maxBytes) return done(new BlobTooLargeError(opts.maxBytes));
      sha256.update(chunk);
      md5.update(chunk);
      done(null, chunk);
    },
  });
  const highWaterMark = opts.bufferBytes ?? DEFAULT_TRANSFER_BUFFER_BYTES;
  try {
    // `flush`: the one fsync, before close, so a placed blob is on disk.
    await pipeline(source, meter, createWriteStream(path, { flush: true, highWaterMark }));
  } catch (err) {
    await rm(path, { force: true });
    throw err;
  }
  const digest = sha256.digest();
  return { path, size, sha256: digest.toString("hex"), sha256Base64: digest.toString("base64"), md5Base64: md5.digest("base64") };
}

/** Removes a staged file (idempotent); call it in `finally` once the blob is placed or abandoned. */
export async function discardStaged(staged: StagedBlob): Promise<void> {
  await rm(staged.path, { force: true });
}

/**
 * Removes staged uploads untouched for `maxAgeMs` (a server killed mid-upload
 * leaves its temporary file; a live upload writes to its file continuously).
 * Returns how many were removed.
 */
export async function sweepStaging(dir: string, now: number, maxAgeMs: number): Promise<number> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw err;
  }
  let removed = 0;
  for (const name of names) {
    if (!/^upload-[0-9a-f]+\.tmp$/.test(name)) continue;
    const path = join(dir, name);
    const st = await stat(path).catch(() => null);
    if (st && now - st.mtimeMs >= maxAgeMs) {
      await rm(path, { force: true });
      removed++;
    }
  }
  return removed;
}

/** Where `store` wants uploads staged, or the OS temp dir for stores without a preference. */
export function stagingDirOf(store: BlobStore, fallback: string): string {
  return store.stagingDir ?? fallback;
}

/**
 * Places a staged file under `key` without consuming it (callers place the same
 * content twice around a row's commit). A store without `putFile` gets the
 * bytes as one array: correct, but not bounded.
 */
export async function putStagedBlob(store: BlobStore, key: string, staged: StagedBlob, signal?: AbortSignal): Promise<void> {
  if (store.putFile) return store.putFile(key, staged, { signal });
  await store.put(key, await readFile(staged.path));
}

/** A stream of the blob (or of `range`), `null` when absent. Stores without `openRead` fall back to one read. */
export async function openBlob(store: BlobStore, key: string, range?: ByteRange): Promise<BlobReader | null> {
  if (store.openRead) return store.openRead(key, range);
  const data = await store.get(key);
  if (!data) return null;
  const part = range ? data.subarray(range.start, range.end + 1) : data;
  return { body: Readable.from([part]), size: data.length };
}

/** A local file as a stream of `range`, with `bufferBytes` as its buffer. */
export function readFileRange(path: string, range: ByteRange | undefined, bufferBytes: number): Readable {
  return createReadStream(path, { start: range?.start, end: range?.end, highWaterMark: bufferBytes });
}

/**
 * Parses a single-range `Range` header (`bytes=a-b`, `bytes=a-`, `bytes=-n`) against `size`.
 * `undefined`: absent or not a single byte range (serve the whole blob, as RFC 9110 allows);
 * `null`: unsatisfiable (416).
 */
export function parseByteRange(header: string | undefined, size: number): ByteRange | null | undefined {
  if (header === undefined) return undefined;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m || (m[1] === "" && m[2] === "")) return undefined;
  if (m[1] === "") {
    const suffix = Number(m[2]);
    if (suffix === 0 || size === 0) return null;
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(m[1]);
  const end = m[2] === "" ? size - 1 : Math.min(Number(m[2]), size - 1);
  if (!Number.isSafeInteger(start) || start >= size || end < start) return null;
  return { start, end };
}
