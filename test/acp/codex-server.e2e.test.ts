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
 * session's pinned release, and that changing the agent's selection leaves
 * the live session on its release.
 */
import type Anthropic from "@anthropic-ai/sdk";
import { ensureAgentRelease, KNOWN_AGENT_RELEASES } from "@openma/acp";
import { pinnedAcpRelease } from "@openma/api";
import { assertBwrapInstalled } from "@openma/driver-bubblewrap/test-support";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";
import { endTurnIdle, type LoggedEvent, sendAndWait } from "../support/worker-e2e.ts";

const REAL_KEY = "sk-real-model-key-acp-server";
const CODEX = KNOWN_AGENT_RELEASES.find((r) => r.id === "codex-acp");
const SCRIPT = [
  { label: "one", match: { last_user_text_contains: "first task" }, response: "answer one" },
  { label: "two", match: { last_user_text_contains: "second task" }, response: "answer two" },
];

const said = (events: LoggedEvent[]) =>
  events
    .filter((e) => e.type === "agent.message")
    .flatMap((e) => (e.content as { type: string; text?: string }[]).map((b) => b.text ?? ""))
    .join("");

const userMessage = (text: string) => [{ type: "user.message", content: [{ type: "text", text }] }];

describe("Codex as a session harness through openma serve and the official SDK", () => {
  let model: ScriptedModel;
  let srv: TestServer;
  let client: Anthropic;
  let integrity: string;

  beforeAll(async () => {
    assertBwrapInstalled();
    if (!CODEX) throw new Error("codex-acp is not a known release");
    integrity = (await ensureAgentRelease(CODEX)).integrity;
    model = await startScriptedModel({ apiKey: REAL_KEY, script: { turns: SCRIPT } });
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
    const all: LoggedEvent[] = [];
    for await (const e of client.beta.sessions.events.list(session.id)) all.push(e as unknown as LoggedEvent);
    expect(all.filter((e) => e.type === "session.error")).toEqual([]);
  }, 600_000);
});
