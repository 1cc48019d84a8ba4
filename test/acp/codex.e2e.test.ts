/**
 * Codex (the real `@zed-industries/codex-acp` release, installed once into
 * the agent cache) as an ACP harness in a real bubblewrap sandbox, against
 * the scripted model through the host-side model gateway.
 *
 * Two turns; the sandbox is killed mid-turn 3; a fresh sandbox and a fresh
 * runner restore Codex's native files and `session/resume` (the next model
 * request carries the earlier turns, checked at the scripted model); then the
 * native state is deleted and the next placement takes semantic recovery
 * with exactly one warning. The agent only ever holds a placeholder key.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import {
  AcpSessionRunner,
  type CanonicalEvent,
  ensureAgentRelease,
  KNOWN_AGENT_RELEASES,
  sandboxSpawn,
  toolSandboxStatePort,
} from "@openma/acp";
import { BubblewrapSandbox, bubblewrapProcesses } from "@openma/driver-bubblewrap";
import { acquire, assertBwrapInstalled, scratch } from "@openma/driver-bubblewrap/test-support";
import { GATEWAY_FORWARDER_DIR, GATEWAY_FORWARDER_SCRIPT, type ModelGateway, openModelGateway } from "@openma/model-gateway";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const REAL_KEY = "sk-real-model-key-e2e";
const PLACEHOLDER = "openma-placeholder";
const GATEWAY_PORT = 18080;
const SESSION = "sesn_codex_e2e";
const release = KNOWN_AGENT_RELEASES.find((r) => r.id === "codex-acp");
if (!release) throw new Error("codex-acp release missing");

let root: string;
let model: ScriptedModel;
let gateway: ModelGateway;
let driver: BubblewrapSandbox;
let agentDir: string;

beforeAll(async () => {
  assertBwrapInstalled();
  agentDir = (await ensureAgentRelease(release)).dir;
  root = await scratch("acp-codex");
  model = await startScriptedModel({
    apiKey: REAL_KEY,
    script: [
      // First: the recovery prompt quotes every earlier request, so its turn must win over theirs.
      { label: "five", match: { last_user_text_contains: "openma-recovery" }, response: "answer five" },
      { label: "one", match: { last_user_text_contains: "first task" }, response: "answer one" },
      { label: "two", match: { last_user_text_contains: "second task" }, response: "answer two" },
      { label: "hang", match: { last_user_text_contains: "third task" }, delay: { first_byte_ms: 600_000 }, response: "never" },
      { label: "four", match: { last_user_text_contains: "fourth task" }, response: "answer four" },
    ],
  });
  gateway = await openModelGateway({
    socketPath: join(root, "gateway", "model.sock"),
    upstream: model.url,
    apiKey: () => REAL_KEY,
    keyStyle: "bearer",
  });
  driver = new BubblewrapSandbox({
    stateRoot: join(root, "state"),
    // The agent cache lives under /root, which the default unprivileged host uid cannot traverse.
    hostUser: null,
    binds: [
      { source: agentDir, target: "/openma/agent", writable: false },
      { source: join(root, "gateway"), target: "/openma/gateway", writable: false },
      { source: GATEWAY_FORWARDER_DIR, target: "/openma/gateway-bin", writable: false },
    ],
  });
}, 600_000);

afterAll(async () => {
  await model?.close();
  await gateway?.close();
  await driver?.shutdown();
  if (root) await rm(root, { recursive: true, force: true });
});

/** The Session's canonical log, as the API would keep it. */
const log: CanonicalEvent[] = [];
const input = (id: string, text: string) => log.push({ id, type: "user.message", content: [{ type: "text", text }] });

async function placement(seedWorkspace: string | null) {
  const acquired = await acquire(driver, root);
  if (seedWorkspace) {
    // The fresh sandbox's workspace is the restored candidate: the previous workspace's files.
    await rm(acquired.bindings.workspace.metadata?.hostPath as string, { recursive: true, force: true });
    const { cp } = await import("node:fs/promises");
    await cp(seedWorkspace, acquired.bindings.workspace.metadata?.hostPath as string, { recursive: true });
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
  const published: string[] = [];
  const runner = new AcpSessionRunner({
    sessionId: SESSION,
    agent: {
      id: release?.id,
      command: `/openma/agent/${release?.bin}`,
      args: [],
      env: { OPENMA_MODEL_API_KEY: PLACEHOLDER, TMPDIR: "/tmp", HOME: "/tmp" },
    },
    spawn: sandboxSpawn(processes, acquired.lease),
    state: toolSandboxStatePort(driver.toolSandbox(acquired.lease)),
    history: [...log],
    publish: async (events) => {
      log.push(...(events as CanonicalEvent[]));
      published.push(...events.map((e) => e.type));
    },
    commitWorkspace: async () => {},
    configure: async (binding, state) => {
      await state.writeFile(
        `${binding.nativePath}/config.toml`,
        [
          'model = "gpt-5.3-codex"',
          'model_provider = "openma"',
          'approval_policy = "never"',
          'sandbox_mode = "danger-full-access"',
          "[model_providers.openma]",
          'name = "OpenMA model gateway"',
          `base_url = "http://127.0.0.1:${GATEWAY_PORT}/v1"`,
          'env_key = "OPENMA_MODEL_API_KEY"',
          'wire_api = "responses"',
          "",
        ].join("\n"),
      );
    },
  });
  return {
    runner,
    lease: acquired.lease,
    scope: acquired.scope,
    workspace: acquired.bindings.workspace.metadata?.hostPath as string,
    published,
  };
}

const lastMessage = () => {
  const m = log.filter((e) => e.type === "agent.message").at(-1);
  return ((m?.content as { text: string }[] | undefined)?.[0]?.text ?? "") as string;
};

function userTexts(requestIndex: number): string {
  const req = model.requests[requestIndex];
  return JSON.stringify(req?.view?.messages ?? []);
}

describe("Codex over ACP in a bubblewrap sandbox", () => {
  it("two turns, sandbox killed mid-turn 3, native resume in a fresh sandbox, then semantic recovery", async () => {
    const p1 = await placement(null);
    expect(await p1.runner.start()).toMatchObject({ mode: "new", recovery: null });
    input("evt_1", "first task");
    await p1.runner.runTurn("evt_1", "first task");
    expect(lastMessage()).toBe("answer one");
    input("evt_2", "second task");
    await p1.runner.runTurn("evt_2", "second task");
    expect(lastMessage()).toBe("answer two");
    expect(model.requests.every((r) => r.auth === "bearer")).toBe(true); // the gateway's key; the agent's placeholder would be refused

    // Turn 3: the model hangs; the sandbox is killed under the turn.
    input("evt_3", "third task");
    // Observed at once: the kill rejects it before the assertion below runs.
    const hung = p1.runner.runTurn("evt_3", "third task").then(
      () => null,
      (error: unknown) => error,
    );
    await expect
      .poll(() => model.requests.some((r) => JSON.stringify(r.view?.messages ?? []).includes("third task")), { timeout: 120_000 })
      .toBe(true);
    await driver.terminate({
      scope: p1.scope,
      fence: { scope: p1.scope, ownerId: "t", generation: 1, expiresAt: Date.now() + 60_000 },
      lease: p1.lease,
      reason: "failed",
      signal: new AbortController().signal,
    });
    expect(await hung).toBeInstanceOf(Error);

    // Fresh sandbox, fresh runner: Codex's rollout files come back and the session resumes.
    const p2 = await placement(p1.workspace);
    const resumed = await p2.runner.start();
    expect(resumed.mode).toBe("resume");
    expect(resumed.recovery).toBeNull();
    input("evt_4", "fourth task");
    const before = model.requests.length;
    await p2.runner.runTurn("evt_4", "fourth task");
    expect(lastMessage()).toBe("answer four");
    const fourth = model.requests.findIndex((r, i) => i >= before && JSON.stringify(r.view?.messages ?? []).includes("fourth task"));
    expect(fourth).toBeGreaterThanOrEqual(0);
    expect(userTexts(fourth)).toContain("first task");
    expect(userTexts(fourth)).toContain("answer two");
    expect(p2.published).not.toContain("session.warning");
    await p2.runner.shutdown();

    // Native state deleted: one session/new with the recovery prompt and one warning.
    await rm(join(p2.workspace, ".openma/harness-state/acp", SESSION, "codex/v1/native"), { recursive: true, force: true });
    const p3 = await placement(p2.workspace);
    expect(await p3.runner.start()).toMatchObject({ mode: "new", recovery: "native-state-missing" });
    input("evt_5", "fifth task");
    await p3.runner.runTurn("evt_5", "fifth task");
    expect(lastMessage()).toBe("answer five");
    expect(log.filter((e) => e.type === "session.warning")).toHaveLength(1);
    const recoveryRequest = JSON.stringify(model.requests.at(-1)?.view?.messages ?? []);
    expect(recoveryRequest).toContain("fourth task");
    expect(recoveryRequest).toContain("fifth task");
    await p3.runner.destroy();
  }, 600_000);
});
