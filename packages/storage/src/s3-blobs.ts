/**
 * The scale-out blob store: any S3-compatible object storage through the
 * official `@aws-sdk/client-s3`. Uploads carry SHA-256 and MD5 digests so the
 * server rejects bytes damaged in transit; downloads are checked against the
 * stored SHA-256 and length and re-read once when damaged. Errors become
 * `BlobStoreError`s with the S3 code and status, never raw XML, and never
 * include credentials.
 */
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import {
  DeleteObjectCommand,
  GetObjectCommand,
  type GetObjectCommandOutput,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from "@aws-sdk/client-s3";
import { type BlobListing, type BlobStore, KEY_PATTERN } from "./blobs.ts";
import { MIN_PART_BYTES, putMultipart } from "./s3-blobs-multipart.ts";
import { type BlobReader, type ByteRange, DEFAULT_TRANSFER_BUFFER_BYTES, readFileRange, type StagedBlob } from "./transfers.ts";

export interface S3BlobStoreOptions {
  bucket: string;
  /** Key prefix inside the bucket (`openma/` → `openma/files/…`); default none. */
  prefix?: string | undefined;
  /** Default `us-east-1`. */
  region?: string | undefined;
  /** S3-compatible endpoint (`http(s)://host[:port]`); default AWS. */
  endpoint?: string | undefined;
  /** Path-style addressing (`endpoint/bucket/key`), which most S3-compatible servers need. */
  forcePathStyle?: boolean | undefined;
  /** Static credentials; without them the SDK's default chain (env, profile, instance role) applies. */
  credentials?: { accessKeyId: string; secretAccessKey: string } | undefined;
  /** Deadline of one store call, retries included; default 60 s. */
  timeoutMs?: number | undefined;
  /** SDK attempts per request for transient failures (5xx, throttling, network); default 3. */
  maxAttempts?: number | undefined;
  /** ListObjectsV2 page size, 1–1000; default 1000. */
  listPageSize?: number | undefined;
  /** Downloads whose body arrives damaged or cut short are read again up to this many times in all; default 2. */
  readAttempts?: number | undefined;
  /** Local directory uploads are spooled into before they are hashed and sent; default `<tmpdir>/openma-uploads`. */
  stagingDir?: string | undefined;
  /** Stream buffer of one transfer; default 1 MiB. */
  bufferBytes?: number | undefined;
  /**
   * Staged uploads larger than this go up as multipart uploads in parts of this
   * size (at least 5 MiB); default 16 MiB. A part in flight holds one stream
   * buffer, not the part (s3-blobs-multipart.ts).
   */
  partBytes?: number | undefined;
  /** Parts of one upload sent at once; default 2. */
  partConcurrency?: number | undefined;
}

export interface BlobCallOptions {
  signal?: AbortSignal | undefined;
}

/** A failed store call: `code` is the S3 error code (`NoSuchBucket`, `SignatureDoesNotMatch`…) or one of ours. */
export class BlobStoreError extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly status: number | undefined,
    readonly requestId?: string | undefined,
  ) {
    super(message);
    this.name = "BlobStoreError";
  }
}

const b64 = (algorithm: "sha256" | "md5", data: Uint8Array) => createHash(algorithm).update(data).digest("base64");

function normalizePrefix(prefix: string | undefined): string {
  const clean = (prefix ?? "").replace(/^\/+|\/+$/g, "");
  if (clean === "") return "";
  if (!/^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/.test(clean) || clean.split("/").some((s) => s === "." || s === "..")) {
    throw new Error(`invalid S3 key prefix: ${JSON.stringify(prefix)}`);
  }
  return `${clean}/`;
}

/** The same key rules as `FsBlobStore`, so a key valid on one store is valid on the other. */
function assertKey(key: string): void {
  if (!KEY_PATTERN.test(key) || key.split("/").some((s) => s === "." || s === "..")) throw new Error(`invalid blob key: ${key}`);
}

/** The first line of the SDK's message, unless it is markup or noise. */
function cleanMessage(message: string | undefined, status: number | undefined): string {
  const first = (message ?? "").split("\n")[0]!.trim();
  if (first === "" || first.includes("<") || first === "UnknownError" || /^\d+$/.test(first)) {
    return status ? `HTTP ${status}` : "unknown error";
  }
  return first.length > 300 ? `${first.slice(0, 300)}…` : first;
}

function statusOf(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
}

const isNotFound = (err: unknown) => statusOf(err) === 404 || (err as Error | null)?.name === "NoSuchKey";

/** A download that arrived but cannot be trusted; worth reading again. */
class DamagedBody extends Error {
  constructor(
    message: string,
    readonly code: "ChecksumMismatch" | "IncompleteBody",
  ) {
    super(message);
  }
}

export class S3BlobStore implements BlobStore {
  // A private field: the client holds the credentials and must not show up in logs or inspection.
  readonly #client: S3Client;
  /** The same endpoint and credentials without SDK retries, for streamed multipart parts (retried with a fresh stream). */
  readonly #partClient: S3Client;
  private readonly maxAttempts: number;
  readonly bucket: string;
  readonly prefix: string;
  private readonly timeoutMs: number;
  private readonly pageSize: number;
  private readonly readAttempts: number;
  readonly stagingDir: string;
  private readonly bufferBytes: number;
  private readonly partBytes: number;
  private readonly partConcurrency: number;

  constructor(opts: S3BlobStoreOptions) {
    if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(opts.bucket)) throw new Error(`invalid S3 bucket name: ${JSON.stringify(opts.bucket)}`);
    this.bucket = opts.bucket;
    this.prefix = normalizePrefix(opts.prefix);
    this.timeoutMs = boundedInt(opts.timeoutMs, 60_000, 1, 3_600_000, "timeoutMs");
    this.pageSize = boundedInt(opts.listPageSize, 1000, 1, 1000, "listPageSize");
    this.readAttempts = boundedInt(opts.readAttempts, 2, 1, 10, "readAttempts");
    this.stagingDir = opts.stagingDir ?? join(tmpdir(), "openma-uploads");
    this.bufferBytes = opts.bufferBytes ?? DEFAULT_TRANSFER_BUFFER_BYTES;
    this.partBytes = boundedInt(opts.partBytes, 16 * 1024 * 1024, MIN_PART_BYTES, 5 * 1024 ** 3, "partBytes");
    this.partConcurrency = boundedInt(opts.partConcurrency, 2, 1, 16, "partConcurrency");
    this.maxAttempts = boundedInt(opts.maxAttempts, 3, 1, 10, "maxAttempts");
    const clientConfig = {
      region: opts.region ?? "us-east-1",
      endpoint: opts.endpoint,
      forcePathStyle: opts.forcePathStyle ?? false,
      credentials: opts.credentials,
    };
    this.#client = new S3Client({ ...clientConfig, maxAttempts: this.maxAttempts });
    // Silent: a failed part is retried by putMultipart or reported in putFile's error; the SDK would otherwise warn on
    // the console for every failed streamed request that it cannot retry itself.
    const quiet = () => undefined;
    const logger = { trace: quiet, debug: quiet, info: quiet, warn: quiet, error: quiet };
    this.#partClient = new S3Client({ ...clientConfig, maxAttempts: 1, logger });
  }

  private keyOf(key: string): string {
    assertKey(key);
    return this.prefix + key;
  }

  private signalFor(opts: BlobCallOptions | undefined): AbortSignal {
    const deadline = AbortSignal.timeout(this.timeoutMs);
    return opts?.signal ? AbortSignal.any([opts.signal, deadline]) : deadline;
  }

  private fail(op: string, key: string, err: unknown, signal: AbortSignal): BlobStoreError {
    const what = `s3 ${op} ${JSON.stringify(key)}`;
    if (err instanceof BlobStoreError) return err;
    if (signal.aborted) {
      const timedOut = (signal.reason as Error | undefined)?.name === "TimeoutError";
      return timedOut
        ? new BlobStoreError(`${what} timed out after ${this.timeoutMs} ms`, "Timeout", undefined)
        : new BlobStoreError(`${what} was aborted`, "Aborted", undefined);
    }
    if (err instanceof DamagedBody) return new BlobStoreError(`${what}: ${err.message}`, err.code, undefined);
    const status = statusOf(err);
    if (err instanceof S3ServiceException || status !== undefined) {
      const e = err as S3ServiceException;
      const code = /^[A-Za-z0-9.]+$/.test(e.name) && !/^\d+$/.test(e.name) ? e.name : `Http${status ?? ""}`;
      return new BlobStoreError(
        `${what} failed: ${code} (HTTP ${status ?? "?"}): ${cleanMessage(e.message, status)}`,
        code,
        status,
        e.$metadata?.requestId,
      );
    }
    const e = err as (Error & { code?: string }) | null;
    return new BlobStoreError(`${what} failed: ${cleanMessage(e?.message, undefined)}`, e?.code ?? "NetworkError", undefined);
  }

  async put(key: string, data: Uint8Array, opts?: BlobCallOptions): Promise<void> {
    const fullKey = this.keyOf(key);
    const signal = this.signalFor(opts);
    try {
      await this.#client.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: fullKey,
          Body: data,
          ContentLength: data.byteLength,
          ContentType: "application/octet-stream",
          // Both digests: S3 verifies the SHA-256; S3-compatible servers that ignore flexible checksums still verify MD5.
          ChecksumSHA256: b64("sha256", data),
          ContentMD5: b64("md5", data),
        }),
        { abortSignal: signal },
      );
    } catch (err) {
      throw this.fail("put", key, err, signal);
    }
  }

  /**
   * A staged file up to `partBytes`: one streamed PutObject (its length and
   * digests are known from spooling, so the SDK sends the file as it reads it
   * and S3 verifies the bytes). Larger: a multipart upload of file-range
   * streams, aborted on failure or when `opts.signal` fires.
   */
  async putFile(key: string, staged: StagedBlob, opts?: BlobCallOptions): Promise<void> {
    const fullKey = this.keyOf(key);
    const signal = this.signalFor(opts);
    if (staged.size > this.partBytes) {
      try {
        const clients = { client: this.#client, partClient: this.#partClient, partAttempts: this.maxAttempts };
        const target = { ...clients, bucket: this.bucket, key: fullKey, signal, abortTimeoutMs: this.timeoutMs };
        await putMultipart(
          { ...target, partBytes: this.partBytes, concurrency: this.partConcurrency, bufferBytes: this.bufferBytes },
          staged,
        );
        return;
      } catch (err) {
        throw this.fail("put", key, err, signal);
      }
    }
    const body = readFileRange(staged.path, undefined, this.bufferBytes);
    try {
      await this.#client.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: fullKey,
          Body: body,
          ContentLength: staged.size,
          ContentType: "application/octet-stream",
          ChecksumSHA256: staged.sha256Base64,
          ContentMD5: staged.md5Base64,
        }),
        { abortSignal: signal },
      );
    } catch (err) {
      throw this.fail("put", key, err, signal);
    } finally {
      body.destroy();
    }
  }

  /**
   * The object (or a byte range) as the SDK's response stream, which the
   * socket fills only as fast as it is read. Whole-object reads are checked by
   * the SDK against the stored checksum as they stream (a mismatch errors the
   * stream, so the client sees a cut-off body, never silently wrong bytes).
   */
  async openRead(key: string, range?: ByteRange, opts?: BlobCallOptions): Promise<BlobReader | null> {
    const fullKey = this.keyOf(key);
    // No deadline here: the SDK aborts the body when its signal fires, and a slow reader may rightly take longer.
    const signal = opts?.signal ?? new AbortController().signal;
    try {
      const res = await this.#client.send(
        new GetObjectCommand({
          Bucket: this.bucket,
          Key: fullKey,
          Range: range ? `bytes=${range.start}-${range.end}` : undefined,
          ChecksumMode: range ? undefined : "ENABLED",
        }),
        { abortSignal: signal },
      );
      const total = range ? Number(/\/(\d+)$/.exec(res.ContentRange ?? "")?.[1] ?? Number.NaN) : (res.ContentLength ?? Number.NaN);
      if (!Number.isFinite(total))
        throw new BlobStoreError(`s3 get ${JSON.stringify(key)}: response has no length`, "InvalidResponse", undefined);
      return { body: res.Body as Readable, size: total };
    } catch (err) {
      if (isNotFound(err) && (err as Error).name !== "NoSuchBucket") return null;
      throw this.fail("get", key, err, signal);
    }
  }

  async get(key: string, opts?: BlobCallOptions): Promise<Buffer | null> {
    const fullKey = this.keyOf(key);
    const signal = this.signalFor(opts);
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.getOnce(fullKey, signal);
      } catch (err) {
        if (err instanceof DamagedBody && attempt < this.readAttempts && !signal.aborted) continue;
        throw this.fail("get", key, err, signal);
      }
    }
  }

  private async getOnce(fullKey: string, signal: AbortSignal): Promise<Buffer | null> {
    let res: GetObjectCommandOutput;
    try {
      res = await this.#client.send(new GetObjectCommand({ Bucket: this.bucket, Key: fullKey, ChecksumMode: "ENABLED" }), {
        abortSignal: signal,
      });
    } catch (err) {
      if (isNotFound(err) && (err as Error).name !== "NoSuchBucket") return null;
      throw err;
    }
    let body: Buffer;
    try {
      body = Buffer.from((await res.Body?.transformToByteArray()) ?? new Uint8Array());
    } catch (err) {
      if (signal.aborted) throw err;
      // The SDK reports a body failing its checksum, or a connection lost mid-body, here.
      const mismatch = /checksum mismatch/i.test((err as Error).message);
      throw new DamagedBody(
        mismatch ? "downloaded bytes do not match the stored checksum" : "download ended early",
        mismatch ? "ChecksumMismatch" : "IncompleteBody",
      );
    }
    if (res.ContentLength !== undefined && body.length !== res.ContentLength) {
      throw new DamagedBody(`received ${body.length} of ${res.ContentLength} bytes`, "IncompleteBody");
    }
    // Independent of the SDK's own validation; multipart uploads carry a composite (`…-N`) value, not a digest of the bytes.
    const stored = res.ChecksumSHA256;
    if (stored && !/-\d+$/.test(stored) && stored !== b64("sha256", body)) {
      throw new DamagedBody("downloaded bytes do not match the stored checksum", "ChecksumMismatch");
    }
    return body;
  }

  async delete(key: string, opts?: BlobCallOptions): Promise<void> {
    const fullKey = this.keyOf(key);
    const signal = this.signalFor(opts);
    try {
      await this.#client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: fullKey }), { abortSignal: signal });
    } catch (err) {
      // S3 answers 204 for a missing key; some compatible servers say NoSuchKey. Either way it is gone.
      if ((err as Error).name === "NoSuchKey") return;
      throw this.fail("delete", key, err, signal);
    }
  }

  async exists(key: string, opts?: BlobCallOptions): Promise<boolean> {
    const fullKey = this.keyOf(key);
    const signal = this.signalFor(opts);
    try {
      await this.#client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: fullKey }), { abortSignal: signal });
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw this.fail("exists", key, err, signal);
    }
  }

  async list(prefix: string, opts?: BlobCallOptions): Promise<BlobListing[]> {
    // Like FsBlobStore: `a/b` and `a/b/` both mean "everything under the a/b directory".
    const clean = prefix.replace(/\/+$/, "");
    const s3Prefix = `${this.keyOf(clean)}/`;
    const signal = this.signalFor(opts);
    const out: BlobListing[] = [];
    let token: string | undefined;
    try {
      do {
        const page = await this.#client.send(
          new ListObjectsV2Command({ Bucket: this.bucket, Prefix: s3Prefix, MaxKeys: this.pageSize, ContinuationToken: token }),
          { abortSignal: signal },
        );
        for (const o of page.Contents ?? []) {
          if (!o.Key?.startsWith(s3Prefix)) continue;
          out.push({ key: o.Key.slice(this.prefix.length), size: o.Size ?? 0, modifiedAt: o.LastModified?.getTime() ?? 0 });
        }
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
        if (page.IsTruncated && !token)
          throw new BlobStoreError(
            `s3 list ${JSON.stringify(prefix)}: truncated page without a continuation token`,
            "InvalidResponse",
            undefined,
          );
      } while (token);
    } catch (err) {
      throw this.fail("list", prefix, err, signal);
    }
    return out;
  }

  /** Fails fast with a clear message when the bucket is missing or the credentials are refused. */
  async verify(opts?: BlobCallOptions): Promise<void> {
    const signal = this.signalFor(opts);
    try {
      await this.#client.send(new HeadBucketCommand({ Bucket: this.bucket }), { abortSignal: signal });
    } catch (err) {
      const status = statusOf(err);
      if (status === 404) throw new BlobStoreError(`s3 bucket ${JSON.stringify(this.bucket)} does not exist`, "NoSuchBucket", 404);
      if (status === 403) {
        throw new BlobStoreError(`s3 bucket ${JSON.stringify(this.bucket)}: access denied (check the credentials)`, "AccessDenied", 403);
      }
      throw this.fail("verify", this.bucket, err, signal);
    }
  }

  /** Releases the client's sockets. */
  close(): void {
    this.#client.destroy();
    this.#partClient.destroy();
  }
}

function boundedInt(value: number | undefined, fallback: number, min: number, max: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min || value > max) throw new Error(`${name} must be an integer from ${min} to ${max}`);
  return value;
}

/** The blob settings of `openma serve`, read from the environment. */
export type BlobEnv = Partial<
  Record<
    | "OPENMA_BLOB_URL"
    | "OPENMA_S3_ENDPOINT"
    | "OPENMA_S3_REGION"
    | "OPENMA_S3_ACCESS_KEY_ID"
    | "OPENMA_S3_SECRET_ACCESS_KEY"
    | "OPENMA_S3_FORCE_PATH_STYLE",
    string
  >
>;

/**
 * `OPENMA_BLOB_URL=s3://bucket[/prefix]` plus the `OPENMA_S3_*` settings →
 * store options; `undefined` when no blob URL is set (local files). Errors name
 * the variable, never a credential's value.
 */
export function s3OptionsFromEnv(env: BlobEnv): S3BlobStoreOptions | undefined {
  const get = (name: keyof BlobEnv) => (env[name] === "" ? undefined : env[name]);
  const url = get("OPENMA_BLOB_URL");
  if (url === undefined) {
    const stray = (Object.keys(env) as (keyof BlobEnv)[]).filter((k) => k.startsWith("OPENMA_S3_") && get(k) !== undefined);
    if (stray.length > 0) throw new Error(`${stray.join(", ")} set but OPENMA_BLOB_URL is not (expected s3://bucket[/prefix])`);
    return undefined;
  }
  const m = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/(.*))?$/.exec(url);
  if (!m) throw new Error("OPENMA_BLOB_URL must be s3://bucket[/prefix] with a valid S3 bucket name");
  let prefix: string;
  try {
    prefix = normalizePrefix(m[2]);
  } catch {
    throw new Error("OPENMA_BLOB_URL: the prefix may contain only letters, digits, '.', '_', '-' and '/'");
  }
  const endpoint = get("OPENMA_S3_ENDPOINT");
  if (endpoint !== undefined && !/^https?:\/\/[^/\s]+\/?$/.test(endpoint)) {
    throw new Error("OPENMA_S3_ENDPOINT must be an http(s)://host[:port] URL");
  }
  const accessKeyId = get("OPENMA_S3_ACCESS_KEY_ID");
  const secretAccessKey = get("OPENMA_S3_SECRET_ACCESS_KEY");
  if ((accessKeyId === undefined) !== (secretAccessKey === undefined)) {
    throw new Error("OPENMA_S3_ACCESS_KEY_ID and OPENMA_S3_SECRET_ACCESS_KEY must be set together");
  }
  const pathStyle = get("OPENMA_S3_FORCE_PATH_STYLE");
  if (pathStyle !== undefined && !/^(true|false|1|0)$/.test(pathStyle)) throw new Error("OPENMA_S3_FORCE_PATH_STYLE must be true or false");
  const region = get("OPENMA_S3_REGION");
  if (region !== undefined && !/^[a-z0-9-]{1,64}$/.test(region)) throw new Error("OPENMA_S3_REGION must be a region name like us-east-1");
  return {
    bucket: m[1]!,
    prefix,
    region: region ?? "us-east-1",
    endpoint,
    // A custom endpoint is almost always an S3-compatible server that wants path-style addressing.
    forcePathStyle: pathStyle === undefined ? endpoint !== undefined : pathStyle === "true" || pathStyle === "1",
    credentials: accessKeyId && secretAccessKey ? { accessKeyId, secretAccessKey } : undefined,
  };
}

export function blobStoreFromEnv(
  env: BlobEnv,
  transfers: Pick<S3BlobStoreOptions, "stagingDir" | "bufferBytes"> = {},
): S3BlobStore | undefined {
  const opts = s3OptionsFromEnv(env);
  return opts && new S3BlobStore({ ...opts, ...transfers });
}
