/**
 * Session create → first tool result, per local sandbox driver, against the
 * raw sandbox primitive: `npx tsx bench/session-first-exec.ts [runs=20]`
 * (env `BENCH_WARMUP`, default 3). Needs root, bwrap, Docker with the sandbox
 * images (`npm run provision`) and PostgreSQL; a missing one fails the run.
 *
 * For each storage backend and each driver (OPENMA_SANDBOX=bubblewrap, then
 * docker) it starts a real `openma serve` child process, brain on, against
 * the scripted model in this process, and measures per iteration, in turn so
 * all three see the same machine load:
 *
 *   host        t0 just before `client.beta.sessions.create` (official SDK);
 *               open the session's SSE stream; send a user message the
 *               scripted model answers with a `bash` tool_use running `true`;
 *               t1 when the `agent.tool_result` for that tool_use arrives on
 *               the stream. Every session is new, so this includes acquiring
 *               its sandbox (lazily, on the first sandbox tool call).
 *   model-only  the same flow with a message the model answers with text (no
 *               tool, no sandbox), until the `agent.message` arrives: what the
 *               agent loop costs without the sandbox.
 *   primitive   bubblewrap: one raw `bwrap … true` (bench/bwrap-primitive.ts);
 *               docker: create + start + exec `true` through the Engine API
 *               (bench/docker-primitive.ts; the removal that follows is not
 *               counted), on the image `openma serve` uses.
 *
 * Each session is archived once idle, outside the timed span. The last table
 * column counts the server's sandboxes still running after every session was
 * archived (0 when archiving terminates a session's sandbox; otherwise they
 * live until their idle timeout or the server stops). Stopping the server
 * must leave none: the run fails if any remains.
 *
 * The server, the flow and the primitives are exported for
 * bench/ama-worker-first-exec.ts (the same measurement for the ama_worker lane).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import Anthropic from "@anthropic-ai/sdk";
import { connectDocker, probeEngine, readImageManifest } from "@openma/driver-node-docker";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import type { Dialect } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { openRawBwrap } from "./bwrap-primitive.ts";
import { engineRoundTrip } from "./docker-primitive.ts";

const RUNS = Math.max(1, Math.min(1000, Number(process.argv[2] ?? 20) || 20));
const WARMUP = Math.max(0, Math.min(100, Number(process.env.BENCH_WARMUP ?? 3) || 0));
export const DRIVERS = ["bubblewrap", "docker"] as const;
export type Driver = (typeof DRIVERS)[number];

export const MODEL_KEY = "sk-scripted-session-first-exec";
/** A stuck session fails the run instead of hanging it. */
export const SESSION_DEADLINE_MS = 60_000;
export const BENCH_LABEL = { "openma.bench": "session-first-exec" };
const REPO_ROOT = fileURLToPath(new URL("..", import.meta.url));
const CLI = join(REPO_ROOT, "apps/openma/src/cli.ts");

export const SCRIPT = [
  // First: after the tool result, the turn ends with text (so the session goes idle and can be archived).
  { match: { tool_result_for: "bash" }, response: "Done." },
  {
    match: { last_user_text_contains: "run true" },
    response: { content: [{ type: "tool_use" as const, name: "bash", input: { command: "true" } }] },
  },
  { match: { last_user_text_contains: "say hi" }, response: "Hi." },
].map((turn) => ({ ...turn, times: 1_000_000 }));

type Flow = "tool" | "text";

/** A running `openma serve` child process. */
export interface Serve {
  client: Anthropic;
  /** The admin key it was started with (a restart on the same data must present the same one). */
  apiKey: string;
  dataDir: string;
  /** The last lines the child wrote (stdout and stderr: its structured logs), for a failure's diagnosis. */
  output(): string;
  stop(): Promise<void>;
}

/** How much of a child's latest output a `Serve` keeps. */
const OUTPUT_TAIL = 16_384;

export interface ServeOptions {
  /** Start on this data dir, which the caller owns (kept on stop); default a fresh one removed on stop. */
  dataDir?: string;
  apiKey?: string;
  /** Added to the child's environment (e.g. the runtime host's variables; secrets belong here, never in argv). */
  env?: Record<string, string>;
}

export async function startServe(
  driver: Driver,
  dialect: Dialect,
  model: ScriptedModel,
  pg: TestStorage | null,
  options: ServeOptions = {},
): Promise<Serve> {
  const ownDataDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), "openma-bench-serve-")));
  const apiKey = options.apiKey ?? `sk-bench-${randomBytes(16).toString("hex")}`;
  const removeDataDir = () => (ownDataDir ? rm(dataDir, { recursive: true, force: true }) : Promise.resolve());
  // Secrets go through the environment, never argv.
  const child = spawn(process.execPath, ["--import", "tsx", CLI, "serve"], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      OPENMA_DATA_DIR: dataDir,
      OPENMA_API_KEY: apiKey,
      LOG_LEVEL: "warn",
      OPENMA_BRAIN: "on",
      OPENMA_SANDBOX: driver,
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_EXECUTION_POLL_MS: "600000", // turns start on change-bus wake-ups, not on a poll
      // Empty means unset (loadConfig drops empty values): a DATABASE_URL from the caller's shell must not leak in.
      DATABASE_URL: dialect === "postgres" ? (pg?.databaseUrl ?? "") : "",
      OPENMA_PG_SCHEMA: dialect === "postgres" ? (pg?.pgSchema ?? "") : "",
      ...options.env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let tail = "";
  const keep = (chunk: Buffer | string) => {
    tail = (tail + chunk.toString()).slice(-OUTPUT_TAIL);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  try {
    const baseURL = await listeningUrl(child);
    return {
      client: new Anthropic({ baseURL, apiKey, maxRetries: 0 }),
      apiKey,
      dataDir,
      output: () => tail,
      stop: async () => {
        await stopChild(child);
        await removeDataDir();
      },
    };
  } catch (err) {
    await stopChild(child);
    await removeDataDir();
    throw err;
  }
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
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  await exited;
}

/**
 * Milliseconds from just before `sessions.create` to the event that ends `flow` on the session's SSE stream:
 * the `agent.tool_result` of the `bash` tool_use, or the `agent.message`. The session is archived once idle.
 */
export async function sessionOnce(client: Anthropic, agent: string, env: string, flow: Flow): Promise<number> {
  const t0 = performance.now();
  const session = await client.beta.sessions.create({ agent, environment_id: env });
  const stream = await client.beta.sessions.events.stream(session.id, undefined, { signal: AbortSignal.timeout(SESSION_DEADLINE_MS) });
  let t1: number | undefined;
  try {
    const text = flow === "tool" ? "run true" : "say hi";
    await client.beta.sessions.events.send(session.id, { events: [{ type: "user.message", content: [{ type: "text", text }] }] });
    let toolUseId: string | undefined;
    for await (const event of stream) {
      if (event.type === "session.error") throw new Error(`session.error: ${JSON.stringify(event)}`);
      if (flow === "tool" && event.type === "agent.tool_use" && event.name === "bash") toolUseId = event.id;
      if (flow === "tool" && event.type === "agent.tool_result" && event.tool_use_id === toolUseId) {
        t1 = performance.now();
        if (event.is_error) throw new Error(`the bash tool failed: ${JSON.stringify(event.content)}`);
      }
      if (flow === "text" && event.type === "agent.message") t1 ??= performance.now();
      // Idle after the measured event: the turn is over and the session can be archived.
      if (t1 !== undefined && event.type === "session.status_idle") break;
    }
  } finally {
    stream.controller.abort();
  }
  if (t1 === undefined)
    throw new Error(`session ${session.id}: the stream ended before the ${flow === "tool" ? "tool result" : "message"}`);
  await client.beta.sessions.archive(session.id);
  return t1 - t0;
}

/** The raw primitive of one driver: `run` returns one sample in ms. */
export interface Primitive {
  name: string;
  run(): Promise<number>;
  close(): Promise<void>;
}

export type DockerClient = ReturnType<typeof connectDocker>;

export async function openPrimitive(driver: Driver, docker: DockerClient, image: string): Promise<Primitive> {
  if (driver === "bubblewrap") {
    const raw = await openRawBwrap();
    return { name: "bwrap … true", run: () => raw.run(), close: () => raw.close() };
  }
  return {
    name: "Engine API create + start + exec true",
    async run() {
      const round = await engineRoundTrip(docker, image, BENCH_LABEL);
      return round.create + round.start + round.exec;
    },
    close: async () => {},
  };
}

/** A server's running sandboxes, and the handles (container ids or pids) that remove them. */
export interface Live {
  sandboxes: number;
  handles: string[];
}

/**
 * Sandboxes of one server still running: Docker containers labelled with the environment, or bwrap processes
 * whose command line binds a workspace under `workspaceRoot` (`<data dir>/workspaces` for `openma serve`'s
 * sandboxes; one sandbox is several bwrap processes, so those count once per workspace directory).
 */
export async function liveSandboxes(driver: Driver, docker: DockerClient, envId: string, workspaceRoot: string): Promise<Live> {
  if (driver === "docker") {
    const ids = (await docker.listContainers({ all: true, filters: { label: [`openma.environment=${envId}`] } })).map((c) => c.Id);
    return { sandboxes: ids.length, handles: ids };
  }
  const marker = `${workspaceRoot}/`;
  const sessions = new Set<string>();
  const pids: string[] = [];
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    const argv = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    const at = argv.indexOf(marker);
    if (at < 0 || !argv.split("\0")[0]?.endsWith("bwrap")) continue;
    sessions.add(argv.slice(at + marker.length).split(/[/\0]/)[0] ?? "");
    pids.push(pid);
  }
  return { sandboxes: sessions.size, handles: pids };
}

/** Leaves nothing behind when the server did not: the handles come from `liveSandboxes` of this run's server. */
export async function removeSandboxes(driver: Driver, docker: DockerClient, ids: string[]): Promise<void> {
  for (const id of ids) {
    if (driver === "docker")
      await docker
        .getContainer(id)
        .remove({ force: true })
        .catch(() => {});
    else {
      try {
        process.kill(Number(id), "SIGKILL");
      } catch {
        // already gone
      }
    }
  }
}

interface Row {
  dialect: Dialect;
  driver: Driver;
  primitive: string;
  host: number[];
  model: number[];
  raw: number[];
  sessions: number;
  aliveAfterArchive: number;
}

/** Creates the environment and agent, then runs the warm-up and measured iterations on one server. */
async function measure(serve: Serve, driver: Driver, docker: DockerClient, image: string, onEnv: (id: string) => void) {
  const { client } = serve;
  const envId = (await client.beta.environments.create({ name: `bench-${driver}` })).id;
  onEnv(envId);
  const agent = (
    await client.beta.agents.create({
      name: "bench",
      model: "claude-test-1",
      tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_allow" } } }],
    })
  ).id;
  const primitive = await openPrimitive(driver, docker, image);
  const samples = { primitive: primitive.name, host: [] as number[], model: [] as number[], raw: [] as number[], sessions: 0 };
  try {
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const host = await sessionOnce(client, agent, envId, "tool");
      const text = await sessionOnce(client, agent, envId, "text");
      const raw = await primitive.run();
      samples.sessions += 1;
      if (i < WARMUP) continue;
      samples.host.push(host);
      samples.model.push(text);
      samples.raw.push(raw);
    }
  } finally {
    await primitive.close();
  }
  return { ...samples, aliveAfterArchive: (await liveSandboxes(driver, docker, envId, join(serve.dataDir, "workspaces"))).sandboxes };
}

async function benchOne(dialect: Dialect, driver: Driver, model: ScriptedModel, docker: DockerClient, image: string): Promise<Row> {
  const pg = dialect === "postgres" ? await openTestStorage("postgres") : null;
  try {
    const serve = await startServe(driver, dialect, model, pg);
    // Until the environment exists no container can carry its label; "-" matches none.
    let envId = "-";
    const outcome = await measure(serve, driver, docker, image, (id) => {
      envId = id;
    }).then(
      (samples) => ({ ok: true as const, samples }),
      (error: unknown) => ({ ok: false as const, error }),
    );
    await serve.stop();
    const left = await liveSandboxes(driver, docker, envId, join(serve.dataDir, "workspaces"));
    await removeSandboxes(driver, docker, left.handles);
    if (!outcome.ok) throw outcome.error;
    if (left.sandboxes > 0) throw new Error(`${left.sandboxes} ${driver} sandbox(es) outlived their server (removed now)`);
    return { dialect, driver, ...outcome.samples };
  } finally {
    await pg?.cleanup();
  }
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
}

export function summary(xs: number[]): { p50: number; p95: number } {
  const sorted = [...xs].sort((a, b) => a - b);
  return { p50: quantile(sorted, 0.5), p95: quantile(sorted, 0.95) };
}

/** Removes the primitive's containers should a failed run have left any (they carry the bench label). */
export async function removeBenchContainers(docker: DockerClient): Promise<void> {
  const left = await docker.listContainers({ all: true, filters: { label: [`openma.bench=${BENCH_LABEL["openma.bench"]}`] } });
  await Promise.all(
    left.map((c) =>
      docker
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => {}),
    ),
  );
}

async function main(): Promise<void> {
  const docker = connectDocker();
  const engine = await probeEngine(docker);
  if (!engine.ok) throw new Error(engine.message);
  const manifest = await readImageManifest();
  if (!manifest.ok) throw new Error(manifest.message);
  // The image `openma serve`'s Docker sandboxes start from, so the primitive pays the same image.
  const image = manifest.manifest.base.image;
  const bwrapVersion = execFileSync("bwrap", ["--version"], { encoding: "utf8" }).trim();

  const model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
  const rows: Row[] = [];
  try {
    for (const dialect of BACKENDS) for (const driver of DRIVERS) rows.push(await benchOne(dialect, driver, model, docker, image));
  } finally {
    await model.close();
    await removeBenchContainers(docker);
  }

  const cpu = cpus()[0]?.model ?? "unknown CPU";
  console.log(
    `Session create -> first tool result: ${RUNS} runs per backend and driver (after ${WARMUP} warm-up), ${cpus().length} CPUs (${cpu}), Node ${process.version}, ${new Date().toISOString()}`,
  );
  console.log(
    `${bwrapVersion}; Docker ${engine.info.serverVersion} (storage ${engine.info.storageDriver}, cgroup v${engine.info.cgroupVersion}), image ${image}\n`,
  );
  console.log(
    "| Backend | Driver | Host p50 | Host p95 | Model-only p50 | Model-only p95 | Primitive | Primitive p50 | Primitive p95 | Host / primitive | (Host - model-only) / primitive | Sandboxes alive after archive |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|---|");
  const f = (x: number) => `${x.toFixed(1)} ms`;
  for (const r of rows) {
    const h = summary(r.host);
    const m = summary(r.model);
    const p = summary(r.raw);
    console.log(
      `| ${r.dialect} | ${r.driver} | ${f(h.p50)} | ${f(h.p95)} | ${f(m.p50)} | ${f(m.p95)} | ${r.primitive} | ${f(p.p50)} | ${f(p.p95)} | ${(h.p50 / p.p50).toFixed(1)}x | ${((h.p50 - m.p50) / p.p50).toFixed(1)}x | ${r.aliveAfterArchive} of ${r.sessions} |`,
    );
  }
  console.log("\nRatios use p50s. Host and model-only sessions are new each time; each is archived once idle, outside the timed span.");
}

// Run only as a script: bench/ama-worker-first-exec.ts imports the pieces above.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: Error) => {
    console.error(err);
    process.exit(1);
  });
}
