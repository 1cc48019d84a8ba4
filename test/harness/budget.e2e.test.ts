/**
 * Usage, list cost and budgets through the harness, on both backends: the
 * turn whose spend reaches `max_list_cost` ends with `budget_reached` before
 * its next model call, the cost matches the default price table to the cent,
 * raising the budget lets the session go on, a budget on an unpriced model
 * fails closed, and running time comes from the injected clock.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { ModelPort } from "@openma/harness";
import { WebFetchExecutor } from "@openma/harness/server-tools/web-fetch";
import { ManualClock } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, ofType, startHarness, TOOLSET } from "./support.ts";

const usage = (input: number, output: number, cacheRead = 0, cacheWrite = 0) => ({
  input_tokens: input,
  output_tokens: output,
  cache_read_input_tokens: cacheRead,
  cache_creation_input_tokens: cacheWrite,
});
const budget = (cents: string) => ({ type: "limit" as const, max_list_cost: { amount: cents, currency: "USD" as const } });
const say = (text: string) => ({ type: "user.message" as const, content: [{ type: "text" as const, text }] });

describe.each(BACKENDS)("usage, cost and budgets on %s", (dialect) => {
  let h: Harness;
  const clock = new ManualClock();
  let web: Server;
  let webUrl: string;
  beforeAll(async () => {
    web = createServer((_req, res) => res.end("fetched page"));
    await new Promise<void>((resolve) => web.listen(0, "127.0.0.1", resolve));
    webUrl = `http://127.0.0.1:${(web.address() as AddressInfo).port}/page`;
    h = await startHarness(
      dialect,
      [
        // $0.60 input + $0.30 output on claude-sonnet-4-6 ($3 / $15 per million): 90 cents, under the $1.00 budget.
        {
          match: { last_user_text_contains: "spend" },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo one" } }], usage: usage(200_000, 20_000) },
        },
        // + $0.09 input + $0.03 output + $0.03 cache reads ($0.30/M) + $0.0375 cache writes ($3.75/M) = $1.0875 in all.
        {
          match: { tool_result_for: "bash" },
          response: {
            content: [{ type: "tool_use", name: "bash", input: { command: "echo two" } }],
            usage: usage(30_000, 2_000, 100_000, 10_000),
          },
        },
        { match: { last_user_text_contains: "go on" }, response: { content: [{ type: "text", text: "went on" }], usage: usage(10, 5) } },
        { match: { last_user_text_contains: "time me" }, response: { content: [{ type: "text", text: "timed" }], usage: usage(10, 5) } },
        {
          match: { last_user_text_contains: "fetch it" },
          response: { content: [{ type: "tool_use", name: "web_fetch", input: { url: webUrl } }], usage: usage(10, 5) },
        },
        { match: { tool_result_for: "web_fetch" }, response: { content: [{ type: "text", text: "read it" }], usage: usage(10, 5) } },
        // Never reached: the budget stops the turn first.
        { match: { tool_result_for: "bash" }, response: "over budget", times: 10 },
      ],
      [new WebFetchExecutor({ privateAddressAllowlist: ["127.0.0.1/32"] })],
      { clock },
    );
    // The token counts here are sized for prices, far past a real window: keep compaction out of it.
    h.deps.contextWindows = { windows: new Map(), fallback: 100_000_000 };
  });
  afterAll(async () => {
    await h?.close();
    web?.close();
  });

  const requestsOf = (sessionId: string) =>
    h.model.requests.filter((r) => (r.body as { metadata?: { user_id?: string } }).metadata?.user_id === sessionId).length;

  it("stops the turn that crosses max_list_cost before its next model call, priced to the cent", async () => {
    const client = h.t.client;
    const agent = await client.beta.agents.create({
      name: "spender",
      model: "claude-sonnet-4-6",
      tools: [{ type: "agent_toolset_20260401" }],
    });
    const env = await h.environment("cloud");
    const created = await client.beta.sessions.create({
      agent: agent.id,
      environment_id: env,
      budget: budget("100"),
      initial_events: [say("spend")],
    });
    expect(created.budget).toEqual(budget("100"));

    expect(await h.run(created.id)).toEqual({ type: "idle", stopReason: "budget_reached" });
    expect(requestsOf(created.id)).toBe(2);
    const events = await h.events(created.id);
    // Both tool calls ran; the model was not asked again.
    expect(ofType(events, "agent.tool_result")).toHaveLength(2);
    expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "budget_reached" } });
    const snapshots = ofType(events, "session.usage");
    expect(snapshots.map((s) => (s.usage as { list_cost?: unknown }).list_cost)).toEqual([
      { amount: "90", currency: "USD" },
      // $1.0875 rounds up to $1.09.
      { amount: "109", currency: "USD" },
    ]);
    expect(snapshots[1]).toMatchObject({
      budget: budget("100"),
      usage: {
        input_tokens: 230_000,
        output_tokens: 22_000,
        cache_read_input_tokens: 100_000,
        cache_creation: { ephemeral_5m_input_tokens: 10_000, ephemeral_1h_input_tokens: 0 },
        server_tool_use: { web_fetch_requests: 0, web_search_requests: 0 },
      },
    });
    const session = await client.beta.sessions.retrieve(created.id);
    expect(session.usage.list_cost).toEqual({ amount: "109", currency: "USD" });
    expect(session.status).toBe("idle");
    expect(await h.needsTurn(created.id)).toBe(false);

    // Still over budget: a new message idles at once, without a model call.
    await client.beta.sessions.events.send(created.id, { events: [say("go on")] });
    expect(await h.run(created.id)).toEqual({ type: "idle", stopReason: "budget_reached" });
    expect(requestsOf(created.id)).toBe(2);

    // A raised budget lets the next message through.
    const raised = await client.beta.sessions.update(created.id, { budget: budget("500") });
    expect(raised.budget).toEqual(budget("500"));
    await client.beta.sessions.events.send(created.id, { events: [say("go on")] });
    expect(await h.run(created.id)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(requestsOf(created.id)).toBe(3);
  });

  it("fails closed when the model has no list price", async () => {
    const agent = await h.agent([TOOLSET]); // claude-test-1: not in the price table
    const env = await h.environment("cloud");
    const created = await h.t.client.beta.sessions.create({
      agent,
      environment_id: env,
      budget: budget("1000"),
      initial_events: [say("spend")],
    });
    expect(await h.run(created.id)).toEqual({ type: "idle", stopReason: "budget_reached" });
    expect(requestsOf(created.id)).toBe(0);
    const error = ofType(await h.events(created.id), "session.error")[0] as { error?: { message?: string } } | undefined;
    expect(error?.error?.message).toMatch(/no list price is known for model "claude-test-1".*OPENMA_PRICE_TABLE/);
  });

  it("counts server tool requests in server_tool_use", async () => {
    const agent = await h.agent([TOOLSET]);
    const env = await h.environment("cloud");
    const created = await h.t.client.beta.sessions.create({ agent, environment_id: env, initial_events: [say("fetch it")] });
    expect(await h.run(created.id)).toEqual({ type: "idle", stopReason: "end_turn" });
    const events = await h.events(created.id);
    expect(ofType(events, "agent.tool_result")[0]?.content).toEqual([{ type: "text", text: expect.stringContaining("fetched page") }]);
    // One snapshot per response, plus one with the fetch (recorded with its result).
    const counts = ofType(events, "session.usage").map((e) => (e.usage as { server_tool_use: unknown }).server_tool_use);
    expect(counts).toEqual([
      { web_fetch_requests: 0, web_search_requests: 0 },
      { web_fetch_requests: 1, web_search_requests: 0 },
      { web_fetch_requests: 1, web_search_requests: 0 },
    ]);
    expect((await h.t.client.beta.sessions.retrieve(created.id)).usage.server_tool_use).toEqual({
      web_fetch_requests: 1,
      web_search_requests: 0,
    });
  });

  it("measures active and elapsed time with the server's clock", async () => {
    const agent = await h.agent([TOOLSET]);
    const env = await h.environment("cloud");
    const created = await h.t.client.beta.sessions.create({ agent, environment_id: env });
    expect(created.stats).toEqual({ active_seconds: 0, duration_seconds: 0 });
    clock.advance(10_000); // idle time is not active time
    await h.t.client.beta.sessions.events.send(created.id, { events: [say("time me")] });
    // The model request takes 1.5 s on the injected clock.
    const slow: ModelPort = {
      retry: h.deps.model.retry,
      send: async (request, signal) => {
        clock.advance(1_500);
        return h.deps.model.send(request, signal);
      },
    };
    expect(await h.run(created.id, { model: slow })).toEqual({ type: "idle", stopReason: "end_turn" });
    const snapshot = ofType(await h.events(created.id), "session.usage")[0] as { usage?: { active_seconds?: number } };
    expect(snapshot.usage?.active_seconds).toBe(1.5);
    clock.advance(5_000);
    const session = await h.t.client.beta.sessions.retrieve(created.id);
    expect(session.stats).toEqual({ active_seconds: 1.5, duration_seconds: 16.5 });
    expect(session.usage.active_seconds).toBe(1.5);
    // Terminated: the duration freezes at the final update.
    const archived = await h.t.client.beta.sessions.archive(created.id);
    clock.advance(60_000);
    expect(archived.stats?.duration_seconds).toBe(16.5);
    expect((await h.t.client.beta.sessions.retrieve(created.id)).stats).toEqual({ active_seconds: 1.5, duration_seconds: 16.5 });
  });
});
