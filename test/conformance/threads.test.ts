/**
 * Multi-agent threads through the official SDK against the server with its
 * brain on and the scripted model, on both backends: a coordinator with a
 * roster of two agents messages both through `send_thread_message`, each
 * runs its own turn in its own thread (events tagged with the thread), their
 * replies come back as `agent.thread_message_received`, and the thread
 * resources (list, retrieve, archive, events, stream) say what happened,
 * with per-thread usage adding up to the session's, and the session's list
 * cost (and its budget) the sum of each thread's usage on its own model.
 */
import Anthropic from "@anthropic-ai/sdk";
import type { BetaManagedAgentsSessionEvent, BetaManagedAgentsStreamSessionEvents } from "@anthropic-ai/sdk/resources/beta/sessions/events";
import type {
  BetaManagedAgentsSessionThread,
  BetaManagedAgentsStreamSessionThreadEvents,
} from "@anthropic-ai/sdk/resources/beta/sessions/threads/threads";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const MODEL_KEY = "sk-scripted-threads";
const send = (agent: string, message: string) => ({ type: "tool_use" as const, name: "send_thread_message", input: { agent, message } });

describe.each(BACKENDS)("multi-agent threads through the SDK on %s", (dialect) => {
  let model: ScriptedModel;
  let t: TestServer;
  beforeAll(async () => {
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      script: [
        {
          match: { system_contains: "ROLE:lead", last_user_text_contains: "plan the trip" },
          response: {
            content: [send("researcher", "find flights"), send("writer", "draft the note")],
            usage: { input_tokens: 100, output_tokens: 10 },
          },
        },
        { match: { system_contains: "ROLE:lead", tool_result_for: "send_thread_message" }, times: 2, response: "Waiting for my team." },
        {
          match: { system_contains: "ROLE:researcher", last_user_text_contains: "find flights" },
          response: { content: [{ type: "text", text: "flights: 2 options" }], usage: { input_tokens: 30, output_tokens: 7 } },
        },
        { match: { system_contains: "ROLE:writer", last_user_text_contains: "shorter please" }, response: "short note" },
        {
          match: { system_contains: "ROLE:writer", last_user_text_contains: "draft the note" },
          response: { content: [{ type: "text", text: "note drafted" }], usage: { input_tokens: 40, output_tokens: 9 } },
        },
        { match: { system_contains: "ROLE:lead", last_user_text_contains: "flights: 2 options" }, response: "Got the flights." },
        { match: { system_contains: "ROLE:lead", last_user_text_contains: "note drafted" }, response: "All done." },
        {
          match: { system_contains: "ROLE:lead", last_user_text_contains: "ask the writer again" },
          // A text block the session stream previews, while the writer's own stream must not.
          response: { content: [{ type: "text", text: "Asking the writer." }, send("writer", "shorter please")] },
        },
        { match: { system_contains: "ROLE:lead", last_user_text_contains: "short note" }, response: "Thanks." },
        {
          match: { system_contains: "ROLE:boss", last_user_text_contains: "use the helper" },
          response: { content: [send("helper", "look it up")] },
        },
        { match: { system_contains: "ROLE:boss", tool_result_for: "send_thread_message" }, response: "Waiting." },
        {
          match: { system_contains: "ROLE:helper", tool_result_for: "lookup", tool_result_contains: "42" },
          response: { content: [{ type: "text", text: "the answer is 42" }], usage: { input_tokens: 210_000, output_tokens: 2_000 } },
        },
        {
          match: { system_contains: "ROLE:helper", last_user_text_contains: "look it up" },
          response: {
            content: [{ type: "tool_use", name: "lookup", input: { q: "the answer" } }],
            usage: { input_tokens: 200_000, output_tokens: 10_000 },
          },
        },
        { match: { system_contains: "ROLE:boss", last_user_text_contains: "the answer is 42" }, response: "Boss done." },
        // A coordinator on claude-sonnet-4-6 ($3 / $15 per million) and its analyst on claude-opus-4-6 ($5 / $25).
        {
          match: { system_contains: "ROLE:chief", last_user_text_contains: "delegate" },
          // 100,000 in on sonnet: $0.30.
          response: { content: [send("analyst", "crunch it")], usage: { input_tokens: 100_000, output_tokens: 0 } },
        },
        {
          match: { system_contains: "ROLE:chief", tool_result_for: "send_thread_message" },
          response: { content: [{ type: "text", text: "Waiting for the analyst." }], usage: { input_tokens: 0, output_tokens: 0 } },
        },
        {
          match: { system_contains: "ROLE:analyst", last_user_text_contains: "crunch it" },
          // 200,000 in on opus: $1.00 (on sonnet it would be $0.60).
          response: { content: [{ type: "text", text: "crunched" }], usage: { input_tokens: 200_000, output_tokens: 0 } },
        },
        // Never reached while the budget is spent.
        {
          match: { system_contains: "ROLE:chief", last_user_text_contains: "crunched" },
          response: { content: [{ type: "text", text: "Chief done." }], usage: { input_tokens: 0, output_tokens: 0 } },
        },
      ],
    });
    t = await startTestServer(dialect, { OPENMA_BRAIN: "on", OPENMA_MODEL_BASE_URL: model.url, OPENMA_MODEL_API_KEY: MODEL_KEY });
  });
  afterAll(async () => {
    await t?.close();
    await model?.close();
  });

  /** A session of coordinator `name` (system prompt `ROLE:<name>`) on `model` over `roster`, with no sandbox. */
  async function coordinatorSession(
    name: string,
    model: string,
    roster: string[],
    budget?: { type: "limit"; max_list_cost: { amount: string; currency: "USD" } },
  ) {
    const client = t.client.beta;
    const lead = await client.agents.create({ name, model, system: `ROLE:${name}`, multiagent: { type: "coordinator", agents: roster } });
    const env = await client.environments.create({ name: "none", config: { type: "none" } as never });
    return client.sessions.create({ agent: lead.id, environment_id: env.id, ...(budget ? { budget } : {}) });
  }

  /** Reads the session stream until the coordinator says `last`, then until its idle. */
  async function until(stream: AsyncIterable<BetaManagedAgentsStreamSessionEvents> & { controller: AbortController }, last: string) {
    const seen: BetaManagedAgentsStreamSessionEvents[] = [];
    let said = false;
    for await (const event of stream) {
      seen.push(event);
      if (event.type === "agent.message" && event.content.some((b) => b.type === "text" && b.text === last)) said = true;
      if (said && event.type === "session.status_idle") break;
    }
    stream.controller.abort();
    return seen;
  }

  it("runs a coordinator and two subagents in their own threads", async () => {
    const client = t.client.beta;
    const researcher = await client.agents.create({ name: "researcher", model: "claude-test-1", system: "ROLE:researcher" });
    const writer = await client.agents.create({ name: "writer", model: "claude-test-1", system: "ROLE:writer" });
    const lead = await client.agents.create({
      name: "lead",
      model: "claude-test-1",
      system: "ROLE:lead",
      multiagent: { type: "coordinator", agents: [researcher.id, writer.id] },
    });
    const env = await client.environments.create({ name: "none", config: { type: "none" } as never });
    const session = await client.sessions.create({ agent: lead.id, environment_id: env.id });
    expect((await client.sessions.threads.list(session.id)).data).toEqual([]);

    const stream = await client.sessions.events.stream(session.id);
    await client.sessions.events.send(session.id, {
      events: [{ type: "user.message", content: [{ type: "text", text: "plan the trip" }] }],
    });
    const seen = await until(stream, "All done.");

    // The coordinator's tool and the lifecycle of both threads, on the session stream.
    const created = seen.filter((e) => e.type === "session.thread_created");
    expect(created.map((e) => e.type === "session.thread_created" && e.agent_name)).toEqual(["researcher", "writer"]);
    const toolUses = seen.filter((e) => e.type === "agent.tool_use");
    expect(toolUses.map((e) => e.type === "agent.tool_use" && [e.name, e.evaluated_permission])).toEqual([
      ["send_thread_message", "allow"],
      ["send_thread_message", "allow"],
    ]);
    const received = seen.filter((e) => e.type === "agent.thread_message_received");
    expect(received.map((e) => e.type === "agent.thread_message_received" && [e.from_agent_name, e.content])).toEqual([
      ["lead", [{ type: "text", text: "find flights" }]],
      ["lead", [{ type: "text", text: "draft the note" }]],
      ["researcher", [{ type: "text", text: "flights: 2 options" }]],
      ["writer", [{ type: "text", text: "note drafted" }]],
    ]);
    expect(seen.filter((e) => e.type === "agent.thread_message_sent")).toHaveLength(4);

    // Thread resources, typed by the SDK.
    const threads: BetaManagedAgentsSessionThread[] = [];
    for await (const thread of client.sessions.threads.list(session.id, { limit: 1 })) threads.push(thread);
    expect(threads.map((th) => [th.agent.type === "agent" && th.agent.name, th.parent_thread_id === null, th.status])).toEqual([
      ["lead", true, "idle"],
      ["researcher", false, "idle"],
      ["writer", false, "idle"],
    ]);
    const [primary, research, write] = threads as [
      BetaManagedAgentsSessionThread,
      BetaManagedAgentsSessionThread,
      BetaManagedAgentsSessionThread,
    ];
    expect(research.parent_thread_id).toBe(primary.id);
    expect(research.agent).toMatchObject({ type: "agent", id: researcher.id, version: 1, system: "ROLE:researcher" });
    expect(research.id).toMatch(/^sthr_/);
    expect(await client.sessions.threads.retrieve(write.id, { session_id: session.id })).toMatchObject({
      id: write.id,
      type: "session_thread",
    });

    // Each thread's usage is its own; together they are the session's.
    const usage = (await client.sessions.retrieve(session.id)).usage;
    expect(research.usage).toMatchObject({ input_tokens: 30, output_tokens: 7 });
    expect(write.usage).toMatchObject({ input_tokens: 40, output_tokens: 9 });
    const sum = (k: "input_tokens" | "output_tokens" | "cache_read_input_tokens") => threads.reduce((n, th) => n + (th.usage?.[k] ?? 0), 0);
    expect(sum("input_tokens")).toBe(usage.input_tokens);
    expect(sum("output_tokens")).toBe(usage.output_tokens);
    expect(sum("cache_read_input_tokens")).toBe(usage.cache_read_input_tokens);
    expect(research.stats?.duration_seconds).toBeGreaterThanOrEqual(0);

    // A thread's events: its own log, tool uses and statuses tagged with it.
    const events: BetaManagedAgentsSessionEvent[] = [];
    for await (const e of client.sessions.threads.events.list(research.id, { session_id: session.id })) events.push(e);
    expect(events.map((e) => e.type)).toEqual([
      "session.thread_created",
      "agent.thread_message_received",
      "session.thread_status_running",
      "span.model_request_start",
      "agent.message",
      "span.model_request_end",
      "session.usage",
      "session.thread_status_idle",
      "agent.thread_message_sent",
    ]);
    const idle = events.find((e) => e.type === "session.thread_status_idle");
    expect(idle?.type === "session.thread_status_idle" && [idle.session_thread_id, idle.agent_name, idle.stop_reason]).toEqual([
      research.id,
      "researcher",
      { type: "end_turn" },
    ]);
    const primaryEvents: BetaManagedAgentsSessionEvent[] = [];
    for await (const e of client.sessions.threads.events.list(primary.id, { session_id: session.id })) primaryEvents.push(e);
    expect(
      primaryEvents.some((e) => e.type === "agent.message" && e.content.some((b) => b.type === "text" && b.text === "flights: 2 options")),
    ).toBe(false);
    expect(primaryEvents[0]?.type).toBe("user.message");

    // The writer's own stream, while the coordinator messages it again (same thread, no new one); both
    // streams ask for previews, and the writer's shows only its own thread's.
    const writerStream = await client.sessions.threads.events.stream(write.id, { session_id: session.id, event_deltas: ["agent.message"] });
    const again = await client.sessions.events.stream(session.id, { event_deltas: ["agent.message"] });
    await client.sessions.events.send(session.id, {
      events: [{ type: "user.message", content: [{ type: "text", text: "ask the writer again" }] }],
    });
    const writerSeen: BetaManagedAgentsStreamSessionThreadEvents[] = [];
    for await (const e of writerStream) {
      writerSeen.push(e);
      if (e.type === "agent.thread_message_sent") break;
    }
    writerStream.controller.abort();
    const isPreview = (e: { type: string }) => e.type === "event_start" || e.type === "event_delta";
    expect(writerSeen.filter((e) => !isPreview(e)).map((e) => e.type)).toEqual([
      "agent.thread_message_received",
      "session.thread_status_running",
      "span.model_request_start",
      "agent.message",
      "span.model_request_end",
      "session.usage",
      "session.thread_status_idle",
      "agent.thread_message_sent",
    ]);
    const writerMessages = writerSeen.flatMap((e) => (e.type === "agent.message" ? [e.id] : []));
    const writerStarts = writerSeen.flatMap((e) => (e.type === "event_start" ? [e.event.id] : []));
    expect(writerStarts).toEqual(writerMessages);
    expect(writerSeen.every((e) => e.type !== "event_delta" || writerMessages.includes(e.event_id))).toBe(true);
    const more = await until(again, "Thanks.");
    expect(more.some((e) => e.type === "session.thread_created")).toBe(false);
    // The session stream previews every thread's messages: the coordinator's and the writer's.
    const moreMessages = more.flatMap((e) => (e.type === "agent.message" ? [e.id] : []));
    expect(more.flatMap((e) => (e.type === "event_start" ? [e.event.id] : []))).toEqual(moreMessages);
    expect(moreMessages).toHaveLength(4);

    // Archive: a subagent thread, never the primary one.
    const archived = await client.sessions.threads.archive(research.id, { session_id: session.id });
    expect(archived.archived_at).not.toBeNull();
    const refused = await client.sessions.threads.archive(primary.id, { session_id: session.id }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(Anthropic.BadRequestError);
    const missing = await client.sessions.threads.retrieve("sthr_missing", { session_id: session.id }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(Anthropic.NotFoundError);
    const idleOnly = await client.sessions.threads.list(session.id, { statuses: ["running"] });
    expect(idleOnly.data).toEqual([]);
  });

  it("routes a subagent's custom tool result to its thread, and archiving the session terminates its threads", async () => {
    const client = t.client.beta;
    const helper = await client.agents.create({
      name: "helper",
      // A model with a list price: the helper's thread reports its own list_cost.
      model: "claude-opus-4-6",
      system: "ROLE:helper",
      tools: [{ type: "custom", name: "lookup", description: "look something up", input_schema: { type: "object", properties: {} } }],
    });
    const session = await coordinatorSession("boss", "claude-test-1", [helper.id]);

    // The helper asks the client for its custom tool; the session stream carries the call, tagged with the helper's thread.
    const stream = await client.sessions.events.stream(session.id);
    await client.sessions.events.send(session.id, {
      events: [{ type: "user.message", content: [{ type: "text", text: "use the helper" }] }],
    });
    let use: BetaManagedAgentsStreamSessionEvents | undefined;
    for await (const e of stream) {
      if (e.type === "agent.custom_tool_use") use = e;
      if (use && e.type === "session.thread_status_idle" && e.stop_reason.type === "requires_action") break;
    }
    stream.controller.abort();
    if (use?.type !== "agent.custom_tool_use") throw new Error("no custom tool use");
    const helperThread = (await client.sessions.threads.list(session.id)).data.find(
      (th) => th.agent.type === "agent" && th.agent.name === "helper",
    );
    expect(helperThread).toBeDefined();
    expect(use.session_thread_id).toBe(helperThread?.id);

    // Its result goes back to that thread (the server routes it by the tool use id) and the helper resumes.
    const rest = await client.sessions.events.stream(session.id);
    const sent = await client.sessions.events.send(session.id, {
      events: [{ type: "user.custom_tool_result", custom_tool_use_id: use.id, content: [{ type: "text", text: "42" }] }],
    });
    expect(sent.data?.[0]).toMatchObject({ type: "user.custom_tool_result", session_thread_id: helperThread?.id });
    const seen = await until(rest, "Boss done.");
    expect(
      seen.some(
        (e) => e.type === "agent.thread_message_received" && e.content.some((b) => b.type === "text" && b.text === "the answer is 42"),
      ),
    ).toBe(true);
    const helperEvents: BetaManagedAgentsSessionEvent[] = [];
    for await (const e of client.sessions.threads.events.list(helperThread?.id ?? "", { session_id: session.id })) helperEvents.push(e);
    expect(helperEvents.filter((e) => e.type === "user.custom_tool_result").map((e) => e.id)).toEqual([sent.data?.[0]?.id]);
    const primaryEvents = (await client.sessions.events.list(session.id)).data.filter((e) => e.type === "user.custom_tool_result");
    expect(primaryEvents.map((e) => e.type === "user.custom_tool_result" && e.session_thread_id)).toEqual([helperThread?.id]);

    // The helper's cost, priced on its own model ($5 / $25 per million): 410,000 in and 12,000 out are $2.35;
    // the coordinator's model has no list price, so its thread has no cost.
    const priced = (await client.sessions.threads.list(session.id)).data;
    expect(priced.map((th) => [th.agent.type === "agent" && th.agent.name, th.usage?.list_cost ?? null])).toEqual([
      ["boss", null],
      ["helper", { amount: "235", currency: "USD" }],
    ]);

    // Archiving the session ends its live threads, each with a terminated status in its own log, then the session.
    await client.sessions.archive(session.id);
    const after: BetaManagedAgentsSessionEvent[] = [];
    for await (const e of client.sessions.threads.events.list(helperThread?.id ?? "", { session_id: session.id })) after.push(e);
    const ended = after.at(-1);
    expect(ended?.type === "session.thread_status_terminated" && [ended.session_thread_id, ended.agent_name]).toEqual([
      helperThread?.id,
      "helper",
    ]);
    const tail = (await client.sessions.events.list(session.id, { order: "desc", limit: 2 })).data.map((e) => e.type);
    expect(tail).toEqual(["session.status_terminated", "session.thread_status_terminated"]);
    expect((await client.sessions.threads.list(session.id)).data.map((th) => th.status)).toEqual(["terminated", "terminated"]);
    // One unpriced model in the session leaves the session's cost unknown rather than understated.
    const snapshots = (await client.sessions.events.list(session.id)).data.filter((e) => e.type === "session.usage");
    expect(snapshots.length).toBeGreaterThan(0);
    expect(snapshots.map((e) => e.type === "session.usage" && e.usage.list_cost)).toEqual(snapshots.map(() => undefined));
  });

  it("prices the session's usage on each thread's model and stops at a budget only the mixed cost reaches", async () => {
    const client = t.client.beta;
    const analyst = await client.agents.create({ name: "analyst", model: "claude-opus-4-6", system: "ROLE:analyst" });
    // $1.10: over the $0.90 the session would cost all on the chief's model, under the $1.30 it costs.
    const session = await coordinatorSession("chief", "claude-sonnet-4-6", [analyst.id], {
      type: "limit",
      max_list_cost: { amount: "110", currency: "USD" },
    });
    const stream = await client.sessions.events.stream(session.id);
    await client.sessions.events.send(session.id, { events: [{ type: "user.message", content: [{ type: "text", text: "delegate" }] }] });
    // Until the chief's first idle after the analyst's reply reached it.
    let received = false;
    let stop: string | undefined;
    const said: string[] = [];
    for await (const e of stream) {
      if (e.type === "agent.thread_message_received") received ||= e.content.some((b) => b.type === "text" && b.text === "crunched");
      if (e.type === "agent.message") said.push(...e.content.map((b) => (b.type === "text" ? b.text : "")));
      if (received && e.type === "session.status_idle") {
        stop = e.stop_reason.type;
        break;
      }
    }
    stream.controller.abort();
    // The budget stopped the chief's next model call: on the chief's model alone it would have answered.
    expect(stop).toBe("budget_reached");
    expect(said).not.toContain("Chief done.");

    // Each thread priced on its own model, and the session's cost is their sum: $0.30 + $1.00.
    const threads = (await client.sessions.threads.list(session.id)).data;
    expect(threads.map((th) => [th.agent.type === "agent" && th.agent.name, th.usage?.list_cost])).toEqual([
      ["chief", { amount: "30", currency: "USD" }],
      ["analyst", { amount: "100", currency: "USD" }],
    ]);
    const retrieved = await client.sessions.retrieve(session.id);
    expect(retrieved.usage.list_cost).toEqual({ amount: "130", currency: "USD" });
    expect(retrieved.usage.input_tokens).toBe(300_000);
    expect(retrieved.status).toBe("idle");
  });
});
