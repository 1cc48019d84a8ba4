/**
 * One real ACP agent, end to end, in a real bubblewrap sandbox against the
 * scripted model through the host-side model gateway:
 *
 *   two turns; the sandbox is killed mid-turn 3; a fresh sandbox and a fresh
 *   runner restore the agent's native files and continue (session/resume or
 *   session/load: the next model request carries the earlier turns, checked
 *   at the scripted model); then the native state is deleted and the next
 *   placement takes semantic recovery with exactly one warning.
 *
 * The agent holds only a placeholder key; the scripted model demands the
 * real one, so every answered request went through the gateway.
 */
import { cp, rm } from "node:fs/promises";
import { join } from "node:path";
import { AcpSessionRunner, type CanonicalEvent, ensureAgentRelease, sandboxSpawn, toolSandboxStatePort } from "@openma/acp";
import { BubblewrapSandbox, bubblewrapProcesses } from "@openma/driver-bubblewrap";
import { acquire, assertBwrapInstalled, scratch } from "@openma/driver-bubblewrap/test-support";
import { GATEWAY_FORWARDER_DIR, GATEWAY_FORWARDER_SCRIPT, openModelGateway } from "@openma/model-gateway";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { expect } from "vitest";
import { type AgentSetup, type ModelEndpoint, modernNodeHostDir, sandboxAgentProcess } from "./agents.ts";

export const REAL_KEY = "sk-real-model-key-e2e";
export const PLACEHOLDER = "openma-placeholder";
export const GATEWAY_PORT = 18080;
/** Where a release that needs a newer Node than the sandbox's finds one (ours, bound read-only). */
const MODERN_NODE_DIR = "/openma/node/bin";
const SESSION = "sesn_acp_e2e";

/** One agent's setup as it sees the model from inside the sandbox: through the gateway, with a placeholder key. */
export type AgentScenario = AgentSetup;

export const SANDBOX_MODEL: ModelEndpoint = { origin: `http://127.0.0.1:${GATEWAY_PORT}`, key: PLACEHOLDER };

const SCRIPT = [
  // First: the recovery prompt quotes every earlier request, so its turn must win over theirs.
  { label: "five", match: { last_user_text_contains: "openma-recovery" }, response: "answer five" },
  { label: "one", match: { last_user_text_contains: "first task" }, response: "answer one" },
  { label: "two", match: { last_user_text_contains: "second task" }, response: "answer two" },
  { label: "hang", match: { last_user_text_contains: "third task" }, delay: { first_byte_ms: 600_000 }, response: "never" },
  { label: "four", match: { last_user_text_contains: "fourth task" }, response: "answer four" },
];

export async function runAgentScenario(s: AgentScenario): Promise<void> {
  assertBwrapInstalled();
  const agentDir = (await ensureAgentRelease(s.release)).dir;
  const root = await scratch(`acp-${s.profile}`);
  let model: ScriptedModel | null = null;
  const driver = new BubblewrapSandbox({
    stateRoot: join(root, "state"),
    // The agent cache lives under /root, which the default unprivileged host uid cannot traverse.
    hostUser: null,
    binds: [
      { source: agentDir, target: "/openma/agent", writable: false },
      { source: join(root, "gateway"), target: "/openma/gateway", writable: false },
      { source: GATEWAY_FORWARDER_DIR, target: "/openma/gateway-bin", writable: false },
      ...(s.release.nodeMajor ? [{ source: modernNodeHostDir(), target: MODERN_NODE_DIR, writable: false }] : []),
    ],
  });
  model = await startScriptedModel({
    apiKey: REAL_KEY,
    script: { turns: SCRIPT, side_requests: { rules: (s.sideRules ?? []) as never[] } },
  });
  const live = await openModelGateway({
    socketPath: join(root, "gateway", "model.sock"),
    upstream: model.url,
    apiKey: () => REAL_KEY,
    keyStyle: s.keyStyle,
  });
  const log: CanonicalEvent[] = [];
  const input = (id: string, text: string) => log.push({ id, type: "user.message", content: [{ type: "text", text }] });
  // Contains, not equals: Claude Code appends its own notices to the turn's text.
  const lastMessage = () => {
    const m = log.filter((e) => e.type === "agent.message").at(-1);
    return ((m?.content as { text: string }[] | undefined)?.[0]?.text ?? "") as string;
  };
  const scripted = model;
  const requestWith = (text: string, from = 0) =>
    scripted.requests.findIndex((r, i) => i >= from && JSON.stringify(r.view?.messages ?? []).includes(text));

  async function placement(seedWorkspace: string | null) {
    const acquired = await acquire(driver, root);
    const workspace = acquired.bindings.workspace.metadata?.hostPath as string;
    if (seedWorkspace) {
      // The fresh sandbox's workspace is the restored candidate: the previous workspace's files.
      await rm(workspace, { recursive: true, force: true });
      await cp(seedWorkspace, workspace, { recursive: true });
    }
    const processes = bubblewrapProcesses(driver);
    let ready: () => void = () => {};
    const listening = new Promise<void>((resolve) => {
      ready = resolve;
    });
    const fwd = await processes.spawn(acquired.lease, {
      command: ["node", `/openma/gateway-bin/${GATEWAY_FORWARDER_SCRIPT}`, String(GATEWAY_PORT), "/openma/gateway/model.sock"],
      onOutput: (stream, chunk) => {
        if (stream === "stdout" && Buffer.from(chunk).toString().includes("listening")) ready();
      },
    });
    if (fwd.type !== "started") throw new Error(fwd.message);
    await listening;
    const runner = new AcpSessionRunner({
      sessionId: SESSION,
      agent: sandboxAgentProcess(s.release, s, { agentDir: "/openma/agent", nodeDir: MODERN_NODE_DIR }),
      spawn: sandboxSpawn(processes, acquired.lease),
      state: toolSandboxStatePort(driver.toolSandbox(acquired.lease)),
      history: [...log],
      publish: async (events) => {
        log.push(...(events as CanonicalEvent[]));
      },
      commitWorkspace: async () => {},
      ...(s.configure ? { configure: s.configure } : {}),
    });
    return { runner, acquired, workspace };
  }

  try {
    const p1 = await placement(null);
    expect(await p1.runner.start()).toMatchObject({ mode: "new", recovery: null });
    input("evt_1", "first task");
    await p1.runner.runTurn("evt_1", "first task");
    expect(lastMessage()).toContain("answer one");
    input("evt_2", "second task");
    await p1.runner.runTurn("evt_2", "second task");
    expect(lastMessage()).toContain("answer two");
    // The agent asked for the model its setup names (environment or configuration, per agent).
    expect(new Set(scripted.requests.map((r) => r.view?.model))).toEqual(new Set([s.model]));
    const spans = log.filter((e) => e.type === "span.model_request_end");
    expect(spans.map((e) => e.is_error)).toEqual([false, false]);
    if (s.reportsUsage) {
      // PromptResponse.usage (the SDK's unstable field) reached model_usage.
      for (const e of spans) expect((e.model_usage as { input_tokens: number }).input_tokens).toBeGreaterThan(0);
    }

    // Turn 3: the model hangs; the sandbox is killed under the turn.
    input("evt_3", "third task");
    // Observed at once: the kill rejects it before the assertion below runs.
    const hung = p1.runner.runTurn("evt_3", "third task").then(
      () => null,
      (error: unknown) => error,
    );
    await expect.poll(() => requestWith("third task") >= 0, { timeout: 120_000 }).toBe(true);
    const { scope, lease } = p1.acquired;
    const fence = { scope, ownerId: "e2e", generation: 1, expiresAt: Date.now() + 60_000 };
    await driver.terminate({ scope, fence, lease, reason: "failed", signal: new AbortController().signal });
    expect(await hung).toBeInstanceOf(Error);

    // Fresh sandbox, fresh runner: the native files come back and the session continues.
    const p2 = await placement(p1.workspace);
    const resumed = await p2.runner.start();
    expect(resumed).toMatchObject({ mode: s.expectedContinue, recovery: null });
    input("evt_4", "fourth task");
    const before = scripted.requests.length;
    await p2.runner.runTurn("evt_4", "fourth task");
    expect(lastMessage()).toContain("answer four");
    const fourth = requestWith("fourth task", before);
    expect(fourth).toBeGreaterThanOrEqual(0);
    const carried = JSON.stringify(scripted.requests[fourth]?.view?.messages ?? []);
    expect(carried).toContain("first task");
    expect(carried).toContain("answer two");
    expect(log.filter((e) => e.type === "session.warning")).toHaveLength(0);
    await p2.runner.shutdown();

    // Native state deleted: one session/new with the recovery prompt and one warning.
    await rm(join(p2.workspace, ".openma/harness-state/acp", SESSION, s.profile, "v1/native"), { recursive: true, force: true });
    const p3 = await placement(p2.workspace);
    expect(await p3.runner.start()).toMatchObject({ mode: "new", recovery: "native-state-missing" });
    input("evt_5", "fifth task");
    await p3.runner.runTurn("evt_5", "fifth task");
    expect(lastMessage()).toContain("answer five");
    expect(log.filter((e) => e.type === "session.warning")).toHaveLength(1);
    const recovery = JSON.stringify(scripted.requests.at(-1)?.view?.messages ?? []);
    expect(recovery).toContain("fourth task");
    expect(recovery).toContain("fifth task");
    // Every answered request carried the gateway's key (the scripted model refuses the placeholder).
    expect(scripted.requests.length).toBeGreaterThan(0);
    await p3.runner.destroy();
  } finally {
    await model?.close();
    await live.close();
    await driver.shutdown();
    await rm(root, { recursive: true, force: true });
  }
}
