/**
 * Bounded memory under large transfers (docs/transfers.md), measured in a real
 * `openma serve` child process through a memory probe loaded into it: an
 * upload 192× the configured transfer buffer, a download whose reader stops
 * reading (of a file, and of a session's workspace file), a stream that crosses the upload limit, and an upload whose client
 * disconnects halfway.
 *
 * The bound (96 MiB over the value before the transfer, for RSS and for heap +
 * off-heap each) is a few transfer buffers plus V8's ~64 MiB of headroom before
 * it collects finished Buffers (docs/transfers.md#memory-budget). It is half the
 * file: the server before streaming held an upload at least twice (the parsed
 * form and a copy), over 384 MiB for this one, and a download once.
 */
import { createHash, randomBytes } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { copyFile, mkdir, mkdtemp, rm } from "node:fs/promises";
import { type IncomingMessage, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { toFile } from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ChildServer, startServeProcess } from "../support/child-server.ts";

const MiB = 1024 * 1024;
const BUFFER = 1 * MiB;
const LIMIT = 200 * MiB;
const FILE_SIZE = 192 * MiB;
/**
 * Growth over the pre-transfer value allowed for RSS, and for heap + off-heap memory: the process-wide budget
 * docs/transfers.md states (the transfers' buffers plus V8's ~64 MiB of garbage-collection headroom), 128 MiB,
 * against a file of 192 MiB. A peak sampled just before a collection sits near the top of that headroom.
 */
const BOUND = 128 * MiB;
const API_KEY = "sk-ant-api03-transfers-admin-key-0123456789";
const PROBE = fileURLToPath(new URL("../support/memory-probe.mjs", import.meta.url));

interface Peaks {
  rss: number;
  heapUsed: number;
  offHeap: number;
  samples: number;
  resets: number;
}

/** Polls a condition (bounded by a deadline): waiting on the server's state, not a timed sleep for logic. */
async function until<T>(what: string, probe: () => T | undefined | false, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function filesUnder(dir: string): string[] {
  let out: string[] = [];
  let names: import("node:fs").Dirent[];
  try {
    names = readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const d of names) {
    const p = join(dir, d.name);
    out = d.isDirectory() ? out.concat(filesUnder(p)) : out.concat(p);
  }
  return out;
}

describe("large file transfers in a child server", () => {
  let srv: ChildServer;
  let probeDir: string;
  const probeFile = () => join(probeDir, "peaks.json");
  const stagingDir = () => join(srv.dataDir, "blobs", ".staging");
  const blobFiles = () => filesUnder(join(srv.dataDir, "blobs", "files")).sort();
  const readPeaks = (): Peaks => JSON.parse(readFileSync(probeFile(), "utf8")) as Peaks;
  /** The probe's latest peaks, read again when caught mid-write. */
  const peaks = () =>
    until("the probe's peaks", () => {
      try {
        return readPeaks();
      } catch {
        return undefined; // read while it was being written
      }
    });

  /** Resets the probe's peaks to now and returns the baseline once it has sampled again. */
  async function resetPeaks(): Promise<Peaks> {
    const before = (await peaks()).resets;
    process.kill(srv.pid, "SIGUSR2");
    return until("the probe to reset", () => {
      try {
        const p = readPeaks();
        return p.resets > before ? p : undefined;
      } catch {
        return undefined; // read while it was being written
      }
    });
  }

  async function expectWithinBound(base: Peaks, what: string): Promise<void> {
    const now = await peaks();
    const growth = { rss: now.rss - base.rss, heap: now.heapUsed + now.offHeap - (base.heapUsed + base.offHeap) };
    expect(growth.rss, `${what}: RSS growth ${(growth.rss / MiB).toFixed(1)} MiB`).toBeLessThan(BOUND);
    expect(growth.heap, `${what}: heap + off-heap growth ${(growth.heap / MiB).toFixed(1)} MiB`).toBeLessThan(BOUND);
  }

  const rawRequest = (method: string, path: string, headers: Record<string, string | number>) => {
    const url = new URL(path, srv.baseURL);
    // A connection of its own (no keep-alive reuse), so its socket's byte counts are this request's.
    return request(url, { method, agent: false, headers: { "x-api-key": API_KEY, "anthropic-version": "2023-06-01", ...headers } });
  };

  beforeAll(async () => {
    probeDir = await mkdtemp(join(tmpdir(), "openma-probe-"));
    srv = await startServeProcess({
      apiKey: API_KEY,
      env: {
        LOG_LEVEL: "silent",
        // The brain without sandboxes: no turn runs, and the workspace browser serves `<dataDir>/workspaces`.
        OPENMA_BRAIN: "on",
        OPENMA_SANDBOX: "none",
        OPENMA_AUTO_PROVISION: "off",
        OPENMA_TRANSFER_BUFFER_BYTES: String(BUFFER),
        OPENMA_FILE_UPLOAD_LIMIT_BYTES: String(LIMIT),
        NODE_OPTIONS: `--import ${PROBE}`,
        OPENMA_TEST_MEMORY_PROBE: join(probeDir, "peaks.json"),
      },
    });
    await until("the memory probe", () => {
      try {
        return readPeaks().samples >= 0;
      } catch {
        return undefined;
      }
    });
    // Warm-up: the first upload and download load their modules; that is not a transfer's memory.
    const warm = await srv.client.beta.files.upload({ file: await toFile(randomBytes(2 * BUFFER), "warm.bin") });
    await (await srv.client.beta.files.download(warm.id)).arrayBuffer();
  });
  afterAll(async () => {
    await srv?.close();
    if (probeDir) await rm(probeDir, { recursive: true, force: true });
  });

  let uploaded: { id: string; sha256: string };

  it("uploads a file 192× the transfer buffer within the bound, byte-exact", async () => {
    const base = await resetPeaks();
    // Streamed from here (the SDK would first build the whole body in this process): distinct 1 MiB chunks.
    const boundary = "uploadboundary";
    const head = Buffer.from(
      `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="big.bin"\r\ncontent-type: application/octet-stream\r\n\r\n`,
    );
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const hash = createHash("sha256");
    const res = await new Promise<{ status: number | undefined; body: string }>((resolve, reject) => {
      const req = rawRequest("POST", "/v1/files", {
        "content-type": `multipart/form-data; boundary=${boundary}`,
        "content-length": head.length + FILE_SIZE + tail.length,
      });
      req.on("response", (r) => {
        let body = "";
        r.on("data", (c: Buffer) => {
          body += c.toString();
        });
        r.on("end", () => resolve({ status: r.statusCode, body }));
      });
      req.on("error", reject);
      req.write(head);
      const chunk = randomBytes(BUFFER);
      let i = 0;
      const pump = () => {
        while (i < FILE_SIZE / BUFFER) {
          chunk.writeUInt32BE(i++, 0);
          hash.update(chunk);
          if (!req.write(Buffer.from(chunk))) return void req.once("drain", pump);
        }
        req.end(tail);
      };
      pump();
    });
    expect(res.status, res.body).toBe(200);
    await expectWithinBound(base, "upload");
    const meta = JSON.parse(res.body) as { id: string; size_bytes: number };
    expect(meta.size_bytes).toBe(FILE_SIZE);
    const sha256 = hash.digest("hex");
    uploaded = { id: meta.id, sha256 };
    // Placed under its content key; nothing left in staging.
    expect(blobFiles().some((p) => p.endsWith(sha256))).toBe(true);
    expect(filesUnder(stagingDir())).toEqual([]);
  });

  /** A GET of `path` whose reader stops reading: the server stalls on backpressure within the bound, then sends it all. */
  async function stalledDownload(path: string, what: string): Promise<void> {
    const base = await resetPeaks();
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = rawRequest("GET", path, {});
      req.on("response", resolve).on("error", reject).end();
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-length"]).toBe(String(FILE_SIZE));
    res.pause();
    // Wait until the server has stopped sending (socket buffers full), i.e. backpressure holds it.
    let last = -1;
    let steady = 0;
    await until("the download to stall", () => {
      const read = res.socket.bytesRead;
      steady = read === last ? steady + 1 : 0;
      last = read;
      return steady >= 25;
    });
    expect(res.socket.bytesRead).toBeLessThan(FILE_SIZE / 2);
    await expectWithinBound(base, `stalled ${what}`);
    const hash = createHash("sha256");
    let size = 0;
    res.on("data", (chunk: Buffer) => {
      size += chunk.length;
      hash.update(chunk);
    });
    res.resume();
    await new Promise((r) => res.on("end", r));
    expect(size).toBe(FILE_SIZE);
    expect(hash.digest("hex")).toBe(uploaded.sha256);
    await expectWithinBound(base, what);
  }

  it("serves a reader that stops reading from a bounded buffer, then the whole file", async () => {
    await stalledDownload(`/v1/files/${uploaded.id}/content`, "download");
  });

  it("serves a session's workspace file the same way (the console's workspace browser)", async () => {
    const agent = await srv.client.beta.agents.create({ name: "a", model: "claude-test-1" });
    const env = await srv.client.beta.environments.create({ name: "e" });
    const session = await srv.client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    // The workspace a sandbox would have written: the uploaded file's bytes, copied on disk.
    const workspace = join(srv.dataDir, "workspaces", session.id);
    await mkdir(workspace, { recursive: true });
    const blob = blobFiles().find((p) => p.endsWith(uploaded.sha256));
    await copyFile(blob ?? "", join(workspace, "big.bin"));
    await stalledDownload(`/v1/sessions/${session.id}/workspace/content?path=big.bin`, "workspace download");
  });

  it("serves a byte range", async () => {
    const res = await fetch(new URL(`/v1/files/${uploaded.id}/content`, srv.baseURL), {
      headers: { "x-api-key": API_KEY, range: "bytes=1000-1999" },
    });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes 1000-1999/${FILE_SIZE}`);
    expect((await res.arrayBuffer()).byteLength).toBe(1000);
    const bad = await fetch(new URL(`/v1/files/${uploaded.id}/content`, srv.baseURL), {
      headers: { "x-api-key": API_KEY, range: `bytes=${FILE_SIZE}-` },
    });
    expect(bad.status).toBe(416);
    expect(((await bad.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
  });

  it("refuses a declared-too-large upload at once and a streamed one as it crosses the limit, leaving nothing", async () => {
    const before = blobFiles();
    // Declared up front: refused before any body byte is read.
    const early = await new Promise<{ status: number | undefined; body: string }>((resolve, reject) => {
      const req = rawRequest("POST", "/v1/files", { "content-type": "multipart/form-data; boundary=x", "content-length": LIMIT * 2 });
      req.on("response", (res) => {
        let body = "";
        res.on("data", (c: Buffer) => {
          body += c.toString();
        });
        res.on("end", () => {
          resolve({ status: res.statusCode, body });
          req.destroy();
        });
      });
      req.on("error", reject);
      req.flushHeaders();
    });
    expect(early.status).toBe(413);
    expect(JSON.parse(early.body)).toMatchObject({ type: "error", error: { type: "request_too_large" } });

    // Chunked (no length): refused once more than the limit has arrived.
    const base = await resetPeaks();
    const boundary = "transfersboundary";
    const head = Buffer.from(
      `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="huge.bin"\r\ncontent-type: application/octet-stream\r\n\r\n`,
    );
    const streamed = await new Promise<{ status: number | undefined; body: string; sent: number }>((resolve, reject) => {
      const req = rawRequest("POST", "/v1/files", {
        "content-type": `multipart/form-data; boundary=${boundary}`,
        "transfer-encoding": "chunked",
      });
      let sent = 0;
      let done = false;
      const chunk = randomBytes(BUFFER);
      const pump = () => {
        while (!done && sent < LIMIT * 2) {
          sent += chunk.length;
          if (!req.write(chunk)) return void req.once("drain", pump);
        }
      };
      req.on("response", (res) => {
        done = true;
        let body = "";
        res.on("data", (c: Buffer) => {
          body += c.toString();
        });
        res.on("end", () => {
          resolve({ status: res.statusCode, body, sent });
          req.destroy();
        });
      });
      req.on("error", (err) => (done ? undefined : reject(err)));
      req.write(head);
      pump();
    });
    expect(streamed.status).toBe(413);
    expect(JSON.parse(streamed.body)).toMatchObject({ type: "error", error: { type: "request_too_large" } });
    expect(streamed.sent).toBeLessThan(LIMIT * 2);
    await expectWithinBound(base, "refused upload");
    expect(filesUnder(stagingDir())).toEqual([]);
    expect(blobFiles()).toEqual(before);
  });

  it("leaves no blob and no row when the client disconnects mid-upload", async () => {
    const before = blobFiles();
    const rowsBefore = (await srv.client.beta.files.list()).data.length;
    const boundary = "abortboundary";
    const head = Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="cut.bin"\r\n\r\n`);
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const req = rawRequest("POST", "/v1/files", {
      "content-type": `multipart/form-data; boundary=${boundary}`,
      "content-length": head.length + FILE_SIZE + tail.length,
    });
    req.on("error", () => undefined);
    req.write(head);
    const chunk = randomBytes(BUFFER);
    for (let sent = 0; sent < FILE_SIZE / 4; sent += chunk.length) {
      if (!req.write(chunk)) await new Promise((r) => req.once("drain", r));
    }
    // The server is spooling it...
    await until("the upload to be spooling", () => filesUnder(stagingDir()).some((p) => statSync(p).size > 0));
    req.destroy();
    // ...and drops it once the connection is gone.
    await until("the staged upload to be removed", () => filesUnder(stagingDir()).length === 0);
    expect(blobFiles()).toEqual(before);
    expect((await srv.client.beta.files.list()).data.length).toBe(rowsBefore);
  });
});
