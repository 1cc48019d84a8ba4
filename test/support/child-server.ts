/**
 * A second, real `openma serve` process sharing a test's storage: same
 * Postgres database and schema (via OPENMA_PG_SCHEMA), its own data dir.
 * Used to show that clients of different processes see each other's writes
 * and wake-ups (the Postgres change bus is LISTEN/NOTIFY).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Anthropic from "@anthropic-ai/sdk";
import type { TestStorage } from "@openma/storage/testing";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
const CLI = join(REPO_ROOT, "apps/openma/src/cli.ts");

export interface ChildServer {
  baseURL: string;
  client: Anthropic;
  close(): Promise<void>;
}

/**
 * Starts `node --import tsx apps/openma/src/cli.ts serve` on a free port and waits for its listening line.
 * Its brain is off unless `env` turns it on (`OPENMA_BRAIN: "on"`).
 */
export async function startChildServer(store: TestStorage, apiKey: string, env: Record<string, string> = {}): Promise<ChildServer> {
  if (!store.databaseUrl || !store.pgSchema) throw new Error("a child server shares storage only through Postgres");
  const dataDir = mkdtempSync(join(tmpdir(), "openma-child-"));
  const child = spawn(process.execPath, ["--import", "tsx", CLI, "serve"], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      DATABASE_URL: store.databaseUrl,
      OPENMA_PG_SCHEMA: store.pgSchema,
      OPENMA_DATA_DIR: dataDir,
      OPENMA_API_KEY: apiKey,
      LOG_LEVEL: "silent",
      OPENMA_BRAIN: "off",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  try {
    const baseURL = await listeningUrl(child);
    return {
      baseURL,
      client: new Anthropic({ baseURL, apiKey, maxRetries: 0 }),
      close: () => stop(child).finally(() => rmSync(dataDir, { recursive: true, force: true })),
    };
  } catch (err) {
    await stop(child);
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
}

function listeningUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    let stdout = "";
    let stderr = "";
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
      const match = /listening on (http:\/\/\S+)/.exec(stdout);
      if (match?.[1]) resolvePromise(match[1]);
    });
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    child.once("exit", (code) => reject(new Error(`openma serve exited (${code}) before listening: ${stderr || stdout}`)));
    child.once("error", reject);
  });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolvePromise) => child.once("exit", () => resolvePromise()));
  child.kill("SIGTERM");
  await exited;
}
