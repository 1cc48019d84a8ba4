/**
 * Large transfers against a real `openma serve` child (docs/transfers.md):
 *   1. memory: the server's RSS (from /proc, sampled every 50 ms) while 8 uploads
 *      and 8 slow downloads of a 300 MB file run at once, against its idle RSS
 *      (target: peak ≤ idle + 256 MB);
 *   2. throughput: one upload and one download of the file, against `cp` of the
 *      same file on the same disk in the same run.
 * Run: npm run bench:transfers [-- <size MB, 300> <concurrency, 8> <slow reader MB/s, 20>]
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createReadStream, readFileSync, statSync } from "node:fs";
import { mkdtemp, open, rm } from "node:fs/promises";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServeProcess } from "../test/support/child-server.ts";
import { reportTarget } from "./report.ts";

const SIZE_MB = Number(process.argv[2] ?? 300);
const CONCURRENCY = Number(process.argv[3] ?? 8);
const SLOW_MB_PER_S = Number(process.argv[4] ?? 20);
const MB = 1024 * 1024;
const API_KEY = "sk-ant-api03-bench-transfers-key-0123456789";

const rssOf = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) * 1024;
const mb = (bytes: number) => (bytes / MB).toFixed(1);

async function makeFile(path: string, bytes: number): Promise<void> {
  const fh = await open(path, "w");
  const chunk = randomBytes(4 * MB);
  for (let done = 0; done < bytes; done += chunk.length) await fh.write(chunk, 0, Math.min(chunk.length, bytes - done));
  await fh.sync();
  await fh.close();
}

function upload(baseURL: string, path: string): Promise<string> {
  const size = statSync(path).size;
  const boundary = `bench${randomBytes(8).toString("hex")}`;
  const head = Buffer.from(
    `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="big.bin"\r\ncontent-type: application/octet-stream\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  return new Promise((resolve, reject) => {
    const req = request(new URL("/v1/files", baseURL), {
      method: "POST",
      headers: {
        "x-api-key": API_KEY,
        "content-type": `multipart/form-data; boundary=${boundary}`,
        "content-length": head.length + size + tail.length,
      },
    });
    req.on("response", (res) => {
      let body = "";
      res.on("data", (c: Buffer) => {
        body += c.toString();
      });
      res.on("end", () => (res.statusCode === 200 ? resolve((JSON.parse(body) as { id: string }).id) : reject(new Error(body))));
    });
    req.on("error", reject);
    req.write(head);
    const file = createReadStream(path, { highWaterMark: MB });
    file.pipe(req, { end: false });
    file.on("end", () => req.end(tail));
  });
}

/** Reads the file at most `mbPerSecond` (0: as fast as possible), pausing the socket in between. */
function download(baseURL: string, id: string, mbPerSecond: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(new URL(`/v1/files/${id}/content`, baseURL), { headers: { "x-api-key": API_KEY } });
    req.on("response", (res) => {
      const started = Date.now();
      let got = 0;
      res.on("data", (c: Buffer) => {
        got += c.length;
        if (mbPerSecond <= 0) return;
        const due = started + (got / MB / mbPerSecond) * 1000;
        const wait = due - Date.now();
        if (wait > 5) {
          res.pause();
          setTimeout(() => res.resume(), wait);
        }
      });
      res.on("end", () => resolve(got));
      res.on("error", reject);
    });
    req.on("error", reject).end();
  });
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "openma-bench-transfers-"));
  const file = join(dir, "big.bin");
  const srv = await startServeProcess({
    apiKey: API_KEY,
    dataDir: join(dir, "data"),
    env: {
      LOG_LEVEL: "silent",
      OPENMA_BRAIN: "off",
      OPENMA_AUTO_PROVISION: "off",
      OPENMA_MAX_CONCURRENT_TRANSFERS: String(CONCURRENCY * 2),
    },
  });
  try {
    await makeFile(file, SIZE_MB * MB);

    // Baseline: cp of the same file on the same disk (with its fsync, as an upload does).
    let t0 = performance.now();
    execFileSync("cp", [file, join(dir, "copy.bin")]);
    execFileSync("sync", [join(dir, "copy.bin")]);
    const cpSeconds = (performance.now() - t0) / 1000;
    await rm(join(dir, "copy.bin"));

    // Throughput of one transfer each way.
    t0 = performance.now();
    const id = await upload(srv.baseURL, file);
    const upSeconds = (performance.now() - t0) / 1000;
    t0 = performance.now();
    await download(srv.baseURL, id, 0);
    const downSeconds = (performance.now() - t0) / 1000;

    // Memory under load: idle first (after the warm-up above), then 8 uploads and 8 slow downloads at once.
    await new Promise((r) => setTimeout(r, 1000));
    const idle = rssOf(srv.pid);
    let peak = idle;
    const sampler = setInterval(() => {
      peak = Math.max(peak, rssOf(srv.pid));
    }, 50);
    t0 = performance.now();
    await Promise.all([
      ...Array.from({ length: CONCURRENCY }, () => upload(srv.baseURL, file)),
      ...Array.from({ length: CONCURRENCY }, () => download(srv.baseURL, id, SLOW_MB_PER_S)),
    ]);
    const loadSeconds = (performance.now() - t0) / 1000;
    clearInterval(sampler);

    const delta = peak - idle;
    console.log(`transfers: ${CONCURRENCY} uploads + ${CONCURRENCY} downloads (${SLOW_MB_PER_S} MB/s readers) of ${SIZE_MB} MB each`);
    console.log(
      `  server RSS idle ${mb(idle)} MB, peak ${mb(peak)} MB: +${mb(delta)} MB, ratio ${(peak / idle).toFixed(2)} (target +256 MB: ${delta <= 256 * MB ? "met" : "MISSED"})`,
    );
    reportTarget({
      bench: "transfers",
      metric: `server RSS growth, ${CONCURRENCY} uploads + ${CONCURRENCY} slow downloads of ${SIZE_MB} MB, over idle`,
      target: "<= +256 MB",
      measured: delta / MB,
      unit: "MB",
      pass: delta <= 256 * MB,
    });
    reportTarget({
      bench: "transfers",
      metric: `one upload of ${SIZE_MB} MB, throughput vs cp (+ sync) of the file`,
      target: "none (recorded)",
      measured: cpSeconds / upSeconds,
      unit: "x",
      pass: true,
    });
    console.log(`  under load: ${((2 * CONCURRENCY * SIZE_MB) / loadSeconds).toFixed(0)} MB/s in all over ${loadSeconds.toFixed(1)} s`);
    console.log(`  cp of the file: ${(SIZE_MB / cpSeconds).toFixed(0)} MB/s (${cpSeconds.toFixed(2)} s)`);
    console.log(
      `  one upload: ${(SIZE_MB / upSeconds).toFixed(0)} MB/s (${upSeconds.toFixed(2)} s), ${(cpSeconds / upSeconds).toFixed(2)}× cp`,
    );
    console.log(
      `  one download: ${(SIZE_MB / downSeconds).toFixed(0)} MB/s (${downSeconds.toFixed(2)} s), ${(cpSeconds / downSeconds).toFixed(2)}× cp`,
    );
  } finally {
    await srv.close();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
