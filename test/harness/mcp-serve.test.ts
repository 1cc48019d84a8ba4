/**
 * MCP toolsets through `openma serve` with its brain on (both backends): the
 * official SDK creates an agent whose `mcp_toolset` points at a real MCP
 * server (built with @modelcontextprotocol/sdk), a vault holding its bearer
 * token, and a session; the execution worker runs the default harness
 * against the scripted model, which calls the MCP tools. Completion is
 * observed on the SSE stream, never by waiting on time.
 */
import type Anthropic from "@anthropic-ai/sdk";
import { type McpTestServer, startMcpTestServer } from "@openma/harness/server-tools/testing";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const MODEL_KEY = "sk-scripted-mcp-serve";
const VALID_TOKEN = "mcp-serve-valid-token-4d81e2";
const WRONG_TOKEN = "mcp-serve-wrong-token-90aa17";
type Event = { type: string; id: string; [k: string]: unknown };

const message = (t: string) => ({ type: "user.message" as const, content: [{ type: "text" as const, text: t }] });
const idle = (e: Event) => e.type === "session.status_idle";

/** Opens the stream, sends, and collects events until `done` says so. */
async function sendAndCollect(client: Anthropic, sessionId: string, events: unknown[], done: (e: Event) => boolean): Promise<Event[]> {
  const stream = await client.beta.sessions.events.stream(sessionId);
  await client.beta.sessions.events.send(sessionId, { events: events as never });
  const seen: Event[] = [];
  for await (const event of stream) {
    seen.push(event as unknown as Event);
    if (done(event as unknown as Event)) break;
  }
  stream.controller.abort();
  return seen;
}

const SCRIPT = [
  {
    match: { last_user_text_contains: "echo" },
    response: { content: [{ type: "tool_use" as const, name: "notes__echo", input: { text: "hi" } }] },
  },
  { match: { tool_result_for: "notes__echo" }, response: "The server echoed hi." },
  {
    match: { last_user_text_contains: "note" },
    response: { content: [{ type: "tool_use" as const, name: "notes__private_note", input: {} }] },
  },
  { match: { tool_result_for: "notes__private_note" }, response: "I read the note." },
  { match: { last_user_text_contains: "plain" }, response: "Answering without tools." },
].map((turn) => ({ ...turn, times: 100 }));

describe.each(BACKENDS)("MCP toolsets in openma serve on %s", (dialect) => {
  let model: ScriptedModel;
  let mcp: McpTestServer;
  let t: TestServer;
  let env: string;
  let agent: string;

  beforeAll(async () => {
    model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
    mcp = await startMcpTestServer({ validToken: VALID_TOKEN });
    t = await startTestServer(dialect, {
      OPENMA_BRAIN: "on",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_EXECUTION_POLL_MS: "600000", // bus wake-ups only
    });
    env = (await t.client.beta.environments.create({ name: "cloud" })).id;
    agent = (
      await t.client.beta.agents.create({
        name: "mcp agent",
        model: "claude-test-1",
        mcp_servers: [{ type: "url", name: "notes", url: mcp.url }],
        tools: [
          {
            type: "mcp_toolset",
            mcp_server_name: "notes",
            default_config: { permission_policy: { type: "always_allow" } },
            // Configured by the server's own tool name; the model sees `notes__private_note`.
            configs: [{ name: "private_note", permission_policy: { type: "always_ask" } }],
          },
        ],
      })
    ).id;
  });
  afterAll(async () => {
    await t?.close();
    await mcp?.close();
    await model?.close();
  });

  async function sessionWithToken(token: string): Promise<string> {
    const vault = await t.client.beta.vaults.create({ display_name: "mcp" });
    await t.client.beta.vaults.credentials.create(vault.id, { auth: { type: "static_bearer", mcp_server_url: mcp.url, token } });
    return (await t.client.beta.sessions.create({ agent, environment_id: env, vault_ids: [vault.id] })).id;
  }

  it("records agent.mcp_tool_use with the tool's own name, then its result, then the answer", async () => {
    const sessionId = await sessionWithToken(VALID_TOKEN);
    const before = mcp.authorizations.length;
    const events = await sendAndCollect(t.client, sessionId, [message("please echo hi")], idle);
    const relevant = events.filter((e) => e.type.startsWith("agent.") || e.type === "session.status_idle");
    expect(relevant.map((e) => e.type)).toEqual(["agent.mcp_tool_use", "agent.mcp_tool_result", "agent.message", "session.status_idle"]);
    const [use, result, answer, last] = relevant;
    expect(use).toMatchObject({ name: "echo", mcp_server_name: "notes", input: { text: "hi" }, evaluated_permission: "allow" });
    expect(result).toMatchObject({ mcp_tool_use_id: use?.id, is_error: false, content: [{ type: "text", text: "echo: hi" }, {}] });
    expect(answer).toMatchObject({ content: [{ type: "text", text: "The server echoed hi." }] });
    expect(last).toMatchObject({ stop_reason: { type: "end_turn" } });
    expect(events.some((e) => e.type === "session.error")).toBe(false);
    // The vault's token reached the MCP server, and only there.
    const seen = mcp.authorizations.slice(before);
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.every((a) => a === `Bearer ${VALID_TOKEN}`)).toBe(true);
    expect(JSON.stringify(events)).not.toContain(VALID_TOKEN);
  });

  it("holds a tool configured always_ask for confirmation, then runs it once allowed", async () => {
    const sessionId = await sessionWithToken(VALID_TOKEN);
    const held = await sendAndCollect(t.client, sessionId, [message("read the private note")], idle);
    const use = held.find((e) => e.type === "agent.mcp_tool_use");
    expect(use).toMatchObject({
      name: "private_note",
      mcp_server_name: "notes",
      evaluated_permission: "ask",
      evaluation: { type: "always_ask" },
    });
    expect(held.some((e) => e.type === "agent.mcp_tool_result")).toBe(false);
    expect(held.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "requires_action", event_ids: [use?.id] } });

    const done = await sendAndCollect(
      t.client,
      sessionId,
      [{ type: "user.tool_confirmation", tool_use_id: use?.id, result: "allow" }],
      (e) => idle(e) && (e.stop_reason as { type?: string }).type === "end_turn",
    );
    const result = done.find((e) => e.type === "agent.mcp_tool_result");
    // The test server echoes the token on purpose: the log only ever sees it redacted.
    expect(result).toMatchObject({
      mcp_tool_use_id: use?.id,
      is_error: false,
      content: [{ type: "text", text: "private note for test-client, token [redacted credential]" }],
    });
    expect(done.find((e) => e.type === "agent.message")).toMatchObject({ content: [{ type: "text", text: "I read the note." }] });
    const all: Event[] = [];
    for await (const e of t.client.beta.sessions.events.list(sessionId, { limit: 1000 })) all.push(e as unknown as Event);
    expect(all.filter((e) => e.type === "agent.mcp_tool_result")).toHaveLength(1);
    expect(JSON.stringify(all)).not.toContain(VALID_TOKEN);
  });

  it("reports a rejected token as mcp_authentication_failed_error and answers without the server's tools", async () => {
    const sessionId = await sessionWithToken(WRONG_TOKEN);
    const events = await sendAndCollect(t.client, sessionId, [message("a plain question")], idle);
    expect(events.find((e) => e.type === "session.error")).toMatchObject({
      error: { type: "mcp_authentication_failed_error", mcp_server_name: "notes", retry_status: { type: "retrying" } },
    });
    expect(events.find((e) => e.type === "agent.message")).toMatchObject({ content: [{ type: "text", text: "Answering without tools." }] });
    expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
    expect(events.some((e) => e.type === "agent.mcp_tool_use")).toBe(false);
    expect(JSON.stringify(events)).not.toContain(WRONG_TOKEN);
    // The model was asked, without the unreachable server's tools.
    const requests = model.requests.filter((r) => (r.body as { metadata?: { user_id?: string } }).metadata?.user_id === sessionId);
    expect(requests).toHaveLength(1);
    const tools = (requests[0]?.body as { tools?: Array<{ name: string }> } | undefined)?.tools ?? [];
    expect(tools.map((x) => x.name)).not.toContain("notes__echo");
  });
});
