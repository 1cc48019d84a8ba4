/**
 * Codex (`@zed-industries/codex-acp`) as a session's harness THROUGH THE
 * SERVER: the official SDK creates an agent that selects the ACP agent with
 * the OpenMA extension (`metadata["openma.acp_agent"]`), a session pins the
 * release, and two turns sent with `sessions.events.send` are run by the real
 * Codex in a real bubblewrap sandbox (apps/openma/src/acp-sessions.ts),
 * against the scripted model through the host-side model gateway: the agent
 * holds a placeholder key, the scripted model demands the real one.
 *
 * Checked: each turn's `agent.message` (streamed through the SDK), that turn
 * 2's model request carries turn 1 (one ACP session across turns), the
 * session's pinned release, that changing the agent's selection leaves
 * the live session on its release, that a `user.interrupt` cancels a turn
 * (`session/cancel`), and that archiving ends the placement. Then a real `openma serve` process is
 * killed with SIGKILL while Codex waits on turn 3's model; a restarted server
 * on the same data takes the turn over, restores Codex's native session from
 * the workspace and continues it (`session/resume`): the retried request
 * carries turns 1 and 2, and no recovery warning is published.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import type Anthropic from "@anthropic-ai/sdk";
import { ensureAgentRelease, KNOWN_AGENT_RELEASES } from "@openma/acp";
import { pinnedAcpRelease } from "@openma/api";
import { assertBwrapInstalled } from "@openma/driver-bubblewrap/test-support";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type ChildServer, startServeProcess } from "../support/child-server.ts";
import { freePort } from "../support/ports.ts";
import { startTestServer, TEST_API_KEY, type TestServer } from "../support/server.ts";
import { endTurnIdle, type LoggedEvent, sendAndWait } from "../support/worker-e2e.ts";

const REAL_KEY = "sk-real-model-key-acp-server";
const HELD_MS = 1000;
const CODEX = KNOWN_AGENT_RELEASES.find((r) => r.id === "codex-acp");
const SCRIPT = [
  { label: "one", match: { last_user_text_contains: "first task" }, response: "answer one" },
  { label: "two", match: { last_user_text_contains: "second task" }, response: "answer two" },
  // Held on the model's manual clock until the user interrupts.
  { label: "long", match: { last_user_text_contains: "long task" }, delay: { first_byte_ms: HELD_MS }, response: "too late" },
  // Held on the model's manual clock: the server is killed while Codex waits for it. A request cut off
  // hands its turn back, so the retried request (from the restarted server) gets it.
  { label: "three", match: { last_user_text_contains: "third task" }, delay: { first_byte_ms: HELD_MS }, response: "answer three" },
];

const said = (events: LoggedEvent[]) =>
  events
    .filter((e) => e.type === "agent.message")
    .flatMap((e) => (e.content as { type: string; text?: string }[]).map((b) => b.text ?? ""))
    .join("");

const userMessage = (text: string) => [{ type: "user.message", content: [{ type: "text", text }] }];

async function allEvents(client: Anthropic, sessionId: string): Promise<LoggedEvent[]> {
  const out: LoggedEvent[] = [];
  for await (const e of client.beta.sessions.events.list(sessionId)) out.push(e as unknown as LoggedEvent);
  return out;
}

const requestWith = (model: ScriptedModel, text: string, from = 0) =>
  model.requests.findIndex((r, i) => i >= from && JSON.stringify(r.view?.messages ?? []).includes(text));

describe("Codex as a session harness through openma serve and the official SDK", () => {
  let model: ScriptedModel;
  let srv: TestServer;
  let client: Anthropic;
  let integrity: string;
  let clock: ManualScheduler;

  beforeAll(async () => {
    assertBwrapInstalled();
    if (!CODEX) throw new Error("codex-acp is not a known release");
    integrity = (await ensureAgentRelease(CODEX)).integrity;
    clock = new ManualScheduler();
    model = await startScriptedModel({ apiKey: REAL_KEY, scheduler: clock, script: { turns: SCRIPT } });
    srv = await startTestServer("sqlite", {
      OPENMA_BRAIN: "on",
      OPENMA_SANDBOX: "bubblewrap",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: REAL_KEY,
    });
    client = srv.client;
  }, 600_000);
  afterAll(async () => {
    await srv?.close();
    await model?.close();
  });

  it("two turns of one ACP session; the release is pinned on the session", async () => {
    const agent = await client.beta.agents.create({
      name: "codex",
      model: "gpt-5.3-codex",
      metadata: { "openma.acp_agent": `codex-acp@${CODEX?.version}` },
    });
    const env = await client.beta.environments.create({ name: "acp" });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const pin = { id: "codex-acp", package: CODEX?.package, version: CODEX?.version, integrity };
    expect(await pinnedAcpRelease(srv.store.storage.db, session.id)).toEqual(pin);

    const first = await sendAndWait(client, session.id, userMessage("first task"), endTurnIdle);
    expect(said(first)).toContain("answer one");
    expect(first.map((e) => e.type)).toEqual(expect.arrayContaining(["session.status_running", "span.model_request_end"]));

    // The agent now selects another release: the live session keeps the one it pinned.
    await client.beta.agents.update(agent.id, { version: agent.version, metadata: { "openma.acp_agent": "gemini" } });
    const second = await sendAndWait(client, session.id, userMessage("second task"), endTurnIdle);
    expect(said(second)).toContain("answer two");
    expect(await pinnedAcpRelease(srv.store.storage.db, session.id)).toEqual(pin);

    // Turn 2's model request carries turn 1: the same ACP session continued.
    const request = model.requests.find((r) => JSON.stringify(r.view?.messages ?? []).includes("second task"));
    const carried = JSON.stringify(request?.view?.messages ?? []);
    expect(carried).toContain("first task");
    expect(carried).toContain("answer one");
    // Codex answered (OpenAI Responses), not the default harness (Anthropic Messages), and only with the real key.
    expect(new Set(model.requests.map((r) => r.dialect))).toEqual(new Set(["openai-responses"]));
    expect(model.requests.filter((r) => JSON.stringify(r.headers).includes("openma-placeholder"))).toEqual([]);
    // No session.error: every answered request came through the gateway with the real key.
    expect((await allEvents(client, session.id)).filter((e) => e.type === "session.error")).toEqual([]);

    // A user.interrupt while Codex waits on its model: session/cancel, Codex drops the request, the turn ends.
    const stream = await client.beta.sessions.events.stream(session.id);
    await client.beta.sessions.events.send(session.id, { events: userMessage("long task") as never });
    await clock.untilSleeping();
    const held = requestWith(model, "long task");
    await client.beta.sessions.events.send(session.id, { events: [{ type: "user.interrupt" }] });
    for await (const e of stream) if (e.type === "session.status_idle") break;
    stream.controller.abort();
    await model.idle();
    expect(model.requests[held]?.outcome).toBe("aborted");
    expect(said(await allEvents(client, session.id))).not.toContain("too late");

    // Archiving the session ends its placement: the ACP session closes and its model gateway stops listening.
    const socket = join(srv.store.dataDir, "acp-gateway", `${session.id}.sock`);
    expect(existsSync(socket)).toBe(true);
    await client.beta.sessions.archive(session.id);
    expect(existsSync(socket)).toBe(false);
  }, 600_000);
});

describe("a Codex session survives kill -9 of openma serve mid-turn", () => {
  let model: ScriptedModel | null = null;
  let store: TestStorage | null = null;
  let server: ChildServer | null = null;
  afterEach(async () => {
    await server?.close();
    await model?.close();
    await store?.cleanup();
  });

  it("a restarted server resumes Codex's native session and finishes turn 3", async () => {
    assertBwrapInstalled();
    if (!CODEX) throw new Error("codex-acp is not a known release");
    await ensureAgentRelease(CODEX);
    const clock = new ManualScheduler();
    const m = await startScriptedModel({ apiKey: REAL_KEY, scheduler: clock, script: { turns: SCRIPT } });
    model = m;
    const s = await openTestStorage("sqlite");
    store = s;
    const port = await freePort();
    const start = async () => {
      server = await startServeProcess({
        apiKey: TEST_API_KEY,
        dataDir: s.dataDir,
        port,
        outputTail: 1_000_000,
        env: {
          LOG_LEVEL: process.env.DEBUG_ACP ? "info" : "silent",
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
    let client = await start();
    const agent = await client.beta.agents.create({ name: "codex", model: "gpt-5.3-codex", metadata: { "openma.acp_agent": "codex-acp" } });
    const env = await client.beta.environments.create({ name: "acp" });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    expect(said(await sendAndWait(client, session.id, userMessage("first task"), endTurnIdle))).toContain("answer one");
    expect(said(await sendAndWait(client, session.id, userMessage("second task"), endTurnIdle))).toContain("answer two");

    // Turn 3: Codex's model request is held; the server is killed under it.
    await client.beta.sessions.events.send(session.id, { events: userMessage("third task") as never });
    await clock.untilSleeping();
    const hung = requestWith(m, "third task");
    expect(hung).toBeGreaterThanOrEqual(0);
    await server?.kill9();
    server = null;
    await m.idle(); // the model saw the connection die
    expect(m.requests[hung]?.outcome).toBe("aborted");

    const restarted = await start();
    client = restarted;
    const finished = async () => {
      const events = await allEvents(restarted, session.id);
      return said(events).includes("answer three") && endTurnIdle(events.at(-1) as LoggedEvent);
    };
    // The retried request sleeps on the model's clock too: let it answer.
    await clock.untilSleeping();
    clock.advance(HELD_MS);
    try {
      await expect.poll(finished, { timeout: 180_000, interval: 1000 }).toBe(true);
    } catch (error) {
      const lines = ((server as ChildServer | null)?.output() ?? "").split("\n").filter((l) => !l.includes('"msg":"request"'));
      const asked = m.requests.map((r) => `${r.path} ${r.outcome} ${JSON.stringify(r.view?.messages ?? []).slice(-300)}`);
      throw new Error(`turn 3 did not finish; the model was asked:\n${asked.join("\n")}\nthe restarted server said:\n${lines.join("\n")}`, {
        cause: error,
      });
    }

    // The retried request continued the native session: it carries turns 1 and 2, and nothing was recovered.
    const retried = requestWith(m, "third task", hung + 1);
    expect(retried).toBeGreaterThan(hung);
    const carried = JSON.stringify(m.requests[retried]?.view?.messages ?? []);
    expect(carried).toContain("first task");
    expect(carried).toContain("answer two");
    expect(carried).not.toContain("openma-recovery");
    const log = await allEvents(client, session.id);
    expect(log.filter((e) => e.type === "session.warning")).toEqual([]);
  }, 600_000);
});
