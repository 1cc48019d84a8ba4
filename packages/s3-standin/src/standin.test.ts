/**
 * The stand-in driven by the official `@aws-sdk/client-s3`, configured only
 * with endpoint, path style and credentials: every supported operation,
 * integrity checks on both upload encodings, listing, auth, persistence, and
 * multipart uploads (S3's composite ETag and checksum, its completion checks,
 * aborts, SigV4 on every call).
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import {
  AbortMultipartUploadCommand,
  type ChecksumAlgorithm,
  type CompletedPart,
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  paginateListObjectsV2,
  type S3Client,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CHECKSUM_ALGORITHMS, checksumValue } from "./checksums.ts";
import { MIN_PART_BYTES } from "./multipart.ts";
import { type S3StandIn, startS3StandIn } from "./server.ts";
import { CREDENTIALS, clientFor, s3Failure } from "./testkit.ts";

const BUCKET = "standin-test";
let standIn: S3StandIn;
let client: S3Client;

beforeEach(async () => {
  standIn = await startS3StandIn({ ...CREDENTIALS, buckets: [BUCKET] });
  client = clientFor(standIn);
});

afterEach(async () => {
  client.destroy();
  await standIn.close();
});

const put = (Key: string, Body: string | Uint8Array, extra: Partial<ConstructorParameters<typeof PutObjectCommand>[0]> = {}) =>
  client.send(new PutObjectCommand({ Bucket: BUCKET, Key, Body, ...extra }));
const getText = async (Key: string) => (await client.send(new GetObjectCommand({ Bucket: BUCKET, Key }))).Body!.transformToString();
const streamOf = (data: Buffer, chunk = 65_536) =>
  Readable.from(Array.from({ length: Math.ceil(data.length / chunk) }, (_, i) => data.subarray(i * chunk, (i + 1) * chunk)));

describe("buckets", () => {
  it("creates, heads, lists and deletes buckets", async () => {
    await client.send(new CreateBucketCommand({ Bucket: "second-bucket" }));
    await client.send(new HeadBucketCommand({ Bucket: "second-bucket" }));
    const listed = await client.send(new ListBucketsCommand({}));
    expect(listed.Buckets?.map((b) => b.Name)).toEqual(["second-bucket", BUCKET]);
    expect(listed.Buckets?.[0]?.CreationDate).toBeInstanceOf(Date);
    await client.send(new DeleteBucketCommand({ Bucket: "second-bucket" }));
    expect((await s3Failure(client.send(new HeadBucketCommand({ Bucket: "second-bucket" })))).status).toBe(404);
  });

  it("answers S3's errors for duplicate, invalid, missing and non-empty buckets", async () => {
    expect(await s3Failure(client.send(new CreateBucketCommand({ Bucket: BUCKET })))).toMatchObject({
      name: "BucketAlreadyOwnedByYou",
      status: 409,
    });
    expect(await s3Failure(client.send(new CreateBucketCommand({ Bucket: "Bad_Bucket" })))).toMatchObject({
      name: "InvalidBucketName",
      status: 400,
    });
    const headMissing = await s3Failure(client.send(new HeadBucketCommand({ Bucket: "no-such-bucket" })));
    expect(headMissing).toMatchObject({ name: "NotFound", status: 404 });
    expect(await s3Failure(client.send(new DeleteBucketCommand({ Bucket: "no-such-bucket" })))).toMatchObject({
      name: "NoSuchBucket",
      status: 404,
    });
    await put("k", "x");
    expect(await s3Failure(client.send(new DeleteBucketCommand({ Bucket: BUCKET })))).toMatchObject({
      name: "BucketNotEmpty",
      status: 409,
    });
    const elsewhere = new CreateBucketCommand({ Bucket: "eu-bucket", CreateBucketConfiguration: { LocationConstraint: "eu-west-1" } });
    expect(await s3Failure(client.send(elsewhere))).toMatchObject({ name: "IllegalLocationConstraintException", status: 400 });
  });
});

describe("objects", () => {
  it("puts, gets and heads an object with its metadata", async () => {
    const res = await put("dir/hello world.txt", "hello world", { ContentType: "text/plain", Metadata: { owner: "tests" } });
    expect(res.ETag).toBe('"5eb63bbbe01eeed093cb22bb8f5acdc3"');
    const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "dir/hello world.txt" }));
    expect(await got.Body!.transformToString()).toBe("hello world");
    expect(got).toMatchObject({
      ContentType: "text/plain",
      ContentLength: 11,
      ETag: res.ETag,
      Metadata: { owner: "tests" },
      AcceptRanges: "bytes",
    });
    expect(Math.abs(got.LastModified!.getTime() - Date.now())).toBeLessThan(5000);
    const head = await client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "dir/hello world.txt" }));
    expect(head).toMatchObject({ ContentLength: 11, ETag: res.ETag, ContentType: "text/plain", Metadata: { owner: "tests" } });
  });

  it("round-trips keys with characters that need encoding", async () => {
    const keys = ["a b/c+d", "ünïcödé/ключ", "emoji-😀", "sym!$&'()*,;=@:~%", "x/./y", "trailing/"];
    for (const k of keys) await put(k, `v:${k}`);
    for (const k of keys) expect(await getText(k)).toBe(`v:${k}`);
    const listed = await client.send(new ListObjectsV2Command({ Bucket: BUCKET }));
    expect(listed.Contents?.map((c) => c.Key).sort()).toEqual([...keys].sort());
  });

  it("accepts an aws-chunked streaming upload with a CRC32 trailer, as the SDK sends by default", async () => {
    const data = Buffer.alloc(300_000, "chunked payload ");
    await put("stream", streamOf(data) as unknown as Uint8Array, { ContentLength: data.length });
    const [req] = standIn.requests.filter((r) => r.op === "PutObject");
    expect(req?.headers).toMatchObject({
      "content-encoding": "aws-chunked",
      "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
      "x-amz-trailer": "x-amz-checksum-crc32",
      "x-amz-decoded-content-length": String(data.length),
    });
    const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "stream", ChecksumMode: "ENABLED" }));
    expect(got.ChecksumCRC32).toBe(checksumValue("CRC32", data));
    expect(Buffer.from(await got.Body!.transformToByteArray()).equals(data)).toBe(true);
  });

  it.each(CHECKSUM_ALGORITHMS)("verifies and returns %s checksums computed by the SDK, as header and as trailer", async (algorithm) => {
    const data = Buffer.from(`checksummed with ${algorithm} `.repeat(5000));
    const ChecksumAlgorithm = algorithm as ChecksumAlgorithm;
    const plain = await put("plain", data, { ChecksumAlgorithm });
    await put("streamed", streamOf(data, 10_000) as unknown as Uint8Array, { ChecksumAlgorithm, ContentLength: data.length });
    const field = `Checksum${algorithm}` as const;
    expect(plain[field]).toBe(checksumValue(algorithm, data));
    for (const Key of ["plain", "streamed"]) {
      // With ChecksumMode the SDK validates the body against the returned checksum itself.
      const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key, ChecksumMode: "ENABLED" }));
      expect(got[field]).toBe(checksumValue(algorithm, data));
      expect(Buffer.from(await got.Body!.transformToByteArray()).equals(data)).toBe(true);
    }
  });

  it("gives objects uploaded without a checksum a CRC64NVME one, like S3", async () => {
    await put("plain", Buffer.from("no checksum asked"), {});
    const client2 = clientFor(standIn, { requestChecksumCalculation: "WHEN_REQUIRED" });
    await client2.send(new PutObjectCommand({ Bucket: BUCKET, Key: "bare", Body: Buffer.from("bare") }));
    client2.destroy();
    const head = await client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "bare", ChecksumMode: "ENABLED" }));
    expect(head.ChecksumCRC64NVME).toBe(checksumValue("CRC64NVME", Buffer.from("bare")));
  });

  it("rejects uploads whose digests do not match the bytes, storing nothing", async () => {
    const wrongSha = Buffer.alloc(32, 1).toString("base64");
    expect(await s3Failure(put("bad", "payload", { ChecksumSHA256: wrongSha }))).toMatchObject({ name: "BadDigest", status: 400 });
    const wrongMd5 = Buffer.alloc(16, 2).toString("base64");
    expect(await s3Failure(put("bad", "payload", { ContentMD5: wrongMd5 }))).toMatchObject({
      name: "BadDigest",
      message: "The Content-MD5 you specified did not match what we received.",
    });
    expect(await s3Failure(put("bad", "payload", { ContentMD5: "not-an-md5" }))).toMatchObject({ name: "InvalidDigest", status: 400 });
    expect(await s3Failure(put("bad", "payload", { ChecksumCRC32: "AAAAAA==" }))).toMatchObject({
      name: "BadDigest",
      message: "The CRC32 you specified did not match the calculated checksum.",
    });
    expect(await s3Failure(put("bad", "payload", { ChecksumCRC32C: "short" }))).toMatchObject({ name: "InvalidRequest", status: 400 });
    expect(await s3Failure(client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "bad" })))).toMatchObject({ status: 404 });
  });

  it("serves byte ranges", async () => {
    await put("abc", "abcdefghijklmnopqrstuvwxyz");
    const range = async (Range: string) => {
      const r = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "abc", Range, ChecksumMode: "ENABLED" }));
      return {
        text: await r.Body!.transformToString(),
        contentRange: r.ContentRange,
        length: r.ContentLength,
        status: r.$metadata.httpStatusCode,
      };
    };
    expect(await range("bytes=2-5")).toEqual({ text: "cdef", contentRange: "bytes 2-5/26", length: 4, status: 206 });
    expect(await range("bytes=20-")).toEqual({ text: "uvwxyz", contentRange: "bytes 20-25/26", length: 6, status: 206 });
    expect(await range("bytes=-3")).toEqual({ text: "xyz", contentRange: "bytes 23-25/26", length: 3, status: 206 });
    expect(await range("bytes=24-100")).toMatchObject({ text: "yz", contentRange: "bytes 24-25/26" });
    expect(await range("bytes=5-2")).toMatchObject({ text: "abcdefghijklmnopqrstuvwxyz", status: 200 });
    const unsatisfiable = client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "abc", Range: "bytes=26-" }));
    expect(await s3Failure(unsatisfiable)).toMatchObject({ name: "InvalidRange", status: 416 });
  });

  it("honours conditional requests", async () => {
    const { ETag } = await put("cond", "v1");
    expect(await s3Failure(put("cond", "v2", { IfNoneMatch: "*" }))).toMatchObject({ name: "PreconditionFailed", status: 412 });
    await put("fresh", "v1", { IfNoneMatch: "*" });
    const notModified = client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "cond", IfNoneMatch: ETag }));
    expect((await s3Failure(notModified)).status).toBe(304);
    const mismatch = client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "cond", IfMatch: '"0000"' }));
    expect(await s3Failure(mismatch)).toMatchObject({ name: "PreconditionFailed", status: 412 });
    expect(await getText("cond")).toBe("v1");
  });

  it("answers NoSuchKey and NoSuchBucket", async () => {
    const missingKey = await s3Failure(client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "nope" })));
    expect(missingKey).toMatchObject({ name: "NoSuchKey", status: 404, message: "The specified key does not exist." });
    const missingBucket = await s3Failure(client.send(new GetObjectCommand({ Bucket: "no-such-bucket", Key: "k" })));
    expect(missingBucket).toMatchObject({ name: "NoSuchBucket", status: 404 });
    expect(await s3Failure(put("k".repeat(1025), "x"))).toMatchObject({ name: "KeyTooLongError", status: 400 });
  });

  it("deletes idempotently, one key or many", async () => {
    await put("d1", "x");
    await client.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: "d1" }));
    const again = await client.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: "d1" }));
    expect(again.$metadata.httpStatusCode).toBe(204);
    const keys = ["m/1", "m/a&b<c>", "m/never-existed"];
    await put("m/1", "1");
    await put("m/a&b<c>", "2");
    const res = await client.send(new DeleteObjectsCommand({ Bucket: BUCKET, Delete: { Objects: keys.map((Key) => ({ Key })) } }));
    expect(res.Deleted?.map((d) => d.Key)).toEqual(keys);
    expect(res.Errors ?? []).toEqual([]);
    await put("m/q", "3");
    const quiet = await client.send(new DeleteObjectsCommand({ Bucket: BUCKET, Delete: { Objects: [{ Key: "m/q" }], Quiet: true } }));
    expect(quiet.Deleted ?? []).toEqual([]);
    expect((await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: "m/" }))).KeyCount).toBe(0);
  });

  it("refuses objects above the configured size", async () => {
    const small = await startS3StandIn({ ...CREDENTIALS, buckets: [BUCKET], maxObjectBytes: 1000 });
    const c = clientFor(small);
    try {
      await c.send(new PutObjectCommand({ Bucket: BUCKET, Key: "ok", Body: Buffer.alloc(1000) }));
      const tooBig = c.send(new PutObjectCommand({ Bucket: BUCKET, Key: "big", Body: Buffer.alloc(1001) }));
      expect(await s3Failure(tooBig)).toMatchObject({ name: "EntityTooLarge", status: 400 });
    } finally {
      c.destroy();
      await small.close();
    }
  });
});

describe("ListObjectsV2", () => {
  it("pages across more than 1,000 keys with continuation tokens", async () => {
    const keys = Array.from({ length: 1500 }, (_, i) => `many/${String(i).padStart(5, "0")}`);
    for (let i = 0; i < keys.length; i += 100) await Promise.all(keys.slice(i, i + 100).map((k) => put(k, k)));
    const first = await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: "many/" }));
    expect(first).toMatchObject({ KeyCount: 1000, MaxKeys: 1000, IsTruncated: true, Prefix: "many/" });
    const second = await client.send(
      new ListObjectsV2Command({ Bucket: BUCKET, Prefix: "many/", ContinuationToken: first.NextContinuationToken }),
    );
    expect(second).toMatchObject({ KeyCount: 500, IsTruncated: false, ContinuationToken: first.NextContinuationToken });
    expect(second.NextContinuationToken).toBeUndefined();
    expect([...first.Contents!, ...second.Contents!].map((c) => c.Key)).toEqual(keys);
    expect(first.Contents?.[0]).toMatchObject({ Size: 10, StorageClass: "STANDARD", ETag: expect.stringMatching(/^"[0-9a-f]{32}"$/) });
    const paged: string[] = [];
    let pages = 0;
    for await (const page of paginateListObjectsV2({ client, pageSize: 250 }, { Bucket: BUCKET, Prefix: "many/" })) {
      pages++;
      for (const c of page.Contents ?? []) paged.push(c.Key!);
    }
    expect(pages).toBe(6);
    expect(paged).toEqual(keys);
  });

  it("rolls keys up into common prefixes with a delimiter, across pages", async () => {
    for (const k of ["photos/2024/a.jpg", "photos/2024/b.jpg", "photos/2025/c.jpg", "photos/top.jpg", "videos/x.mp4"]) await put(k, k);
    const res = await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: "photos/", Delimiter: "/" }));
    expect(res.Contents?.map((c) => c.Key)).toEqual(["photos/top.jpg"]);
    expect(res.CommonPrefixes?.map((p) => p.Prefix)).toEqual(["photos/2024/", "photos/2025/"]);
    expect(res).toMatchObject({ KeyCount: 3, Delimiter: "/" });
    const seen: string[] = [];
    let token: string | undefined;
    do {
      const page = await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Delimiter: "/", MaxKeys: 1, ContinuationToken: token }));
      seen.push(...(page.CommonPrefixes ?? []).map((p) => p.Prefix!), ...(page.Contents ?? []).map((c) => c.Key!));
      token = page.NextContinuationToken;
    } while (token);
    expect(seen).toEqual(["photos/", "videos/"]);
  });

  it("orders keys by their UTF-8 bytes, as S3 does", async () => {
    const keys = ["b", "a", "\u{1F600}", "\uFFFD", "é", "Z"];
    for (const k of keys) await put(k, k);
    const res = await client.send(new ListObjectsV2Command({ Bucket: BUCKET }));
    // UTF-16 order would put the emoji (a surrogate pair) before U+FFFD.
    expect(res.Contents?.map((c) => c.Key)).toEqual(["Z", "a", "b", "é", "\uFFFD", "\u{1F600}"]);
  });

  it("supports start-after and max-keys 0, and rejects a forged token", async () => {
    for (const k of ["k1", "k2", "k3"]) await put(k, k);
    const after = await client.send(new ListObjectsV2Command({ Bucket: BUCKET, StartAfter: "k1" }));
    expect(after.Contents?.map((c) => c.Key)).toEqual(["k2", "k3"]);
    expect(after.StartAfter).toBe("k1");
    const none = await client.send(new ListObjectsV2Command({ Bucket: BUCKET, MaxKeys: 0 }));
    expect(none).toMatchObject({ KeyCount: 0, IsTruncated: false });
    const forged = client.send(new ListObjectsV2Command({ Bucket: BUCKET, ContinuationToken: "not-a-token" }));
    expect(await s3Failure(forged)).toMatchObject({ name: "InvalidArgument", status: 400 });
    const missing = client.send(new ListObjectsV2Command({ Bucket: "no-such-bucket" }));
    expect(await s3Failure(missing)).toMatchObject({ name: "NoSuchBucket", status: 404 });
  });
});

describe("authentication", () => {
  it("rejects a wrong secret with SignatureDoesNotMatch and an unknown key with InvalidAccessKeyId", async () => {
    const wrong = clientFor(standIn, { credentials: { accessKeyId: CREDENTIALS.accessKeyId, secretAccessKey: "wrong-secret" } });
    const unknown = clientFor(standIn, { credentials: { accessKeyId: "AKIANOBODY", secretAccessKey: CREDENTIALS.secretAccessKey } });
    try {
      expect(await s3Failure(wrong.send(new PutObjectCommand({ Bucket: BUCKET, Key: "k", Body: "x" })))).toMatchObject({
        name: "SignatureDoesNotMatch",
        status: 403,
      });
      expect(await s3Failure(unknown.send(new GetObjectCommand({ Bucket: BUCKET, Key: "k" })))).toMatchObject({
        name: "InvalidAccessKeyId",
        status: 403,
      });
      expect(await s3Failure(client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "k" })))).toMatchObject({ status: 404 });
    } finally {
      wrong.destroy();
      unknown.destroy();
    }
  });

  it("rejects a request signed for another region", async () => {
    const other = clientFor(standIn, { region: "eu-west-1" });
    try {
      expect(await s3Failure(other.send(new GetObjectCommand({ Bucket: BUCKET, Key: "k" })))).toMatchObject({
        name: "AuthorizationHeaderMalformed",
        status: 400,
      });
    } finally {
      other.destroy();
    }
  });

  it("refuses a skewed clock with RequestTimeTooSkewed, whose Date header lets the SDK correct itself", async () => {
    const hourAhead = () => Date.now() + 3_600_000;
    const skewed = await startS3StandIn({ ...CREDENTIALS, buckets: [BUCKET], now: hourAhead });
    const c = clientFor(skewed, { maxAttempts: 2 });
    try {
      await c.send(new PutObjectCommand({ Bucket: BUCKET, Key: "k", Body: "x" }));
      expect(skewed.requests.map((r) => r.status)).toEqual([403, 200]);
      expect(c.config.systemClockOffset).toBeGreaterThan(3_500_000);
    } finally {
      c.destroy();
      await skewed.close();
    }
  });
});

describe("persistence", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "s3-standin-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("keeps buckets and objects in a directory across restarts", async () => {
    const first = await startS3StandIn({ ...CREDENTIALS, dir, buckets: ["kept"] });
    const c1 = clientFor(first);
    await c1.send(new PutObjectCommand({ Bucket: "kept", Key: "a/b", Body: "survives", Metadata: { m: "1" } }));
    await c1.send(new PutObjectCommand({ Bucket: "kept", Key: "gone", Body: "deleted" }));
    await c1.send(new DeleteObjectCommand({ Bucket: "kept", Key: "gone" }));
    c1.destroy();
    await first.close();
    const second = await startS3StandIn({ ...CREDENTIALS, dir });
    const c2 = clientFor(second);
    try {
      const got = await c2.send(new GetObjectCommand({ Bucket: "kept", Key: "a/b", ChecksumMode: "ENABLED" }));
      expect(await got.Body!.transformToString()).toBe("survives");
      expect(got.Metadata).toEqual({ m: "1" });
      expect((await c2.send(new ListObjectsV2Command({ Bucket: "kept" }))).Contents?.map((x) => x.Key)).toEqual(["a/b"]);
    } finally {
      c2.destroy();
      await second.close();
    }
  });

  it("leaves concurrent writers of one key with matching bytes and metadata", async () => {
    const s = await startS3StandIn({ ...CREDENTIALS, dir, buckets: ["race"] });
    const c = clientFor(s);
    try {
      const bodies = Array.from({ length: 10 }, (_, i) => Buffer.alloc(50_000 + i, i));
      await Promise.all(bodies.map((Body) => c.send(new PutObjectCommand({ Bucket: "race", Key: "k", Body }))));
      const got = await c.send(new GetObjectCommand({ Bucket: "race", Key: "k", ChecksumMode: "ENABLED" }));
      const bytes = Buffer.from(await got.Body!.transformToByteArray());
      expect(bodies.some((b) => b.equals(bytes))).toBe(true);
      expect(got.ContentLength).toBe(bytes.length);
    } finally {
      c.destroy();
      await s.close();
    }
  });
});

const sha256Of = (b: Uint8Array) => createHash("sha256").update(b).digest();
const md5Of = (b: Uint8Array) => createHash("md5").update(b).digest();

async function create(Key: string): Promise<string> {
  const res = await client.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key, ChecksumAlgorithm: "SHA256" }));
  expect(res.UploadId).toBeTruthy();
  return res.UploadId!;
}

async function uploadPart(Key: string, UploadId: string, PartNumber: number, Body: Buffer): Promise<CompletedPart> {
  const ChecksumSHA256 = sha256Of(Body).toString("base64");
  const res = await client.send(
    new UploadPartCommand({ Bucket: BUCKET, Key, UploadId, PartNumber, Body, ChecksumSHA256, ContentMD5: md5Of(Body).toString("base64") }),
  );
  expect(res.ETag).toBe(`"${md5Of(Body).toString("hex")}"`);
  return { PartNumber, ETag: res.ETag, ChecksumSHA256 };
}

const complete = (Key: string, UploadId: string, Parts: CompletedPart[]) =>
  client.send(new CompleteMultipartUploadCommand({ Bucket: BUCKET, Key, UploadId, MultipartUpload: { Parts } }));

const keysInBucket = async () => ((await client.send(new ListObjectsV2Command({ Bucket: BUCKET }))).Contents ?? []).map((o) => o.Key);

describe("multipart uploads", () => {
  it("assembles parts into one object with S3's composite ETag and SHA-256", async () => {
    const parts = [randomBytes(MIN_PART_BYTES), randomBytes(MIN_PART_BYTES), randomBytes(1234)];
    const id = await create("big/object");
    // Sent out of order, as concurrent parts arrive; completion orders them by number.
    const done = [
      await uploadPart("big/object", id, 3, parts[2]!),
      await uploadPart("big/object", id, 1, parts[0]!),
      await uploadPart("big/object", id, 2, parts[1]!),
    ];
    expect(await keysInBucket()).toEqual([]);
    const res = await complete(
      "big/object",
      id,
      done.sort((a, b) => a.PartNumber! - b.PartNumber!),
    );
    const composite = `${sha256Of(Buffer.concat(parts.map(sha256Of))).toString("base64")}-3`;
    expect(res.ChecksumSHA256).toBe(composite);
    expect(res.ETag).toBe(`"${md5Of(Buffer.concat(parts.map(md5Of))).toString("hex")}-3"`);
    const head = await client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "big/object", ChecksumMode: "ENABLED" }));
    expect(head.ContentLength).toBe(2 * MIN_PART_BYTES + 1234);
    expect(head.ChecksumSHA256).toBe(composite);
    expect(head.ChecksumType).toBe("COMPOSITE");
    // The SDK skips validating composite checksums on GET, as with S3.
    const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "big/object", ChecksumMode: "ENABLED" }));
    expect(Buffer.from(await got.Body!.transformToByteArray()).equals(Buffer.concat(parts))).toBe(true);
    expect(standIn.pendingUploads).toBe(0);
  });

  it("refuses what S3 refuses at completion: small parts, wrong ETags or checksums, disorder, missing checksums", async () => {
    const id = await create("k");
    const small = await uploadPart("k", id, 1, randomBytes(1024));
    const last = await uploadPart("k", id, 2, randomBytes(1024));
    expect((await s3Failure(complete("k", id, [small, last]))).name).toBe("EntityTooSmall");
    const big = await uploadPart("k", id, 1, randomBytes(MIN_PART_BYTES));
    expect((await s3Failure(complete("k", id, [{ ...big, ETag: '"00"' }, last]))).name).toBe("InvalidPart");
    expect((await s3Failure(complete("k", id, [{ ...big, ChecksumSHA256: last.ChecksumSHA256 }, last]))).name).toBe("InvalidPart");
    expect((await s3Failure(complete("k", id, [last, big]))).name).toBe("InvalidPartOrder");
    expect((await s3Failure(complete("k", id, [{ PartNumber: 1, ETag: big.ETag }, last]))).name).toBe("InvalidRequest");
    expect(await keysInBucket()).toEqual([]);
    await complete("k", id, [big, last]);
    expect(await keysInBucket()).toEqual(["k"]);
  });

  it("verifies each part's digests, and refuses a part without the upload's checksum algorithm", async () => {
    const id = await create("k");
    const body = randomBytes(4096);
    const wrong = sha256Of(randomBytes(8)).toString("base64");
    const bad = client.send(
      new UploadPartCommand({ Bucket: BUCKET, Key: "k", UploadId: id, PartNumber: 1, Body: body, ChecksumSHA256: wrong }),
    );
    expect((await s3Failure(bad)).name).toBe("BadDigest");
    const badMd5 = client.send(
      new UploadPartCommand({
        Bucket: BUCKET,
        Key: "k",
        UploadId: id,
        PartNumber: 1,
        Body: body,
        ContentMD5: md5Of(randomBytes(8)).toString("base64"),
      }),
    );
    expect((await s3Failure(badMd5)).name).toBe("BadDigest");
    const crc = client.send(
      new UploadPartCommand({ Bucket: BUCKET, Key: "k", UploadId: id, PartNumber: 1, Body: body, ChecksumAlgorithm: "CRC32" }),
    );
    expect((await s3Failure(crc)).name).toBe("InvalidRequest");
  });

  it("aborts: the parts are gone, the upload id is unknown afterwards, and no object appears", async () => {
    const id = await create("gone");
    const part = await uploadPart("gone", id, 1, randomBytes(1024));
    expect(standIn.pendingUploads).toBe(1);
    await client.send(new AbortMultipartUploadCommand({ Bucket: BUCKET, Key: "gone", UploadId: id }));
    expect(standIn.pendingUploads).toBe(0);
    expect((await s3Failure(complete("gone", id, [part]))).name).toBe("NoSuchUpload");
    expect((await s3Failure(uploadPart("gone", id, 2, randomBytes(10)))).name).toBe("NoSuchUpload");
    const again = client.send(new AbortMultipartUploadCommand({ Bucket: BUCKET, Key: "gone", UploadId: id }));
    expect((await s3Failure(again)).status).toBe(404);
    // An upload id is bound to its key.
    const other = await create("other");
    expect((await s3Failure(uploadPart("not-other", other, 1, randomBytes(10)))).name).toBe("NoSuchUpload");
    expect(await keysInBucket()).toEqual([]);
  });

  it("authenticates every multipart call with SigV4", async () => {
    const id = await create("signed");
    const forged = clientFor(standIn, { credentials: { ...CREDENTIALS, secretAccessKey: "not-the-secret" } });
    try {
      const attempts = [
        forged.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key: "signed" })),
        forged.send(new UploadPartCommand({ Bucket: BUCKET, Key: "signed", UploadId: id, PartNumber: 1, Body: randomBytes(10) })),
        forged.send(new CompleteMultipartUploadCommand({ Bucket: BUCKET, Key: "signed", UploadId: id, MultipartUpload: { Parts: [] } })),
        forged.send(new AbortMultipartUploadCommand({ Bucket: BUCKET, Key: "signed", UploadId: id })),
      ].map(s3Failure);
      for (const a of attempts) expect((await a).name).toBe("SignatureDoesNotMatch");
    } finally {
      forged.destroy();
    }
    expect(standIn.pendingUploads).toBe(1);
  });
});
