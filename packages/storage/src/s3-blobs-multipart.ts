/**
 * A staged upload placed in S3 as a multipart upload whose parts are read from
 * the staged file as streams: a part in flight holds one stream buffer, not the
 * part, so a transfer's memory is `concurrency × bufferBytes` whatever the part
 * size (`@aws-sdk/lib-storage`'s `Upload` buffers each part whole, which from a
 * file on disk buys nothing). Every part carries its SHA-256 and MD5, which S3
 * verifies, and the completed object's composite SHA-256 is checked against
 * the one computed here. On any failure, or when the caller's signal fires,
 * parts still in flight are stopped and the upload is aborted, so no object
 * and no stored parts remain.
 */
import { createHash } from "node:crypto";
import {
  AbortMultipartUploadCommand,
  type CompletedPart,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  type S3Client,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { type ByteRange, readFileRange, type StagedBlob } from "./transfers.ts";

/** S3's floor for every part but the last, and its ceiling on parts per upload. */
export const MIN_PART_BYTES = 5 * 1024 * 1024;
const MAX_PARTS = 10_000;

export interface MultipartTarget {
  client: S3Client;
  /**
   * Sends the parts, configured without SDK retries: a part's body is a file
   * stream the SDK cannot rewind, so a failed part is retried here, with a
   * fresh stream, up to `partAttempts` times in all.
   */
  partClient: S3Client;
  partAttempts: number;
  bucket: string;
  key: string;
  /** Part size; the last part takes the rest. Raised when the file would need more than 10,000 parts. */
  partBytes: number;
  /** Parts sent at once. */
  concurrency: number;
  /** Stream buffer of each part read. */
  bufferBytes: number;
  /** The caller's deadline and cancellation. */
  signal: AbortSignal;
  /** Deadline of the abort call after a failure (the caller's signal may be the reason for it). */
  abortTimeoutMs: number;
}

/** Consecutive inclusive byte ranges covering `size` bytes in parts of `partBytes` (more if 10,000 would not do). */
export function partRanges(size: number, partBytes: number): ByteRange[] {
  const part = Math.max(partBytes, Math.ceil(size / MAX_PARTS));
  const out: ByteRange[] = [];
  for (let start = 0; start < size; start += part) out.push({ start, end: Math.min(size, start + part) - 1 });
  return out;
}

async function digestsOf(path: string, range: ByteRange, bufferBytes: number): Promise<{ sha256: Buffer; md5: Buffer }> {
  const sha256 = createHash("sha256");
  const md5 = createHash("md5");
  for await (const chunk of readFileRange(path, range, bufferBytes)) {
    sha256.update(chunk as Buffer);
    md5.update(chunk as Buffer);
  }
  return { sha256: sha256.digest(), md5: md5.digest() };
}

/** Worth sending again: a server error, throttling, or no answer at all (a dropped connection). */
function transient(err: unknown): boolean {
  const status = (err as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
  return status === undefined || status >= 500 || status === 429;
}

/** S3's composite checksum: the digest of the parts' digests, suffixed with the part count. */
export function compositeSha256(partDigests: Buffer[]): string {
  return `${createHash("sha256").update(Buffer.concat(partDigests)).digest("base64")}-${partDigests.length}`;
}

/** Places `staged` under `t.key` by multipart upload; rejects (after aborting the upload) on any failure. */
export async function putMultipart(t: MultipartTarget, staged: StagedBlob): Promise<void> {
  const { client, bucket, key } = t;
  const created = await client.send(
    new CreateMultipartUploadCommand({ Bucket: bucket, Key: key, ContentType: "application/octet-stream", ChecksumAlgorithm: "SHA256" }),
    { abortSignal: t.signal },
  );
  const uploadId = created.UploadId;
  if (!uploadId) throw new Error("CreateMultipartUpload answered without an UploadId");
  // Stops the parts still in flight once one fails.
  const stop = new AbortController();
  const signal = AbortSignal.any([t.signal, stop.signal]);
  try {
    const ranges = partRanges(staged.size, t.partBytes);
    const parts: CompletedPart[] = new Array(ranges.length);
    const digests: Buffer[] = new Array(ranges.length);
    let next = 0;
    const sendPart = async (i: number, sums: { sha256: Buffer; md5: Buffer }) => {
      const range = ranges[i]!;
      for (let attempt = 1; ; attempt++) {
        const body = readFileRange(staged.path, range, t.bufferBytes);
        try {
          return await t.partClient.send(
            new UploadPartCommand({
              Bucket: bucket,
              Key: key,
              UploadId: uploadId,
              PartNumber: i + 1,
              Body: body,
              ContentLength: range.end - range.start + 1,
              ChecksumSHA256: sums.sha256.toString("base64"),
              ContentMD5: sums.md5.toString("base64"),
            }),
            { abortSignal: signal },
          );
        } catch (err) {
          if (attempt >= t.partAttempts || signal.aborted || !transient(err)) throw err;
        } finally {
          body.destroy();
        }
      }
    };
    const worker = async () => {
      while (next < ranges.length && !signal.aborted) {
        const i = next++;
        const sums = await digestsOf(staged.path, ranges[i]!, t.bufferBytes);
        const res = await sendPart(i, sums);
        parts[i] = { PartNumber: i + 1, ETag: res.ETag, ChecksumSHA256: sums.sha256.toString("base64") };
        digests[i] = sums.sha256;
      }
    };
    // The first failure is the cause; the parts it stops then fail as aborted.
    let cause: { err: unknown } | undefined;
    const workers = Array.from({ length: Math.min(t.concurrency, ranges.length) }, () =>
      worker().catch((err: unknown) => {
        cause ??= { err };
        stop.abort();
      }),
    );
    // Every worker settles before the upload is completed or aborted, so no part lands after an abort.
    await Promise.all(workers);
    if (cause) throw cause.err;
    t.signal.throwIfAborted();
    const done = await client.send(
      new CompleteMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId, MultipartUpload: { Parts: parts } }),
      { abortSignal: t.signal },
    );
    const expected = compositeSha256(digests);
    if (done.ChecksumSHA256 !== undefined && done.ChecksumSHA256 !== expected) {
      // Completed, so there is no upload left to abort: the object itself goes.
      await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }), { abortSignal: AbortSignal.timeout(t.abortTimeoutMs) });
      throw Object.assign(new Error(`the stored object's checksum ${done.ChecksumSHA256} is not the parts' ${expected}`), {
        code: "ChecksumMismatch",
      });
    }
  } catch (err) {
    // Parts are invisible until completion but are stored (and billed) until the upload is aborted.
    await client
      .send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId }), {
        abortSignal: AbortSignal.timeout(t.abortTimeoutMs),
      })
      .catch(() => undefined);
    throw err;
  }
}
