/**
 * One real ACP agent as a session's harness THROUGH THE SERVER, end to end
 * (the evidence, per agent): a real `openma serve` process (SQLite,
 * brain on, bubblewrap) and the official SDK as its client; an agent selects
 * the ACP release with `metadata["openma.acp_agent"]`, a session pins it, and
 * the server runs its turns in the session's sandbox against the scripted
 * model through the host-side model gateway (apps/openma/src/acp-sessions.ts):
 *
 *   1. two turns; turn 2's model request carries turn 1 (one ACP session);
 *   2. turn 3's model request is held on the scripted model's manual clock
 *      and the server is killed with SIGKILL under it (its sandbox dies with
 *      it); a restarted server on the same data reclaims the turn, a fresh
 *      sandbox and a fresh runner restore the native state from the
 *      workspace and continue it with the agent's `session/resume` or
 *      `session/load` (the server's "ACP agent started" log line says
 *      which): the retried request carries turns 1 and 2, no recovery
 *      prompt, no warning;
 *   3. the server stops gracefully (its placement closes the ACP session; the
 *      durable copy stays) and a third server continues the session the
 *      same way for turn 4 (a second resume or load, after a close);
 *   4. the server stops, the session's durable native state is deleted from
 *      the workspace, and a fourth server places the next turn on the
 *      semantic recovery path:
 *      exactly one `session.warning` (`source: "acp_semantic_recovery"`,
 *      read through the SDK), the turn's first model request carries the
 *      recovery prompt built from the log, and the turn completes.
 *
 * The agent holds only a placeholder key; the scripted model demands the
 * real one, so every answered request went through the gateway. Every
 * placement's requests ask for the model the Managed Agents agent names
 * (`AGENT_MODEL`, never the setup's default).
 */
import { existsSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import type Anthropic from "@anthropic-ai/sdk";
import { ensureAgentRelease } from "@openma/acp";
import { assertBwrapInstalled } from "@openma/driver-bubblewrap/test-support";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { expect } from "vitest";
import { type ChildServer, startServeProcess } from "../support/child-server.ts";
import { freePort } from "../support/ports.ts";
import { TEST_API_KEY } from "../support/server.ts";
import { allEvents, endTurnIdle, type LoggedEvent, sendAndWait } from "../support/worker-e2e.ts";
import { type AgentName, agentSetup } from "./agents.ts";

export const REAL_KEY = "sk-real-model-key-acp-server";
/** How long a held request waits on the scripted model's manual clock (time moves only when the test advances it). */
export const HELD_MS = 1000;

/** The model API each agent speaks (docs/acp.md "What each real agent needs"): the scripted model records it. */
const DIALECT: Record<AgentName, string> = {
  codex: "openai-responses",
  gemini: "gemini",
  "claude-code": "anthropic",
  opencode: "anthropic",
  "qwen-code": "openai-chat",
  pi: "anthropic",
  copilot: "anthropic",
};

/**
 * The model each agent's Managed Agents agent names: never the setup's
 * default (so the model can only have learnt it from the session's agent).
 * Codex gets a name it knows (it streams a warning as agent text for one it
 * has no metadata for); Claude Code a name it does not know (it maps ids it
 * knows as retired, such as `claude-opus-4-1`, onto current ones).
 */
export const AGENT_MODEL: Record<AgentName, string> = {
  codex: "gpt-5.4",
  gemini: "gemini-2.5-pro",
  "claude-code": "openma-test-model-7",
  opencode: "openma-test-model-7",
  "qwen-code": "qwen3-coder-flash",
  pi: "openma-test-model-7",
  copilot: "openma-test-model-7",
};

/** The model ids the scripted model was asked for (Gemini's is the one in its path, `models/<id>:streamGenerateContent`). */
export const modelsAsked = (model: ScriptedModel) => new Set(model.requests.map((r) => r.view?.model));

export const SCRIPT = [
  // First: the recovery prompt quotes every earlier request, so its turn must win over theirs.
  { label: "recovered", match: { last_user_text_contains: "openma-recovery" }, response: "answer five" },
  { label: "one", match: { last_user_text_contains: "first task" }, response: "answer one" },
  { label: "two", match: { last_user_text_contains: "second task" }, response: "answer two" },
  { label: "four", match: { last_user_text_contains: "fourth task" }, response: "answer four" },
  // Held on the model's manual clock until the user interrupts (the Codex test).
  { label: "long", match: { last_user_text_contains: "long task" }, delay: { first_byte_ms: HELD_MS }, response: "too late" },
  // Held on the model's manual clock: the server is killed while the agent waits for it. A request cut off
  // hands its turn back, so the retried request (from the restarted server) gets it.
  { label: "three", match: { last_user_text_contains: "third task" }, delay: { first_byte_ms: HELD_MS }, response: "answer three" },
];

export const said = (events: LoggedEvent[]) =>
  events
    .filter((e) => e.type === "agent.message")
    .flatMap((e) => (e.content as { type: string; text?: string }[]).map((b) => b.text ?? ""))
    .join("");

export const userMessage = (text: string) => [{ type: "user.message", content: [{ type: "text", text }] }];

/** Index of the first turn request from `from` on whose messages contain `text`, or -1. */
export const requestWith = (model: ScriptedModel, text: string, from = 0) =>
  model.requests.findIndex((r, i) => i >= from && JSON.stringify(r.view?.messages ?? []).includes(text));

const messagesOf = (model: ScriptedModel, index: number) => JSON.stringify(model.requests[index]?.view?.messages ?? []);

/** The `ACP agent started` log lines of a server's output (`mode`: new, resume or load; `recovery`: the reason or null). */
function placementsLogged(output: string, sessionId: string): { mode: string; recovery: string | null }[] {
  return output
    .split("\n")
    .filter((line) => line.includes('"msg":"ACP agent started"') && line.includes(sessionId))
    .map((line) => JSON.parse(line) as { mode: string; recovery: string | null });
}

export interface ServerScenarioResult {
  /** How the restarted server continued the agent's session: `resume` (session/resume) or `load` (session/load). */
  continuedWith: string;
}

export async function runServerScenario(name: AgentName): Promise<ServerScenarioResult> {
  assertBwrapInstalled();
  // The model endpoint is the server's business; the setup here gives the release, profile and side rules.
  const setup = agentSetup(name, { origin: "http://unused.invalid", key: "unused", model: AGENT_MODEL[name] });
  await ensureAgentRelease(setup.release);
  const clock = new ManualScheduler();
  let model: ScriptedModel | null = null;
  let store: TestStorage | null = null;
  let server: ChildServer | null = null;
  try {
    const m = await startScriptedModel({
      apiKey: REAL_KEY,
      scheduler: clock,
      script: { turns: SCRIPT, side_requests: { rules: (setup.sideRules ?? []) as never[] } },
    });
    model = m;
    const s = await openTestStorage("sqlite");
    store = s;
    const port = await freePort();
    const start = async (): Promise<Anthropic> => {
      server = await startServeProcess({
        apiKey: TEST_API_KEY,
        dataDir: s.dataDir,
        port,
        outputTail: 4_000_000,
        env: {
          // Info: the "ACP agent started" line says how each placement began.
          LOG_LEVEL: "info",
          OPENMA_BRAIN: "on",
          OPENMA_SANDBOX: "bubblewrap",
          OPENMA_MODEL_BASE_URL: m.url,
          OPENMA_MODEL_API_KEY: REAL_KEY,
          // The shortest lease the server accepts: the restarted process reclaims the dead one's turn after it.
          OPENMA_EXECUTION_LEASE_TTL_MS: "3000",
          OPENMA_EXECUTION_POLL_MS: "200",
        },
      });
      return server.client;
    };
    const output = () => (server as ChildServer | null)?.output() ?? "";
    const diagnose = (what: string, error: unknown): Error => {
      const lines = output()
        .split("\n")
        .filter((l) => !l.includes('"msg":"request"'))
        .slice(-200);
      const asked = m.requests.map((r) => `${r.path} ${r.outcome} ${JSON.stringify(r.view?.messages ?? []).slice(-300)}`);
      return new Error(`${what}; the model was asked:\n${asked.join("\n")}\nthe server said:\n${lines.join("\n")}`, { cause: error });
    };
    /** Waits until the session's log ends in an end_turn idle after `text`'s answer, letting held requests answer. */
    const finishes = async (client: Anthropic, sessionId: string, answer: string, what: string) => {
      const finished = async () => {
        // A request held on the manual clock answers now (the retried turn 3; nothing else sleeps).
        if (clock.pending.length > 0) clock.advance(HELD_MS);
        const events = await allEvents(client, sessionId);
        return said(events).includes(answer) && endTurnIdle(events.at(-1) as LoggedEvent);
      };
      try {
        await expect.poll(finished, { timeout: 480_000, interval: 1000 }).toBe(true);
      } catch (error) {
        throw diagnose(what, error);
      }
    };

    // 1. Two turns of one ACP session.
    let client = await start();
    const agent = await client.beta.agents.create({
      name,
      model: AGENT_MODEL[name],
      metadata: { "openma.acp_agent": `${setup.release.id}@${setup.release.version}` },
    });
    const env = await client.beta.environments.create({ name: "acp" });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    try {
      expect(said(await sendAndWait(client, session.id, userMessage("first task"), endTurnIdle))).toContain("answer one");
      expect(said(await sendAndWait(client, session.id, userMessage("second task"), endTurnIdle))).toContain("answer two");
    } catch (error) {
      throw diagnose("turns 1 and 2 did not finish", error);
    }
    const second = requestWith(m, "second task");
    expect(messagesOf(m, second)).toContain("first task");
    expect(messagesOf(m, second)).toContain("answer one");
    // The agent answered in its own dialect (not the default harness), only with the real key.
    expect(new Set(m.requests.map((r) => r.dialect))).toEqual(new Set([DIALECT[name]]));
    // It asked for the model the session's agent names (handed to it as its setup reads it).
    expect(modelsAsked(m)).toEqual(new Set([AGENT_MODEL[name]]));
    expect(m.requests.filter((r) => JSON.stringify(r.headers).includes("openma-placeholder"))).toEqual([]);
    expect((await allEvents(client, session.id)).filter((e) => e.type === "session.error")).toEqual([]);
    expect(placementsLogged(output(), session.id)).toEqual([expect.objectContaining({ mode: "new", recovery: null })]);

    // 2. Turn 3: the agent's model request is held; the server is killed under it.
    await client.beta.sessions.events.send(session.id, { events: userMessage("third task") as never });
    await clock.untilSleeping();
    const hung = requestWith(m, "third task");
    expect(hung).toBeGreaterThanOrEqual(0);
    await (server as ChildServer | null)?.kill9();
    server = null;
    await m.idle(); // the model saw the connection die
    expect(m.requests[hung]?.outcome).toBe("aborted");

    client = await start();
    await finishes(client, session.id, "answer three", "turn 3 did not finish after the restart");
    const [continued] = placementsLogged(output(), session.id);
    expect(continued).toMatchObject({ mode: setup.expectedContinue, recovery: null });
    // The retried request continued the native session: it carries turns 1 and 2, and nothing was recovered.
    const retried = requestWith(m, "third task", hung + 1);
    expect(retried).toBeGreaterThan(hung);
    expect(messagesOf(m, retried)).toContain("first task");
    expect(messagesOf(m, retried)).toContain("answer two");
    expect(messagesOf(m, retried)).not.toContain("openma-recovery");
    const resumedLog = await allEvents(client, session.id);
    expect(resumedLog.filter((e) => e.type === "session.warning")).toEqual([]);
    // Turn 3's messages are its own: a session/load's history replay is not projected into the turn after it.
    const third = resumedLog.slice(resumedLog.map((e) => e.type).lastIndexOf("user.message"));
    expect(said(third)).toContain("answer three");
    expect(said(third)).not.toMatch(/answer (one|two)/);

    // 3. The server stops gracefully (the placement closes its ACP session) and a new one continues it again.
    await (server as ChildServer | null)?.close();
    server = null;
    client = await start();
    const beforeFourth = m.requests.length;
    try {
      expect(said(await sendAndWait(client, session.id, userMessage("fourth task"), endTurnIdle))).toContain("answer four");
    } catch (error) {
      throw diagnose("turn 4 did not finish after a graceful restart", error);
    }
    expect(placementsLogged(output(), session.id)).toEqual([expect.objectContaining({ mode: setup.expectedContinue, recovery: null })]);
    const fourth = requestWith(m, "fourth task", beforeFourth);
    expect(messagesOf(m, fourth)).toContain("first task");
    expect(messagesOf(m, fourth)).toContain("answer three");
    expect(messagesOf(m, fourth)).not.toContain("openma-recovery");
    expect((await allEvents(client, session.id)).filter((e) => e.type === "session.warning")).toEqual([]);

    // 4. No placement holds the session (the server stopped); its durable native state is deleted.
    await (server as ChildServer | null)?.close();
    server = null;
    const native = join(s.dataDir, "workspaces", session.id, ".openma/harness-state/acp", session.id, setup.profile, "v1/native");
    expect(existsSync(native)).toBe(true);
    await rm(native, { recursive: true, force: true });
    client = await start();
    const before = m.requests.length;
    let fifth: LoggedEvent[];
    try {
      fifth = await sendAndWait(client, session.id, userMessage("fifth task"), endTurnIdle);
    } catch (error) {
      throw diagnose("the recovered turn did not finish", error);
    }
    expect(said(fifth)).toContain("answer five");
    expect(placementsLogged(output(), session.id)).toEqual([expect.objectContaining({ mode: "new", recovery: "native-state-missing" })]);
    const log = await allEvents(client, session.id);
    const warnings = log.filter((e) => e.type === "session.warning");
    expect(warnings).toEqual([expect.objectContaining({ source: "acp_semantic_recovery", details: { reason: "native-state-missing" } })]);
    // The turn's first model request is the recovery prompt, built from the log: the earlier turns and this one.
    const recovery = messagesOf(m, before);
    expect(recovery).toContain("openma-recovery");
    expect(recovery).toContain("first task");
    expect(recovery).toContain("answer four");
    expect(recovery).toContain("fifth task");
    expect(log.filter((e) => e.type === "session.error")).toEqual([]);
    // Every placement (new, continued after kill -9 and after a graceful stop, recovered) asked for the agent's model.
    expect(modelsAsked(m)).toEqual(new Set([AGENT_MODEL[name]]));
    return { continuedWith: continued?.mode ?? "none" };
  } finally {
    await (server as ChildServer | null)?.close();
    await model?.close();
    await store?.cleanup();
  }
}
