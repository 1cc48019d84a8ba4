/**
 * Load: many concurrent sessions on `openma serve` (one, then two processes)
 * plus one `openma runtime-host` process, all on one fresh Postgres schema and
 * the scripted model, on loopback (issue 16, target 5).
 *
 *   npm run bench:load -- [--sessions=1000] [--turns=3] [--servers=1,2] [--sandboxes=8]
 *                         [--cpu-prof=DIR] [--deadline-min=40]
 *
 * Every session is on one self-hosted environment that the runtime host
 * serves: its bash tool calls run in bubblewrap sandboxes, each running the
 * official EnvironmentWorker, while the servers' brains run the model turns.
 * The runtime host's OPENMA_RUNTIME_HOST_CONCURRENCY (`--sandboxes`) caps the
 * sandboxes alive at once, and OPENMA_WORKER_MAX_IDLE_MS bounds how long an
 * idle worker keeps one, so 1,000 sessions never mean 1,000 bwrap sandboxes
 * on a 2-core machine. The peak number of live sandboxes is sampled from the
 * process table and printed.
 *
 * All sessions start at once (each on the next server, round-robin) and each
 * takes `--turns` turns in a row through the official SDK: send a
 * `user.message` the scripted model answers with a `bash` tool_use; the
 * worker's `user.tool_result` goes back to the model, which ends the turn
 * with text. A turn's latency runs from just before the message is sent to
 * the `session.status_idle` (not `requires_action`) after it on the session's
 * SSE stream, so the first turn of a session includes its wait for a sandbox.
 *
 * Measured per run: turns per second (overall, and sustained: the middle 80%
 * of turn completions over the time they took), p50/p99 turn latency (all
 * turns, and turns after a session's first), peak RSS (VmHWM) of each server
 * and the runtime host, the 1-minute load average, and errors. After the
 * timed span every session's log is checked: through the SDK's event list
 * (no duplicate ids; exactly `turns` user messages, bash tool uses, worker
 * tool results without error and agent messages; no session.error), in the
 * database (seq 1..n without a gap, as many rows as the SDK listed), against
 * what its SSE stream delivered (no event delivered twice, none of the log
 * from the first message to the last idle missing), and at the scripted
 * model (exactly one request per turn and phase for the session: no turn ran
 * twice). Every failure counts as an error.
 *
 * Report lines (bench/report.ts): "no errors, no lost/duplicated events"
 * passes iff the count is 0. Throughput, latency, RSS and the two-server
 * scaling factor have no numeric target in the issue: they are reported with
 * target "measured" and pass iff the run completed without errors, so a table
 * row is red only when the numbers came from a broken run.
 *
 * `--cpu-prof=DIR` runs the servers with `--cpu-prof` into DIR and prints each
 * profile's top functions by self time (bench/load-profile.ts).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { cpus, loadavg, totalmem } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import type Anthropic from "@anthropic-ai/sdk";
import { hostProcesses } from "@openma/driver-suite/host-processes";
import { type RecordedRequest, startScriptedModel } from "@openma/scripted-model";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { type Balancer, startBalancer } from "../test/support/balancer.ts";
import { type ChildServer, startServeProcess } from "../test/support/child-server.ts";
import { formatProfileSummary, summarizeCpuProfile } from "./load-profile.ts";
import { readProcStat } from "./proc-stat.ts";
import { reportTarget } from "./report.ts";

const REPO_ROOT = fileURLToPath(new URL("..", import.meta.url));
const CLI = join(REPO_ROOT, "apps/openma/src/cli.ts");
const MODEL_KEY = "sk-scripted-load";
const BENCH = "load";
/** An idle worker keeps its sandbox this long, so a session's next turn (sent as soon as the client sees idle) reuses it. */
const WORKER_MAX_IDLE_MS = 1_000;
const SAMPLE_EVERY_MS = 250;

const { values: args } = parseArgs({
  options: {
    sessions: { type: "string", default: "1000" },
    turns: { type: "string", default: "3" },
    servers: { type: "string", default: "1,2" },
    sandboxes: { type: "string", default: "8" },
    "cpu-prof": { type: "string" },
    "deadline-min": { type: "string", default: "40" },
  },
});

function intArg(name: string, text: string, min: number, max: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${name} must be an integer in ${min}..${max}, got ${text}`);
  return n;
}

const SESSIONS = intArg("sessions", args.sessions, 1, 10_000);
const TURNS = intArg("turns", args.turns, 1, 50);
const SANDBOXES = intArg("sandboxes", args.sandboxes, 1, 256);
const SERVER_COUNTS = args.servers.split(",").map((s) => intArg("servers", s.trim(), 1, 2));
const DEADLINE_MS = intArg("deadline-min", args["deadline-min"], 1, 600) * 60_000;
const CPU_PROF_DIR = args["cpu-prof"];

const SCRIPT = [
  // After the worker's tool result the turn ends with text; a turn's message asks for the tool.
  { label: "answer", match: { tool_result_for: "bash" }, response: "done" },
  {
    label: "tool",
    match: { last_user_text_contains: "turn" },
    response: { content: [{ type: "tool_use" as const, name: "bash", input: { command: "echo tool-ran" } }] },
  },
].map((turn) => ({ ...turn, times: 1_000_000 }));

interface LoggedEvent {
  id: string;
  type: string;
  [key: string]: unknown;
}

interface SessionRun {
  id: string;
  client: Anthropic;
  /** Every event its SSE stream delivered, in order. */
  seen: LoggedEvent[];
  latencies: number[];
  /** performance.now() at each turn's end. */
  completions: number[];
  error: string | null;
}

interface RunResult {
  servers: number;
  wallMs: number;
  turns: number;
  turnsPerSecond: number;
  sustainedTurnsPerSecond: number;
  latency: { p50: number; p99: number; laterP50: number; laterP99: number; max: number };
  serverPeakRssMb: number[];
  runtimeHostPeakRssMb: number;
  peakSandboxes: number;
  loadAvgMax: number;
  errors: string[];
  modelRequests: number;
  profiles: string[];
  /** CPU seconds spent during the timed span: servers, runtime host, its reaped sandboxes, this client (and the model), the whole machine. */
  cpu: { servers: number; runtimeHost: number; sandboxes: number; client: number; machine: number; capacity: number };
}

const quantile = (xs: number[], q: number) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
};

const textOf = (e: LoggedEvent) =>
  Array.isArray(e.content) ? (e.content as Array<{ type: string; text?: string }>).map((b) => b.text ?? "").join("") : "";

/** Peak (VmHWM) and current (VmRSS) resident set of a process, in MB; 0 once it is gone. */
async function rssOf(pid: number): Promise<{ peak: number; now: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => "");
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? 0);
  return { peak: kb("VmHWM") / 1024, now: kb("VmRSS") / 1024 };
}

/** CPU seconds of a process itself and of its reaped children. */
async function cpuOf(pid: number): Promise<{ self: number; children: number }> {
  const stat = await readProcStat(pid);
  return { self: stat?.cpuSeconds ?? 0, children: stat?.childrenCpuSeconds ?? 0 };
}

/** Busy CPU seconds of the whole machine so far (every tenant), from /proc/stat. */
async function machineBusySeconds(): Promise<number> {
  const line = (await readFile("/proc/stat", "utf8")).split("\n")[0] ?? "";
  const [user, nice, system, , , irq, softirq, steal] = line.split(/\s+/).slice(1).map(Number);
  return ((user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0)) / 100;
}

/**
 * The runtime host's sandboxes, from one pass over /proc: how many bwrap processes it started itself (a
 * sandbox's inner bwrap is their child, not counted), and the CPU seconds each process under them used so far
 * (a killed sandbox's processes are never reaped by the runtime host, so its cutime does not hold them).
 */
async function sandboxScan(hostPid: number, cpuByPid: Map<number, number>): Promise<number> {
  const procs = new Map<number, { ppid: number; comm: string; cpu: number }>();
  for (const name of await readdir("/proc").catch(() => [])) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readProcStat(name);
    if (stat) procs.set(Number(name), { ppid: stat.ppid, comm: stat.comm, cpu: stat.cpuSeconds });
  }
  const underHost = (pid: number) => {
    for (let p = procs.get(pid), hops = 0; p && hops < 32; p = procs.get(p.ppid), hops++) if (p.ppid === hostPid) return true;
    return false;
  };
  let live = 0;
  for (const [pid, p] of procs) {
    if (p.comm === "bwrap" && p.ppid === hostPid) live += 1;
    if (underHost(pid)) cpuByPid.set(pid, Math.max(cpuByPid.get(pid) ?? 0, p.cpu));
  }
  return live;
}

/** `openma runtime-host` as its own process, serving the self-hosted environment from `dataDir` (its blob store and state). */
async function startRuntimeHostProcess(o: {
  store: TestStorage;
  apiUrl: string;
  environmentId: string;
  environmentKey: string;
}): Promise<{ child: ChildProcess; pid: number; output: () => string; stop: () => Promise<number | null> }> {
  const { databaseUrl, pgSchema, dataDir } = o.store;
  if (!databaseUrl || !pgSchema) throw new Error("the runtime host shares the servers' Postgres");
  const child = spawn(process.execPath, ["--import", "tsx", CLI, "runtime-host"], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      OPENMA_PG_SCHEMA: pgSchema,
      OPENMA_DATA_DIR: dataDir,
      OPENMA_API_URL: o.apiUrl,
      OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: o.environmentId,
      // The environment's key is a credential: through the environment, never argv.
      ANTHROPIC_ENVIRONMENT_KEY: o.environmentKey,
      OPENMA_RUNTIME_HOST_SANDBOX: "bubblewrap",
      OPENMA_RUNTIME_HOST_CONCURRENCY: String(SANDBOXES),
      OPENMA_WORKER_MAX_IDLE_MS: String(WORKER_MAX_IDLE_MS),
      LOG_LEVEL: "warn",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let tail = "";
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const ready = new Promise<void>((resolve, reject) => {
    const keep = (chunk: Buffer) => {
      tail = (tail + chunk.toString("utf8")).slice(-16_384);
      if (tail.includes("runtime host serving")) resolve();
    };
    child.stdout?.on("data", keep);
    child.stderr?.on("data", keep);
    void exited.then((code) => reject(new Error(`the runtime host exited (${code}) before serving:\n${tail}`)));
  });
  await ready;
  if (child.pid === undefined) throw new Error("the runtime host child has no pid");
  return {
    child,
    pid: child.pid,
    output: () => tail,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      return exited;
    },
  };
}

/** One session: create, open its stream, take TURNS turns in a row, each until the idle that ends it. */
async function runSession(
  index: number,
  client: Anthropic,
  agent: string,
  environmentId: string,
  signal: AbortSignal,
): Promise<SessionRun> {
  const run: SessionRun = { id: "", client, seen: [], latencies: [], completions: [], error: null };
  try {
    const session = await client.beta.sessions.create({ agent, environment_id: environmentId }, { signal });
    run.id = session.id;
    const stream = await client.beta.sessions.events.stream(session.id, undefined, { signal });
    const events = stream[Symbol.asyncIterator]();
    try {
      for (let turn = 1; turn <= TURNS; turn++) {
        const marker = `s${index} turn ${turn}`;
        const t0 = performance.now();
        await client.beta.sessions.events.send(
          session.id,
          { events: [{ type: "user.message", content: [{ type: "text", text: marker }] }] },
          { signal },
        );
        let mine = false;
        for (;;) {
          const next = await events.next();
          if (next.done) throw new Error(`the stream ended in turn ${turn}`);
          const event = next.value as unknown as LoggedEvent;
          run.seen.push(event);
          if (event.type === "user.message" && textOf(event) === marker) mine = true;
          const stop = (event.stop_reason as { type?: string } | undefined)?.type;
          if (mine && event.type === "session.status_idle" && stop !== "requires_action") break;
        }
        const t1 = performance.now();
        run.latencies.push(t1 - t0);
        run.completions.push(t1);
      }
    } finally {
      stream.controller.abort();
    }
  } catch (err) {
    run.error = `session ${run.id || `#${index}`}: ${err instanceof Error ? err.message : String(err)}`;
  }
  return run;
}

/** Every check of one session's log; returns what is wrong (empty: nothing). */
async function checkSession(run: SessionRun, store: TestStorage, requests: RecordedRequest[]): Promise<string[]> {
  const wrong: string[] = [];
  const say = (what: string) => wrong.push(`session ${run.id}: ${what}`);
  const listed: LoggedEvent[] = [];
  for await (const e of run.client.beta.sessions.events.list(run.id, { limit: 1000 } as never)) listed.push(e as unknown as LoggedEvent);
  const ids = listed.map((e) => e.id);
  if (new Set(ids).size !== ids.length) say("duplicate event ids in the listed log");
  const count = (type: string, test: (e: LoggedEvent) => boolean = () => true) => listed.filter((e) => e.type === type && test(e)).length;
  const expect = (what: string, n: number) => n !== TURNS && say(`${n} ${what}, expected ${TURNS}`);
  expect("user messages", count("user.message"));
  expect(
    "bash tool uses",
    count("agent.tool_use", (e) => e.name === "bash"),
  );
  expect("worker tool results", count("user.tool_result"));
  expect("agent messages", count("agent.message"));
  const failed = count("user.tool_result", (e) => e.is_error === true);
  if (failed > 0) say(`${failed} tool results with is_error`);
  const sessionErrors = listed.filter((e) => e.type === "session.error");
  if (sessionErrors.length > 0) say(`session.error: ${JSON.stringify(sessionErrors[0]).slice(0, 300)}`);

  const seqs = (
    await store.storage.db.selectFrom("session_events").select("seq").where("session_id", "=", run.id).orderBy("seq").execute()
  ).map((r) => Number(r.seq));
  if (seqs.some((seq, i) => seq !== i + 1)) say(`seq has a gap or does not start at 1: ${seqs.join(",").slice(0, 200)}`);
  if (seqs.length !== listed.length) say(`${seqs.length} rows in the database, ${listed.length} listed`);

  const delivered = run.seen.map((e) => e.id);
  if (new Set(delivered).size !== delivered.length) say("the SSE stream delivered an event twice");
  const listedIds = new Set(ids);
  const strangers = delivered.filter((id) => !listedIds.has(id));
  if (strangers.length > 0) say(`the SSE stream delivered ${strangers.length} events the log does not list`);
  const first = listed.findIndex((e) => e.type === "user.message");
  const lastSeen = run.seen.at(-1)?.id;
  const last = listed.findIndex((e) => e.id === lastSeen);
  const deliveredIds = new Set(delivered);
  const lost = first < 0 || last < 0 ? [] : listed.slice(first, last + 1).filter((e) => !deliveredIds.has(e.id));
  if (lost.length > 0) say(`the SSE stream never delivered ${lost.length} logged events (${lost.map((e) => e.type).join(", ")})`);

  // At the model: one request that starts each turn (its last message is the user's text) and one that ends it
  // (its last message carries the worker's tool result). A second of either means a turn ran twice.
  const mine = requests.filter((r) => (r.body as { metadata?: { user_id?: string } } | null)?.metadata?.user_id === run.id);
  const phases = new Map<string, number>();
  for (const r of mine) {
    const messages = r.view?.messages ?? [];
    const lastUserText = [...messages]
      .reverse()
      .find((m) => m.role === "user" && m.content.some((b) => b.type === "text"))
      ?.content.map((b) => (b.type === "text" ? b.text : ""))
      .join("");
    const phase = messages.at(-1)?.content.some((b) => b.type === "tool_result") ? "result" : "start";
    const key = `${lastUserText} ${phase}`;
    phases.set(key, (phases.get(key) ?? 0) + 1);
  }
  const twice = [...phases.entries()].filter(([, n]) => n > 1);
  if (twice.length > 0) say(`the model saw a turn twice: ${twice.map(([k, n]) => `${k} x${n}`).join("; ")}`);
  if (mine.length !== 2 * TURNS) say(`${mine.length} model requests, expected ${2 * TURNS}`);
  if (wrong.length > 0) {
    // The log as the SDK lists it, compact, so a failure can be read without the (dropped) database.
    const stop = (e: LoggedEvent) => (e.stop_reason as { type?: string } | undefined)?.type;
    const line = listed.map((e) => `${e.type}${stop(e) ? `(${stop(e)})` : ""}@${String(e.processed_at).slice(11, 23)}`).join(" ");
    say(`log: ${line}`);
  }
  return wrong;
}

async function benchRun(servers: number): Promise<RunResult> {
  const store = await openTestStorage("postgres");
  const model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
  const apiKey = `sk-bench-${randomBytes(16).toString("hex")}`;
  const children: ChildServer[] = [];
  let balancer: Balancer | null = null;
  let host: Awaited<ReturnType<typeof startRuntimeHostProcess>> | null = null;
  try {
    for (let i = 0; i < servers; i++) {
      children.push(
        await startServeProcess({
          apiKey,
          postgres: store,
          // The first server shares the runtime host's data dir (its blob store holds the checkpoints and outputs).
          ...(i === 0 ? { dataDir: store.dataDir } : {}),
          env: {
            LOG_LEVEL: "warn",
            OPENMA_BRAIN: "on",
            OPENMA_SANDBOX: "none",
            OPENMA_AUTO_PROVISION: "off",
            OPENMA_SCHEDULER: "off",
            OPENMA_MODEL_BASE_URL: model.url,
            OPENMA_MODEL_API_KEY: MODEL_KEY,
            ...(CPU_PROF_DIR ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${CPU_PROF_DIR}` } : {}),
          },
        }),
      );
    }
    const admin = children[0]?.client;
    if (!admin) throw new Error("no server");
    const env = (await admin.beta.environments.create({ name: "load", config: { type: "self_hosted" } } as never)) as unknown as {
      id: string;
      environment_key: string;
    };
    const agent = (
      await admin.beta.agents.create({
        name: "load",
        model: "claude-test-1",
        tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_allow" } } }],
      })
    ).id;
    // The runtime host (and the workers in its sandboxes) reach the API through a round-robin balancer when there are two.
    balancer = servers > 1 ? await startBalancer(children.map((c) => Number(new URL(c.baseURL).port))) : null;
    host = await startRuntimeHostProcess({
      store,
      apiUrl: balancer?.url ?? children[0]?.baseURL ?? "",
      environmentId: env.id,
      environmentKey: env.environment_key,
    });
    const hostPid = host.pid;
    const stateDir = join(store.dataDir, "runtime-host");

    // Sampling: live sandboxes (bwrap processes under the runtime host's state dir) and the load average.
    let peakSandboxes = 0;
    const sandboxCpu = new Map<number, number>();
    let loadAvgMax = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peakSandboxes = Math.max(peakSandboxes, await sandboxScan(hostPid, sandboxCpu));
        loadAvgMax = Math.max(loadAvgMax, loadavg()[0] ?? 0);
        await new Promise((resolve) => setTimeout(resolve, SAMPLE_EVERY_MS));
      }
    })();

    const cpuAt = async () => ({
      servers: (await Promise.all(children.map((c) => cpuOf(c.pid)))).reduce((n, c) => n + c.self, 0),
      host: await cpuOf(hostPid),
      client: (process.cpuUsage().user + process.cpuUsage().system) / 1e6,
      machine: await machineBusySeconds(),
    });
    const cpu0 = await cpuAt();
    const signal = AbortSignal.timeout(DEADLINE_MS);
    const started = performance.now();
    const runs = await Promise.all(
      Array.from({ length: SESSIONS }, (_, i) => {
        const server = children[i % servers];
        if (!server) throw new Error("no server");
        return runSession(i, server.client, agent, env.id, signal);
      }),
    );
    const wallMs = performance.now() - started;
    // The last sandboxes close once their workers idle out: their CPU counts once the runtime host reaped them.
    const drainDeadline = performance.now() + 120_000;
    while ((await sandboxScan(hostPid, sandboxCpu)) > 0 && performance.now() < drainDeadline) await new Promise((r) => setTimeout(r, 100));
    const cpuWindowMs = performance.now() - started;
    const cpu1 = await cpuAt();
    const cpu = {
      servers: cpu1.servers - cpu0.servers,
      runtimeHost: cpu1.host.self - cpu0.host.self,
      sandboxes: [...sandboxCpu.values()].reduce((a, b) => a + b, 0),
      client: cpu1.client - cpu0.client,
      machine: cpu1.machine - cpu0.machine,
      capacity: (cpuWindowMs / 1000) * cpus().length,
    };
    sampling = false;
    await sampler;
    const serverPeakRssMb = await Promise.all(children.map(async (c) => (await rssOf(c.pid)).peak));
    const runtimeHostPeakRssMb = (await rssOf(hostPid)).peak;

    // Checks, outside the timed span.
    const errors = runs.flatMap((r) => (r.error ? [r.error] : []));
    const requests = model.requests;
    for (const r of requests) if (r.outcome === "error") errors.push(`model request ${r.request_id}: ${r.error ?? r.status}`);
    for (const run of runs) if (run.id && !run.error) errors.push(...(await checkSession(run, store, requests)));

    const latencies = runs.flatMap((r) => r.latencies);
    const later = runs.flatMap((r) => r.latencies.slice(1));
    const completions = runs.flatMap((r) => r.completions).sort((a, b) => a - b);
    const lo = completions[Math.floor(0.1 * completions.length)] ?? 0;
    const hi = completions[Math.floor(0.9 * completions.length)] ?? 0;
    const middle = Math.floor(0.9 * completions.length) - Math.floor(0.1 * completions.length);
    const profiles: string[] = [];
    await host.stop();
    host = null;
    for (const c of children.splice(0)) {
      await c.close().catch(() => undefined);
      if (CPU_PROF_DIR) {
        const file = (await readdir(CPU_PROF_DIR)).find((f) => f.includes(`.${c.pid}.`) && f.endsWith(".cpuprofile"));
        if (file) profiles.push(join(CPU_PROF_DIR, file));
      }
    }
    const leftovers = (await hostProcesses()).filter((p) => p.argv.includes("bwrap") && p.argv.includes(stateDir));
    if (leftovers.length > 0) errors.push(`${leftovers.length} bwrap sandboxes left after the runtime host stopped`);
    return {
      servers,
      wallMs,
      turns: latencies.length,
      turnsPerSecond: latencies.length / (wallMs / 1000),
      sustainedTurnsPerSecond: hi > lo ? middle / ((hi - lo) / 1000) : Number.NaN,
      latency: {
        p50: quantile(latencies, 0.5),
        p99: quantile(latencies, 0.99),
        laterP50: quantile(later, 0.5),
        laterP99: quantile(later, 0.99),
        max: Math.max(...latencies),
      },
      serverPeakRssMb,
      runtimeHostPeakRssMb,
      peakSandboxes,
      loadAvgMax,
      errors,
      modelRequests: requests.length,
      profiles,
      cpu,
    };
  } catch (err) {
    const tails = [...children.map((c) => `server ${c.pid}:\n${c.output()}`), host ? `runtime host:\n${host.output()}` : ""];
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${tails.join("\n")}`);
  } finally {
    await host?.stop();
    for (const c of children) await c.close().catch(() => undefined);
    await balancer?.close();
    await model.close();
    await store.cleanup();
  }
}

function printRun(r: RunResult): void {
  const ms = (x: number) => `${x.toFixed(0)} ms`;
  console.log(
    `| ${r.servers} | ${SESSIONS} x ${TURNS} | ${r.turns} | ${(r.wallMs / 1000).toFixed(1)} s | ${r.turnsPerSecond.toFixed(2)} | ${r.sustainedTurnsPerSecond.toFixed(2)} | ${ms(r.latency.p50)} / ${ms(r.latency.p99)} | ${ms(r.latency.laterP50)} / ${ms(r.latency.laterP99)} | ${r.serverPeakRssMb.map((m) => m.toFixed(0)).join(" + ")} MB | ${r.runtimeHostPeakRssMb.toFixed(0)} MB | ${r.peakSandboxes} / ${SANDBOXES} | ${r.loadAvgMax.toFixed(1)} | ${r.modelRequests} | ${r.errors.length} |`,
  );
}

async function main(): Promise<void> {
  const cpu = cpus()[0]?.model ?? "unknown CPU";
  console.log(
    `Load: ${SESSIONS} concurrent sessions x ${TURNS} turns (each a bash tool call in a bubblewrap sandbox), ` +
      `at most ${SANDBOXES} live sandboxes (OPENMA_RUNTIME_HOST_CONCURRENCY), Postgres, ${cpus().length} CPUs (${cpu}), ` +
      `${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, load average at start ${loadavg()
        .map((x) => x.toFixed(2))
        .join(" ")}, ${new Date().toISOString()}\n`,
  );
  const results: RunResult[] = [];
  for (const servers of SERVER_COUNTS) {
    const r = await benchRun(servers);
    results.push(r);
    for (const e of r.errors.slice(0, 20)) console.error(`error (${servers} server(s)): ${e}`);
    if (r.errors.length > 20) console.error(`... and ${r.errors.length - 20} more errors`);
  }
  console.log(
    "| Servers | Sessions x turns | Turns | Wall | Turns/s | Sustained turns/s (middle 80%) | Turn p50 / p99 | Later turns p50 / p99 | Server peak RSS | Runtime host peak RSS | Peak sandboxes / cap | Max load avg (1 min) | Model requests | Errors |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
  for (const r of results) printRun(r);
  console.log(
    "\n| Servers | CPU s: servers | runtime host | sandboxes (sampled, a lower bound) | client + scripted model | whole machine (all tenants) | machine capacity (CPUs x span until the last sandbox closed) |",
  );
  console.log("|---|---|---|---|---|---|---|");
  for (const r of results) {
    const c = r.cpu;
    console.log(
      `| ${r.servers} | ${c.servers.toFixed(1)} | ${c.runtimeHost.toFixed(1)} | ${c.sandboxes.toFixed(1)} | ${c.client.toFixed(1)} | ${c.machine.toFixed(1)} | ${c.capacity.toFixed(1)} |`,
    );
  }
  for (const r of results) {
    for (const p of r.profiles)
      console.log(`\n${formatProfileSummary(`the server (${r.servers} server run) ${p}`, await summarizeCpuProfile(p))}`);
  }
  console.log("");
  for (const r of results) {
    const ok = r.errors.length === 0;
    const what = `${SESSIONS} sessions x ${TURNS} turns, ${r.servers} server(s), Postgres, bwrap cap ${SANDBOXES}`;
    reportTarget({
      bench: BENCH,
      metric: `no errors, no lost/duplicated events (${what})`,
      target: "0",
      measured: r.errors.length,
      unit: "errors",
      pass: ok,
    });
    const measured = (metric: string, value: number, unit: string) =>
      reportTarget({ bench: BENCH, metric: `${metric} (${what})`, target: "measured", measured: Number(value.toFixed(2)), unit, pass: ok });
    measured("sustained turns per second", r.sustainedTurnsPerSecond, "turns/s");
    measured("turn latency p50", r.latency.p50, "ms");
    measured("turn latency p99", r.latency.p99, "ms");
    measured("server peak RSS", Math.max(...r.serverPeakRssMb), "MB");
  }
  const one = results.find((r) => r.servers === 1);
  const two = results.find((r) => r.servers === 2);
  if (one && two) {
    const factor = two.sustainedTurnsPerSecond / one.sustainedTurnsPerSecond;
    console.log(`\nScaling factor, sustained turns/s with 2 servers over 1: ${factor.toFixed(2)}x`);
    reportTarget({
      bench: BENCH,
      metric: `throughput scaling, 2 servers over 1 (${SESSIONS} sessions x ${TURNS} turns)`,
      target: "measured",
      measured: Number(factor.toFixed(2)),
      unit: "x",
      pass: one.errors.length === 0 && two.errors.length === 0,
    });
  }
  if (results.some((r) => r.errors.length > 0)) process.exitCode = 1;
}

main().catch((err: Error) => {
  console.error(err);
  process.exit(1);
});
