/**
 * S3BlobStore behaviour beyond the shared contract (blobs.test.ts): integrity
 * on the wire, retries, error mapping, aborts, configuration, and multipart
 * placement of staged uploads (streamed parts with their digests; an aborted
 * upload on a failed part or a cancelled call leaves nothing). All against
 * the S3 stand-in over real HTTP with the official client.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { inspect } from "node:util";
import { type S3StandIn, startS3StandIn } from "@openma/s3-standin";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { BlobStoreError, blobStoreFromEnv, S3BlobStore, type S3BlobStoreOptions, s3OptionsFromEnv } from "./s3-blobs.ts";
import { compositeSha256, MIN_PART_BYTES, partRanges } from "./s3-blobs-multipart.ts";
import { discardStaged, openBlob, type StagedBlob, stageBlob } from "./transfers.ts";

const CREDENTIALS = { accessKeyId: "AKIAS3BLOBSTORETEST", secretAccessKey: "s3-blob-store-test-secret/0123456789+abc" };
const BUCKET = "openma-blobs";

let standIn: S3StandIn;
const stores: S3BlobStore[] = [];

function storeWith(opts: Partial<S3BlobStoreOptions> = {}): S3BlobStore {
  const store = new S3BlobStore({
    bucket: BUCKET,
    prefix: "tenant-a",
    endpoint: standIn.endpoint,
    region: standIn.region,
    forcePathStyle: true,
    credentials: CREDENTIALS,
    ...opts,
  });
  stores.push(store);
  return store;
}

async function failure(p: Promise<unknown>): Promise<BlobStoreError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(BlobStoreError);
  return err as BlobStoreError;
}

const requestsOf = (op: string) => standIn.requests.filter((r) => r.op === op);

beforeEach(async () => {
  standIn = await startS3StandIn({ ...CREDENTIALS, buckets: [BUCKET] });
});

afterEach(async () => {
  for (const s of stores.splice(0)) s.close();
  await standIn.close();
});

describe("S3BlobStore on the wire", () => {
  it("keeps each prefix's keys apart in one bucket", async () => {
    const a = storeWith({ prefix: "tenant-a" });
    const b = storeWith({ prefix: "/tenant-b/nested/" });
    await a.put("ns/k", Buffer.from("from a"));
    await b.put("ns/k", Buffer.from("from b"));
    expect((await a.get("ns/k"))?.toString()).toBe("from a");
    expect((await b.get("ns/k"))?.toString()).toBe("from b");
    expect((await a.list("ns")).map((l) => l.key)).toEqual(["ns/k"]);
    expect(requestsOf("PutObject").map((r) => r.url.split("?")[0])).toEqual([
      `/${BUCKET}/tenant-a/ns/k`,
      `/${BUCKET}/tenant-b/nested/ns/k`,
    ]);
    expect(a.prefix).toBe("tenant-a/");
    expect(b.prefix).toBe("tenant-b/nested/");
  });

  it("uploads with SHA-256 and MD5 digests and a signed payload hash", async () => {
    const data = Buffer.from("digest me");
    await storeWith().put("ns/d", data);
    const [put] = requestsOf("PutObject");
    expect(put?.headers["x-amz-checksum-sha256"]).toBe(createHash("sha256").update(data).digest("base64"));
    expect(put?.headers["content-md5"]).toBe(createHash("md5").update(data).digest("base64"));
    expect(put?.headers["x-amz-content-sha256"]).toBe(createHash("sha256").update(data).digest("hex"));
  });

  it("has a body damaged in transit refused by the server, storing nothing", async () => {
    const store = storeWith();
    void standIn.inject({ op: "PutObject", kind: "corrupt" });
    const err = await failure(store.put("ns/c", Buffer.from("precious bytes")));
    expect(err.code).toBe("XAmzContentSHA256Mismatch");
    expect(err.status).toBe(400);
    expect(await store.exists("ns/c")).toBe(false);
  });

  it("reads a download damaged once again, and fails rather than return damaged bytes", async () => {
    const store = storeWith();
    const data = Buffer.from("the true contents of this blob");
    await store.put("ns/g", data);
    void standIn.inject({ op: "GetObject", kind: "corrupt" });
    expect((await store.get("ns/g"))?.equals(data)).toBe(true);
    expect(requestsOf("GetObject")).toHaveLength(2);
    void standIn.inject({ op: "GetObject", kind: "corrupt" }, 2);
    const err = await failure(store.get("ns/g"));
    expect(err.code).toBe("ChecksumMismatch");
    expect(standIn.pendingFaults).toBe(0);
  });

  it("reads a download cut short again, and fails when it keeps being cut", async () => {
    const store = storeWith({ readAttempts: 3 });
    const data = Buffer.alloc(200_000, 7);
    await store.put("ns/t", data);
    void standIn.inject({ op: "GetObject", kind: "truncate", keepBytes: 1000 }, 2);
    expect((await store.get("ns/t"))?.equals(data)).toBe(true);
    void standIn.inject({ op: "GetObject", kind: "truncate" }, 3);
    const err = await failure(store.get("ns/t"));
    expect(err.code).toBe("IncompleteBody");
    expect(standIn.pendingFaults).toBe(0);
  });

  it("lets the SDK retry a transient 500 and reports a persistent one clearly", async () => {
    const store = storeWith({ maxAttempts: 2 });
    void standIn.inject({ op: "PutObject", kind: "error", status: 500 });
    await store.put("ns/r", Buffer.from("eventually"));
    expect((await store.get("ns/r"))?.toString()).toBe("eventually");
    void standIn.inject({ op: "PutObject", kind: "error", status: 503, code: "SlowDown", message: "Please reduce your request rate." }, 2);
    const err = await failure(store.put("ns/r2", Buffer.from("never")));
    expect(err.code).toBe("SlowDown");
    expect(err.status).toBe(503);
    expect(err.message).toBe('s3 put "ns/r2" failed: SlowDown (HTTP 503): Please reduce your request rate.');
    expect(err.requestId).toMatch(/^[0-9A-F]{16}$/);
  });

  it("maps a wrong secret to SignatureDoesNotMatch without leaking the secret or XML", async () => {
    const wrongSecret = "definitely-not-the-secret-0123456789";
    const store = storeWith({ credentials: { accessKeyId: CREDENTIALS.accessKeyId, secretAccessKey: wrongSecret } });
    const err = await failure(store.put("ns/s", Buffer.from("x")));
    expect(err.code).toBe("SignatureDoesNotMatch");
    expect(err.status).toBe(403);
    for (const text of [err.message, inspect(err), JSON.stringify(err)]) {
      expect(text).not.toContain(wrongSecret);
      expect(text).not.toContain(CREDENTIALS.secretAccessKey);
      expect(text).not.toContain("<");
    }
    const unknown = storeWith({ credentials: { accessKeyId: "AKIAUNKNOWN", secretAccessKey: wrongSecret } });
    expect((await failure(unknown.get("ns/s"))).code).toBe("InvalidAccessKeyId");
  });

  it("keeps credentials out of inspection and serialisation", () => {
    const store = storeWith();
    for (const text of [inspect(store, { depth: 20, showHidden: true }), JSON.stringify(store)]) {
      expect(text).not.toContain(CREDENTIALS.secretAccessKey);
      expect(text).not.toContain(CREDENTIALS.accessKeyId);
    }
  });

  it("reports a missing bucket as an error, not as a missing key", async () => {
    const store = storeWith({ bucket: "no-such-bucket" });
    expect((await failure(store.get("ns/x"))).code).toBe("NoSuchBucket");
    expect((await failure(store.put("ns/x", Buffer.from("x")))).code).toBe("NoSuchBucket");
    expect((await failure(store.list("ns"))).code).toBe("NoSuchBucket");
  });

  it("verifies the bucket and credentials up front", async () => {
    await expect(storeWith().verify()).resolves.toBeUndefined();
    const missing = await failure(storeWith({ bucket: "no-such-bucket" }).verify());
    expect(missing.message).toBe('s3 bucket "no-such-bucket" does not exist');
    const denied = await failure(storeWith({ credentials: { ...CREDENTIALS, secretAccessKey: "wrong-secret-wrong-secret" } }).verify());
    expect(denied.code).toBe("AccessDenied");
  });

  it("reports an unreachable endpoint as a network error", async () => {
    const endpoint = standIn.endpoint;
    await standIn.close();
    const err = await failure(storeWith({ endpoint, maxAttempts: 1 }).put("ns/n", Buffer.from("x")));
    expect(err.code).toBe("ECONNREFUSED");
    expect(err.message).toMatch(/^s3 put "ns\/n" failed: /);
  });

  it("pages through a listing with the configured page size", async () => {
    const store = storeWith({ listPageSize: 7 });
    const keys = Array.from({ length: 30 }, (_, i) => `ns/p/${String(i).padStart(2, "0")}`);
    await Promise.all(keys.map((k) => store.put(k, Buffer.from(k))));
    expect((await store.list("ns/p")).map((l) => l.key)).toEqual(keys);
    expect(requestsOf("ListObjectsV2")).toHaveLength(5);
  });

  it("aborts a call that is waiting on the server", async () => {
    const store = storeWith();
    await store.put("ns/h", Buffer.from("x"));
    const arrived = standIn.inject({ op: "GetObject", kind: "hang" });
    const controller = new AbortController();
    const pending = store.get("ns/h", { signal: controller.signal });
    await arrived;
    controller.abort();
    expect((await failure(pending)).code).toBe("Aborted");
    const already = AbortSignal.abort();
    expect((await failure(store.put("ns/h2", Buffer.from("x"), { signal: already }))).code).toBe("Aborted");
    expect(await store.exists("ns/h2")).toBe(false);
  });

  it("gives up on a call past its deadline", async () => {
    const store = storeWith({ timeoutMs: 100 });
    void standIn.inject({ op: "HeadObject", kind: "hang" });
    const err = await failure(store.exists("ns/slow"));
    expect(err.code).toBe("Timeout");
    expect(err.message).toBe('s3 exists "ns/slow" timed out after 100 ms');
  });

  it("refuses invalid options", () => {
    expect(() => storeWith({ bucket: "Bad_Bucket" })).toThrow(/invalid S3 bucket name/);
    expect(() => storeWith({ prefix: "../up" })).toThrow(/invalid S3 key prefix/);
    expect(() => storeWith({ listPageSize: 1001 })).toThrow(/listPageSize/);
    expect(() => storeWith({ timeoutMs: 0 })).toThrow(/timeoutMs/);
  });
});

describe("blobStoreFromEnv", () => {
  it("is undefined without OPENMA_BLOB_URL (local files stay the default)", () => {
    expect(blobStoreFromEnv({})).toBeUndefined();
    expect(blobStoreFromEnv({ OPENMA_BLOB_URL: "" })).toBeUndefined();
  });

  it("reads bucket, prefix, endpoint, region, credentials and path style", () => {
    expect(
      s3OptionsFromEnv({
        OPENMA_BLOB_URL: "s3://my-bucket/openma/prod/",
        OPENMA_S3_ENDPOINT: "http://127.0.0.1:9000",
        OPENMA_S3_REGION: "eu-west-1",
        OPENMA_S3_ACCESS_KEY_ID: "AKIAEXAMPLE",
        OPENMA_S3_SECRET_ACCESS_KEY: "example-secret",
      }),
    ).toEqual({
      bucket: "my-bucket",
      prefix: "openma/prod/",
      region: "eu-west-1",
      endpoint: "http://127.0.0.1:9000",
      forcePathStyle: true,
      credentials: { accessKeyId: "AKIAEXAMPLE", secretAccessKey: "example-secret" },
    });
    expect(s3OptionsFromEnv({ OPENMA_BLOB_URL: "s3://aws-bucket" })).toEqual({
      bucket: "aws-bucket",
      prefix: "",
      region: "us-east-1",
      endpoint: undefined,
      forcePathStyle: false,
      credentials: undefined,
    });
    expect(
      s3OptionsFromEnv({ OPENMA_BLOB_URL: "s3://b-1", OPENMA_S3_ENDPOINT: "https://s3.example", OPENMA_S3_FORCE_PATH_STYLE: "false" })
        ?.forcePathStyle,
    ).toBe(false);
  });

  it("builds a working store", async () => {
    const store = blobStoreFromEnv({
      OPENMA_BLOB_URL: `s3://${BUCKET}/env`,
      OPENMA_S3_ENDPOINT: standIn.endpoint,
      OPENMA_S3_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
      OPENMA_S3_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
    })!;
    stores.push(store);
    await store.put("ns/e", Buffer.from("via env"));
    expect((await store.get("ns/e"))?.toString()).toBe("via env");
    expect(requestsOf("PutObject")[0]?.url).toMatch(new RegExp(`^/${BUCKET}/env/ns/e`));
  });

  it.each([
    [{ OPENMA_BLOB_URL: "file:///tmp/x" }, /OPENMA_BLOB_URL must be s3:\/\/bucket/],
    [{ OPENMA_BLOB_URL: "s3://UPPER" }, /OPENMA_BLOB_URL must be/],
    [{ OPENMA_BLOB_URL: "s3://bucket/a/../b" }, /OPENMA_BLOB_URL: the prefix/],
    [{ OPENMA_BLOB_URL: "s3://bucket", OPENMA_S3_ENDPOINT: "ftp://x" }, /OPENMA_S3_ENDPOINT/],
    [{ OPENMA_BLOB_URL: "s3://bucket", OPENMA_S3_FORCE_PATH_STYLE: "yes" }, /OPENMA_S3_FORCE_PATH_STYLE/],
    [{ OPENMA_BLOB_URL: "s3://bucket", OPENMA_S3_REGION: "Not A Region" }, /OPENMA_S3_REGION/],
    [{ OPENMA_S3_REGION: "us-east-1" }, /OPENMA_S3_REGION set but OPENMA_BLOB_URL is not/],
  ])("rejects %j", (env, message) => {
    expect(() => s3OptionsFromEnv(env)).toThrow(message);
  });

  it("names, but never echoes, a half-configured credential", () => {
    const secret = "lonely-secret-value-0123456789";
    let message = "";
    try {
      s3OptionsFromEnv({ OPENMA_BLOB_URL: "s3://bucket", OPENMA_S3_SECRET_ACCESS_KEY: secret });
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toBe("OPENMA_S3_ACCESS_KEY_ID and OPENMA_S3_SECRET_ACCESS_KEY must be set together");
  });
});

describe("partRanges", () => {
  it("covers the file in consecutive parts, growing them rather than exceed 10,000 parts", () => {
    expect(partRanges(11, 5)).toEqual([
      { start: 0, end: 4 },
      { start: 5, end: 9 },
      { start: 10, end: 10 },
    ]);
    expect(partRanges(10, 5)).toHaveLength(2);
    const many = partRanges(100_001, 5);
    expect(many).toHaveLength(9_091);
    expect(partRanges(200_000, 5)).toHaveLength(10_000);
    expect(many.at(-1)?.end).toBe(100_000);
  });
});

describe("S3BlobStore multipart placement", () => {
  const MiB = 1024 * 1024;
  let store: S3BlobStore;
  let dir: string;
  let staged: StagedBlob;
  let data: Buffer;

  async function expectNothingLeft(key: string): Promise<void> {
    expect(await store.exists(key)).toBe(false);
    expect(await store.list("files")).toEqual([]);
    expect(standIn.pendingUploads).toBe(0);
  }

  beforeEach(async () => {
    store = storeWith({ prefix: undefined, partBytes: MIN_PART_BYTES, bufferBytes: 256 * 1024 });
    dir = await mkdtemp(join(tmpdir(), "openma-multipart-"));
    data = randomBytes(2 * MIN_PART_BYTES + 12_345);
    staged = await stageBlob(Readable.from([data]), { dir, maxBytes: 64 * MiB });
  });

  afterEach(async () => {
    await discardStaged(staged);
    await rm(dir, { recursive: true, force: true });
  });

  it("sends a staged file larger than a part as streamed parts with their digests, stored byte-exact", async () => {
    await store.putFile("files/big", staged);
    expect(requestsOf("PutObject")).toHaveLength(0);
    expect(requestsOf("CreateMultipartUpload")).toHaveLength(1);
    const parts = requestsOf("UploadPart");
    expect(parts.map((p) => p.status)).toEqual([200, 200, 200]);
    const ranges = partRanges(data.length, MIN_PART_BYTES);
    const partSums = ranges.map((r) =>
      createHash("sha256")
        .update(data.subarray(r.start, r.end + 1))
        .digest(),
    );
    for (const p of parts) {
      const n = Number(new URL(p.url, "http://x").searchParams.get("partNumber"));
      expect(p.headers["x-amz-checksum-sha256"]).toBe(partSums[n - 1]!.toString("base64"));
      expect(p.headers["content-md5"]).toBe(
        createHash("md5")
          .update(data.subarray(ranges[n - 1]!.start, ranges[n - 1]!.end + 1))
          .digest("base64"),
      );
    }
    expect(requestsOf("CompleteMultipartUpload").map((r) => r.status)).toEqual([200]);
    expect(standIn.pendingUploads).toBe(0);
    expect((await store.get("files/big"))?.equals(data)).toBe(true);
    const reader = await openBlob(store, "files/big", { start: MIN_PART_BYTES - 3, end: MIN_PART_BYTES + 2 });
    expect(Buffer.concat(await reader!.body.toArray()).equals(data.subarray(MIN_PART_BYTES - 3, MIN_PART_BYTES + 3))).toBe(true);
    expect(compositeSha256(partSums)).toMatch(/-3$/);
  });

  it("sends a file of at most one part as one PutObject", async () => {
    const small = await stageBlob(Readable.from([data.subarray(0, MIN_PART_BYTES)]), { dir, maxBytes: 64 * MiB });
    try {
      await store.putFile("files/small", small);
    } finally {
      await discardStaged(small);
    }
    expect(requestsOf("CreateMultipartUpload")).toHaveLength(0);
    expect(requestsOf("PutObject")).toHaveLength(1);
  });

  it("aborts the upload when a part is refused, leaving no object and no parts", async () => {
    void standIn.inject({ op: "UploadPart", kind: "error", status: 403, code: "AccessDenied", message: "Access Denied" });
    const err = await failure(store.putFile("files/refused", staged));
    expect(err.code).toBe("AccessDenied");
    expect(requestsOf("AbortMultipartUpload").map((r) => r.status)).toEqual([204]);
    expect(requestsOf("CompleteMultipartUpload")).toHaveLength(0);
    await expectNothingLeft("files/refused");
  });

  it("aborts the upload when the caller gives up mid-part (a client gone), leaving nothing", async () => {
    const hit = standIn.inject({ op: "UploadPart", kind: "hang" });
    const controller = new AbortController();
    const put = store.putFile("files/abandoned", staged, { signal: controller.signal });
    await hit;
    controller.abort();
    const err = await failure(put);
    expect(err.code).toBe("Aborted");
    expect(requestsOf("AbortMultipartUpload").map((r) => r.status)).toEqual([204]);
    await expectNothingLeft("files/abandoned");
  });

  it("retries a part that met a transient 500 and completes", async () => {
    void standIn.inject({ op: "UploadPart", kind: "error", status: 500 });
    await store.putFile("files/retried", staged);
    expect((await store.get("files/retried"))?.equals(data)).toBe(true);
    expect(
      requestsOf("UploadPart")
        .map((r) => r.status)
        .sort(),
    ).toEqual([200, 200, 200, 500]);
  });
});
