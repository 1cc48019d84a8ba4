/**
 * A real `openma serve` child process (`node --import tsx apps/openma/src/cli.ts serve`) on a free port.
 *
 * `startServeProcess` runs it on SQLite in its data dir, or on a test's Postgres database and schema (via
 * OPENMA_PG_SCHEMA); the benchmarks use it as the server they measure. `startChildServer` is the second
 * process sharing a test's Postgres storage, used to show that clients of different processes see each
 * other's writes and wake-ups (the Postgres change bus is LISTEN/NOTIFY).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Anthropic from "@anthropic-ai/sdk";
import type { TestStorage } from "@openma/storage/testing";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
const CLI = join(REPO_ROOT, "apps/openma/src/cli.ts");
/** How much of a child's latest output `output()` keeps. */
const OUTPUT_TAIL = 16_384;

export interface ChildServer {
  baseURL: string;
  client: Anthropic;
  /** The admin key it was started with (a restart on the same data must present the same one). */
  apiKey: string;
  dataDir: string;
  /** The child's process id (the execution worker's owner ids carry it as `pid<N>`). */
  pid: number;
  /** The last lines the child wrote (stdout and stderr: its structured logs), for a failure's diagnosis. */
  output(): string;
  /** SIGTERM (`openma serve` closes its sandboxes before exiting), then removes the data dir unless the caller owns it. */
  close(): Promise<void>;
  /** SIGKILL: no shutdown hook runs, in-flight requests and leases are simply abandoned (the data dir stays). */
  kill9(): Promise<void>;
  /** Sends a signal and returns at once (a drain test watches what follows); the data dir stays. */
  signal(name: NodeJS.Signals): void;
  /** Resolves with the exit code (null when a signal killed it) once the process has exited. */
  readonly exited: Promise<number | null>;
  /** Resolves once the child's output (stdout and stderr) matches, or rejects when it exits first. */
  waitForOutput(pattern: RegExp): Promise<void>;
}

export interface ServeProcessOptions {
  apiKey: string;
  /** Postgres storage to run on (its database and schema); null or absent: SQLite in the data dir. */
  postgres?: Pick<TestStorage, "databaseUrl" | "pgSchema"> | null;
  /** Start on this data dir, which the caller owns (kept on close); default a fresh one removed on close. */
  dataDir?: string;
  /** Added to the child's environment last (brain, sandbox, model, log level...; secrets belong here, never in argv). */
  env?: Record<string, string>;
  /** Listen port (default 0: a free one); a fixed one lets a restarted server keep its clients' URL. */
  port?: number;
  /** How much of the latest output `output()` keeps (default 16 KiB). */
  outputTail?: number;
}

/** Starts `openma serve` and waits for its listening line. */
export async function startServeProcess(options: ServeProcessOptions): Promise<ChildServer> {
  const { apiKey, postgres } = options;
  const ownDataDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), "openma-child-")));
  const removeDataDir = () => (ownDataDir ? rm(dataDir, { recursive: true, force: true }) : Promise.resolve());
  // Secrets go through the environment, never argv.
  const child = spawn(process.execPath, ["--import", "tsx", CLI, "serve"], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      PORT: String(options.port ?? 0),
      HOST: "127.0.0.1",
      // Empty means unset (loadConfig drops empty values): a DATABASE_URL from the caller's shell must not leak in.
      DATABASE_URL: postgres?.databaseUrl ?? "",
      OPENMA_PG_SCHEMA: postgres?.pgSchema ?? "",
      OPENMA_DATA_DIR: dataDir,
      OPENMA_API_KEY: apiKey,
      ...options.env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let tail = "";
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const watchers = new Set<{ pattern: RegExp; resolve: () => void }>();
  const keep = (chunk: Buffer | string) => {
    tail = (tail + chunk.toString()).slice(-(options.outputTail ?? OUTPUT_TAIL));
    for (const w of watchers) if (w.pattern.test(tail)) w.resolve();
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  try {
    const baseURL = await listeningUrl(child);
    // A listening child has a pid; a missing one must never turn into kill(-1) or kill(0) in a test.
    if (child.pid === undefined) throw new Error("the server child has no pid");
    return {
      baseURL,
      client: new Anthropic({ baseURL, apiKey, maxRetries: 0 }),
      apiKey,
      dataDir,
      pid: child.pid,
      output: () => tail,
      close: async () => {
        await stop(child);
        await removeDataDir();
      },
      signal: (name) => {
        child.kill(name);
      },
      exited,
      waitForOutput: (pattern) =>
        new Promise<void>((resolve, reject) => {
          if (pattern.test(tail)) return resolve();
          const watcher = {
            pattern,
            resolve: () => {
              watchers.delete(watcher);
              resolve();
            },
          };
          watchers.add(watcher);
          void exited.then(() => {
            if (watchers.delete(watcher)) reject(new Error(`the server exited before printing ${pattern}:\n${tail}`));
          });
        }),
      kill9: async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
        child.kill("SIGKILL");
        await exited;
      },
    };
  } catch (err) {
    await stop(child);
    await removeDataDir();
    throw err;
  }
}

/**
 * The second server of a test sharing `store` (Postgres only: SQLite is one process's file).
 * Its brain is off unless `env` turns it on (`OPENMA_BRAIN: "on"`).
 */
export async function startChildServer(store: TestStorage, apiKey: string, env: Record<string, string> = {}): Promise<ChildServer> {
  if (!store.databaseUrl || !store.pgSchema) throw new Error("a child server shares storage only through Postgres");
  return startServeProcess({ apiKey, postgres: store, env: { LOG_LEVEL: "silent", OPENMA_BRAIN: "off", ...env } });
}

function listeningUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let stdout = "";
    let stderr = "";
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      if (stdout.length < 65_536) stdout += chunk;
      const match = /listening on (http:\/\/\S+)/.exec(stdout);
      if (match?.[1]) resolve(match[1]);
    });
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-8_192);
    });
    child.once("exit", (code) => reject(new Error(`openma serve exited (${code}) before listening: ${stderr || stdout}`)));
    child.once("error", reject);
  });
}

/** SIGTERM: `openma serve` closes its sandboxes before exiting (and force-exits itself after 10 s). */
async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  await exited;
}
