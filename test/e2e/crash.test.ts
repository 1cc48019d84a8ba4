/**
 * `kill -9` of the server mid-turn costs nothing that was already recorded
 * (Postgres; the server is a child process so it can be SIGKILLed and
 * started again on the same port):
 *
 *  (a) killed while the model stream is in flight (held open by a chunk delay
 *      on the scripted model's manual clock): after a restart the new process
 *      reclaims the turn once the dead process's lease expires, repeats the
 *      one unfinished model request and finishes the session;
 *  (b) killed while the official worker runs a slow `bash` (`sleep 2`, the
 *      tool's real runtime): the worker reconnects to the restarted server and
 *      posts its result, which is applied exactly once.
 *
 * Both check the log: every event id once, `seq` gap-free from 1, exactly
 * one `agent.message` and one ending idle for the one turn. Waiting is on the
 * SSE stream, the model's manual clock and the worker's own requests.
 */
import { watch } from "node:fs";
import type Anthropic from "@anthropic-ai/sdk";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type CrashableServer, crashableServer } from "../support/crash-server.ts";
import { TEST_API_KEY } from "../support/server.ts";
import {
  allEvents,
  createSelfHostedEnvironment,
  endTurnIdle,
  isForceStop,
  type LoggedEvent,
  startOfficialWorker,
} from "../support/worker-e2e.ts";

const MODEL_KEY = "sk-scripted-crash";
const CHUNK_MS = 1000;
const BRAIN_ENV = {
  OPENMA_BRAIN: "on",
  OPENMA_MODEL_API_KEY: MODEL_KEY,
  // The shortest lease the server accepts: the restarted process reclaims the dead one's turn after it.
  OPENMA_EXECUTION_LEASE_TTL_MS: "3000",
  OPENMA_EXECUTION_POLL_MS: "200",
};
const message = (text: string) => ({ type: "user.message" as const, content: [{ type: "text" as const, text }] });

/** Resolves with the first event `test` accepts, from the log or (later) the live stream. */
async function eventually(client: Anthropic, sessionId: string, test: (e: LoggedEvent) => boolean): Promise<LoggedEvent> {
  const stream = await client.beta.sessions.events.stream(sessionId);
  try {
    const past = (await allEvents(client, sessionId)).find(test);
    if (past) return past;
    for await (const event of stream) if (test(event as unknown as LoggedEvent)) return event as unknown as LoggedEvent;
    throw new Error("the stream ended first");
  } finally {
    stream.controller.abort();
  }
}

/** The invariants of a log that survived a crash. */
async function assertCleanLog(store: TestStorage, client: Anthropic, sessionId: string): Promise<LoggedEvent[]> {
  const rows = await store.storage.db
    .selectFrom("session_events")
    .select(["seq", "id"])
    .where("session_id", "=", sessionId)
    .orderBy("seq")
    .execute();
  expect(rows.map((r) => Number(r.seq))).toEqual(rows.map((_, i) => i + 1));
  expect(new Set(rows.map((r) => r.id)).size).toBe(rows.length);
  const events = await allEvents(client, sessionId);
  expect(events.map((e) => e.id)).toEqual(rows.map((r) => r.id));
  expect(events.filter((e) => e.type === "agent.message")).toHaveLength(1);
  expect(events.filter(endTurnIdle)).toHaveLength(1);
  expect(events.filter((e) => e.type === "user.message")).toHaveLength(1);
  return events;
}

describe("kill -9 of the server mid-turn (postgres)", () => {
  let store: TestStorage;
  let server: CrashableServer | null = null;
  let model: ScriptedModel | null = null;
  beforeAll(async () => {
    store = await openTestStorage("postgres");
  });
  afterEach(async () => {
    await server?.close();
    await model?.close();
    server = null;
    model = null;
  });
  afterAll(async () => {
    await store?.cleanup();
  });

  it("finishes a turn whose model stream was cut by the crash, without duplicated or lost events", async () => {
    const clock = new ManualScheduler();
    const m = await startScriptedModel({
      apiKey: MODEL_KEY,
      scheduler: clock,
      script: [{ delay: { chunk_ms: CHUNK_MS }, response: { content: [{ type: "text", text: "survived the crash" }], chunk_chars: 4 } }],
    });
    model = m;
    const s = await crashableServer(store, TEST_API_KEY, { ...BRAIN_ENV, OPENMA_MODEL_BASE_URL: m.url });
    server = s;
    await s.start();
    const env = await s.client.beta.environments.create({ name: "cloud" });
    const agent = await s.client.beta.agents.create({ name: "crash-a", model: "claude-test-1" });
    const session = await s.client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    await s.client.beta.sessions.events.send(session.id, { events: [message("keep talking")] });

    // The stream is open and held between two chunks: the first attempt is in flight.
    await clock.untilSleeping();
    expect(m.requests.map((r) => r.outcome)).toEqual(["pending"]);
    const before = (await allEvents(s.client, session.id)).map((e) => e.type);
    expect(before).toContain("span.model_request_start");
    expect(before).not.toContain("agent.message");
    await s.kill9();
    await m.idle(); // the model saw the connection die and handed its turn back
    expect(m.requests.map((r) => r.outcome)).toEqual(["aborted"]);
    await s.start();

    // Drive the model's clock for the repeated request until the session is idle.
    let finished = false;
    const done = eventually(s.client, session.id, endTurnIdle).finally(() => {
      finished = true;
    });
    while (!finished) {
      await Promise.race([clock.untilSleeping(), done]);
      if (clock.pending.length) clock.advance(CHUNK_MS);
    }
    await done;

    const events = await assertCleanLog(store, s.client, session.id);
    expect(events.find((e) => e.type === "agent.message")).toMatchObject({ content: [{ type: "text", text: "survived the crash" }] });
    expect(m.requests.map((r) => r.outcome)).toEqual(["aborted", "completed"]);
    // The cut request left no model output behind; its retry wrote one response's worth of usage.
    expect(events.filter((e) => e.type === "span.model_request_end")).toHaveLength(1);
  });

  it("applies a tool result the worker posts across a server crash exactly once", async () => {
    const m = await startScriptedModel({
      apiKey: MODEL_KEY,
      script: [
        {
          match: { last_user_text_contains: "SLOW_TOOL" },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: "touch started && sleep 2 && echo done" } }] },
        },
        { match: { tool_result_for: "bash", tool_result_contains: "done" }, response: "the slow tool finished" },
      ],
    });
    model = m;
    const s = await crashableServer(store, TEST_API_KEY, { ...BRAIN_ENV, OPENMA_MODEL_BASE_URL: m.url });
    server = s;
    await s.start();
    const env = await createSelfHostedEnvironment(s.client, "hands");
    const agent = await s.client.beta.agents.create({
      name: "crash-b",
      model: "claude-test-1",
      tools: [{ type: "agent_toolset_20260401" }],
    });
    const session = await s.client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const worker = startOfficialWorker({
      baseURL: s.baseURL,
      apiKey: TEST_API_KEY,
      environmentId: env.id,
      environmentKey: env.key,
      maxIdleMs: 200,
    });
    try {
      // The bash command marks its start in the workdir: the test waits for that file, then kills.
      const started = new Promise<void>((resolve) => {
        const w = watch(worker.workdir, (_event, name) => {
          if (name === "started") {
            w.close();
            resolve();
          }
        });
      });
      await s.client.beta.sessions.events.send(session.id, { events: [message("SLOW_TOOL please")] });
      await started;
      await s.kill9();
      await s.start();

      // The worker's result reached the restarted server, and the turn finished.
      const posted = await worker.wire.next(
        (r) => r.method === "POST" && r.path === `/v1/sessions/${session.id}/events` && r.status === 200,
      );
      expect(JSON.parse(posted.body)).toMatchObject({ events: [{ type: "user.tool_result", is_error: false }] });
      await eventually(s.client, session.id, endTurnIdle);
      expect((await worker.wire.next(isForceStop)).status).toBe(200);

      const events = await assertCleanLog(store, s.client, session.id);
      const uses = events.filter((e) => e.type === "agent.tool_use");
      expect(uses).toHaveLength(1);
      const results = events.filter((e) => e.type === "user.tool_result");
      expect(results).toHaveLength(1);
      expect(results[0]).toMatchObject({ tool_use_id: uses[0]?.id, content: [{ type: "text", text: "done" }] });
      expect(events.find((e) => e.type === "agent.message")).toMatchObject({ content: [{ type: "text", text: "the slow tool finished" }] });
      // The model saw the tool's result once: two requests, both answered.
      expect(m.requests.map((r) => r.outcome)).toEqual(["completed", "completed"]);
    } finally {
      await worker.stop();
    }
  });
});
