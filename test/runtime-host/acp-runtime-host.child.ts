/**
 * A runtime host serving the ACP lane in its own process, so a test can
 * `kill -9` it while the control plane stays up. Reads its configuration
 * (the environment key among it) as one JSON line on stdin, never argv or
 * environment. Writes `{"ready":true}` and then one `{"result":...}` line
 * per finished run to stdout; its log goes to stderr.
 */
import { createInterface } from "node:readline";
import { startRuntimeHost } from "@openma/runtime-host";
import { openStorage } from "@openma/storage";

interface ChildConfig {
  apiUrl: string;
  environmentId: string;
  environmentKey: string;
  databaseUrl: string;
  pgSchema: string;
  dataDir: string;
  stateDir: string;
  model: { baseUrl: string; apiKey: string };
  fenceTtlMs: number;
  maxIdleMs: number;
}

const line = await new Promise<string>((resolve) => createInterface({ input: process.stdin }).once("line", resolve));
const config = JSON.parse(line) as ChildConfig;
const storage = await openStorage({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, pgSchema: config.pgSchema });
const write = (level: string) => (obj: object, msg: string) => process.stderr.write(`${JSON.stringify({ level, msg, ...obj })}\n`);
const ttl = config.fenceTtlMs;
const host = await startRuntimeHost({
  driver: "bubblewrap",
  harness: { type: "acp", model: config.model, maxIdleMs: config.maxIdleMs },
  apiUrl: config.apiUrl,
  environmentId: config.environmentId,
  environmentKey: config.environmentKey,
  storage,
  stateDir: config.stateDir,
  logger: { info: write("info"), warn: write("warn"), error: write("error") },
  concurrency: 1,
  timings: { leaseTtlMs: ttl, renewEveryMs: Math.floor(ttl / 3), safetyMarginMs: Math.floor(ttl / 6), renewTimeoutMs: Math.floor(ttl / 6) },
  onResult: (_ticket, result) => process.stdout.write(`${JSON.stringify({ result: { type: result.type } })}\n`),
});
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
process.once("SIGTERM", () => {
  void host
    .close()
    .then(() => storage.close())
    .finally(() => process.exit(0));
});
