/**
 * Workspace checkpoint benchmark: `npx tsx bench/checkpoint.ts`.
 *
 * Builds a 100 MiB / 2,000-file workspace in a temp dir and measures, in the
 * same run and against the same tree:
 *   full checkpoint        vs  tar -cf - . | sha256sum
 *   restore                vs  tar -xf archive.tar
 *   incremental after a 1% change, without and with the stat cache,
 *                          vs  the same tar | sha256sum (what a non-incremental archive costs)
 * The full checkpoint is also shown against tar written to a file + fsync.
 * Each figure is the median of BENCH_REPS runs (default 3). The page cache is
 * warm for both sides (the tree was just written), so this compares CPU and
 * syscall work, not cold-disk reads.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { availableParallelism, cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { type CheckpointCache, createCheckpoint } from "@openma/persistence/checkpoint";
import { DEFAULT_CONCURRENCY } from "@openma/persistence/concurrency";
import { CountingBlobStore } from "@openma/persistence/instrument";
import { restoreCheckpoint } from "@openma/persistence/restore";
import { seededBytes } from "@openma/persistence/testkit";
import { type BlobStore, FsBlobStore } from "@openma/storage/blobs";

const TOTAL = 100 * 1024 * 1024;
const FILES = 2_000;
const REPS = Number(process.env.BENCH_REPS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? DEFAULT_CONCURRENCY);
const MiB = 1024 * 1024;

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

/** Changes 1% of the bytes: a 64 KiB region rewritten in the middle of 16 files of at least 128 KiB. */
async function changeOnePercent(root: string, sizes: number[], round: number): Promise<number> {
  const big = sizes.map((n, i) => [n, i] as const).filter(([n]) => n >= 128 * 1024);
  let changed = 0;
  for (let k = 0; k < 16; k++) {
    const i = big[(round * 7919 + k * 127) % big.length]![1];
    const data = seededBytes(`file-${i}`, sizes[i]!);
    const region = 64 * 1024;
    seededBytes(`edit-${round}-${k}`, region).copy(data, Math.floor((data.length - region) / 2));
    await writeFile(join(root, pathOf(i)), data);
    changed += region;
  }
  return changed;
}

/** Isolates the checkpoint pipeline (walk, read, chunk, hash) from the blob store's durability cost. */
class MemoryBlobStore implements BlobStore {
  private readonly data = new Map<string, Buffer>();
  async put(key: string, bytes: Uint8Array): Promise<void> {
    this.data.set(key, Buffer.from(bytes));
  }
  async get(key: string): Promise<Buffer | null> {
    return this.data.get(key) ?? null;
  }
  async delete(key: string): Promise<void> {
    this.data.delete(key);
  }
  async exists(key: string): Promise<boolean> {
    return this.data.has(key);
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
function report(name: string, ours: number[], baselineName: string, baseline: number[], note = ""): void {
  const o = median(ours);
  const b = median(baseline);
  rows.push([name, `${o.toFixed(0)} ms`, baselineName, `${b.toFixed(0)} ms`, `${(o / b).toFixed(2)}x`, note]);
  console.log(`${name}: ${o.toFixed(0)} ms | ${baselineName.replace("\\", "")}: ${b.toFixed(0)} ms | ratio ${(o / b).toFixed(2)}x ${note}`);
}

async function main(): Promise<void> {
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
    report(
      "full checkpoint",
      full,
      "tar -cf - . \\| sha256sum",
      tarFull,
      `${(fullTraffic.putBytes / MiB).toFixed(1)} MiB written as ${fullTraffic.puts} fsynced objects`,
    );
    report("full checkpoint", full, "tar -cf archive.tar . && sync archive.tar", tarFile, "same run, second reference");
    const memory: number[] = [];
    for (let r = 0; r < REPS; r++) {
      memory.push(await timed(async () => createCheckpoint(new MemoryBlobStore(), ws, { concurrency: CONCURRENCY })));
    }
    report(
      "full checkpoint into an in-memory store",
      memory,
      "tar -cf - . \\| sha256sum",
      tarFull,
      "pipeline only: walk, read, chunk, hash",
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
    report("restore (verify every byte)", restore, "tar -xf archive.tar", untar);

    // Incremental: a fresh 1% change before each run, checkpointed into the store holding the previous
    // state. Without a cache every file is read and chunked; with the previous checkpoint's cache only
    // files whose inode/size/mtime/ctime changed are read.
    const pct = (n: number) => ((100 * n) / TOTAL).toFixed(2);
    let cache: CheckpointCache | undefined;
    for (const useCache of [false, true]) {
      const inc: number[] = [];
      const tarInc: number[] = [];
      let last = { uploaded: 0, puts: 0, cachedFiles: 0, changed: 0 };
      for (let r = 0; r < REPS; r++) {
        const changed = await changeOnePercent(ws, sizes, (useCache ? 100 : 0) + r + 1);
        tarInc.push(await timed(tarHash));
        store.reset();
        inc.push(
          await timed(async () => {
            const cp = await createCheckpoint(store, ws, { concurrency: CONCURRENCY, ...(useCache && cache ? { cache } : {}) });
            if (!cp.ok) throw new Error(cp.error.message);
            cache = cp.cache;
            last = { uploaded: cp.stats.uploadedBytes, puts: store.traffic.puts, cachedFiles: cp.stats.cachedFiles, changed };
          }),
        );
      }
      report(
        `incremental checkpoint, 1% changed, ${useCache ? "with stat cache" : "no cache (reads all)"}`,
        inc,
        "tar -cf - . \\| sha256sum",
        tarInc,
        `changed ${pct(last.changed)}%, uploaded ${(last.uploaded / MiB).toFixed(2)} MiB = ${pct(last.uploaded)}% in ${last.puts} objects` +
          (useCache ? `, ${last.cachedFiles} files not read` : ""),
      );
    }

    const cpu = cpus()[0]?.model ?? "unknown";
    console.log("\n| Operation | OpenMA | Baseline | Baseline time | Ratio | Notes |");
    console.log("|---|---|---|---|---|---|");
    for (const r of rows) console.log(`| ${r.join(" | ")} |`);
    console.log(
      `\nMachine: ${availableParallelism()} CPUs (${cpu}), Node ${process.version}, ${new Date().toISOString().slice(0, 10)}, ` +
        `load average at end ${loadavg()
          .map((l) => l.toFixed(1))
          .join(" / ")}, reps ${REPS}, concurrency ${CONCURRENCY}`,
    );
  } finally {
    await rm(base, { recursive: true, force: true });
  }
}

await main();
