/**
 * A real `openma serve` child process on Postgres that a test can `kill -9`
 * and start again on the same port, so clients holding its URL (the SDK,
 * the official worker) reconnect to the new process as they would after a
 * crash and restart of a production server. Each start is a
 * `startServeProcess` on the same port, data dir and storage.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import type { TestStorage } from "@openma/storage/testing";
import { type ChildServer, startServeProcess } from "./child-server.ts";
import { freePort } from "./ports.ts";

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
  let child: ChildServer | null = null;
  /** Output of the processes that already ended; the running one's is read live. */
  let earlier = "";
  const retire = (c: ChildServer) => {
    earlier += c.output();
  };

  return {
    baseURL,
    client: new Anthropic({ baseURL, apiKey, maxRetries: 0 }),
    dataDir,
    logs: () => earlier + (child?.output() ?? ""),
    async start(extra = {}) {
      if (child) throw new Error("already running");
      child = await startServeProcess({
        apiKey,
        postgres: store,
        dataDir,
        port,
        env: { LOG_LEVEL: "silent", ...env, ...extra },
        outputTail: Number.POSITIVE_INFINITY,
      });
    },
    async stop() {
      const c = child;
      child = null;
      if (!c) return;
      await c.close();
      retire(c);
    },
    async kill9() {
      const c = child;
      child = null;
      if (!c) return;
      await c.kill9();
      retire(c);
    },
    async close() {
      const c = child;
      child = null;
      if (c) await c.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
