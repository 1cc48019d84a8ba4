/**
 * A rolling restart under load: two `openma serve` processes on one Postgres
 * serve 50 sessions while each in turn gets SIGTERM mid-turn (every session's
 * model request is held by the test's clock at that moment) and is restarted.
 * Every session completes both of its turns; its log has no gap, no
 * duplicate and exactly one answer per turn; and the scripted model saw
 * exactly one request per turn, so no turn ran twice. Nothing waits on the
 * wall clock: the model answers when the test advances its clock, and the
 * drains are observed in the servers' output.
 */
import type Anthropic from "@anthropic-ai/sdk";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ChildServer, startServeProcess } from "../support/child-server.ts";
import { until } from "../support/until.ts";

const MODEL_KEY = "sk-scripted-rolling";
const API_KEY = "sk-ant-api03-rolling-admin-key-0123456789";
const SESSIONS = 50;
const ANSWER_DELAY_MS = 1_000;
type Event = { id: string; type: string; [k: string]: unknown };

describe("a rolling restart of two servers on one Postgres", () => {
  let store: TestStorage;
  let clock: ManualScheduler;
  let model: ScriptedModel;
  const children: ChildServer[] = [];

  beforeAll(async () => {
    store = await openTestStorage("postgres");
    clock = new ManualScheduler();
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      scheduler: clock,
      script: [{ delay: { first_byte_ms: ANSWER_DELAY_MS }, response: "answered", times: 10 * SESSIONS }],
    });
  });
  afterAll(async () => {
    for (const c of children) await c.kill9();
    await model?.close();
    await store?.cleanup();
  });

  async function serve(): Promise<ChildServer> {
    const child = await startServeProcess({
      apiKey: API_KEY,
      postgres: store,
      env: {
        OPENMA_BRAIN: "on",
        OPENMA_SANDBOX: "none",
        OPENMA_AUTO_PROVISION: "off",
        OPENMA_SCHEDULER: "off",
        OPENMA_MODEL_BASE_URL: model.url,
        OPENMA_MODEL_API_KEY: MODEL_KEY,
        // Room for every session's turn at once, so all of them are in flight when a server is stopped.
        OPENMA_EXECUTION_CONCURRENCY: String(SESSIONS),
        OPENMA_DRAIN_TIMEOUT_MS: "600000",
        LOG_LEVEL: "info",
      },
    });
    children.push(child);
    return child;
  }

  /** SIGTERM while `held` model requests wait on the clock; the server drains, the clock releases them, it exits 0. */
  async function restart(server: ChildServer, held: number): Promise<ChildServer> {
    await clock.untilSleeping(held);
    server.signal("SIGTERM");
    await server.waitForOutput(/"msg":"draining/);
    expect((await fetch(`${server.baseURL}/ready`)).status).toBe(503);
    clock.advance(ANSWER_DELAY_MS);
    expect(await server.exited).toBe(0);
    return serve();
  }

  async function send(client: Anthropic, sessionId: string, text: string): Promise<void> {
    await client.beta.sessions.events.send(sessionId, { events: [{ type: "user.message", content: [{ type: "text", text }] }] });
  }

  async function log(client: Anthropic, sessionId: string): Promise<Event[]> {
    const events: Event[] = [];
    for await (const event of client.beta.sessions.events.list(sessionId, { limit: 100 })) events.push(event as unknown as Event);
    return events;
  }

  const answered = (events: Event[]) => events.filter((e) => e.type === "agent.message").length;
  const requestsOf = (sessionId: string) =>
    model.requests.filter((r) => (r.body as { metadata?: { user_id?: string } }).metadata?.user_id === sessionId).length;

  it("completes every session's turns exactly once while each server in turn is restarted", async () => {
    let a = await serve();
    let b = await serve();
    const env = (await a.client.beta.environments.create({ name: "cloud" })).id;
    const agent = (await a.client.beta.agents.create({ name: "rolling", model: "claude-test-1" })).id;
    const sessions: string[] = [];
    for (let i = 0; i < SESSIONS; i += 1) {
      const client = i % 2 === 0 ? a.client : b.client;
      sessions.push((await client.beta.sessions.create({ agent, environment_id: env })).id);
    }

    // Turn 1 of every session, sent through both servers; A is stopped while all of them wait for the model.
    await Promise.all(sessions.map((id, i) => send(i % 2 === 0 ? a.client : b.client, id, "first")));
    a = await restart(a, SESSIONS);
    await until(
      async () => (await Promise.all(sessions.map(async (id) => answered(await log(b.client, id))))).every((n) => n === 1),
      "every first turn",
    );

    // Turn 2 through the restarted A and B; now B is stopped mid-turn.
    await Promise.all(sessions.map((id, i) => send(i % 2 === 0 ? b.client : a.client, id, "second")));
    b = await restart(b, SESSIONS);
    await until(async () => {
      const logs = await Promise.all(sessions.map((id) => log(a.client, id)));
      return logs.every((events) => answered(events) === 2 && events.at(-1)?.type === "session.status_idle");
    }, "every second turn");

    for (const id of sessions) {
      const events = await log(b.client, id);
      expect(new Set(events.map((e) => e.id)).size).toBe(events.length);
      expect(events.filter((e) => e.type === "user.message")).toHaveLength(2);
      expect(answered(events)).toBe(2);
      expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
      // One model request per turn: no turn was run twice, by either server.
      expect(requestsOf(id)).toBe(2);
    }
    for (const server of [a, b]) {
      server.signal("SIGTERM");
      expect(await server.exited).toBe(0);
    }
  }, 600_000);
});
