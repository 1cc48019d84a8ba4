/** Model failures and retries, the missing-key path, and crash-and-rerun idempotency. */
import { createAnthropicModel, MISSING_KEY_MESSAGE, type ModelPort, modelFromEnv } from "@openma/harness";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTypes, type Harness, MODEL_KEY, ofType, startHarness, TOOLSET } from "./support.ts";

const text = (t: string) => ({ content: [{ type: "text" as const, text: t }] });

/** A model port that dies (throws, like a process crash would cut the turn) after the Nth response arrived and before it is recorded. */
function crashingAfter(model: ModelPort, crashOnCall: number): ModelPort {
  let calls = 0;
  return {
    retry: model.retry,
    async send(request, signal, observer) {
      const result = await model.send(request, signal, observer);
      calls += 1;
      if (calls === crashOnCall) throw new Error("simulated crash between the model response and the appends");
      return result;
    },
  };
}

describe.each(BACKENDS)("harness model handling on %s", (dialect) => {
  let h: Harness;
  let agentId: string;
  let cloud: string;
  beforeAll(async () => {
    h = await startHarness(dialect);
    agentId = await h.agent([TOOLSET]);
    cloud = await h.environment("cloud");
  });
  afterAll(async () => h?.close());

  it("a 429 is retried: rescheduled, then running again, then the answer", async () => {
    h.sleeps.length = 0;
    h.model.load([{ response: text("after the rate limit") }]);
    h.model.inject({ type: "error", status: 429, message: "slow down" });
    const sessionId = await h.session(agentId, cloud, "hello");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    const events = await h.events(sessionId);
    expect(events.map((e) => e.type)).toEqual([
      "user.message",
      "session.status_running",
      "span.model_request_start",
      "span.model_request_end",
      "session.error",
      "session.status_rescheduled",
      "session.status_running",
      "span.model_request_start",
      "agent.message",
      "span.model_request_end",
      "session.usage",
      "session.status_idle",
    ]);
    expect(ofType(events, "span.model_request_end").map((e) => e.is_error)).toEqual([true, false]);
    expect(ofType(events, "session.error")[0]?.error).toMatchObject({
      type: "model_rate_limited_error",
      retry_status: { type: "retrying" },
    });
    expect(String((ofType(events, "session.error")[0]?.error as { message?: string } | undefined)?.message)).toContain("slow down");
    expect(h.sleeps).toEqual([1000]);
  });

  it("a persistent 529 exhausts the retries and idles with retries_exhausted", async () => {
    h.sleeps.length = 0;
    h.model.load([{ times: 10, error: { status: 529 } }]);
    const sessionId = await h.session(agentId, cloud, "hello");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "retries_exhausted" });
    const events = await h.events(sessionId);
    const counts = countTypes(events.map((e) => e.type));
    // maxRetries is 3 in the harness: four attempts.
    expect(counts).toMatchObject({
      "span.model_request_start": 4,
      "span.model_request_end": 4,
      "session.error": 4,
      "session.status_rescheduled": 3,
      "session.status_running": 4,
    });
    expect(ofType(events, "session.error").map((e) => (e.error as { retry_status: { type: string } }).retry_status.type)).toEqual([
      "retrying",
      "retrying",
      "retrying",
      "exhausted",
    ]);
    expect(ofType(events, "session.error")[3]?.error).toMatchObject({ type: "model_overloaded_error" });
    expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "retries_exhausted" } });
    expect(h.sleeps).toEqual([1000, 2000, 4000]);
    expect(await h.needsTurn(sessionId)).toBe(false);
    expect((await h.t.client.beta.sessions.retrieve(sessionId)).status).toBe("idle");

    // A new message starts a fresh request with a fresh retry budget.
    h.model.load([{ response: text("recovered") }]);
    await h.say(sessionId, "try again");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
  });

  it("without a model key the server runs and the session reports a clear session.error", async () => {
    const before = h.model.requests.length;
    const sessionId = await h.session(agentId, cloud, "hello");
    expect(await h.run(sessionId, { model: modelFromEnv({}) })).toEqual({ type: "idle", stopReason: "retries_exhausted" });
    const events = await h.events(sessionId);
    const error = ofType(events, "session.error")[0]?.error as { type: string; message: string; retry_status: { type: string } };
    expect(error).toEqual({ type: "model_request_failed_error", message: MISSING_KEY_MESSAGE, retry_status: { type: "exhausted" } });
    expect(error.message).toContain("OPENMA_MODEL_API_KEY");
    expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "retries_exhausted" } });
    expect(h.model.requests.length).toBe(before);
  });

  it("reads the base URL and the key (with its ANTHROPIC_API_KEY fallback) from the environment", async () => {
    h.model.load([{ response: text("configured from env") }, { response: text("configured again") }]);
    const sessionId = await h.session(agentId, cloud, "hello");
    expect(await h.run(sessionId, { model: modelFromEnv({ OPENMA_MODEL_BASE_URL: h.model.url, ANTHROPIC_API_KEY: MODEL_KEY }) })).toEqual({
      type: "idle",
      stopReason: "end_turn",
    });
    await h.say(sessionId, "again");
    const preferred = modelFromEnv({ OPENMA_MODEL_BASE_URL: h.model.url, OPENMA_MODEL_API_KEY: MODEL_KEY, ANTHROPIC_API_KEY: "sk-wrong" });
    // The scripted model answers 401 to any other key: OPENMA_MODEL_API_KEY wins over ANTHROPIC_API_KEY.
    expect(await h.run(sessionId, { model: preferred })).toEqual({ type: "idle", stopReason: "end_turn" });
  });

  it("a wrong key is not retried and names the variables to check", async () => {
    const sessionId = await h.session(agentId, cloud, "hello");
    const wrong = createAnthropicModel({ baseURL: h.model.url, apiKey: "sk-wrong" });
    expect(await h.run(sessionId, { model: wrong })).toEqual({ type: "idle", stopReason: "retries_exhausted" });
    const events = await h.events(sessionId);
    expect(countTypes(events.map((e) => e.type))["span.model_request_start"]).toBe(1);
    expect(String((ofType(events, "session.error")[0]?.error as { message?: string } | undefined)?.message)).toMatch(
      /HTTP 401.*OPENMA_MODEL_API_KEY/,
    );
  });

  it("records thinking without replaying it, and ends a refused response with stop_reason refusal", async () => {
    h.model.load([
      {
        match: { last_user_text_contains: "first" },
        response: {
          content: [
            { type: "thinking", thinking: "private reasoning", signature: "sig" },
            { type: "text", text: "Hello." },
          ],
        },
      },
      {
        match: { last_user_text_contains: "second" },
        response: { content: [{ type: "text", text: "I can't help with that." }], stop_reason: "refusal" },
      },
    ]);
    const sessionId = await h.session(agentId, cloud, "first");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    const thinking = ofType(await h.events(sessionId), "agent.thinking");
    expect(thinking).toHaveLength(1);
    expect(Object.keys(thinking[0] ?? {}).sort()).toEqual(["id", "processed_at", "type"]);
    await h.say(sessionId, "second");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "refusal" });
    expect((await h.events(sessionId)).at(-1)).toMatchObject({
      type: "session.status_idle",
      stop_reason: { type: "refusal" },
      stop_details: { type: "refusal", category: null, explanation: null },
    });
    expect((h.model.requests.at(-1)?.body as { messages: unknown[] } | undefined)?.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "first" }] },
      { role: "assistant", content: [{ type: "text", text: "Hello." }] },
      { role: "user", content: [{ type: "text", text: "second" }] },
    ]);
  });

  it("re-running after a crash between the model response and the appends duplicates nothing", async () => {
    h.model.load([{ times: 2, response: text("only once in the log") }]);
    const sessionId = await h.session(agentId, cloud, "hello");
    const crashed = await h.run(sessionId, { model: crashingAfter(h.deps.model, 1) });
    expect(crashed).toMatchObject({ type: "failed" });
    expect(await h.types(sessionId)).toEqual(["user.message", "session.status_running", "span.model_request_start"]);
    expect(await h.needsTurn(sessionId)).toBe(true);

    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(await h.types(sessionId)).toEqual([
      "user.message",
      "session.status_running",
      "span.model_request_start",
      "agent.message",
      "span.model_request_end",
      "session.usage",
      "session.status_idle",
    ]);
    // The usage of the lost response is not counted: only what landed.
    expect(ofType(await h.events(sessionId), "session.usage")).toHaveLength(1);

    // Running a finished session again is a no-op.
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(await h.types(sessionId)).toHaveLength(7);
  });

  it("a crash in the middle of a tool round resumes without re-running what landed", async () => {
    h.model.load([
      { response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo ran >> count.txt; cat count.txt" } }] } },
      { times: 2, match: { tool_result_for: "bash" }, response: text("done") },
    ]);
    const sessionId = await h.session(agentId, cloud, "count");
    expect(await h.run(sessionId, { model: crashingAfter(h.deps.model, 2) })).toMatchObject({ type: "failed" });
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    const events = await h.events(sessionId);
    expect(countTypes(events.map((e) => e.type))).toEqual({
      "user.message": 1,
      "session.status_running": 1,
      "span.model_request_start": 2,
      "agent.tool_use": 1,
      "span.model_request_end": 2,
      "session.usage": 2,
      "agent.tool_result": 1,
      "agent.message": 1,
      "session.status_idle": 1,
    });
    // The tool ran once: its result landed before the crash and was not re-run.
    expect(ofType(events, "agent.tool_result")[0]?.content).toEqual([{ type: "text", text: "ran" }]);
  });
});
