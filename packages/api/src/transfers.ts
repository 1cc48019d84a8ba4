/**
 * Large request and response bodies as bounded streams (docs/transfers.md):
 * a multipart upload is parsed as it arrives and its file part spooled to the
 * blob store's staging directory (hashed, counted, refused with a 413 the
 * moment it crosses the limit); a download is the blob store's stream, pulled
 * only as fast as the client reads. A transfer slot bounds how many run at once.
 */

import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import {
  BlobTooLargeError,
  type ByteRange,
  DEFAULT_TRANSFER_BUFFER_BYTES,
  discardStaged,
  openBlob,
  parseByteRange,
  type StagedBlob,
  stageBlob,
  stagingDirOf,
} from "@openma/storage";
import busboy from "busboy";
import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { AppEnv } from "./context.ts";
import { ApiError, badRequest } from "./errors.ts";
import { FILE_UPLOAD_LIMIT_BYTES } from "./schemas/file.ts";

const MB = 1024 * 1024;

/** Server settings of large transfers (`openma serve`: OPENMA_TRANSFER_BUFFER_BYTES, OPENMA_MAX_CONCURRENT_TRANSFERS…). */
export interface TransferSettings {
  /** Buffer of each stream stage of one transfer. */
  bufferBytes: number;
  /** Largest `POST /v1/files` file part. */
  fileUploadLimitBytes: number;
  /** Slots for uploads and downloads of file content running at once. */
  slots: TransferSlots;
}

/** Room for the multipart framing and the small text fields around a file part. */
const MULTIPART_OVERHEAD_BYTES = 64 * 1024;

/**
 * A counting semaphore without a queue: a transfer past the limit is refused at
 * once with a retryable 529 (`overloaded_error`, which the SDK retries with
 * backoff) instead of holding its socket and buffers while it waits.
 */
export class TransferSlots {
  private inUse = 0;
  constructor(readonly max: number) {
    if (!Number.isInteger(max) || max < 1) throw new Error("the maximum of concurrent transfers must be a positive integer");
  }

  get active(): number {
    return this.inUse;
  }

  /** A release function (idempotent), or a 529 when every slot is taken. */
  acquire(): () => void {
    if (this.inUse >= this.max) {
      throw new ApiError(
        529 as ContentfulStatusCode,
        "overloaded_error",
        `the server is already running ${this.max} large transfers; retry shortly`,
      );
    }
    this.inUse++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inUse--;
    };
  }
}

export function defaultTransferSettings(): TransferSettings {
  return { bufferBytes: DEFAULT_TRANSFER_BUFFER_BYTES, fileUploadLimitBytes: FILE_UPLOAD_LIMIT_BYTES, slots: new TransferSlots(16) };
}

/** The deps' settings; built-in defaults (kept on the deps, so the slots are shared) when none were given. */
export function transferSettings(c: Context<AppEnv>): TransferSettings {
  const deps = c.get("deps");
  deps.transfers ??= defaultTransferSettings();
  return deps.transfers;
}

export interface ReceivedUpload {
  staged: StagedBlob;
  /** As the client sent them (callers validate). */
  filename: string;
  mimeType: string;
  fields: ReadonlyMap<string, string>;
}

export interface ReceiveOptions {
  /** The one file part read (others are drained and ignored). */
  fileField: string;
  maxBytes: number;
  bufferBytes: number;
  /** Named in the 413 message. */
  what: string;
}

function tooLarge(what: string, maxBytes: number): ApiError {
  const limit = maxBytes >= MB ? `${Math.round(maxBytes / MB)} MB` : `${maxBytes} bytes`;
  return new ApiError(413, "request_too_large", `${what} exceeds the ${limit} limit`);
}

/**
 * Reads a multipart/form-data request, spooling its `fileField` part into the
 * blob store's staging directory. The caller owns the returned staged file and
 * must `discardStaged` it; on any failure (bad form, 413, client gone) nothing
 * is left behind when this rejects.
 */
export async function receiveUpload(c: Context<AppEnv>, opts: ReceiveOptions): Promise<ReceivedUpload> {
  const type = c.req.header("content-type") ?? "";
  if (!/^multipart\/form-data\s*;/i.test(type)) throw badRequest("request body must be multipart/form-data");
  const declared = Number(c.req.header("content-length") ?? Number.NaN);
  // Refused before a byte is read when the client says up front that it is too large.
  if (declared > opts.maxBytes + MULTIPART_OVERHEAD_BYTES) throw tooLarge(opts.what, opts.maxBytes);
  const body = c.req.raw.body;
  if (!body) throw badRequest("request body is not valid multipart/form-data");

  let parser: busboy.Busboy;
  try {
    parser = busboy({
      headers: { "content-type": type },
      // Browsers and the SDK send raw UTF-8 filenames; busboy assumes latin1 unless told.
      defParamCharset: "utf8",
      highWaterMark: opts.bufferBytes,
      fileHwm: opts.bufferBytes,
      limits: { fileSize: opts.maxBytes, fields: 32, fieldSize: 64 * 1024, parts: 64 },
    });
  } catch {
    throw badRequest("request body is not valid multipart/form-data");
  }
  const source = Readable.fromWeb(body as import("node:stream/web").ReadableStream<Uint8Array>);
  const stagingDir = stagingDirOf(c.get("deps").storage.blobs, join(tmpdir(), "openma-uploads"));

  return await new Promise<ReceivedUpload>((resolve, reject) => {
    const fields = new Map<string, string>();
    let file: { stream: Readable; filename: string; mimeType: string; staging: Promise<StagedBlob> } | undefined;
    let failed = false;

    // Stops reading, then rejects only once whatever was spooled is gone.
    const fail = (err: Error) => {
      if (failed) return;
      failed = true;
      source.unpipe(parser);
      source.destroy();
      file?.stream.destroy();
      const cleanup = file ? file.staging.then(discardStaged, () => undefined) : Promise.resolve();
      void cleanup.finally(() => reject(err));
    };

    parser.on("file", (name, stream, info) => {
      if (failed || name !== opts.fileField || file) {
        // Not ours (or a second `file` part): drained, never stored.
        stream.resume();
        if (name === opts.fileField && file) fail(badRequest(`${name}: only one file part is allowed`));
        return;
      }
      stream.once("limit", () => fail(tooLarge(opts.what, opts.maxBytes)));
      const staging = stageBlob(stream, { dir: stagingDir, maxBytes: opts.maxBytes, bufferBytes: opts.bufferBytes });
      // Settled by `close` or `fail`; this only keeps an early rejection from going unhandled.
      staging.catch(() => undefined);
      file = { stream, filename: info.filename ?? "", mimeType: info.mimeType, staging };
    });
    parser.on("field", (name, value, info) => {
      if (info.valueTruncated) return fail(badRequest(`${name}: text field too long`));
      fields.set(name, value);
    });
    parser.on("partsLimit", () => fail(badRequest("too many multipart parts")));
    parser.on("fieldsLimit", () => fail(badRequest("too many multipart fields")));
    parser.on("error", () => fail(badRequest("request body is not valid multipart/form-data")));
    // The client went away (or the body stream broke): whatever arrived is dropped.
    source.on("error", () => fail(badRequest("the upload was interrupted before it completed")));
    parser.on("close", () => {
      if (failed) return;
      if (!file && fields.has(opts.fileField)) return fail(badRequest(`${opts.fileField}: expected a file part, got a text field`));
      if (!file) return fail(badRequest(`${opts.fileField}: a multipart part named ${opts.fileField} is required`));
      const { filename, mimeType } = file;
      file.staging.then(
        (staged) => {
          if (failed) return void discardStaged(staged);
          resolve({ staged, filename, mimeType, fields });
        },
        (err: unknown) =>
          fail(err instanceof BlobTooLargeError ? tooLarge(opts.what, opts.maxBytes) : asError(err, "storing the upload failed")),
      );
    });
    source.pipe(parser);
  });
}

function asError(err: unknown, fallback: string): Error {
  return err instanceof Error ? err : new Error(fallback);
}

/** The response headers and status of serving `size` bytes for a `Range` request header. */
function rangeOf(c: Context<AppEnv>, size: number): ByteRange | undefined {
  const range = parseByteRange(c.req.header("range"), size);
  if (range === null) {
    throw new ApiError(
      416 as ContentfulStatusCode,
      "invalid_request_error",
      `range not satisfiable for a ${size}-byte body`,
      undefined,
      undefined,
      {
        "content-range": `bytes */${size}`,
      },
    );
  }
  return range;
}

export interface SendBlobOptions {
  contentType: string;
  headers?: Record<string, string>;
  /** Named in the 404 when the blob is gone. */
  onMissing: () => Error;
}

/**
 * Streams a blob (honouring a single `Range`) with backpressure: the store's
 * stream is read only as fast as the socket drains, so a slow reader holds at
 * most a few transfer buffers. The transfer slot is held until the body ends.
 */
export async function sendBlob(c: Context<AppEnv>, key: string, opts: SendBlobOptions, settings: TransferSettings): Promise<Response> {
  const release = settings.slots.acquire();
  try {
    const store = c.get("deps").storage.blobs;
    // The size first (a cheap open), so a bad range is refused before any body is read.
    const whole = await openBlob(store, key);
    if (!whole) throw opts.onMissing();
    const range = rangeOf(c, whole.size);
    let reader = whole;
    if (range) {
      whole.body.destroy();
      const part = await openBlob(store, key, range);
      if (!part) throw opts.onMissing();
      reader = part;
    }
    const length = range ? range.end - range.start + 1 : reader.size;
    const body = reader.body;
    body.once("close", release);
    const headers: Record<string, string> = {
      ...opts.headers,
      "content-type": opts.contentType,
      "content-length": String(length),
      "accept-ranges": "bytes",
    };
    if (range) headers["content-range"] = `bytes ${range.start}-${range.end}/${reader.size}`;
    const web = Readable.toWeb(body) as unknown as ReadableStream<Uint8Array>;
    return c.body(web, range ? 206 : 200, headers);
  } catch (err) {
    release();
    throw err;
  }
}
