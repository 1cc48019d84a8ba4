/**
 * Usage, list cost, activity and budgets through the official SDK against
 * `openma serve` with its brain on, on both backends, with an operator price
 * table (OPENMA_PRICE_TABLE). Every value is read through the SDK's own
 * types: the stream's `session.usage` and `session.status_idle` events, the
 * session's `usage`, `stats` and `budget`.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { BetaManagedAgentsStreamSessionEvents } from "@anthropic-ai/sdk/resources/beta/sessions/events";
import type { BetaManagedAgentsSession, BetaManagedAgentsSessionUsageEvent } from "@anthropic-ai/sdk/resources/beta/sessions/sessions";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const MODEL_KEY = "sk-scripted-usage";
const budget = (cents: string) => ({ type: "limit" as const, max_list_cost: { amount: cents, currency: "USD" as const } });

describe.each(BACKENDS)("usage and budgets through the SDK on %s", (dialect) => {
  let model: ScriptedModel;
  let t: TestServer;
  let agent: string;
  let env: string;
  beforeAll(async () => {
    // claude-usage-1 is priced only by the operator's table: $2 in / $8 out per million.
    const prices = join(mkdtempSync(join(tmpdir(), "openma-usage-")), "prices.json");
    writeFileSync(prices, JSON.stringify({ models: { "claude-usage-1": { input: "2", output: "8" } } }));
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      script: [
        // 250k in ($0.50) + 50k out ($0.40) = 90 cents.
        {
          match: { last_user_text_contains: "look it up" },
          response: {
            content: [{ type: "tool_use", name: "lookup", input: { q: "x" } }],
            usage: { input_tokens: 250_000, output_tokens: 50_000 },
          },
        },
        // + 100k in ($0.20) = $1.10: past the $1.00 budget.
        {
          match: { tool_result_for: "lookup" },
          response: {
            content: [{ type: "tool_use", name: "lookup", input: { q: "y" } }],
            usage: { input_tokens: 100_000, output_tokens: 0 },
          },
        },
        { match: { tool_result_for: "lookup" }, response: "never asked", times: 10 },
      ],
    });
    t = await startTestServer(dialect, {
      OPENMA_BRAIN: "on",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_EXECUTION_POLL_MS: "600000",
      OPENMA_PRICE_TABLE: prices,
      // Token counts sized for prices, far past a real window: keep compaction out of it.
      OPENMA_CONTEXT_WINDOWS: JSON.stringify({ "*": 100_000_000 }),
    });
    env = (await t.client.beta.environments.create({ name: "cloud" })).id;
    const created = await t.client.beta.agents.create({
      name: "looker",
      model: "claude-usage-1",
      tools: [{ type: "custom", name: "lookup", description: "Looks a thing up.", input_schema: { type: "object", properties: {} } }],
    });
    agent = created.id;
  });
  afterAll(async () => {
    await t?.close();
    await model?.close();
  });

  /** Sends, then reads the stream until the session idles; returns what it saw. */
  async function untilIdle(sessionId: string, send: () => Promise<unknown>): Promise<BetaManagedAgentsStreamSessionEvents[]> {
    const stream = await t.client.beta.sessions.events.stream(sessionId);
    await send();
    const seen: BetaManagedAgentsStreamSessionEvents[] = [];
    for await (const event of stream) {
      seen.push(event);
      if (event.type === "session.status_idle") break;
    }
    stream.controller.abort();
    return seen;
  }

  /** Answers the custom tool call a `requires_action` idle waits for. */
  function answer(sessionId: string, idle: BetaManagedAgentsStreamSessionEvents | undefined) {
    if (idle?.type !== "session.status_idle" || idle.stop_reason.type !== "requires_action") throw new Error("expected requires_action");
    const id = idle.stop_reason.event_ids[0] ?? "";
    return t.client.beta.sessions.events.send(sessionId, { events: [{ type: "user.custom_tool_result", custom_tool_use_id: id }] });
  }

  it("reports cumulative usage and list cost, and stops with budget_reached before the next model call", async () => {
    const sessions = t.client.beta.sessions;
    const session: BetaManagedAgentsSession = await sessions.create({ agent, environment_id: env, budget: budget("100") });
    const first = await untilIdle(session.id, () =>
      sessions.events.send(session.id, { events: [{ type: "user.message", content: [{ type: "text", text: "look it up" }] }] }),
    );
    const usage1 = first.find((e): e is BetaManagedAgentsSessionUsageEvent => e.type === "session.usage");
    expect(usage1?.usage).toMatchObject({ input_tokens: 250_000, output_tokens: 50_000, list_cost: { amount: "90", currency: "USD" } });
    expect(usage1?.budget).toEqual(budget("100"));

    // The answer lets the model go on once; its response crosses the budget, so the next answer idles at once.
    const second = await untilIdle(session.id, () => answer(session.id, first.at(-1)));
    const third = await untilIdle(session.id, () => answer(session.id, second.at(-1)));
    const stopped = third.at(-1);
    expect(stopped?.type === "session.status_idle" && stopped.stop_reason).toEqual({ type: "budget_reached" });
    expect(third.map((e) => e.type)).not.toContain("span.model_request_start");
    expect(model.requests.filter((r) => (r.body as { metadata?: { user_id?: string } }).metadata?.user_id === session.id)).toHaveLength(2);

    const after = await sessions.retrieve(session.id);
    expect(after.usage).toMatchObject({
      input_tokens: 350_000,
      output_tokens: 50_000,
      cache_read_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
      server_tool_use: { web_fetch_requests: 0, web_search_requests: 0 },
      list_cost: { amount: "110", currency: "USD" },
    });
    expect(after.budget).toEqual(budget("100"));
    expect(after.stats.active_seconds).toBeGreaterThanOrEqual(0);
    expect(after.stats.duration_seconds).toBeGreaterThanOrEqual(after.stats.active_seconds ?? 0);
    expect(after.usage.active_seconds).toBe(after.stats.active_seconds);

    const listed: string[] = [];
    for await (const e of sessions.events.list(session.id, { types: ["session.usage"] })) listed.push(e.type);
    expect(listed).toEqual(["session.usage", "session.usage"]);
    const page = await sessions.list({ limit: 100 });
    const same = page.data.find((s) => s.id === session.id);
    expect(same?.usage.list_cost).toEqual({ amount: "110", currency: "USD" });
  });
});
