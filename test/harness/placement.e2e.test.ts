/**
 * Where tools run: the self-hosted worker's hands (the loop stops at
 * agent.tool_use), no sandbox driver (fail closed), and sandbox-free
 * sessions (`config: {type: "none"}`: server tools only).
 */
import type { SandboxResolver } from "@openma/contract";
import { NO_SANDBOX_DRIVER, noSandboxResolver, SANDBOX_FREE_REFUSAL, type ServerToolExecutor } from "@openma/harness";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, ofType, startHarness, TOOLSET } from "./support.ts";

const text = (t: string) => ({ content: [{ type: "text" as const, text: t }] });

/** Counts sandbox acquisitions, so a test can prove none happened. */
function counting(inner: SandboxResolver): SandboxResolver & { calls: number } {
  const r = {
    calls: 0,
    resolve(request: Parameters<SandboxResolver["resolve"]>[0]) {
      r.calls += 1;
      return inner.resolve(request);
    },
  };
  return r;
}

/** A tiny server tool: a stand-in for web_fetch (built-in) or an MCP server (when its id names one). */
function executor(id: string, toolName: string, reply: (input: unknown) => string): ServerToolExecutor & { contexts: unknown[] } {
  const contexts: unknown[] = [];
  return {
    id,
    contexts,
    listTools: async () => [
      { name: toolName, description: `${toolName} tool`, input_schema: { type: "object", properties: { q: { type: "string" } } } },
    ],
    handles: (name) => name === toolName,
    async execute(call, ctx) {
      contexts.push({ sessionId: ctx.sessionId, vaultIds: ctx.vaultIds, toolUseId: call.toolUseId });
      return { content: [{ type: "text", text: reply(call.input) }], isError: false };
    },
  };
}

describe.each(BACKENDS)("tool placement on %s", (dialect) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(dialect);
  });
  afterAll(async () => h?.close());

  it("self-hosted: stops at agent.tool_use (waiting for hands) and continues after the worker's user.tool_result", async () => {
    h.model.load([
      {
        match: { last_user_text_contains: "list files" },
        response: { content: [{ type: "tool_use", name: "bash", input: { command: "ls" } }] },
      },
      { match: { tool_result_for: "bash", tool_result_contains: "a.txt" }, response: text("There is a.txt.") },
    ]);
    const sandboxes = counting(h.driver);
    const sessionId = await h.session(await h.agent([TOOLSET]), await h.environment("self_hosted"), "list files");
    expect(await h.run(sessionId, { sandboxes })).toEqual({ type: "waiting_for_hands" });
    let events = await h.events(sessionId);
    const use = ofType(events, "agent.tool_use")[0];
    expect(use).toMatchObject({
      name: "bash",
      input: { command: "ls" },
      evaluated_permission: "allow",
      evaluation: { type: "always_allow" },
    });
    expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "requires_action", event_ids: [use?.id] } });
    expect(await h.needsTurn(sessionId)).toBe(false);
    expect(await h.run(sessionId, { sandboxes })).toEqual({ type: "waiting_for_hands" });

    // What the official worker posts.
    await h.t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.tool_result", tool_use_id: use?.id ?? "", content: [{ type: "text", text: "a.txt" }], is_error: false }],
    });
    expect(await h.run(sessionId, { sandboxes })).toEqual({ type: "idle", stopReason: "end_turn" });
    events = await h.events(sessionId);
    expect(ofType(events, "agent.tool_result")).toEqual([]);
    expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
    expect(sandboxes.calls).toBe(0);
  });

  it("cloud without a sandbox driver fails closed: the tool result says no driver is configured", async () => {
    h.model.load([
      { match: { last_user_text_contains: "run" }, response: { content: [{ type: "tool_use", name: "bash", input: { command: "id" } }] } },
      { match: { tool_result_is_error: true, tool_result_contains: "no sandbox driver" }, response: text("I cannot run commands here.") },
    ]);
    const sessionId = await h.session(await h.agent([TOOLSET]), await h.environment("cloud"), "run id");
    expect(await h.run(sessionId, { sandboxes: noSandboxResolver })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(ofType(await h.events(sessionId), "agent.tool_result")[0]).toMatchObject({
      is_error: true,
      content: [{ type: "text", text: `bash: ${NO_SANDBOX_DRIVER}` }],
    });
  });

  it("sandbox-free: no sandbox is acquired, sandbox tools are refused, web_fetch and MCP tools still run", async () => {
    const env = await h.t.client.beta.environments.create({ name: "chat only", config: { type: "none" } as never });
    expect(env.config).toEqual({ type: "none" });
    expect((await h.t.client.beta.environments.retrieve(env.id)).config).toEqual({ type: "none" });
    const webFetch = executor("web_fetch", "web_fetch", (input) => `fetched ${(input as { q: string }).q}`);
    const docs = executor("docs", "search_docs", (input) => `doc hit for ${(input as { q: string }).q}`);
    const agentId = await h.agent(
      [TOOLSET, { type: "mcp_toolset", mcp_server_name: "docs", default_config: { permission_policy: { type: "always_allow" } } }],
      { mcp_servers: [{ type: "url", name: "docs", url: "https://mcp.example.test/mcp" }] },
    );
    h.model.load([
      {
        match: { last_user_text_contains: "research" },
        response: { content: [{ type: "tool_use", name: "bash", input: { command: "id" } }] },
      },
      {
        match: { tool_result_for: "bash", tool_result_is_error: true },
        response: { content: [{ type: "tool_use", name: "web_fetch", input: { q: "page" } }] },
      },
      { match: { tool_result_for: "web_fetch" }, response: { content: [{ type: "tool_use", name: "search_docs", input: { q: "api" } }] } },
      { match: { tool_result_for: "search_docs" }, response: text("Research done.") },
    ]);
    const sandboxes = counting(h.driver);
    const sessionId = await h.session(agentId, env.id, "research this");
    expect(await h.run(sessionId, { sandboxes, serverTools: [webFetch, docs] })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(sandboxes.calls).toBe(0);

    const events = await h.events(sessionId);
    const [bash, fetch] = ofType(events, "agent.tool_use");
    expect(bash).toMatchObject({ name: "bash", evaluated_permission: "deny" });
    expect(bash).not.toHaveProperty("evaluation");
    expect(fetch).toMatchObject({ name: "web_fetch", evaluated_permission: "allow", evaluation: { type: "always_allow" } });
    const results = ofType(events, "agent.tool_result");
    expect(results[0]).toMatchObject({ tool_use_id: bash?.id, is_error: true, content: [{ type: "text", text: SANDBOX_FREE_REFUSAL }] });
    expect(results[1]).toMatchObject({ tool_use_id: fetch?.id, is_error: false, content: [{ type: "text", text: "fetched page" }] });
    const mcpUse = ofType(events, "agent.mcp_tool_use")[0];
    expect(mcpUse).toMatchObject({ name: "search_docs", mcp_server_name: "docs", input: { q: "api" }, evaluated_permission: "allow" });
    expect(ofType(events, "agent.mcp_tool_result")[0]).toMatchObject({
      mcp_tool_use_id: mcpUse?.id,
      is_error: false,
      content: [{ type: "text", text: "doc hit for api" }],
    });
    expect(docs.contexts).toEqual([{ sessionId, vaultIds: [], toolUseId: mcpUse?.id }]);

    // The model was never offered a sandbox tool.
    for (const req of h.model.requests.slice(-4)) {
      expect((req.body as { tools: Array<{ name: string }> }).tools.map((t) => t.name)).toEqual(["web_fetch", "search_docs"]);
    }
  });

  it("MCP tools default to always_ask and are held for a confirmation", async () => {
    const docs = executor("docs", "search_docs", () => "hit");
    const agentId = await h.agent([{ type: "mcp_toolset", mcp_server_name: "docs" }], {
      mcp_servers: [{ type: "url", name: "docs", url: "https://mcp.example.test/mcp" }],
    });
    h.model.load([
      {
        match: { last_user_text_contains: "search" },
        response: { content: [{ type: "tool_use", name: "search_docs", input: { q: "x" } }] },
      },
      { match: { tool_result_for: "search_docs", tool_result_is_error: true }, response: text("Skipped.") },
    ]);
    const sessionId = await h.session(agentId, await h.environment("none"), "search docs");
    expect(await h.run(sessionId, { serverTools: [docs] })).toEqual({ type: "idle", stopReason: "requires_action" });
    const use = ofType(await h.events(sessionId), "agent.mcp_tool_use")[0];
    expect(use).toMatchObject({ evaluated_permission: "ask", evaluation: { type: "always_ask" } });
    await h.t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.tool_confirmation", tool_use_id: use?.id ?? "", result: "deny" }],
    });
    expect(await h.run(sessionId, { serverTools: [docs] })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(ofType(await h.events(sessionId), "agent.mcp_tool_result")[0]).toMatchObject({ mcp_tool_use_id: use?.id, is_error: true });
    expect(docs.contexts).toEqual([]);
  });

  it("per-session executors that rename tools (MCP `<server>__<tool>`) record the tool's own name and are closed after the run", async () => {
    const calls: string[] = [];
    let closed = 0;
    let failNext = false;
    const renaming: ServerToolExecutor = {
      id: "docs",
      listTools: async () => [{ name: "docs__search", input_schema: { type: "object" } }],
      handles: (name) => name === "docs__search",
      binding: (name) => (name === "docs__search" ? { toolName: "search", permissionPolicy: { type: "always_allow" } } : undefined),
      async execute(call) {
        calls.push(call.name);
        if (failNext) {
          throw Object.assign(new Error("server went away"), {
            toSessionError: (retry: string) => ({
              type: "mcp_connection_failed_error",
              mcp_server_name: "docs",
              message: "down",
              retry_status: { type: retry },
            }),
          });
        }
        return { content: [{ type: "text", text: "found" }], isError: false };
      },
    };
    const agentId = await h.agent([{ type: "mcp_toolset", mcp_server_name: "docs" }], {
      mcp_servers: [{ type: "url", name: "docs", url: "https://mcp.example.test/mcp" }],
    });
    h.model.load([
      { match: { last_user_text_contains: "look" }, response: { content: [{ type: "tool_use", name: "docs__search", input: {} }] } },
      { match: { tool_result_for: "docs__search", tool_result_is_error: false }, response: text("Found.") },
      { match: { last_user_text_contains: "again" }, response: { content: [{ type: "tool_use", name: "docs__search", input: {} }] } },
      { match: { tool_result_for: "docs__search", tool_result_is_error: true }, response: text("It failed.") },
    ]);
    const sessionTools = () => ({
      executors: [renaming],
      close: async () => {
        closed += 1;
      },
    });
    const sessionId = await h.session(agentId, await h.environment("none"), "look it up");
    expect(await h.run(sessionId, { sessionTools })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(closed).toBe(1);
    expect(calls).toEqual(["docs__search"]);
    const use = ofType(await h.events(sessionId), "agent.mcp_tool_use")[0];
    expect(use).toMatchObject({ name: "search", mcp_server_name: "docs", evaluated_permission: "allow" });
    // The replayed conversation uses the name the model knows.
    expect(h.model.requests.at(-1)?.body).toMatchObject({
      messages: [{}, { content: [{ type: "tool_use", id: use?.id, name: "docs__search" }] }, {}],
    });

    failNext = true;
    await h.say(sessionId, "again");
    expect(await h.run(sessionId, { sessionTools })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(closed).toBe(2);
    const events = await h.events(sessionId);
    expect(ofType(events, "session.error").at(-1)?.error).toEqual({
      type: "mcp_connection_failed_error",
      mcp_server_name: "docs",
      message: "down",
      retry_status: { type: "retrying" },
    });
    expect(ofType(events, "agent.mcp_tool_result").at(-1)).toMatchObject({
      is_error: true,
      content: [{ type: "text", text: "search: server went away" }],
    });
  });

  it("an executor whose tools cannot be listed is reported and the turn goes on without it", async () => {
    const broken: ServerToolExecutor = {
      id: "docs",
      listTools: async () => {
        throw new Error("connection refused");
      },
      handles: () => false,
      execute: async () => ({ content: [], isError: true }),
    };
    const agentId = await h.agent([{ type: "mcp_toolset", mcp_server_name: "docs" }], {
      mcp_servers: [{ type: "url", name: "docs", url: "https://mcp.example.test/mcp" }],
    });
    h.model.load([{ response: text("No tools, answering directly.") }]);
    const sessionId = await h.session(agentId, await h.environment("none"), "hi");
    expect(await h.run(sessionId, { serverTools: [broken] })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(ofType(await h.events(sessionId), "session.error")[0]?.error).toMatchObject({
      type: "mcp_connection_failed_error",
      mcp_server_name: "docs",
      retry_status: { type: "retrying" },
    });
  });
});
