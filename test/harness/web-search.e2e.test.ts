/**
 * web_search end to end, on both backends: the official SDK against the real
 * server, the scripted model calling `web_search`, and the Tavily adapter
 * (the official `@tavily/core` client) talking to the Tavily stand-in,
 * selected by the same environment variables an operator sets. Results
 * arrive as `search_result` blocks and reach the model, the agent's domain
 * lists and location reach the provider and bound the results, each call
 * counts in `server_tool_use.web_search_requests`, and a failing provider is
 * a tool error the turn survives.
 */
import type { MessageParam } from "@anthropic-ai/sdk/resources/messages";
import { webSearchProviderFromEnv } from "@openma/harness/server-tools/tavily";
import { WebSearchExecutor } from "@openma/harness/server-tools/web-search";
import { startTavilyStandIn, type TavilyStandIn } from "@openma/standin-tavily";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, ofType, startHarness } from "./support.ts";

const DOCUMENTS = [
  { url: "https://docs.example.com/sandboxes", title: "Sandboxes", content: "How OpenMA sandboxes run tools.", country: "united states" },
  { url: "https://blog.example.org/sandboxes", title: "Sandboxes, a blog post", content: "Our take on sandboxes and tools." },
  { url: "https://ads.example.net/sandboxes", title: "Buy sandboxes", content: "Sandboxes for sale, tools included." },
];

const say = (text: string) => ({ type: "user.message" as const, content: [{ type: "text" as const, text }] });
const toolset = (config: Record<string, unknown>) => [{ type: "agent_toolset_20260401", configs: [{ name: "web_search", ...config }] }];

describe.each(BACKENDS)("web_search on %s", (dialect) => {
  let h: Harness;
  let tavily: TavilyStandIn;
  beforeAll(async () => {
    tavily = await startTavilyStandIn({ documents: DOCUMENTS });
    const provider = webSearchProviderFromEnv(tavily.env);
    if (!provider) throw new Error("the stand-in's environment selects no provider");
    h = await startHarness(
      dialect,
      [
        {
          match: { last_user_text_contains: "look it up" },
          response: { content: [{ type: "tool_use", name: "web_search", input: { query: "sandboxes tools" } }] },
          times: 10,
        },
        { match: { tool_result_for: "web_search" }, response: "here is what I found", times: 10 },
      ],
      [new WebSearchExecutor(provider)],
    );
  });
  afterAll(async () => {
    await h?.close();
    await tavily?.close();
  });

  async function search(config: Record<string, unknown>) {
    const agent = await h.agent(toolset(config));
    const env = await h.environment("none");
    const session = await h.t.client.beta.sessions.create({ agent, environment_id: env, initial_events: [say("look it up")] });
    expect(await h.run(session.id)).toEqual({ type: "idle", stopReason: "end_turn" });
    const events = await h.events(session.id);
    const result = ofType(events, "agent.tool_result")[0] as { content?: Array<Record<string, unknown>>; is_error?: boolean };
    return { session, events, result };
  }

  it("returns search_result blocks that reach the model, counted in server_tool_use", async () => {
    const before = tavily.searches.length;
    const { session, events, result } = await search({});
    expect(ofType(events, "agent.tool_use")[0]).toMatchObject({ name: "web_search", input: { query: "sandboxes tools" } });
    expect(result.is_error).toBe(false);
    expect(result.content?.map((b) => b.source)).toEqual(DOCUMENTS.map((d) => d.url));
    expect(result.content?.[0]).toEqual({
      type: "search_result",
      source: "https://docs.example.com/sandboxes",
      title: "Sandboxes",
      content: [{ type: "text", text: "How OpenMA sandboxes run tools." }],
      citations: { enabled: true },
    });
    expect(tavily.searches.length).toBe(before + 1);
    expect(tavily.requests.at(-1)).toMatchObject({ path: "/search", authHeader: "authorization", authorized: true });
    // The model is answered with the same blocks.
    const lastRequest = h.model.requests.at(-1)?.body as { messages: MessageParam[] };
    const answered = lastRequest.messages.at(-1)?.content as Array<{ type: string; content?: unknown }>;
    expect(answered[0]?.type).toBe("tool_result");
    expect(answered[0]?.content).toEqual(result.content);
    // One snapshot per model response, plus one recorded with the search's result.
    const searches = ofType(events, "session.usage").map((e) => (e.usage as { server_tool_use: Record<string, number> }).server_tool_use);
    expect(searches.map((c) => [c.web_search_requests, c.web_fetch_requests])).toEqual([
      [0, 0],
      [1, 0],
      [1, 0],
    ]);
    const retrieved = await h.t.client.beta.sessions.retrieve(session.id);
    expect(retrieved.usage.server_tool_use?.web_search_requests).toBe(1);
  });

  it("passes allowed_domains and user_location to the provider and keeps only allowed hosts", async () => {
    const { result } = await search({
      allowed_domains: ["example.com", "example.org/sandboxes"],
      user_location: { type: "approximate", country: "US", city: "Portland" },
    });
    expect(tavily.searches.at(-1)).toMatchObject({ include_domains: ["example.com", "example.org/sandboxes"], country: "united states" });
    expect(result.content?.map((b) => b.source)).toEqual(["https://docs.example.com/sandboxes", "https://blog.example.org/sandboxes"]);
  });

  it("drops blocked_domains", async () => {
    const { result } = await search({ blocked_domains: ["example.net"] });
    expect(tavily.searches.at(-1)?.exclude_domains).toEqual(["example.net"]);
    expect(result.content?.map((b) => b.source)).not.toContain("https://ads.example.net/sandboxes");
    expect(result.content).toHaveLength(2);
  });

  it("reports a provider failure as a tool error and the turn goes on", async () => {
    tavily.failNext(500);
    const { session, events, result } = await search({});
    expect(result.is_error).toBe(true);
    expect(result.content).toEqual([
      { type: "text", text: expect.stringMatching(/^web_search: the tavily search provider failed: .*Internal server error/) },
    ]);
    expect(ofType(events, "agent.message").at(-1)?.content).toEqual([{ type: "text", text: "here is what I found" }]);
    // The request was made: it is counted like any other.
    expect((await h.t.client.beta.sessions.retrieve(session.id)).usage.server_tool_use?.web_search_requests).toBe(1);
  });

  it("reports a rejected key without echoing it", async () => {
    const provider = webSearchProviderFromEnv({ ...tavily.env, TAVILY_API_KEY: "tvly-wrong-key" });
    if (!provider) throw new Error("no provider");
    const hit = await new WebSearchExecutor(provider).execute(
      { name: "web_search", input: { query: "sandboxes" } },
      { sessionId: "s", agent: { tools: toolset({}) }, environment: null, vaultIds: [], storage: h.t.store.storage },
      new AbortController().signal,
    );
    expect(hit.isError).toBe(true);
    expect(JSON.stringify(hit.content)).toMatch(/Unauthorized: missing or invalid API key/);
    expect(JSON.stringify(hit.content)).not.toContain("tvly-wrong-key");
  });
});
