/**
 * The ama_worker runner on its own: a fake SandboxProcessPort records what
 * would be started in the sandbox (argv, cwd, env, stdin) and plays the
 * worker's end, while the turn-boundary stream runs against the real API
 * (SQLite, brain off) with a real claimed work item's sessions token. The
 * test writes the session's idle events itself, the way the brain would.
 */
import { sessionsTokenFromSecret } from "@anthropic-ai/sdk/lib/environments/worker";
import { appendEvents } from "@openma/api";
import {
  HARNESS_SUPERVISOR_PROTOCOL,
  type ManagedRuntimePlan,
  type ManagedSandboxLease,
  type RuntimeProcess,
  type RuntimeResourceScope,
  type SandboxProcess,
  type SandboxProcessEnd,
  type SandboxProcessPort,
  type SandboxSpawnInput,
  type SandboxSpawnResult,
} from "@openma/contract";
import type { HarnessRunInput, TurnCommitResult } from "@openma/host";
import { newId, systemClock } from "@openma/storage";
import { ManualScheduler } from "@openma/time";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../../test/support/server.ts";
import { AmaWorkerRunner, type AmaWorkerRunnerOptions, type WorkTicket } from "./ama-worker-runner.ts";

/** A sandbox process the test ends by hand; it records stdin and kills. */
class FakeProcess implements SandboxProcess {
  readonly stdin: string[] = [];
  stdinClosed = false;
  kills = 0;
  /** Makes `write` fail as if the process died before reading stdin. */
  brokenStdin = false;
  readonly done: Promise<SandboxProcessEnd>;
  #end!: (end: SandboxProcessEnd) => void;

  constructor(readonly input: SandboxSpawnInput) {
    this.done = new Promise((resolve) => {
      this.#end = resolve;
    });
  }

  async write(chunk: Uint8Array | string): Promise<void> {
    if (this.brokenStdin || this.stdinClosed) throw new Error("stdin is closed");
    this.stdin.push(typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8"));
  }

  closeStdin(): void {
    this.stdinClosed = true;
  }

  async kill(): Promise<void> {
    this.kills += 1;
    this.end({ type: "killed" });
  }

  end(end: SandboxProcessEnd): void {
    this.#end(end);
  }

  stderr(text: string): void {
    this.input.onOutput("stderr", Buffer.from(text));
  }
}

/** Records every spawn; answers with a started FakeProcess unless `spawnError` is set. */
class FakeProcesses implements SandboxProcessPort {
  readonly spawns: Array<{ lease: ManagedSandboxLease; input: SandboxSpawnInput }> = [];
  spawnError: string | null = null;
  brokenStdin = false;
  #started: FakeProcess[] = [];
  #waiters: Array<(p: FakeProcess) => void> = [];

  async spawn(lease: ManagedSandboxLease, input: SandboxSpawnInput): Promise<SandboxSpawnResult> {
    this.spawns.push({ lease, input });
    if (this.spawnError !== null) return { type: "error", message: this.spawnError };
    const process = new FakeProcess(input);
    process.brokenStdin = this.brokenStdin;
    const waiter = this.#waiters.shift();
    if (waiter) waiter(process);
    else this.#started.push(process);
    return { type: "started", process };
  }

  /** The next process started (already, or from now on), each handed out once. */
  next(): Promise<FakeProcess> {
    const started = this.#started.shift();
    if (started) return Promise.resolve(started);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }
}

/** `commitTurn` as the host offers it: records the turn ids and lets the test await them. */
class Commits {
  readonly ids: string[] = [];
  #waiters: Array<{ count: number; resolve: () => void }> = [];

  commit = async (turnId: string): Promise<TurnCommitResult> => {
    this.ids.push(turnId);
    for (const w of this.#waiters.filter((w) => this.ids.length >= w.count)) w.resolve();
    this.#waiters = this.#waiters.filter((w) => this.ids.length < w.count);
    return { type: "committed", revision: this.ids.length, replayed: false };
  };

  until(count: number): Promise<void> {
    if (this.ids.length >= count) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ count, resolve }));
  }
}

/**
 * Wraps the runner's fetch for the event stream only to observe it: which
 * Last-Event-ID each connection sent, when its response has arrived (the
 * server has read the log head by then), and a way to drop the connection.
 */
class StreamWire {
  readonly lastEventIds: Array<string | null> = [];
  #drops: Array<() => void> = [];
  #waiters: Array<{ count: number; resolve: () => void }> = [];

  fetch: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    const url = new URL(typeof input === "string" ? input : input instanceof URL ? input.href : input.url);
    if (!url.pathname.endsWith("/events/stream") || !response.ok || !response.body) return response;
    const upstream = response.body.getReader();
    let fail!: (err: Error) => void;
    const failed = new Promise<never>((_, reject) => {
      fail = reject;
    });
    failed.catch(() => {});
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const next = await Promise.race([upstream.read(), failed]);
        if (next.done) controller.close();
        else controller.enqueue(next.value);
      },
      cancel: (reason) => upstream.cancel(reason),
    });
    this.#drops.push(() => {
      fail(new Error("connection dropped by the test"));
      void upstream.cancel().catch(() => {});
    });
    this.lastEventIds.push(new Headers(init?.headers).get("last-event-id"));
    for (const w of this.#waiters.filter((w) => this.lastEventIds.length >= w.count)) w.resolve();
    this.#waiters = this.#waiters.filter((w) => this.lastEventIds.length < w.count);
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };

  /** Resolves once `count` stream connections have been answered. */
  opened(count: number): Promise<void> {
    if (this.lastEventIds.length >= count) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ count, resolve }));
  }

  /** Breaks the newest connection mid-stream, as a restarting server would. */
  drop(): void {
    this.#drops.at(-1)?.();
  }
}

const LAUNCHER: RuntimeProcess = { command: "node", args: ["/openma/launcher/ama-worker.mjs"], cwd: "/workspace" };

function planFor(driver: ManagedRuntimePlan["driver"]): ManagedRuntimePlan {
  return {
    provider: "fake",
    driver,
    workspace: { requirement: "durable", strategy: "checkpoint_restore", durability: "durable" },
    outputs: null,
    runtimeCheckpoint: null,
  };
}

const SANDBOX: ManagedSandboxLease = { provider: "fake", runtimeId: "rt_fake_1" };
const SOCKET = "/openma/run/api.sock";

describe("AmaWorkerRunner", () => {
  let t: TestServer;
  let agentId: string;
  let environment: { id: string; key: string };

  beforeAll(async () => {
    t = await startTestServer("sqlite");
    agentId = (await t.client.beta.agents.create({ name: "hands", model: "claude-sonnet-4-5" })).id;
    const env = (await t.client.beta.environments.create({ name: "fleet", config: { type: "self_hosted" } } as never)) as unknown as {
      id: string;
      environment_key: string;
    };
    environment = { id: env.id, key: env.environment_key };
  });
  afterAll(async () => t?.close());

  /** A new session with a first message, its work item claimed with the environment key. */
  async function claim(): Promise<WorkTicket> {
    const session = await t.client.beta.sessions.create({
      agent: agentId,
      environment_id: environment.id,
      initial_events: [{ type: "user.message", content: [{ type: "text", text: "hello" }] }],
    });
    const fleet = t.clientWith(environment.key).beta.environments.work;
    const work = await fleet.poll(environment.id);
    if (!work || work.data.id !== session.id) throw new Error("the new session's item was not claimed");
    // Acknowledged, as the WorkPoller does: an unacknowledged item would be handed out again.
    await fleet.ack(work.id, { environment_id: environment.id });
    const sessionsToken = sessionsTokenFromSecret(work.secret);
    if (!work.secret || !sessionsToken) throw new Error("the claimed item carries no sessions token");
    return { workId: work.id, environmentId: environment.id, sessionId: session.id, secret: work.secret, sessionsToken };
  }

  function setup(ticket: WorkTicket | undefined, extra: Partial<AmaWorkerRunnerOptions> = {}) {
    const processes = new FakeProcesses();
    const logs: Array<{ line: string; scope: RuntimeResourceScope }> = [];
    const scheduler = new ManualScheduler();
    const runner = new AmaWorkerRunner({
      processes,
      ticketFor: (scope) => (ticket && scope.sessionId === ticket.sessionId ? ticket : undefined),
      apiUrl: t.baseURL,
      apiSocketPath: SOCKET,
      onLog: (line, scope) => logs.push({ line, scope }),
      scheduler,
      ...extra,
    });
    const commits = new Commits();
    const abort = new AbortController();
    const scope = { environmentId: environment.id, sessionId: ticket?.sessionId ?? "sesn_unclaimed" };
    const input = (driver: ManagedRuntimePlan["driver"] = { type: "ama_worker", process: LAUNCHER }): HarnessRunInput => ({
      scope,
      fence: { scope, ownerId: "rh-test-owner", generation: 1, expiresAt: Date.now() + 60_000 },
      plan: planFor(driver),
      sandbox: SANDBOX,
      workspace: { bindingId: "wsb_1", strategy: "checkpoint_restore", mountPath: "/workspace" },
      outputs: null,
      restored: null,
      attempt: 1,
      commitTurn: commits.commit,
      signal: abort.signal,
    });
    return { processes, logs, scheduler, runner, commits, abort, scope, input };
  }

  const exited = (exitCode: number): SandboxProcessEnd => ({ type: "exited", exitCode, signal: null });

  it("hands the item's values, the socket and the workdir to the worker on stdin, never in argv or env", async () => {
    const ticket = await claim();
    const s = setup(ticket, { maxIdleMs: 1_500 });
    const running = s.runner.run(s.input());
    const child = await s.processes.next();
    child.end(exited(0));
    expect(await running).toEqual({ type: "completed" });

    expect(child.stdinClosed).toBe(true);
    const sent = child.stdin.join("");
    expect(sent.endsWith("\n")).toBe(true);
    expect(sent.indexOf("\n")).toBe(sent.length - 1); // exactly one line
    expect(JSON.parse(sent)).toEqual({
      env: {
        ANTHROPIC_WORK_ID: ticket.workId,
        ANTHROPIC_ENVIRONMENT_ID: ticket.environmentId,
        ANTHROPIC_SESSION_ID: ticket.sessionId,
        ANTHROPIC_WORK_SECRET: ticket.secret,
      },
      apiSocket: SOCKET,
      workdir: "/workspace",
      maxIdleMs: 1_500,
    });

    const [spawn] = s.processes.spawns;
    const { onOutput: _onOutput, ...visible } = spawn?.input ?? ({} as SandboxSpawnInput);
    const inspectable = JSON.stringify(visible);
    for (const secret of [ticket.secret, ticket.sessionsToken]) expect(inspectable).not.toContain(secret);
    expect(spawn?.input.env ?? {}).toEqual({});
  });

  it("leaves maxIdleMs to the SDK's default when it is not configured", async () => {
    const s = setup(await claim());
    const running = s.runner.run(s.input());
    const child = await s.processes.next();
    child.end(exited(0));
    await running;
    expect(JSON.parse(child.stdin.join(""))).not.toHaveProperty("maxIdleMs");
  });

  it("starts the plan's ama_worker process (command, args, cwd) in the acquired sandbox", async () => {
    const s = setup(await claim());
    const custom = { type: "ama_worker" as const, process: { command: "/usr/bin/env", args: ["node", "/opt/w.mjs", "--x"], cwd: "/srv" } };
    const first = s.runner.run(s.input(custom));
    (await s.processes.next()).end(exited(0));
    await first;
    // Without args and cwd: the bare command, in the workspace.
    const second = s.runner.run(s.input({ type: "ama_worker", process: { command: "worker" } }));
    (await s.processes.next()).end(exited(0));
    await second;
    expect(s.processes.spawns.map((p) => ({ lease: p.lease, command: p.input.command, cwd: p.input.cwd }))).toEqual([
      { lease: SANDBOX, command: ["/usr/bin/env", "node", "/opt/w.mjs", "--x"], cwd: "/srv" },
      { lease: SANDBOX, command: ["worker"], cwd: "/workspace" },
    ]);
  });

  it("maps the worker's end: exit 0 completes, a non-zero exit fails with the last stderr line, a kill fails", async () => {
    const s = setup(await claim());
    const outcome = async (end: (child: FakeProcess) => void) => {
      const running = s.runner.run(s.input());
      end(await s.processes.next());
      return running;
    };
    expect(await outcome((c) => c.end(exited(0)))).toEqual({ type: "completed" });
    expect(
      await outcome((c) => {
        c.stderr("starting\nama-worker: launch message lacks ANTHROPIC_WORK_ID\n");
        c.end(exited(1));
      }),
    ).toEqual({ type: "failed", error: "the worker exited with code 1: ama-worker: launch message lacks ANTHROPIC_WORK_ID" });
    expect(await outcome((c) => c.end({ type: "killed" }))).toEqual({ type: "failed", error: "the worker was killed" });
    expect(await outcome((c) => c.end({ type: "error", message: "the sandbox is not running" }))).toEqual({
      type: "sandbox_lost",
      reason: "the sandbox is not running",
    });
    expect(await outcome((c) => c.end({ type: "error", message: "exec attach failed" }))).toEqual({
      type: "failed",
      error: "exec attach failed",
    });
  });

  it("reports the exit when the process died before reading its launch message", async () => {
    const s = setup(await claim());
    s.processes.brokenStdin = true;
    const running = s.runner.run(s.input());
    const child = await s.processes.next();
    child.stderr("node: not found\n");
    child.end(exited(127));
    expect(await running).toEqual({ type: "failed", error: "the worker exited with code 127: node: not found" });
    expect(child.stdin).toEqual([]);
  });

  it("maps spawn errors: a sandbox that is not running is lost, anything else fails", async () => {
    const s = setup(await claim());
    s.processes.spawnError = "container rt_fake_1 is not running";
    expect(await s.runner.run(s.input())).toEqual({ type: "sandbox_lost", reason: "container rt_fake_1 is not running" });
    s.processes.spawnError = "no such executable: node";
    expect(await s.runner.run(s.input())).toEqual({ type: "failed", error: "no such executable: node" });
  });

  it("fails without starting anything when no item is claimed for the scope or the plan is not ama_worker", async () => {
    const unclaimed = setup(undefined);
    expect(await unclaimed.runner.run(unclaimed.input())).toEqual({ type: "failed", error: "no claimed work item for this session" });
    expect(unclaimed.processes.spawns).toEqual([]);

    const s = setup(await claim());
    const supervised: ManagedRuntimePlan["driver"] = {
      type: "openma_supervised",
      protocol: HARNESS_SUPERVISOR_PROTOCOL,
      supervisor: { command: "node", args: ["/openma/supervisor.mjs"] },
      harness: { id: "h", version: "1" },
      readyTimeoutMs: 1_000,
      heartbeatTimeoutMs: 1_000,
      drainTimeoutMs: 1_000,
    };
    expect(await s.runner.run(s.input(supervised))).toEqual({
      type: "failed",
      error: "the ama_worker runner cannot run openma_supervised",
    });
    expect(s.processes.spawns).toEqual([]);
  });

  it("kills the worker when the host aborts the run", async () => {
    const s = setup(await claim());
    const running = s.runner.run(s.input());
    const child = await s.processes.next();
    expect(child.kills).toBe(0);
    s.abort.abort();
    expect(await running).toEqual({ type: "failed", error: "the worker was killed" });
    expect(child.kills).toBe(1);
  });

  it("forwards stderr to onLog line by line, across chunk boundaries, skipping blank lines", async () => {
    const ticket = await claim();
    const s = setup(ticket);
    const running = s.runner.run(s.input());
    const child = await s.processes.next();
    child.stderr("worker: polling");
    child.stderr(" item\n\n   \nworker: tool ");
    child.input.onOutput("stdout", Buffer.from("stdout is not a log\n"));
    child.stderr("bash ran\nunterminated");
    child.end(exited(0));
    await running;
    expect(s.logs).toEqual([
      { line: "worker: polling item", scope: s.scope },
      { line: "worker: tool bash ran", scope: s.scope },
    ]);
  });

  it("commits at every idle that ends a turn, not at requires_action, and resumes after a dropped stream", async () => {
    const ticket = await claim();
    const wire = new StreamWire();
    const s = setup(ticket, { fetch: wire.fetch });
    const running = s.runner.run(s.input());
    const child = await s.processes.next();
    const deps = { storage: t.store.storage, clock: systemClock, ids: newId };
    const idle = (type: string) => ({ type: "session.status_idle", fields: { stop_reason: { type } }, dedupeKey: null });

    await wire.opened(1);
    expect(wire.lastEventIds).toEqual([null]);
    const first = await appendEvents(deps, ticket.sessionId, [idle("requires_action"), idle("end_turn"), idle("retries_exhausted")]);
    const [paused, ended, exhausted] = first.events.map((e) => e.id);
    await s.commits.until(2);
    expect(s.commits.ids).toEqual([ended, exhausted]);
    expect(paused).toBeDefined();

    // The connection breaks; boundaries written meanwhile are picked up after the last event seen.
    wire.drop();
    await s.scheduler.untilSleeping(1);
    const gap = await appendEvents(deps, ticket.sessionId, [idle("requires_action"), idle("end_turn")]);
    s.scheduler.advance(500);
    await wire.opened(2);
    expect(wire.lastEventIds[1]).toBe(exhausted);
    await s.commits.until(3);
    expect(s.commits.ids).toEqual([ended, exhausted, gap.events[1]?.id]);

    child.end(exited(0));
    expect(await running).toEqual({ type: "completed" });
    expect(s.commits.ids).toHaveLength(3);
  });

  it("drains trivially: the worker has exited by then", async () => {
    const s = setup(undefined);
    expect(await s.runner.drain({ sandbox: SANDBOX, signal: s.abort.signal })).toEqual({ type: "drained" });
  });
});
