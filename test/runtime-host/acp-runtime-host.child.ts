/**
 * A runtime host serving the ACP lane in its own process, so a test can
 * `kill -9` it while the control plane stays up. Reads its configuration
 * (the environment key among it) as one JSON line on stdin, never argv or
 * environment. Writes `{"ready":true}` and then one `{"result":...}` line
 * per finished run to stdout; its log goes to stderr.
 *
 * Later stdin lines `{"hold":"<turn id>"}` hold that turn's fenced commit:
 * the host's workspace checkpoint for the turn is created (uploaded, not
 * published) and then never returns, after `{"held":{...}}` is written to
 * stdout; the test kills the process there (a crash between the turn's
 * published idle and its commit). The hold wraps the host's workspace port
 * through `startRuntimeHost`'s `instrument` option, from outside.
 */
import { createInterface } from "node:readline";
import type { WorkspacePersistencePort } from "@openma/contract";
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

const say = (message: object) => process.stdout.write(`${JSON.stringify(message)}\n`);
const holds = new Set<string>();
const lines = createInterface({ input: process.stdin });
const line = await new Promise<string>((resolve) => lines.once("line", resolve));
lines.on("line", (next) => {
  const { hold } = JSON.parse(next) as { hold?: string };
  if (hold) holds.add(hold);
  say({ armed: hold });
});
const config = JSON.parse(line) as ChildConfig;
const storage = await openStorage({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, pgSchema: config.pgSchema });
const write = (level: string) => (obj: object, msg: string) => process.stderr.write(`${JSON.stringify({ level, msg, ...obj })}\n`);
const ttl = config.fenceTtlMs;

/** The workspace port, except that a held turn's checkpoint never returns (its candidate exists, unpublished). */
function holding(port: WorkspacePersistencePort): WorkspacePersistencePort {
  return {
    capabilities: port.capabilities,
    materialize: (input) => port.materialize(input),
    attach: (input) => port.attach(input),
    release: (input) => port.release(input),
    discard: (input) => port.discard(input),
    async checkpoint(input) {
      const created = await port.checkpoint(input);
      // A turn commit's key is `<generation>:turn:<turn id>:workspace-checkpoint` (host/steps/commit.ts).
      const turnId = [...holds].find((id) => input.idempotencyKey.includes(`:turn:${id}:`));
      if (turnId === undefined) return created;
      say({ held: { turnId, candidate: created.candidate.id } });
      return new Promise((_, reject) => input.signal.addEventListener("abort", () => reject(input.signal.reason), { once: true }));
    },
  };
}

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
  instrument: { workspace: holding },
  onResult: (_ticket, result) => say({ result: { type: result.type } }),
});
say({ ready: true });
process.once("SIGTERM", () => {
  void host
    .close()
    .then(() => storage.close())
    .finally(() => process.exit(0));
});
