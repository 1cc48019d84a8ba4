/**
 * A real `openma serve` child process on Postgres that a test can `kill -9`
 * and start again on the same port, so clients holding its URL (the SDK,
 * the official worker) reconnect to the new process as they would after a
 * crash and restart of a production server.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Anthropic from "@anthropic-ai/sdk";
import type { TestStorage } from "@openma/storage/testing";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
const CLI = join(REPO_ROOT, "apps/openma/src/cli.ts");

/** A port that was free a moment ago (the OS hands out a fresh ephemeral port). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (!address || typeof address === "string") throw new Error("no port");
  return address.port;
}

export interface CrashableServer {
  baseURL: string;
  client: Anthropic;
  /** The process's OPENMA_DATA_DIR (kept across restarts). */
  dataDir: string;
  /** Starts the process (again), on the same port and storage; `env` adds to the creation-time variables. */
  start(env?: Record<string, string>): Promise<void>;
  /** What the process(es) wrote to stdout and stderr so far (all starts), for a failing test's message. */
  logs(): string;
  /** Graceful stop (SIGTERM) that keeps the data dir, for a restart with other settings. */
  stop(): Promise<void>;
  /** SIGKILL: no shutdown hook runs, in-flight requests and leases are simply abandoned. */
  kill9(): Promise<void>;
  /** Graceful stop (SIGTERM) and cleanup of the data dir. */
  close(): Promise<void>;
}

export async function crashableServer(store: TestStorage, apiKey: string, env: Record<string, string>): Promise<CrashableServer> {
  if (!store.databaseUrl || !store.pgSchema) throw new Error("a crashable server keeps its state in Postgres");
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), "openma-crash-"));
  const baseURL = `http://127.0.0.1:${port}`;
  let child: ChildProcess | null = null;
  let output = "";
  const exited = (c: ChildProcess) =>
    c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise<void>((resolve) => c.once("exit", () => resolve()));

  return {
    baseURL,
    client: new Anthropic({ baseURL, apiKey, maxRetries: 0 }),
    dataDir,
    logs: () => output,
    async start(extra = {}) {
      if (child) throw new Error("already running");
      const c = spawn(process.execPath, ["--import", "tsx", CLI, "serve"], {
        cwd: REPO_ROOT,
        env: {
          ...process.env,
          PORT: String(port),
          HOST: "127.0.0.1",
          DATABASE_URL: store.databaseUrl,
          OPENMA_PG_SCHEMA: store.pgSchema,
          OPENMA_DATA_DIR: dataDir,
          OPENMA_API_KEY: apiKey,
          LOG_LEVEL: "silent",
          ...env,
          ...extra,
        },
        stdio: ["ignore", "pipe", "pipe"],
      });
      child = c;
      c.stdout?.on("data", (chunk: Buffer) => {
        output += chunk.toString("utf8");
      });
      c.stderr?.on("data", (chunk: Buffer) => {
        output += chunk.toString("utf8");
      });
      try {
        await listening(c);
      } catch (err) {
        child = null;
        c.kill("SIGKILL");
        throw err;
      }
    },
    async stop() {
      const c = child;
      child = null;
      if (!c) return;
      c.kill("SIGTERM");
      await exited(c);
    },
    async kill9() {
      const c = child;
      if (!c) return;
      child = null;
      c.kill("SIGKILL");
      await exited(c);
    },
    async close() {
      const c = child;
      child = null;
      if (c) {
        c.kill("SIGTERM");
        await exited(c);
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function listening(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    let stdout = "";
    let stderr = "";
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
      if (/listening on http:\/\//.test(stdout)) resolve();
    });
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    child.once("exit", (code, signal) =>
      reject(new Error(`openma serve exited (${code ?? signal}) before listening: ${stderr || stdout}`)),
    );
    child.once("error", reject);
  });
}
