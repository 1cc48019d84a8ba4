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
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { cpus } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type Anthropic from "@anthropic-ai/sdk";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import type { Dialect } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { type ChildServer, startServeProcess } from "../test/support/child-server.ts";
import { openRawBwrap } from "./bwrap-primitive.ts";
import { type DockerClient, engineRoundTrip, openEngine, removeLabelledContainers } from "./docker-primitive.ts";
import { reportRatioAtMost, reportTarget } from "./report.ts";

/** Measured iterations (argv[2]) and warm-up iterations (env BENCH_WARMUP) of either first-exec benchmark. */
export const RUNS = Math.max(1, Math.min(1000, Number(process.argv[2] ?? 20) || 20));
export const WARMUP = Math.max(0, Math.min(100, Number(process.env.BENCH_WARMUP ?? 3) || 0));
export const DRIVERS = ["bubblewrap", "docker"] as const;
export type Driver = (typeof DRIVERS)[number];

export const MODEL_KEY = "sk-scripted-session-first-exec";
/** A stuck session fails the run instead of hanging it. */
export const SESSION_DEADLINE_MS = 60_000;
export const BENCH_LABEL = { "openma.bench": "session-first-exec" };

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
export type Serve = ChildServer;

export interface ServeOptions {
  /** Start on this data dir, which the caller owns (kept on close); default a fresh one removed on close. */
  dataDir?: string;
  apiKey?: string;
  /** Added to the child's environment (e.g. the runtime host's variables; secrets belong here, never in argv). */
  env?: Record<string, string>;
}

/** `openma serve` with the brain on, sandbox tools on `driver`, the scripted model, on `dialect` (`pg` for Postgres). */
export function startServe(
  driver: Driver,
  dialect: Dialect,
  model: ScriptedModel,
  pg: TestStorage | null,
  options: ServeOptions = {},
): Promise<Serve> {
  return startServeProcess({
    apiKey: options.apiKey ?? `sk-bench-${randomBytes(16).toString("hex")}`,
    postgres: dialect === "postgres" ? pg : null,
    ...(options.dataDir === undefined ? {} : { dataDir: options.dataDir }),
    env: {
      LOG_LEVEL: "warn",
      OPENMA_BRAIN: "on",
      OPENMA_SANDBOX: driver,
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_EXECUTION_POLL_MS: "600000", // turns start on change-bus wake-ups, not on a poll
      ...options.env,
    },
  });
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

/**
 * Runs `once` WARMUP + RUNS times in turn (its steps in turn within each, so all see the same machine load);
 * the samples after the warm-up.
 */
export async function measuredRuns<T>(once: () => Promise<T>): Promise<T[]> {
  const samples: T[] = [];
  for (let i = 0; i < WARMUP + RUNS; i++) {
    const sample = await once();
    if (i >= WARMUP) samples.push(sample);
  }
  return samples;
}

/** The agent every benchmark session runs: the whole toolset, always allowed (no confirmation stops a turn). */
export async function createBenchAgent(client: Anthropic): Promise<string> {
  const agent = await client.beta.agents.create({
    name: "bench",
    model: "claude-test-1",
    tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_allow" } } }],
  });
  return agent.id;
}

/** Creates the environment and agent, then runs the warm-up and measured iterations on one server. */
async function measure(serve: Serve, driver: Driver, docker: DockerClient, image: string, onEnv: (id: string) => void) {
  const { client } = serve;
  const envId = (await client.beta.environments.create({ name: `bench-${driver}` })).id;
  onEnv(envId);
  const agent = await createBenchAgent(client);
  const primitive = await openPrimitive(driver, docker, image);
  const runs = await measuredRuns(async () => ({
    host: await sessionOnce(client, agent, envId, "tool"),
    model: await sessionOnce(client, agent, envId, "text"),
    raw: await primitive.run(),
  })).finally(() => primitive.close());
  return {
    primitive: primitive.name,
    host: runs.map((r) => r.host),
    model: runs.map((r) => r.model),
    raw: runs.map((r) => r.raw),
    sessions: WARMUP + RUNS,
    aliveAfterArchive: (await liveSandboxes(driver, docker, envId, join(serve.dataDir, "workspaces"))).sandboxes,
  };
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
    await serve.close();
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

/** What the first-exec benchmarks run on, checked: a missing engine, image manifest or bwrap fails the run. */
export interface Machine {
  docker: DockerClient;
  /** The image and root filesystem `openma serve`'s sandboxes start from (the primitive pays the same image). */
  image: string;
  rootfs: string;
  /** bwrap and Docker versions and the image, for the line under a result table's title. */
  versions: string;
}

export async function openMachine(): Promise<Machine> {
  const { docker, engine, manifest } = await openEngine();
  const { image, rootfs } = manifest.base;
  const bwrapVersion = execFileSync("bwrap", ["--version"], { encoding: "utf8" }).trim();
  const versions = `${bwrapVersion}; Docker ${engine.serverVersion} (storage ${engine.storageDriver}, cgroup v${engine.cgroupVersion}), image ${image}`;
  return { docker, image, rootfs, versions };
}

async function main(): Promise<void> {
  const { docker, image, versions } = await openMachine();

  const model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
  const rows: Row[] = [];
  try {
    for (const dialect of BACKENDS) for (const driver of DRIVERS) rows.push(await benchOne(dialect, driver, model, docker, image));
  } finally {
    await model.close();
    // The primitive's containers, should a failed run have left any.
    await removeLabelledContainers(docker, BENCH_LABEL);
  }

  const cpu = cpus()[0]?.model ?? "unknown CPU";
  console.log(
    `Session create -> first tool result: ${RUNS} runs per backend and driver (after ${WARMUP} warm-up), ${cpus().length} CPUs (${cpu}), Node ${process.version}, ${new Date().toISOString()}`,
  );
  console.log(`${versions}\n`);
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
  reportSandboxTargets(rows);
  console.log("\nRatios use p50s. Host and model-only sessions are new each time; each is archived once idle, outside the timed span.");
}

/** Issue 16 target 4: session create -> first tool result <= 1.5x and <= 15 ms above raw bwrap; <= 1.2x the Engine API. */
function reportSandboxTargets(rows: Row[]): void {
  for (const r of rows) {
    const host = summary(r.host).p50;
    const raw = summary(r.raw).p50;
    const metric = `session create -> first tool result vs ${r.primitive} (p50, ${r.dialect})`;
    if (r.driver === "docker") {
      reportRatioAtMost("session-first-exec", metric.replace("session", "docker session"), host / raw, 1.2);
      continue;
    }
    reportRatioAtMost("session-first-exec", metric.replace("session", "bwrap session"), host / raw, 1.5);
    reportTarget({
      bench: "session-first-exec",
      metric: `bwrap session create -> first tool result above ${r.primitive} (p50, ${r.dialect})`,
      target: "<= 15 ms",
      measured: host - raw,
      unit: "ms",
      pass: host - raw <= 15,
    });
  }
}

// Run only as a script: bench/ama-worker-first-exec.ts imports the pieces above.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: Error) => {
    console.error(err);
    process.exit(1);
  });
}
