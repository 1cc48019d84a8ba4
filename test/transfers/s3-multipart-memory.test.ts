/**
 * S3 uploads hold part buffers, not parts (docs/transfers.md#memory-budget):
 * a child process under the memory probe places a 256 MiB staged file in the
 * S3 stand-in with 128 MiB parts, two in flight. Its growth in RSS and in heap
 * + off-heap memory stays under 96 MiB, less than one part (a store that held
 * its parts in memory, as `@aws-sdk/lib-storage`'s `Upload` does, would hold
 * two or three: 256-384 MiB); the bound leaves room for V8's ~64 MiB of
 * headroom before it collects finished Buffers. The object is byte-exact.
 */
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { GetObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { type S3StandIn, startS3StandIn } from "@openma/s3-standin";
import { discardStaged, type StagedBlob, stageBlob } from "@openma/storage";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const MiB = 1024 * 1024;
const FILE_SIZE = 256 * MiB;
const PART = 128 * MiB;
const BOUND = 96 * MiB;
const BUCKET = "openma-memory";
const CREDENTIALS = { accessKeyId: "AKIAS3MEMORYTEST0001", secretAccessKey: "s3-memory-test-secret/0123456789+abcd" };
const PROBE = fileURLToPath(new URL("../support/memory-probe.mjs", import.meta.url));
const CHILD = fileURLToPath(new URL("./s3-put-file.child.ts", import.meta.url));

interface Peaks {
  rss: number;
  heapUsed: number;
  offHeap: number;
}

/** Random bytes generated a MiB at a time, never the whole file in this process at once. */
function randomStream(size: number, hash: ReturnType<typeof createHash>): Readable {
  let left = size;
  return new Readable({
    read() {
      const n = Math.min(MiB, left);
      left -= n;
      if (n === 0) return void this.push(null);
      const chunk = randomBytes(n);
      hash.update(chunk);
      this.push(chunk);
    },
  });
}

describe("a multipart S3 upload in a child process", () => {
  let standIn: S3StandIn;
  let dir: string;
  let staged: StagedBlob;
  let warm: StagedBlob;

  beforeAll(async () => {
    standIn = await startS3StandIn({ ...CREDENTIALS, buckets: [BUCKET], maxObjectBytes: FILE_SIZE + MiB });
    dir = await mkdtemp(join(tmpdir(), "openma-s3-memory-"));
    staged = await stageBlob(randomStream(FILE_SIZE, createHash("sha256")), { dir, maxBytes: FILE_SIZE });
    warm = await stageBlob(randomStream(6 * MiB, createHash("sha256")), { dir, maxBytes: 6 * MiB });
  }, 120_000);

  afterAll(async () => {
    if (staged) await discardStaged(staged);
    if (warm) await discardStaged(warm);
    await rm(dir, { recursive: true, force: true });
    await standIn?.close();
  });

  it("holds stream buffers, not parts, and stores the file byte-exact", async () => {
    const probeFile = join(dir, "peaks.json");
    const child = spawn(process.execPath, ["--import", "tsx", CHILD], {
      env: {
        ...process.env,
        NODE_OPTIONS: `--import ${PROBE}`,
        OPENMA_TEST_MEMORY_PROBE: probeFile,
        OPENMA_S3_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
        OPENMA_S3_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
        OPENMA_TEST_S3_PUT: JSON.stringify({
          endpoint: standIn.endpoint,
          region: standIn.region,
          bucket: BUCKET,
          partBytes: PART,
          bufferBytes: MiB,
          warm,
          staged,
          probeFile,
        }),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(code, stderr).toBe(0);
    expect(stdout).toMatch(/\ndone\n$/);
    const base = JSON.parse(/^baseline (.*)$/m.exec(stdout)![1]!) as Peaks;
    const peak = JSON.parse(readFileSync(probeFile, "utf8")) as Peaks;
    const growth = { rss: peak.rss - base.rss, heap: peak.heapUsed + peak.offHeap - (base.heapUsed + base.offHeap) };
    expect(growth.rss, `RSS growth ${(growth.rss / MiB).toFixed(1)} MiB`).toBeLessThan(BOUND);
    expect(growth.heap, `heap + off-heap growth ${(growth.heap / MiB).toFixed(1)} MiB`).toBeLessThan(BOUND);

    const ops = standIn.requests.map((r) => r.op);
    expect(ops.filter((o) => o === "UploadPart")).toHaveLength(2 + 2);
    expect(ops).not.toContain("PutObject");
    expect(standIn.pendingUploads).toBe(0);
    const client = new S3Client({ endpoint: standIn.endpoint, region: standIn.region, forcePathStyle: true, credentials: CREDENTIALS });
    try {
      const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "files/big" }));
      const hash = createHash("sha256");
      for await (const chunk of got.Body as Readable) hash.update(chunk as Buffer);
      expect(hash.digest("hex")).toBe(staged.sha256);
    } finally {
      client.destroy();
    }
  }, 300_000);
});
