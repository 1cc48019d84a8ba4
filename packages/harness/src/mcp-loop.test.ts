/**
 * The agent loop with real MCP executors (`createMcpExecutors` against a real
 * MCP server built with @modelcontextprotocol/sdk) and vault credentials:
 * per-tool permissions keyed by the server's own tool name, the recorded
 * `agent.mcp_tool_use` name, the described `session.error` of a failing
 * server, and `credential_host_unreachable_error` before the first model
 * request of a run. Both backends.
 */
import type { Storage } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, ofType, startHarness } from "../../../test/harness/support.ts";
import { createMcpExecutors } from "./server-tools/mcp.ts";
import { type McpTestServer, startMcpTestServer, toolContext } from "./server-tools/testing.ts";
import type { ServerToolContext, ServerToolExecutor, SessionToolSet } from "./server-tools.ts";
import { buildCatalogue, type SessionAgentView } from "./tools.ts";

const VALID_TOKEN = "mcp-loop-valid-token-2b7e91";
const text = (t: string) => ({ content: [{ type: "text" as const, text: t }] });
const useOf = (name: string, input: Record<string, unknown> = {}) => ({ content: [{ type: "tool_use" as const, name, input }] });

/** An agent with the `notes` MCP server: everything allowed except `private_note`, which asks. */
function notesAgent(url: string) {
  return {
    mcp_servers: [{ type: "url" as const, name: "notes", url }],
    tools: [
      {
        type: "mcp_toolset",
        mcp_server_name: "notes",
        default_config: { permission_policy: { type: "always_allow" } },
        configs: [{ name: "private_note", permission_policy: { type: "always_ask" } }],
      },
    ],
  };
}

describe("buildCatalogue: MCP per-tool configs", () => {
  it("looks a renamed tool's config up by the tool's own name, not the exposed `<server>__<tool>` name", async () => {
    // An executor that renames tools but leaves the policy to the loop (its binding carries no permissionPolicy).
    const renaming: ServerToolExecutor = {
      id: "docs",
      listTools: async () => ["docs__search", "docs__drop", "docs__list"].map((name) => ({ name, input_schema: { type: "object" } })),
      handles: (name) => name.startsWith("docs__"),
      binding: (name) => (name.startsWith("docs__") ? { toolName: name.slice("docs__".length) } : undefined),
      execute: async () => ({ content: [], isError: false }),
    };
    const agent: SessionAgentView = {
      mcp_servers: [{ name: "docs" }],
      tools: [
        {
          type: "mcp_toolset",
          mcp_server_name: "docs",
          default_config: { permission_policy: { type: "always_allow" } },
          configs: [
            { name: "search", permission_policy: { type: "always_ask" } },
            { name: "drop", enabled: false },
          ],
        },
      ],
    };
    const catalogue = await buildCatalogue(agent, true, [renaming], toolContext({ storage: {} as Storage }, agent));
    expect(catalogue.definitions.map((d) => d.name)).toEqual(["docs__search", "docs__list"]);
    expect(catalogue.routes.get("docs__search")).toMatchObject({
      type: "server",
      mcpServerName: "docs",
      toolName: "search",
      permission: { evaluated_permission: "ask", evaluation: { type: "always_ask" } },
    });
    expect(catalogue.routes.get("docs__list")).toMatchObject({ toolName: "list", permission: { evaluated_permission: "allow" } });
  });
});

describe.each(BACKENDS)("the loop with MCP executors on %s", (dialect) => {
  let h: Harness;
  let mcp: McpTestServer;
  let envId: string;
  let closes = 0;
  const sessionTools = (ctx: ServerToolContext): SessionToolSet => {
    const set = createMcpExecutors(ctx.agent);
    return {
      executors: set.executors,
      close: async () => {
        closes += 1;
        await set.close();
      },
    };
  };

  beforeAll(async () => {
    h = await startHarness(dialect);
    mcp = await startMcpTestServer({ validToken: VALID_TOKEN });
    envId = await h.environment("cloud");
  });
  afterAll(async () => {
    await mcp?.close();
    await h?.close();
  });

  async function vaultWith(auth: Record<string, unknown>): Promise<string> {
    const vault = await h.t.client.beta.vaults.create({ display_name: "loop" });
    await h.t.client.beta.vaults.credentials.create(vault.id, { auth: auth as never });
    return vault.id;
  }

  async function session(opts: { token?: string; environmentId?: string; vaultIds?: string[]; text: string }): Promise<string> {
    const agent = await h.t.client.beta.agents.create({
      name: "mcp loop",
      model: "claude-test-1",
      ...(notesAgent(mcp.url) as object),
    } as never);
    const vaultIds = opts.vaultIds ?? [];
    if (opts.token) vaultIds.push(await vaultWith({ type: "static_bearer", mcp_server_url: mcp.url, token: opts.token }));
    const created = await h.t.client.beta.sessions.create({
      agent: agent.id,
      environment_id: opts.environmentId ?? envId,
      vault_ids: vaultIds,
      initial_events: [{ type: "user.message", content: [{ type: "text", text: opts.text }] }],
    });
    return created.id;
  }

  it("records the MCP server's own tool name on agent.mcp_tool_use and closes the run's connections", async () => {
    h.model.load([
      { match: { last_user_text_contains: "echo" }, response: useOf("notes__echo", { text: "hi" }) },
      { match: { tool_result_for: "notes__echo" }, response: text("Echoed.") },
    ]);
    const sessionId = await session({ token: VALID_TOKEN, text: "echo hi" });
    const before = closes;
    expect(await h.run(sessionId, { sessionTools })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(closes).toBe(before + 1);
    const events = await h.events(sessionId);
    const use = ofType(events, "agent.mcp_tool_use")[0];
    expect(use).toMatchObject({ name: "echo", mcp_server_name: "notes", input: { text: "hi" }, evaluated_permission: "allow" });
    expect(ofType(events, "agent.mcp_tool_result")[0]).toMatchObject({ mcp_tool_use_id: use?.id, is_error: false });
    // The replayed conversation calls the tool by the name the model was offered.
    expect(h.model.requests.at(-1)?.body).toMatchObject({
      messages: [{}, { content: [{ type: "tool_use", id: use?.id, name: "notes__echo" }] }, {}],
    });
  });

  it("holds a tool whose own name is configured always_ask, even though the default allows", async () => {
    h.model.load([
      { match: { last_user_text_contains: "note" }, response: useOf("notes__private_note") },
      { match: { tool_result_for: "notes__private_note" }, response: text("Read it.") },
    ]);
    const sessionId = await session({ token: VALID_TOKEN, text: "read the note" });
    expect(await h.run(sessionId, { sessionTools })).toEqual({ type: "idle", stopReason: "requires_action" });
    let events = await h.events(sessionId);
    const use = ofType(events, "agent.mcp_tool_use")[0];
    expect(use).toMatchObject({ name: "private_note", evaluated_permission: "ask", evaluation: { type: "always_ask" } });
    expect(ofType(events, "agent.mcp_tool_result")).toEqual([]);
    await h.t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.tool_confirmation", tool_use_id: use?.id ?? "", result: "allow" }],
    });
    expect(await h.run(sessionId, { sessionTools })).toEqual({ type: "idle", stopReason: "end_turn" });
    events = await h.events(sessionId);
    expect(ofType(events, "agent.mcp_tool_result")[0]).toMatchObject({
      mcp_tool_use_id: use?.id,
      is_error: false,
      content: [{ type: "text", text: "private note for test-client, token [redacted credential]" }],
    });
  });

  it("reports a rejected token with the executor's own error: mcp_authentication_failed_error", async () => {
    h.model.load([{ match: { last_user_text_contains: "plain" }, response: text("No tools.") }]);
    const sessionId = await session({ token: "mcp-loop-wrong-token-77", text: "plain question" });
    expect(await h.run(sessionId, { sessionTools })).toEqual({ type: "idle", stopReason: "end_turn" });
    const errors = ofType(await h.events(sessionId), "session.error");
    expect(errors).toHaveLength(1);
    expect(errors[0]?.error).toMatchObject({
      type: "mcp_authentication_failed_error",
      mcp_server_name: "notes",
      retry_status: { type: "retrying" },
    });
    expect(JSON.stringify(errors)).not.toContain("mcp-loop-wrong-token-77");
  });

  it("emits credential_host_unreachable_error once per run, before the first model request, and goes on", async () => {
    const limited = await h.t.client.beta.environments.create({
      name: "limited",
      config: { type: "cloud", networking: { type: "limited", allowed_hosts: ["allowed.test"] } },
    });
    const vault = await h.t.client.beta.vaults.create({ display_name: "hosts" });
    const credential = await h.t.client.beta.vaults.credentials.create(vault.id, {
      auth: {
        type: "environment_variable",
        secret_name: "API_TOKEN",
        secret_value: "env-secret-value-5521",
        networking: { type: "limited", allowed_hosts: ["api.elsewhere.test"] },
      },
    });
    h.model.load([
      { match: { last_user_text_contains: "echo" }, response: useOf("notes__echo", { text: "x" }), times: 2 },
      { match: { tool_result_for: "notes__echo" }, response: text("Done."), times: 2 },
    ]);
    const sessionId = await session({ token: VALID_TOKEN, environmentId: limited.id, vaultIds: [vault.id], text: "echo x" });

    // A run that dies at its model request (a crash) after the check; the re-run must not repeat the error.
    const crashing = { ...h.deps.model, send: async () => Promise.reject(new Error("process died")) };
    expect(await h.run(sessionId, { sessionTools, model: crashing })).toMatchObject({ type: "failed" });
    // Two model requests in this run (tool use, then the answer): still one error.
    expect(await h.run(sessionId, { sessionTools })).toEqual({ type: "idle", stopReason: "end_turn" });
    let events = await h.events(sessionId);
    const expected = {
      type: "credential_host_unreachable_error",
      credential_id: credential.id,
      vault_id: vault.id,
      retry_status: { type: "retrying" },
    };
    expect(ofType(events, "session.error").map((e) => e.error)).toEqual([expect.objectContaining(expected)]);
    const types = events.map((e) => e.type);
    expect(types.indexOf("session.error")).toBeLessThan(types.indexOf("span.model_request_start"));
    expect(types.filter((t) => t === "span.model_request_end")).toHaveLength(2);
    expect(JSON.stringify(events)).not.toContain("env-secret-value-5521");

    // The next turn is told again, once.
    await h.say(sessionId, "echo again");
    expect(await h.run(sessionId, { sessionTools })).toEqual({ type: "idle", stopReason: "end_turn" });
    events = await h.events(sessionId);
    expect(ofType(events, "session.error")).toHaveLength(2);
  });
});
