/**
 * Session create → first tool result on the ama_worker lane (a self-hosted
 * environment served by `openma serve`'s embedded runtime host: the official
 * EnvironmentWorker inside a fresh local sandbox), per driver, against the
 * same raw primitive as bench/session-first-exec.ts:
 * `npx tsx bench/ama-worker-first-exec.ts [runs=20]` (env `BENCH_WARMUP`,
 * default 3; `BENCH_BACKENDS`, default `sqlite`, e.g. `sqlite,postgres`).
 * Needs root, bwrap, Docker with the sandbox images (`npm run provision`),
 * and PostgreSQL when asked for; a missing one fails the run.
 *
 * For each backend and driver it starts a real `openma serve` child process
 * (brain on, the scripted model in this process), creates a self-hosted
 * environment (its key exists only now), a cloud environment and an agent
 * through the official SDK, stops it and starts it again on the same data
 * with OPENMA_RUNTIME_HOST_ENVIRONMENT_ID + ANTHROPIC_ENVIRONMENT_KEY +
 * OPENMA_RUNTIME_HOST_SANDBOX=<driver> (and OPENMA_SANDBOX=<driver> for the
 * cloud environment). Then per iteration, in turn so all see the same load:
 *
 *   ama_worker  t0 just before `sessions.create` in the self-hosted
 *               environment; open the SSE stream; send a user message the
 *               scripted model answers with a `bash` tool_use running `true`;
 *               t1 when the `user.tool_result` for it (posted by the official
 *               worker inside the sandbox) arrives on the stream. In between,
 *               alongside the server's model turn: the work claim, the fence,
 *               workspace materialize, sandbox acquire, node + SDK start-up of
 *               the worker inside the sandbox, the worker's own session
 *               set-up, and the tool. The arrival of the `agent.tool_use` is
 *               recorded too (the brain's share of the span).
 *   serve lane  bench/session-first-exec.ts's host flow on the cloud
 *               environment of the same server: the harness outside the
 *               sandbox, the tool exec through the driver, until the
 *               `agent.tool_result`.
 *   primitive   bwrap … true, or Engine API create + start + exec true (the
 *               session-first-exec primitive).
 *   node        in ONE sandbox acquired once through the same driver with the
 *               runtime host's root filesystem / image and its read-only SDK
 *               bind: a warm exec of `true`, of `node -e 0`, and of a node
 *               that imports the SDK and builds a client (what the launcher
 *               does before `handleItem()`).
 *
 * After each ama_worker session went idle the benchmark waits (outside the
 * timed span, polling the engine / process table with a deadline) until the
 * worker left (OPENMA_WORKER_MAX_IDLE_MS) and the host terminated the
 * sandbox, reports that as teardown, then archives the session; so no two
 * sandboxes of the lane overlap. Stopping the server must leave no sandbox
 * of either lane: the run fails if any remains.
 */

import { chmod, mkdir, mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { cpus, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import type { BetaSelfHostedWork } from "@anthropic-ai/sdk/resources/beta/environments/work";
import type { ManagedSandboxLease, ManagedSandboxPort, ToolSandboxPort } from "@openma/contract";
import { BubblewrapSandbox } from "@openma/driver-bubblewrap";
import { NODE_DOCKER_PROVIDER, NodeDockerSandbox } from "@openma/driver-node-docker";
import { SANDBOX_PATHS } from "@openma/runtime-host";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import type { Dialect } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ephemeralAcquireInput } from "./bwrap-primitive.ts";
import { type DockerClient, removeLabelledContainers } from "./docker-primitive.ts";
import { reportRatioAtMost } from "./report.ts";
import {
  BENCH_LABEL,
  createBenchAgent,
  DRIVERS,
  type Driver,
  liveSandboxes,
  MODEL_KEY,
  measuredRuns,
  openMachine,
  openPrimitive,
  RUNS,
  removeSandboxes,
  SCRIPT,
  SESSION_DEADLINE_MS,
  type Serve,
  sessionOnce,
  startServe,
  summary,
  WARMUP,
} from "./session-first-exec.ts";

const DIALECTS = parseBackends(process.env.BENCH_BACKENDS ?? "sqlite");
/** The worker leaves this long after the turn ended, so the host can publish and terminate the sandbox. */
const WORKER_MAX_IDLE_MS = 200;
/** An idle session's sandbox must be gone by then: worker idle, final checkpoint, publish, terminate. */
const TEARDOWN_DEADLINE_MS = 60_000;
const TEARDOWN_POLL_MS = 20;
const never = new AbortController().signal;

function parseBackends(text: string): Dialect[] {
  const wanted = text.split(",").map((s) => s.trim());
  const unknown = wanted.filter((name) => !(BACKENDS as readonly string[]).includes(name));
  if (unknown.length > 0) throw new Error(`BENCH_BACKENDS: unknown backend(s) ${unknown.join(", ")} (known: ${BACKENDS.join(", ")})`);
  return BACKENDS.filter((b) => wanted.includes(b));
}

/** Where the embedded runtime host binds its sessions' workspaces (`<state dir>/workspaces`, state dir `<data dir>/runtime-host`). */
const runtimeHostWorkspaces = (dataDir: string) => join(dataDir, "runtime-host", "workspaces");

/** A self-hosted environment and its key (a credential: never printed, passed to the server through its environment). */
interface SelfHosted {
  id: string;
  key: string;
}

/** A self-hosted environment through the SDK; `environment_key` is an OpenMA response field the SDK's type does not name. */
async function createSelfHostedEnvironment(client: Anthropic, name: string): Promise<SelfHosted> {
  const env = (await client.beta.environments.create({ name, config: { type: "self_hosted" } } as never)) as unknown as {
    id: string;
    environment_key: string;
  };
  if (!env.environment_key) throw new Error("the self-hosted environment came back without its key");
  return { id: env.id, key: env.environment_key };
}

/** Polls a condition outside this process (engine listing, process table) that no event announces, with a deadline. */
async function until(check: () => Promise<boolean>, what: string, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, TEARDOWN_POLL_MS));
  }
}

interface AmaSample {
  /** t0 → the `user.tool_result` posted by the worker inside the sandbox. */
  result: number;
  /** t0 → the `agent.tool_use` the server's model turn appended. */
  toolUse: number;
  /** t0 → the runtime host acknowledged its claim of the session's work item (server clock, ms resolution). */
  claimed: number;
  /** t0 → the worker's first heartbeat from inside the sandbox: the item's `started_at` (server clock, ms resolution). */
  workerUp: number;
  /** Session idle → the sandbox gone (worker idle timeout, final checkpoint and publish, terminate). */
  teardown: number;
}

/** One new session in the self-hosted environment, timed from just before `sessions.create` to the worker's tool result. */
async function amaWorkerOnce(serve: Serve, agent: string, env: SelfHosted, driver: Driver, docker: DockerClient): Promise<AmaSample> {
  const { client } = serve;
  const envId = env.id;
  // The wall clock at t0 places the server's work-item timestamps (same machine, same clock) on this span.
  const wall0 = Date.now();
  const t0 = performance.now();
  const session = await client.beta.sessions.create({ agent, environment_id: envId });
  const stream = await client.beta.sessions.events.stream(session.id, undefined, { signal: AbortSignal.timeout(SESSION_DEADLINE_MS) });
  let toolUseId: string | undefined;
  let toolUse: number | undefined;
  let result: number | undefined;
  let idleAt: number | undefined;
  const seen: string[] = [];
  try {
    await client.beta.sessions.events.send(session.id, {
      events: [{ type: "user.message", content: [{ type: "text", text: "run true" }] }],
    });
    for await (const event of stream) {
      seen.push(event.type);
      if (event.type === "session.error") throw new Error(`session.error: ${JSON.stringify(event)}`);
      if (event.type === "agent.tool_use" && event.name === "bash" && toolUseId === undefined) {
        toolUseId = event.id;
        toolUse = performance.now() - t0;
      }
      if (event.type === "user.tool_result" && toolUseId !== undefined && event.tool_use_id === toolUseId) {
        result = performance.now() - t0;
        if (event.is_error) throw new Error(`the worker's bash tool failed: ${JSON.stringify(event.content)}`);
      }
      // `requires_action` is the pause for the worker's result; the idle after the result ends the turn.
      if (result !== undefined && event.type === "session.status_idle" && event.stop_reason.type !== "requires_action") {
        idleAt = performance.now();
        break;
      }
    }
  } finally {
    stream.controller.abort();
  }
  if (result === undefined || toolUse === undefined || idleAt === undefined) {
    const work = await workItemOf(client.baseURL, env, session.id).then(
      (w) => JSON.stringify({ id: w.id, state: w.state, acknowledged_at: w.acknowledged_at, started_at: w.started_at }),
      (err: Error) => err.message,
    );
    throw new Error(
      `session ${session.id} (${driver}): the stream ended before the worker's tool result and the idle after it\n` +
        `events: ${seen.join(", ")}\nwork item: ${work}\nserver output (tail):\n${serve.output()}`,
    );
  }
  const root = runtimeHostWorkspaces(serve.dataDir);
  await until(
    async () => (await liveSandboxes(driver, docker, envId, root)).sandboxes === 0,
    `the sandbox of ${session.id} to be terminated`,
    TEARDOWN_DEADLINE_MS,
  ).catch((err: Error) => {
    throw new Error(`${err.message}\nserver output (tail):\n${serve.output()}`);
  });
  const teardown = performance.now() - idleAt;
  const work = await workItemOf(client.baseURL, env, session.id);
  await client.beta.sessions.archive(session.id);
  const at = (iso: string | null, what: string) => {
    if (iso === null) throw new Error(`work item ${work.id}: no ${what}`);
    return Date.parse(iso) - wall0;
  };
  return { result, toolUse, claimed: at(work.acknowledged_at, "acknowledged_at"), workerUp: at(work.started_at, "started_at"), teardown };
}

/**
 * The session's work item, listed with the environment key (the listing route accepts only that credential),
 * outside the timed span. The newest items come first, so the session just measured is on the first page.
 */
async function workItemOf(baseURL: string, env: SelfHosted, sessionId: string): Promise<BetaSelfHostedWork> {
  const client = new Anthropic({ baseURL, apiKey: null, authToken: env.key, maxRetries: 0 });
  for await (const work of client.beta.environments.work.list(env.id)) if (work.data.id === sessionId) return work;
  throw new Error(`no work item for session ${sessionId}`);
}

/** The SDK's node_modules directory, as the runtime host binds it read-only into its sandboxes. */
function sdkNodeModules(): string {
  let dir = dirname(createRequire(import.meta.url).resolve("@anthropic-ai/sdk"));
  while (!dir.endsWith("/node_modules")) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error("cannot find the node_modules directory of @anthropic-ai/sdk");
    dir = parent;
  }
  return dir;
}

/** What the launcher does before `handleItem()`: import the SDK from its bind and build a client (no request). */
const SDK_START = `const { default: Anthropic } = await import("${SANDBOX_PATHS.nodeModules}/@anthropic-ai/sdk/index.mjs"); new Anthropic({ baseURL: "http://127.0.0.1:9", apiKey: null, authToken: null }).beta.environments.work;`;

interface NodeSample {
  true: number;
  node: number;
  sdk: number;
}

/** One sandbox of `driver` set up like the runtime host's, kept for warm execs of `true`, `node -e 0` and the SDK start-up. */
interface NodeProbe {
  nodeVersion: string;
  run(): Promise<NodeSample>;
  close(): Promise<void>;
}

async function openNodeProbe(driver: Driver, image: string, rootfs: string): Promise<NodeProbe> {
  const root = await mkdtemp(join(tmpdir(), "openma-bench-node-"));
  const binds = [{ source: sdkNodeModules(), target: SANDBOX_PATHS.nodeModules }];
  let sandbox: ManagedSandboxPort | undefined;
  let lease: ManagedSandboxLease | undefined;
  const scope = { environmentId: "env_bench_node", sessionId: `sess_bench_node_${driver}` };
  const fence = { scope, ownerId: "bench", generation: 1, expiresAt: Date.now() + 3_600_000 };
  const close = async () => {
    if (sandbox && lease) await sandbox.terminate({ scope, fence, lease, reason: "completed", signal: never }).catch(() => {});
    if (sandbox instanceof BubblewrapSandbox) await sandbox.shutdown();
    await rm(root, { recursive: true, force: true });
  };
  try {
    // The bwrap driver's unprivileged sandbox uid must traverse to its state and workspace directories.
    await chmod(root, 0o755);
    const ws = join(root, "ws");
    await mkdir(ws);
    const bwrap = driver === "bubblewrap" ? new BubblewrapSandbox({ stateRoot: join(root, "state"), rootfs, binds }) : null;
    const docker =
      driver === "docker" ? new NodeDockerSandbox({ image, binds, labels: BENCH_LABEL, namePrefix: "openma-bench-node" }) : null;
    sandbox = (bwrap ?? docker) as ManagedSandboxPort;
    const acquired = await sandbox.acquire(
      ephemeralAcquireInput({
        provider: bwrap ? "bubblewrap" : NODE_DOCKER_PROVIDER,
        command: "node",
        hostPath: ws,
        scope,
        fence,
        idempotencyKey: "bench-node",
      }),
    );
    if (acquired.type !== "acquired") throw new Error(`node probe: acquire failed: ${acquired.reason}`);
    lease = acquired.lease;
    const tools: ToolSandboxPort = bwrap ? bwrap.toolSandbox(acquired.lease) : (docker as NodeDockerSandbox).toolSandbox(acquired.lease);
    const exec = async (command: string[]): Promise<{ ms: number; stdout: string }> => {
      const t = performance.now();
      const ran = await tools.exec({ command, timeoutMs: 60_000, signal: never });
      const ms = performance.now() - t;
      if (ran.type !== "exited" || ran.exitCode !== 0)
        throw new Error(
          `node probe: ${command.join(" ")}: ${ran.type === "error" ? ran.message : `${ran.type} ${Buffer.from(ran.stderr).toString("utf8")}`}`,
        );
      return { ms, stdout: Buffer.from(ran.stdout).toString("utf8").trim() };
    };
    const nodeVersion = (await exec(["node", "--version"])).stdout;
    await exec(["node", "--input-type=module", "-e", SDK_START]); // page cache
    return {
      nodeVersion,
      async run() {
        return {
          true: (await exec(["true"])).ms,
          node: (await exec(["node", "-e", "0"])).ms,
          sdk: (await exec(["node", "--input-type=module", "-e", SDK_START])).ms,
        };
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

interface Row {
  dialect: Dialect;
  driver: Driver;
  primitive: string;
  nodeVersion: string;
  ama: AmaSample[];
  serve: number[];
  raw: number[];
  node: NodeSample[];
  sessions: number;
}

interface Setup {
  agent: string;
  cloudEnv: string;
  selfHosted: SelfHosted;
}

/** First start: only the API, to create what the second start serves (the environment key must exist before it). */
async function createResources(serve: Serve, driver: Driver): Promise<Setup> {
  const { client } = serve;
  const selfHosted = await createSelfHostedEnvironment(client, `bench-ama-${driver}`);
  const cloudEnv = (await client.beta.environments.create({ name: `bench-serve-${driver}` })).id;
  const agent = await createBenchAgent(client);
  return { agent, cloudEnv, selfHosted };
}

async function measure(serve: Serve, setup: Setup, driver: Driver, docker: DockerClient, image: string, rootfs: string) {
  const primitive = await openPrimitive(driver, docker, image);
  const probe = await openNodeProbe(driver, image, rootfs).catch(async (err) => {
    await primitive.close();
    throw err;
  });
  const runs = await measuredRuns(async () => ({
    ama: await amaWorkerOnce(serve, setup.agent, setup.selfHosted, driver, docker),
    serve: await sessionOnce(serve.client, setup.agent, setup.cloudEnv, "tool"),
    raw: await primitive.run(),
    node: await probe.run(),
  })).finally(async () => {
    await probe.close();
    await primitive.close();
  });
  return {
    primitive: primitive.name,
    nodeVersion: probe.nodeVersion,
    ama: runs.map((r) => r.ama),
    serve: runs.map((r) => r.serve),
    raw: runs.map((r) => r.raw),
    node: runs.map((r) => r.node),
    sessions: WARMUP + RUNS,
  };
}

async function benchOne(
  dialect: Dialect,
  driver: Driver,
  model: ScriptedModel,
  docker: DockerClient,
  image: string,
  rootfs: string,
): Promise<Row> {
  const pg: TestStorage | null = dialect === "postgres" ? await openTestStorage("postgres") : null;
  const dataDir = await mkdtemp(join(tmpdir(), "openma-bench-ama-"));
  // Until the environments exist no container can carry their labels; "-" matches none.
  let envIds = ["-", "-"];
  let failure: unknown = null;
  let row: Row | null = null;
  try {
    const first = await startServe(driver, dialect, model, pg, { dataDir });
    const created = await createResources(first, driver).then(
      (setup) => ({ ok: true as const, setup }),
      (error: unknown) => ({ ok: false as const, error }),
    );
    await first.close();
    if (!created.ok) throw created.error;
    const { setup } = created;
    envIds = [setup.selfHosted.id, setup.cloudEnv];
    // Secrets go through the environment, never argv.
    const serve = await startServe(driver, dialect, model, pg, {
      dataDir,
      apiKey: first.apiKey,
      env: {
        OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: setup.selfHosted.id,
        ANTHROPIC_ENVIRONMENT_KEY: setup.selfHosted.key,
        OPENMA_RUNTIME_HOST_SANDBOX: driver,
        OPENMA_WORKER_MAX_IDLE_MS: String(WORKER_MAX_IDLE_MS),
        // Its warnings ("session run ended early") explain a failed iteration; `info` adds the worker's own lines.
        LOG_LEVEL: process.env.BENCH_SERVE_LOG_LEVEL ?? "warn",
      },
    });
    const outcome = await measure(serve, setup, driver, docker, image, rootfs).then(
      (samples) => ({ ok: true as const, samples }),
      (error: unknown) => ({ ok: false as const, error }),
    );
    await serve.close();
    if (!outcome.ok) throw outcome.error;
    row = { dialect, driver, ...outcome.samples };
  } catch (err) {
    failure = err;
  }
  // Both lanes' sandboxes: the runtime host's (self-hosted environment) and serve's own (cloud environment).
  const [selfHosted = "-", cloud = "-"] = envIds;
  const left = [
    await liveSandboxes(driver, docker, selfHosted, runtimeHostWorkspaces(dataDir)),
    await liveSandboxes(driver, docker, cloud, join(dataDir, "workspaces")),
  ];
  for (const l of left) await removeSandboxes(driver, docker, l.handles);
  await rm(dataDir, { recursive: true, force: true });
  await pg?.cleanup();
  if (failure !== null) throw failure;
  const count = left.reduce((n, l) => n + l.sandboxes, 0);
  if (count > 0) throw new Error(`${count} ${driver} sandbox(es) outlived their server (removed now)`);
  if (row === null) throw new Error("unreachable: no row and no failure");
  return row;
}

async function main(): Promise<void> {
  // The image and root filesystem the runtime host's sandboxes start from (the primitive pays the same image).
  const { docker, image, rootfs, versions } = await openMachine();

  const model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
  const rows: Row[] = [];
  try {
    for (const dialect of DIALECTS) for (const driver of DRIVERS) rows.push(await benchOne(dialect, driver, model, docker, image, rootfs));
  } finally {
    await model.close();
    // The primitive's containers, should a failed run have left any.
    await removeLabelledContainers(docker, BENCH_LABEL);
  }

  const cpu = cpus()[0]?.model ?? "unknown CPU";
  console.log(
    `Session create -> first tool result, ama_worker lane: ${RUNS} runs per backend and driver (after ${WARMUP} warm-up), ${cpus().length} CPUs (${cpu}), Node ${process.version}, ${new Date().toISOString()}`,
  );
  console.log(
    `${versions}, rootfs ${rootfs}; node in the sandbox ${rows[0]?.nodeVersion ?? "?"}; OPENMA_WORKER_MAX_IDLE_MS=${WORKER_MAX_IDLE_MS}\n`,
  );
  console.log(
    "| Backend | Driver | ama_worker p50 | ama_worker p95 | Claim acked / worker's first heartbeat / agent.tool_use at (p50) | Serve lane p50 | Serve lane p95 | Primitive | Primitive p50 | Primitive p95 | In-sandbox exec p50: true / node -e 0 / node + SDK | ama_worker / primitive | ama_worker / serve lane | Teardown p50 | Sessions |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
  const f = (x: number) => `${x.toFixed(1)} ms`;
  for (const r of rows) {
    const a = summary(r.ama.map((s) => s.result));
    const use = summary(r.ama.map((s) => s.toolUse));
    const claimed = summary(r.ama.map((s) => s.claimed));
    const up = summary(r.ama.map((s) => s.workerUp));
    const down = summary(r.ama.map((s) => s.teardown));
    const s = summary(r.serve);
    const p = summary(r.raw);
    const [t, n, k] = [summary(r.node.map((x) => x.true)), summary(r.node.map((x) => x.node)), summary(r.node.map((x) => x.sdk))];
    console.log(
      `| ${r.dialect} | ${r.driver} | ${f(a.p50)} | ${f(a.p95)} | ${claimed.p50.toFixed(0)} / ${up.p50.toFixed(0)} / ${use.p50.toFixed(0)} ms | ${f(s.p50)} | ${f(s.p95)} | ${r.primitive} | ${f(p.p50)} | ${f(p.p95)} | ${t.p50.toFixed(1)} / ${n.p50.toFixed(1)} / ${k.p50.toFixed(1)} ms | ${(a.p50 / p.p50).toFixed(1)}x | ${(a.p50 / s.p50).toFixed(1)}x | ${f(down.p50)} | ${r.sessions} + ${r.sessions} |`,
    );
  }
  // Issue 16 target 4: the ama_worker lane within 2x the serve lane on the same driver.
  for (const r of rows) {
    const ratio = summary(r.ama.map((s) => s.result)).p50 / summary(r.serve).p50;
    reportRatioAtMost(
      "ama-worker-first-exec",
      `ama_worker lane vs serve lane, first tool result (p50, ${r.driver}, ${r.dialect})`,
      ratio,
      2,
    );
  }
  console.log(
    "\nRatios use p50s. Every session is new; each ama_worker session's sandbox is gone (teardown, outside the timed span) before the next iteration, then it is archived.",
  );
}

main().catch((err: Error) => {
  console.error(err);
  process.exit(1);
});
