/**
 * Workspace checkpoint benchmark: `npx tsx bench/checkpoint.ts`.
 *
 * For each size in BENCH_SIZES (MiB, default "10,100,1024"; 20 files per MiB,
 * so 100 MiB is the 2,000-file tree) it builds a workspace in a temp dir and
 * measures, in the same run and against the same tree:
 *   full checkpoint (packed, ADR 0029)  vs  tar -cf - . | sha256sum
 *   restore, every byte verified        vs  tar -xf archive.tar
 *   incremental after a 1% change, without and with the stat cache,
 *                                       vs  the full checkpoint (time and bytes written)
 *   on the S3 stand-in (sizes up to BENCH_S3_MAX_MIB, default 100):
 *     full checkpoint                   vs  one PutObject of the tar
 * The full checkpoint is also shown against tar written to a file + fsync.
 * Issue 16's targets are printed as `@@bench` lines (bench/report.ts): full
 * checkpoint and restore <= 1.5x their tar baselines, an incremental after 1%
 * changed (with the stat cache) <= 10% of the full checkpoint's time and
 * <= 3% of its bytes, and the S3 full checkpoint <= 1.5x one PutObject of the tar.
 * Each figure is the median of BENCH_REPS runs (default 3; 1 for sizes over
 * 256 MiB). The page cache is warm for both sides (the tree was just
 * written), so this compares CPU and syscall work, not cold-disk reads.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { createReadStream } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { availableParallelism, cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { type CheckpointCache, createCheckpoint } from "@openma/persistence/checkpoint";
import { chunkBuffer } from "@openma/persistence/chunker";
import { DEFAULT_CONCURRENCY } from "@openma/persistence/concurrency";
import { CountingBlobStore } from "@openma/persistence/instrument";
import { restoreCheckpoint } from "@openma/persistence/restore";
import { seededBytes } from "@openma/persistence/testkit";
import { startS3StandIn } from "@openma/s3-standin";
import { type BlobStore, FsBlobStore, sha256Hex } from "@openma/storage/blobs";
import { S3BlobStore } from "@openma/storage/s3-blobs";
import { reportRatioAtMost } from "./report.ts";

const MiB = 1024 * 1024;
const SIZES = (process.env.BENCH_SIZES ?? "10,100,1024").split(",").map(Number);
const S3_MAX_MIB = Number(process.env.BENCH_S3_MAX_MIB ?? 100);
let TOTAL = 100 * MiB;
let FILES = 2_000;
let REPS = 3;
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? DEFAULT_CONCURRENCY);

/** Deterministic, skewed sizes like a real repo: many small files, a few large ones. */
function fileSizes(): number[] {
  const weights = Array.from({ length: FILES }, (_, i) => {
    const u = ((i * 2654435761) % 1000) / 1000; // cheap deterministic spread in [0, 1)
    return Math.exp(u * 6); // 1 .. ~400: log-uniform
  });
  const sum = weights.reduce((a, b) => a + b, 0);
  const sizes = weights.map((w) => Math.max(1, Math.floor((w / sum) * TOTAL)));
  sizes[0]! += TOTAL - sizes.reduce((a, b) => a + b, 0);
  return sizes;
}

function pathOf(i: number): string {
  return `pkg${i % 10}/mod${Math.floor(i / 10) % 20}/file${i}.bin`;
}

async function generate(root: string): Promise<number[]> {
  const sizes = fileSizes();
  for (let i = 0; i < FILES; i++) {
    const file = join(root, pathOf(i));
    await mkdir(join(file, ".."), { recursive: true });
    await writeFile(file, seededBytes(`file-${i}`, sizes[i]!));
  }
  return sizes;
}

/** Changes 1% of the bytes: a 64 KiB region rewritten in the middle of files of at least 128 KiB. */
async function changeOnePercent(root: string, sizes: number[], round: number): Promise<number> {
  const big = sizes.map((n, i) => [n, i] as const).filter(([n]) => n >= 128 * 1024);
  let changed = 0;
  const edits = Math.round(TOTAL / 100 / (64 * 1024));
  for (let k = 0; k < edits; k++) {
    const i = big[(round * 7919 + k * 127) % big.length]![1];
    const data = seededBytes(`file-${i}`, sizes[i]!);
    const region = 64 * 1024;
    seededBytes(`edit-${round}-${k}`, region).copy(data, Math.floor((data.length - region) / 2));
    await writeFile(join(root, pathOf(i)), data);
    changed += region;
  }
  return changed;
}

/**
 * Isolates the checkpoint pipeline (walk, read, chunk, hash, pack) from the
 * blob store's cost: it keeps only the keys. Copying each 16 MiB pack into
 * fresh memory, as a store that keeps bytes must, costs more than the
 * pipeline itself on this virtualized host (a page fault per 4 KiB).
 */
class DiscardingBlobStore implements BlobStore {
  private readonly keys = new Set<string>();
  async put(key: string): Promise<void> {
    this.keys.add(key);
  }
  async get(): Promise<Buffer | null> {
    return null;
  }
  async delete(key: string): Promise<void> {
    this.keys.delete(key);
  }
  async exists(key: string): Promise<boolean> {
    return this.keys.has(key);
  }
}

function sh(script: string): void {
  const r = spawnSync("sh", ["-c", script], { stdio: ["ignore", "ignore", "inherit"] });
  if (r.status !== 0) throw new Error(`failed: ${script}`);
}

async function timed(fn: () => Promise<unknown> | unknown): Promise<number> {
  // Flush earlier writes first so background writeback does not bill the next measurement.
  execFileSync("sync");
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const rows: string[][] = [];
/** Prints one row and returns the ratio of the medians. */
function report(name: string, ours: number[], baselineName: string, baseline: number[], note = ""): number {
  const o = median(ours);
  const b = median(baseline);
  const label = `${TOTAL / MiB} MiB: ${name}`;
  rows.push([label, `${o.toFixed(0)} ms`, baselineName, `${b.toFixed(0)} ms`, `${(o / b).toFixed(2)}x`, note]);
  console.log(
    `${label}: ${o.toFixed(0)} ms | ${baselineName.replace("\\", "")}: ${b.toFixed(0)} ms | ratio ${(o / b).toFixed(2)}x ${note}`,
  );
  return o / b;
}

/** One `@@bench` target line, the tree size in the metric's name. */
function target(metric: string, measured: number, max: number): void {
  reportRatioAtMost("checkpoint", `${metric} (${TOTAL / MiB} MiB)`, Number(measured.toFixed(4)), max);
}

const S3_CREDENTIALS = { accessKeyId: "AKIABENCHCHECKPOINT", secretAccessKey: "bench-checkpoint-secret/0123456789+abcd" };

/**
 * Full checkpoint into the S3 stand-in (packs PUT two at a time) vs one PUT of the tar: the baseline is
 * the simplest upload of the archive, a single streamed PutObject (one PUT takes up to 5 GB).
 */
async function s3Rows(ws: string, archive: string): Promise<void> {
  const standIn = await startS3StandIn({ ...S3_CREDENTIALS, buckets: ["bench"], maxObjectBytes: 2 * 1024 * MiB });
  const endpoint = { endpoint: standIn.endpoint, region: standIn.region, forcePathStyle: true, credentials: S3_CREDENTIALS };
  const client = new S3Client(endpoint);
  try {
    const ours: number[] = [];
    const tarUpload: number[] = [];
    const size = (await stat(archive)).size;
    for (let r = 0; r < REPS; r++) {
      tarUpload.push(
        await timed(async () => {
          await client.send(
            new PutObjectCommand({ Bucket: "bench", Key: `tar-${r}`, Body: createReadStream(archive), ContentLength: size }),
          );
        }),
      );
      const store = new S3BlobStore({ bucket: "bench", prefix: `run-${r}`, ...endpoint });
      ours.push(
        await timed(async () => {
          const cp = await createCheckpoint(store, ws, { concurrency: CONCURRENCY });
          if (!cp.ok) throw new Error(cp.error.message);
        }),
      );
      store.close();
    }
    const ratio = report(
      "full checkpoint, S3 stand-in",
      ours,
      "one PutObject of the tar",
      tarUpload,
      `tar is ${(size / MiB).toFixed(1)} MiB`,
    );
    target("full checkpoint into the S3 stand-in vs one PutObject of the tar", ratio, 1.5);
  } finally {
    client.destroy();
    await standIn.close();
  }
}

async function main(): Promise<void> {
  for (const mib of SIZES) {
    TOTAL = mib * MiB;
    FILES = Math.max(20, mib * 20);
    REPS = Number(process.env.BENCH_REPS ?? (mib > 256 ? 1 : 3));
    await benchSize();
  }
  const cpu = cpus()[0]?.model ?? "unknown";
  console.log("\n| Operation | OpenMA | Baseline | Baseline time | Ratio | Notes |");
  console.log("|---|---|---|---|---|---|");
  for (const r of rows) console.log(`| ${r.join(" | ")} |`);
  console.log(
    `\nMachine: ${availableParallelism()} CPUs (${cpu}), Node ${process.version}, ${new Date().toISOString().slice(0, 10)}, ` +
      `load average at end ${loadavg()
        .map((l) => l.toFixed(1))
        .join(" / ")}, concurrency ${CONCURRENCY}`,
  );
}

async function benchSize(): Promise<void> {
  const base = await mkdtemp(join(tmpdir(), "openma-bench-checkpoint-"));
  try {
    const ws = join(base, "ws");
    const sizes = await generate(ws);
    const archive = join(base, "archive.tar");
    sh(`tar -cf '${archive}' -C '${ws}' .`);
    const tarHash = () => sh(`tar -cf - -C '${ws}' . | sha256sum > /dev/null`);

    // Full checkpoint, each into an empty store.
    const full: number[] = [];
    const tarFull: number[] = [];
    const tarFile: number[] = [];
    const scratch = join(base, "scratch.tar");
    let store = new CountingBlobStore(new FsBlobStore(join(base, "store-0")));
    let id = "";
    for (let r = 0; r < REPS; r++) {
      tarFull.push(await timed(tarHash));
      // A second, closer reference: an archive actually written to disk and fsynced.
      tarFile.push(await timed(() => sh(`tar -cf '${scratch}' -C '${ws}' . && sync '${scratch}'`)));
      await rm(scratch);
      store = new CountingBlobStore(new FsBlobStore(join(base, `store-${r}`)));
      full.push(
        await timed(async () => {
          const cp = await createCheckpoint(store, ws, { concurrency: CONCURRENCY });
          if (!cp.ok) throw new Error(cp.error.message);
          id = cp.id;
        }),
      );
    }
    const fullTraffic = store.reset();
    const fullRatio = report(
      "full checkpoint",
      full,
      "tar -cf - . \\| sha256sum",
      tarFull,
      `${(fullTraffic.putBytes / MiB).toFixed(1)} MiB written as ${fullTraffic.puts} fsynced objects (packs + manifest)`,
    );
    target("full checkpoint into the local blob store vs tar -cf - . | sha256sum", fullRatio, 1.5);
    report("full checkpoint", full, "tar -cf archive.tar . && sync archive.tar", tarFile, "same run, second reference");
    // The CPU floor of any content-defined, content-addressed checkpoint on one thread: cut points
    // and a SHA-256 per chunk over the tree's bytes already in memory (no I/O at all).
    if (TOTAL <= 256 * MiB) {
      const bytes = await Promise.all(sizes.map((_, i) => readFile(join(ws, pathOf(i)))));
      const floor: number[] = [];
      for (let r = 0; r < REPS; r++) {
        floor.push(
          await timed(() => {
            for (const b of bytes) for (const c of chunkBuffer(b)) sha256Hex(c);
          }),
        );
      }
      report(
        "chunk + sha256 of the bytes in memory (one thread)",
        floor,
        "tar -cf - . \\| sha256sum",
        tarFull,
        "CPU floor: no reads, no writes",
      );
    }
    const memory: number[] = [];
    for (let r = 0; r < REPS; r++) {
      memory.push(await timed(async () => createCheckpoint(new DiscardingBlobStore(), ws, { concurrency: CONCURRENCY })));
    }
    report(
      "full checkpoint into a store that keeps nothing",
      memory,
      "tar -cf - . \\| sha256sum",
      tarFull,
      "pipeline only: walk, read, chunk, hash, pack",
    );

    // Restore into a fresh directory vs tar -x of the same tree.
    const restore: number[] = [];
    const untar: number[] = [];
    for (let r = 0; r < REPS; r++) {
      const target = join(base, `restore-${r}`);
      const tarTarget = join(base, `untar-${r}`);
      await mkdir(tarTarget);
      untar.push(await timed(() => sh(`tar -xf '${archive}' -C '${tarTarget}'`)));
      restore.push(
        await timed(async () => {
          const res = await restoreCheckpoint(store, id, target, { concurrency: CONCURRENCY });
          if (!res.ok) throw new Error(res.error.message);
        }),
      );
      await rm(target, { recursive: true });
      await rm(tarTarget, { recursive: true });
    }
    target("restore, every byte verified, vs tar -xf", report("restore (verify every byte)", restore, "tar -xf archive.tar", untar), 1.5);

    // Incremental: a fresh 1% change before each run, checkpointed into the store holding the previous
    // state. Without a cache every file is read and chunked (the previous checkpoint is the `base`
    // whose packs are reused); with its cache only files whose inode/size/mtime/ctime changed are read.
    // Both are compared with the full checkpoint: time and bytes written.
    const pct = (n: number) => ((100 * n) / TOTAL).toFixed(2);
    let cache: CheckpointCache | undefined;
    for (const useCache of [false, true]) {
      const inc: number[] = [];
      let last = { uploaded: 0, puts: 0, putBytes: 0, cachedFiles: 0, changed: 0 };
      for (let r = 0; r < REPS; r++) {
        const changed = await changeOnePercent(ws, sizes, (useCache ? 100 : 0) + r + 1);
        store.reset();
        inc.push(
          await timed(async () => {
            const cp = await createCheckpoint(store, ws, {
              concurrency: CONCURRENCY,
              ...(useCache && cache ? { cache } : { base: id }),
            });
            if (!cp.ok) throw new Error(cp.error.message);
            cache = cp.cache;
            id = cp.id;
            last = {
              uploaded: cp.stats.uploadedBytes,
              puts: store.traffic.puts,
              putBytes: store.traffic.putBytes,
              cachedFiles: cp.stats.cachedFiles,
              changed,
            };
          }),
        );
      }
      const incRatio = report(
        `incremental checkpoint, 1% changed, ${useCache ? "with stat cache" : "no cache (reads all)"}`,
        inc,
        "full checkpoint",
        full,
        `changed ${pct(last.changed)}%, wrote ${(last.putBytes / MiB).toFixed(2)} MiB = ${((100 * last.putBytes) / fullTraffic.putBytes).toFixed(2)}% of the full checkpoint's bytes in ${last.puts} objects` +
          (useCache ? `, ${last.cachedFiles} files not read` : ""),
      );
      // The target is the incremental a host actually runs: with the previous checkpoint's stat cache.
      if (useCache) {
        target("incremental checkpoint after 1% changed, time vs the full checkpoint's", incRatio, 0.1);
        target(
          "incremental checkpoint after 1% changed, bytes written vs the full checkpoint's",
          last.putBytes / fullTraffic.putBytes,
          0.03,
        );
      }
    }

    if (TOTAL / MiB <= S3_MAX_MIB) await s3Rows(ws, archive);
  } finally {
    await rm(base, { recursive: true, force: true });
  }
}

await main();
