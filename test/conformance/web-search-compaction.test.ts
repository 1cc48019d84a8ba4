/**
 * web_search and context compaction through the official SDK against
 * `openma serve` with its brain on, configured only by the operator's
 * variables (OPENMA_WEB_SEARCH_PROVIDER / TAVILY_API_KEY /
 * OPENMA_TAVILY_BASE_URL pointing at the Tavily stand-in, and a 1 000-token
 * OPENMA_CONTEXT_WINDOWS), on both backends. Events are read as the SDK
 * types them on the live stream.
 */
import type { BetaManagedAgentsStreamSessionEvents } from "@anthropic-ai/sdk/resources/beta/sessions/events";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { startTavilyStandIn, type TavilyStandIn } from "@openma/standin-tavily";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const MODEL_KEY = "sk-scripted-search";

describe.each(BACKENDS)("web_search and compaction through the SDK on %s", (dialect) => {
  let model: ScriptedModel;
  let tavily: TavilyStandIn;
  let t: TestServer;
  beforeAll(async () => {
    tavily = await startTavilyStandIn({
      documents: [{ url: "https://docs.example.com/compaction", title: "Compaction", content: "How context compaction works." }],
    });
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      script: [
        // 900 of 1 000 tokens reported: the request after the search is preceded by a summary turn.
        {
          match: { last_user_text_contains: "search it" },
          response: {
            content: [{ type: "tool_use", name: "web_search", input: { query: "compaction" } }],
            usage: { input_tokens: 880, output_tokens: 20 },
          },
        },
        { match: { last_user_text_contains: "about to be compacted" }, response: "SUMMARY: the user asked to search." },
        { match: { tool_result_for: "web_search" }, response: "compaction keeps the recent turns" },
      ],
    });
    t = await startTestServer(dialect, {
      OPENMA_BRAIN: "on",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_CONTEXT_WINDOWS: JSON.stringify({ "claude-test-1": 1000 }),
      ...tavily.env,
    });
  });
  afterAll(async () => {
    await t?.close();
    await model?.close();
    await tavily?.close();
  });

  it("searches, compacts and answers in one turn", async () => {
    const client = t.client.beta;
    const agent = await client.agents.create({
      name: "searcher",
      model: "claude-test-1",
      tools: [{ type: "agent_toolset_20260401", configs: [{ name: "web_search", allowed_domains: ["example.com"] }] }],
    });
    const env = await client.environments.create({ name: "none", config: { type: "none" } as never });
    const session = await client.sessions.create({ agent: agent.id, environment_id: env.id });
    const stream = await client.sessions.events.stream(session.id);
    await client.sessions.events.send(session.id, { events: [{ type: "user.message", content: [{ type: "text", text: "search it" }] }] });
    const seen: BetaManagedAgentsStreamSessionEvents[] = [];
    for await (const event of stream) {
      seen.push(event);
      if (event.type === "session.status_idle") break;
    }
    stream.controller.abort();

    const result = seen.find((e) => e.type === "agent.tool_result");
    expect(result?.type === "agent.tool_result" && result.content).toEqual([
      {
        type: "search_result",
        source: "https://docs.example.com/compaction",
        title: "Compaction",
        content: [{ type: "text", text: "How context compaction works." }],
        citations: { enabled: true },
      },
    ]);
    expect(tavily.searches.at(-1)).toMatchObject({ query: "compaction", include_domains: ["example.com"] });
    const types = seen.map((e) => e.type);
    expect(types.filter((type) => type === "agent.thread_context_compacted")).toHaveLength(1);
    expect(types.indexOf("agent.thread_context_compacted")).toBeGreaterThan(types.indexOf("agent.tool_result"));
    const last = seen.at(-1);
    expect(last?.type === "session.status_idle" && last.stop_reason).toEqual({ type: "end_turn" });
    const reply = seen.filter((e) => e.type === "agent.message").at(-1);
    expect(reply?.type === "agent.message" && reply.content).toEqual([{ type: "text", text: "compaction keeps the recent turns" }]);
    expect((await client.sessions.retrieve(session.id)).usage.server_tool_use?.web_search_requests).toBe(1);
    // In a tool loop the cut keeps the last call and its result verbatim: only the first message was summarized.
    type Sent = { messages: Array<{ role: string; content: Array<{ type: string; text?: string }> }> };
    const after = (model.requests.at(-1)?.body as Sent | undefined)?.messages ?? [];
    expect(after.map((m) => [m.role, m.content.map((b) => b.type)])).toEqual([
      ["user", ["text"]],
      ["assistant", ["tool_use"]],
      ["user", ["tool_result"]],
    ]);
    expect(after[0]?.content[0]?.text).toContain("SUMMARY: the user asked to search.");
  });
  it("refuses web_search domain lists the API documents as invalid", async () => {
    const create = (config: Record<string, unknown>) =>
      t.client.beta.agents.create({
        name: "bad-search",
        model: "claude-test-1",
        tools: [{ type: "agent_toolset_20260401", configs: [{ name: "web_search", ...config }] as never }],
      });
    await expect(create({ allowed_domains: ["a.example"], blocked_domains: ["b.example"] })).rejects.toMatchObject({
      status: 400,
      message: expect.stringMatching(/cannot be combined/),
    });
    await expect(create({ allowed_domains: [] })).rejects.toMatchObject({ status: 400 });
    await expect(create({ blocked_domains: ["https://ads.example"] })).rejects.toMatchObject({ status: 400 });
    await expect(create({ allowed_domains: ["docs.example.com/api"] })).resolves.toMatchObject({ type: "agent" });
  });
});
