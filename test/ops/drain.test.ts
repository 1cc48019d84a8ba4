/**
 * SIGTERM on a real `openma serve` child (SQLite, brain on, scripted model):
 * `/ready` answers 503 `draining` first, the running turn finishes within
 * OPENMA_DRAIN_TIMEOUT_MS, and the process exits 0. With a deadline the turn
 * cannot meet, the turn is handed back as pending and the next server on the
 * same data resumes it: the session still completes. The model is held by a
 * manual clock in this process; nothing waits on the wall clock.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type Anthropic from "@anthropic-ai/sdk";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ChildServer, startServeProcess } from "../support/child-server.ts";

const MODEL_KEY = "sk-scripted-drain";
const API_KEY = "sk-ant-api03-drain-admin-key-0123456789";
type Event = { type: string; [k: string]: unknown };

describe("SIGTERM drains openma serve", () => {
  let clock: ManualScheduler;
  let model: ScriptedModel;
  let dataDir: string;
  const children: ChildServer[] = [];

  beforeAll(async () => {
    clock = new ManualScheduler();
    // Every answer waits a minute of the test's clock: the turn runs until the test lets it finish.
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      scheduler: clock,
      script: [{ delay: { first_byte_ms: 60_000 }, response: "answered", times: 100 }],
    });
    dataDir = await mkdtemp(join(tmpdir(), "openma-drain-"));
  });
  afterAll(async () => {
    for (const c of children) await c.kill9();
    await model?.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  async function serve(drainTimeoutMs: number): Promise<ChildServer> {
    const child = await startServeProcess({
      apiKey: API_KEY,
      dataDir,
      env: {
        OPENMA_BRAIN: "on",
        OPENMA_SANDBOX: "none",
        OPENMA_AUTO_PROVISION: "off",
        OPENMA_MODEL_BASE_URL: model.url,
        OPENMA_MODEL_API_KEY: MODEL_KEY,
        OPENMA_DRAIN_TIMEOUT_MS: String(drainTimeoutMs),
        LOG_LEVEL: "info",
      },
    });
    children.push(child);
    return child;
  }

  async function startTurn(client: Anthropic): Promise<{ sessionId: string; events: AsyncIterator<Event>; close(): void }> {
    const env = (await client.beta.environments.create({ name: "cloud" })).id;
    const agent = (await client.beta.agents.create({ name: "drained", model: "claude-test-1" })).id;
    const sessionId = (await client.beta.sessions.create({ agent, environment_id: env })).id;
    const stream = await client.beta.sessions.events.stream(sessionId);
    await client.beta.sessions.events.send(sessionId, { events: [{ type: "user.message", content: [{ type: "text", text: "hi" }] }] });
    const events = stream[Symbol.asyncIterator]() as AsyncIterator<Event>;
    return { sessionId, events, close: () => stream.controller.abort() };
  }

  async function until(events: AsyncIterator<Event>, type: string): Promise<Event[]> {
    const seen: Event[] = [];
    for (;;) {
      const next = await events.next();
      if (next.done) throw new Error(`the stream ended before ${type}: ${seen.map((e) => e.type).join(", ")}`);
      seen.push(next.value);
      if (next.value.type === type) return seen;
    }
  }

  const requestsOf = (sessionId: string) =>
    model.requests.filter((r) => (r.body as { metadata?: { user_id?: string } }).metadata?.user_id === sessionId).length;

  it("reports not ready at once, lets the running turn finish, and exits 0", async () => {
    const server = await serve(600_000);
    const turn = await startTurn(server.client);
    try {
      await until(turn.events, "span.model_request_start");
      await clock.untilSleeping(1); // the model request is held
      server.signal("SIGTERM");
      await server.waitForOutput(/"msg":"draining/);
      const ready = await fetch(`${server.baseURL}/ready`);
      expect(ready.status).toBe(503);
      expect(await ready.json()).toMatchObject({ status: "draining" });
      // The turn goes on; once it has settled the server closes (its open streams with it) and exits.
      clock.advance(60_000);
      expect(await server.exited).toBe(0);
    } finally {
      turn.close();
    }
    expect(requestsOf(turn.sessionId)).toBe(1);
    // What the drained server published, read back through the next one.
    const next = await serve(600_000);
    const log = (await next.client.beta.sessions.events.list(turn.sessionId)).data as unknown as Event[];
    expect(log.find((e) => e.type === "agent.message")).toMatchObject({ content: [{ type: "text", text: "answered" }] });
    expect(log.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
    next.signal("SIGTERM");
    expect(await next.exited).toBe(0);
  });

  it("hands back a turn that misses the deadline; the next server completes it", async () => {
    const first = await serve(1);
    const turn = await startTurn(first.client);
    await until(turn.events, "span.model_request_start");
    await clock.untilSleeping(1);
    first.signal("SIGTERM");
    expect(await first.exited).toBe(0);
    turn.close();
    expect(first.output()).toMatch(/"msg":"draining/);

    // The restarted server claims the handed-back turn at once (no lease expiry to wait for).
    const second = await serve(600_000);
    const stream = await second.client.beta.sessions.events.stream(turn.sessionId);
    try {
      const events = stream[Symbol.asyncIterator]() as AsyncIterator<Event>;
      await clock.untilSleeping(1);
      clock.advance(60_000);
      const rest = await until(events, "agent.message");
      expect(rest.at(-1)).toMatchObject({ content: [{ type: "text", text: "answered" }] });
    } finally {
      stream.controller.abort();
    }
    // One request cut short by the drain, one answered: the turn was never run twice at once.
    expect(requestsOf(turn.sessionId)).toBe(2);
    second.signal("SIGTERM");
    expect(await second.exited).toBe(0);
  });
});
