/**
 * The ACP lane's host runner against a hand-played harness (the supervisor
 * package's FakeProcesses) and a recording HTTP stand-in of the Work API:
 * the launch line (with the sessions token) goes first and only on stdin,
 * the protocol follows, `ready` must name the pinned release, turn commits
 * go to the host, the Work lease is heartbeated with the item's token and
 * the item is stopped after a completed run (not after a failed one).
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { ManagedRuntimePlan, RuntimeResourceScope } from "@openma/contract";
import type { HarnessRunInput } from "@openma/host";
import { PROTOCOL } from "@openma/supervisor";
import { FakeProcesses } from "@openma/supervisor/testing/fake-processes";
import { ManualScheduler } from "@openma/time";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { acpSupervisedProfile } from "./acp-lane.ts";
import { AcpSupervisedRunner } from "./acp-supervised-runner.ts";

const TOKEN = "sk-ant-req-item-token-only-on-stdin";
const scope: RuntimeResourceScope = { environmentId: "env_acp", sessionId: "sesn_acp" };
const PIN = { id: "codex-acp", package: "@zed-industries/codex-acp", version: "0.16.0", integrity: "sha512-x" };
const ticket = { workId: "work_1", environmentId: scope.environmentId, sessionId: scope.sessionId, secret: "s", sessionsToken: TOKEN };

async function settle(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

interface Call {
  method: string;
  path: string;
  auth: string;
  body: string;
}

describe("AcpSupervisedRunner", () => {
  let api: Server;
  let apiUrl: string;
  const calls: Call[] = [];

  beforeAll(async () => {
    api = createServer((req: IncomingMessage, res) => {
      let body = "";
      req.on("data", (c: Buffer) => {
        body += c.toString("utf8");
      });
      req.on("end", () => {
        calls.push({ method: req.method ?? "", path: req.url ?? "", auth: req.headers.authorization ?? "", body });
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ last_heartbeat: "hb", ttl_seconds: 30, state: "running", lease_extended: true }));
      });
    });
    await new Promise<void>((resolve) => api.listen(0, "127.0.0.1", resolve));
    const address = api.address();
    apiUrl = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => api.close(() => resolve()));
  });

  function setup(opts: { pinned?: typeof PIN | null; installed?: boolean } = {}) {
    const processes = new FakeProcesses();
    const scheduler = new ManualScheduler();
    const commits: string[] = [];
    const runner = new AcpSupervisedRunner({
      processes,
      scheduler,
      ticketFor: () => ticket,
      pinnedRelease: async () => (opts.pinned === undefined ? PIN : opts.pinned),
      agentModel: async () => "gpt-5.4",
      installed: async () => opts.installed ?? true,
      modelSocket: async (style) => `/openma/run/model-${style}.sock`,
      apiUrl,
      maxIdleMs: 1000,
    });
    const driver = acpSupervisedProfile({ type: "acp", model: { baseUrl: "http://m", apiKey: "k" } }).driver;
    const plan: ManagedRuntimePlan = {
      provider: "fake",
      driver,
      workspace: { requirement: "durable", strategy: "checkpoint_restore", durability: "durable" },
      outputs: { requirement: "durable", strategy: "final_collect", durability: "durable" },
      runtimeCheckpoint: null,
    };
    const input: HarnessRunInput = {
      scope,
      fence: { scope, ownerId: "host#1", generation: 2, expiresAt: 1e13 },
      plan,
      sandbox: { provider: "fake", runtimeId: "rt_1", metadata: {} },
      workspace: { bindingId: "wsb", strategy: "checkpoint_restore", mountPath: "/workspace", metadata: {} },
      outputs: null,
      restored: null,
      attempt: 1,
      commitTurn: async (turnId) => {
        commits.push(turnId);
        return { type: "committed", revision: commits.length, replayed: false };
      },
      signal: new AbortController().signal,
    };
    return { processes, runner, input, commits };
  }

  /** A run whose harness was spawned and sent `start` (no ready yet). */
  async function started() {
    calls.length = 0;
    const t = setup();
    const run = t.runner.run(t.input);
    await settle();
    const child = t.processes.last;
    await child.next("start");
    return { t, run, child };
  }

  it("launch line first (the token only there), then the protocol; commits per turn; stops the item after completing", async () => {
    const { t, run, child } = await started();
    const [launch, start] = child.received;
    expect(launch).toMatchObject({
      type: "acp_launch",
      sessionId: scope.sessionId,
      sessionsToken: TOKEN,
      agent: { id: "codex-acp", version: "0.16.0" },
      modelSocket: "/openma/run/model-bearer.sock",
      model: "gpt-5.4",
    });
    expect(start).toMatchObject({ type: "start", protocol: PROTOCOL, generation: 2 });
    // Not in argv or environment.
    expect(JSON.stringify([child.input.command, child.input.env ?? {}])).not.toContain(TOKEN);
    child.say({ type: "ready", protocol: PROTOCOL, harness: { id: "codex-acp", version: "0.16.0" } });
    child.say({ type: "checkpoint_request", turnId: "sevt_turn1" });
    await settle();
    expect(t.commits).toEqual(["sevt_turn1"]);
    expect(child.received.at(-1)).toMatchObject({ type: "checkpoint_result", turnId: "sevt_turn1", result: { type: "committed" } });
    child.say({ type: "completed" });
    expect(await run).toEqual({ type: "completed" });
    // The Work item: heartbeated and then stopped, with the item's own token.
    expect(calls.map((c) => `${c.method} ${c.path.split("?")[0]}`)).toEqual([
      "POST /v1/environments/env_acp/work/work_1/heartbeat",
      "POST /v1/environments/env_acp/work/work_1/stop",
    ]);
    expect(calls.every((c) => c.auth === `Bearer ${TOKEN}`)).toBe(true);
    expect(JSON.parse(calls[1]?.body ?? "{}")).toMatchObject({ force: true });
    child.say({ type: "heartbeat" });
    const drained = t.runner.drain({ scope, fence: t.input.fence, sandbox: t.input.sandbox, signal: new AbortController().signal });
    await child.next("drain");
    child.say({ type: "drained" });
    await child.next("stop");
    child.exit(0);
    expect(await drained).toEqual({ type: "drained" });
  });

  it("a harness that reports another release is killed; the item is left to lapse", async () => {
    const { run, child } = await started();
    child.say({ type: "ready", protocol: PROTOCOL, harness: { id: "gemini", version: "0.61.0" } });
    const result = await run;
    expect(result).toMatchObject({ type: "failed", error: expect.stringContaining("codex-acp@0.16.0") });
    expect(child.kills).toBeGreaterThan(0);
    expect(calls.some((c) => c.path.includes("/stop"))).toBe(false);
  });

  it("no pin, or a pin the cache no longer holds: fails before anything starts", async () => {
    const none = setup({ pinned: null });
    expect(await none.runner.run(none.input)).toMatchObject({ type: "failed", error: expect.stringContaining("pinned no ACP") });
    expect(none.processes.children).toEqual([]);
    const gone = setup({ installed: false });
    expect(await gone.runner.run(gone.input)).toMatchObject({ type: "failed", error: expect.stringContaining("not in the agent cache") });
    expect(gone.processes.children).toEqual([]);
  });
});
