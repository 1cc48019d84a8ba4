/** Fault injection as the official client experiences it. */
import { GetObjectCommand, HeadObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type S3StandIn, startS3StandIn } from "./server.ts";
import { CREDENTIALS, clientFor, s3Failure } from "./testkit.ts";

const BUCKET = "faults";
let standIn: S3StandIn;
let client: S3Client;

beforeEach(async () => {
  standIn = await startS3StandIn({ ...CREDENTIALS, buckets: [BUCKET] });
  client = clientFor(standIn);
  await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: "obj", Body: Buffer.alloc(100_000, "z") }));
});

afterEach(async () => {
  client.destroy();
  await standIn.close();
});

const getBytes = async (c: S3Client, opts: { ChecksumMode?: "ENABLED" } = {}) => {
  const res = await c.send(new GetObjectCommand({ Bucket: BUCKET, Key: "obj", ...opts }));
  return Buffer.from(await res.Body!.transformToByteArray());
};

describe("fault injection", () => {
  it("fails the next requests of one operation with an S3 error, then recovers", async () => {
    void standIn.inject({ op: "PutObject", kind: "error" }, 2);
    expect(standIn.pendingFaults).toBe(2);
    const put = () => client.send(new PutObjectCommand({ Bucket: BUCKET, Key: "k", Body: "x" }));
    // Other operations are unaffected.
    await client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "obj" }));
    expect(await s3Failure(put())).toMatchObject({ name: "InternalError", status: 500 });
    const custom = standIn.inject({ op: "PutObject", kind: "error", status: 503, code: "SlowDown", message: "Reduce your request rate." });
    expect(await s3Failure(put())).toMatchObject({ name: "InternalError", status: 500 });
    expect(await s3Failure(put())).toMatchObject({ name: "SlowDown", status: 503, message: "Reduce your request rate." });
    await expect(custom).resolves.toBeUndefined();
    await put();
    expect(standIn.pendingFaults).toBe(0);
  });

  it("lets the SDK's retries ride out a transient error", async () => {
    const retrying = clientFor(standIn, { maxAttempts: 3 });
    try {
      void standIn.inject({ op: "GetObject", kind: "error", status: 500 }, 2);
      expect((await getBytes(retrying)).length).toBe(100_000);
      expect(standIn.requests.filter((r) => r.op === "GetObject").map((r) => r.status)).toEqual([500, 500, 200]);
    } finally {
      retrying.destroy();
    }
  });

  it("resets the connection", async () => {
    void standIn.inject({ op: "HeadObject", kind: "reset" });
    const failed = await s3Failure(client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "obj" })));
    expect(failed.status).toBeUndefined();
    await client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "obj" }));
    expect(standIn.requests.filter((r) => r.op === "HeadObject").map((r) => r.status)).toEqual([0, 200]);
  });

  it("truncates a download after the headers promised the full length", async () => {
    void standIn.inject({ op: "GetObject", kind: "truncate", keepBytes: 10 });
    await expect(getBytes(client)).rejects.toThrow();
    expect((await getBytes(client)).length).toBe(100_000);
  });

  it("corrupts a download so that the SDK's checksum validation catches it", async () => {
    void standIn.inject({ op: "GetObject", kind: "corrupt" });
    await expect(getBytes(client, { ChecksumMode: "ENABLED" })).rejects.toThrow(/Checksum mismatch/);
    // A client that does not ask for checksums sees nothing wrong: same length, one byte different.
    const trusting = clientFor(standIn, { responseChecksumValidation: "WHEN_REQUIRED" });
    try {
      void standIn.inject({ op: "GetObject", kind: "corrupt" });
      const damaged = await getBytes(trusting);
      expect(damaged.length).toBe(100_000);
      expect(damaged.equals(Buffer.alloc(100_000, "z"))).toBe(false);
    } finally {
      trusting.destroy();
    }
  });

  it("corrupts an upload in transit so the server rejects it, plain or aws-chunked", async () => {
    void standIn.inject({ op: "PutObject", kind: "corrupt" }, 2);
    const plain = client.send(new PutObjectCommand({ Bucket: BUCKET, Key: "c1", Body: Buffer.from("plain body") }));
    expect(await s3Failure(plain)).toMatchObject({ name: "XAmzContentSHA256Mismatch", status: 400 });
    const { Readable } = await import("node:stream");
    const streamed = client.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: "c2", Body: Readable.from([Buffer.from("streamed body")]), ContentLength: 13 }),
    );
    expect(await s3Failure(streamed)).toMatchObject({ name: "BadDigest", status: 400 });
    expect(await s3Failure(client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "c2" })))).toMatchObject({ status: 404 });
  });

  it("hangs until the client aborts, and closing the stand-in releases a hanging request", async () => {
    const arrived = standIn.inject({ op: "GetObject", kind: "hang" });
    const controller = new AbortController();
    const pending = client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "obj" }), { abortSignal: controller.signal });
    await arrived;
    controller.abort();
    expect((await s3Failure(pending)).name).toBe("AbortError");
    const second = standIn.inject({ op: "HeadObject", kind: "hang" });
    const stuck = client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "obj" }));
    await second;
    await standIn.close();
    expect((await s3Failure(stuck)).status).toBeUndefined();
  });

  it("clears queued faults", async () => {
    void standIn.inject({ op: "GetObject", kind: "error" }, 3);
    standIn.clearFaults();
    expect(standIn.pendingFaults).toBe(0);
    expect((await getBytes(client)).length).toBe(100_000);
    expect(() => standIn.inject({ op: "GetObject", kind: "error" }, 0)).toThrow(/positive integer/);
  });
});
