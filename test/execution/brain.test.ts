/**
 * `openma serve` with its brain on (both backends): a user message sent
 * through the official SDK is picked up by the execution worker, run by the
 * default harness against the scripted model, and answered; an interrupt
 * reaches a turn stuck in a model call; without a model key the session
 * fails with a clear `session.error`. Completion is observed on the SSE
 * stream, never by waiting on time.
 */
import type Anthropic from "@anthropic-ai/sdk";
import { executionRow } from "@openma/execution/queue";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const MODEL_KEY = "sk-scripted-brain";
const text = (t: string) => ({ type: "user.message" as const, content: [{ type: "text" as const, text: t }] });
type Event = { type: string; [k: string]: unknown };

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

const idle = (e: Event) => e.type === "session.status_idle";

describe.each(BACKENDS)("the brain in openma serve on %s", (dialect) => {
  let model: ScriptedModel;
  let t: TestServer;
  let env: string;
  let agent: string;
  beforeAll(async () => {
    model = await startScriptedModel({ apiKey: MODEL_KEY, script: [{ response: "hello from the brain", times: 1000 }] });
    t = await startTestServer(dialect, {
      OPENMA_BRAIN: "on",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_EXECUTION_POLL_MS: "600000", // bus wake-ups only
    });
    env = (await t.client.beta.environments.create({ name: "cloud" })).id;
    agent = (await t.client.beta.agents.create({ name: "talker", model: "claude-test-1" })).id;
  });
  afterAll(async () => {
    await t?.close();
    await model?.close();
  });

  it("answers a user message with exactly one model request", async () => {
    const session = await t.client.beta.sessions.create({ agent, environment_id: env });
    const events = await sendAndCollect(t.client, session.id, [text("hi there")], idle);
    expect(events.map((e) => e.type)).toContain("agent.message");
    expect(events.find((e) => e.type === "agent.message")).toMatchObject({ content: [{ type: "text", text: "hello from the brain" }] });
    expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
    const requests = model.requests.filter((r) => (r.body as { metadata?: { user_id?: string } }).metadata?.user_id === session.id);
    expect(requests).toHaveLength(1);
    // The worker claimed the request the message made (the release itself follows the turn's last append).
    expect(await executionRow(t.store.storage.db, session.id)).toMatchObject({ generation: 1, claimed_version: 1 });
  });

  it("delivers an interrupt to a turn that is waiting on the model", async () => {
    const clock = new ManualScheduler();
    const slow = await startScriptedModel({
      apiKey: MODEL_KEY,
      scheduler: clock,
      script: [{ delay: { first_byte_ms: 60_000 }, response: "too late" }],
    });
    const s = await startTestServer(dialect, { OPENMA_BRAIN: "on", OPENMA_MODEL_BASE_URL: slow.url, OPENMA_MODEL_API_KEY: MODEL_KEY });
    try {
      const e = (await s.client.beta.environments.create({ name: "cloud" })).id;
      const a = (await s.client.beta.agents.create({ name: "talker", model: "claude-test-1" })).id;
      const session = await s.client.beta.sessions.create({ agent: a, environment_id: e });
      const stream = await s.client.beta.sessions.events.stream(session.id);
      await s.client.beta.sessions.events.send(session.id, { events: [text("think hard")] });
      const seen: string[] = [];
      for await (const event of stream) {
        seen.push(event.type);
        // The model request is in flight (held by the scripted model's manual clock): interrupt it.
        if (event.type === "span.model_request_start")
          await s.client.beta.sessions.events.send(session.id, { events: [{ type: "user.interrupt" }] });
        if (event.type === "session.status_idle") break;
      }
      stream.controller.abort();
      expect(seen).toContain("user.interrupt");
      expect(seen).not.toContain("agent.message");
      expect(seen.at(-1)).toBe("session.status_idle");
    } finally {
      await s.close();
      await slow.close();
    }
  });

  it("fails a session clearly when no model key is configured", async () => {
    const s = await startTestServer(dialect, { OPENMA_BRAIN: "on" });
    try {
      const e = (await s.client.beta.environments.create({ name: "cloud" })).id;
      const a = (await s.client.beta.agents.create({ name: "talker", model: "claude-test-1" })).id;
      const session = await s.client.beta.sessions.create({ agent: a, environment_id: e });
      const events = await sendAndCollect(s.client, session.id, [text("hello?")], idle);
      const error = events.find((x) => x.type === "session.error") as { error?: { message?: string } } | undefined;
      expect(error?.error?.message).toMatch(/OPENMA_MODEL_API_KEY/);
    } finally {
      await s.close();
    }
  });
});
