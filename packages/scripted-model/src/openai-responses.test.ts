/** The scripted model as the official `openai` client sees the Responses API: create, stream, tool calls, usage, errors. */
import OpenAI, { APIError, AuthenticationError, BadRequestError, InternalServerError, RateLimitError } from "openai";
import type { ResponseInputItem, ResponseStreamEvent } from "openai/resources/responses/responses";
import { afterEach, describe, expect, it } from "vitest";
import { type ScriptedModel, type ScriptedModelOptions, startScriptedModel } from "./index.ts";

const KEY = "sk-openai-test";
let model: ScriptedModel | null = null;

afterEach(async () => {
  await model?.close();
  model = null;
});

async function start(opts: ScriptedModelOptions): Promise<{ model: ScriptedModel; client: OpenAI }> {
  model = await startScriptedModel({ apiKey: KEY, ...opts });
  return { model, client: new OpenAI({ baseURL: model.baseUrls.openai, apiKey: KEY, maxRetries: 0 }) };
}

const bash = {
  type: "function" as const,
  name: "bash",
  parameters: { type: "object", properties: { command: { type: "string" } } },
  strict: false,
};

describe("responses.create (JSON)", () => {
  it("returns the scripted text with usage counting cached tokens in the input", async () => {
    const { client, model } = await start({
      script: [
        {
          response: {
            content: [{ type: "text", text: "Hello there." }],
            usage: { input_tokens: 12, output_tokens: 3, cache_creation_input_tokens: 5, cache_read_input_tokens: 40 },
          },
        },
      ],
    });
    const res = await client.responses.create({ model: "gpt-test", input: "hi", instructions: "be brief" });
    expect(res).toMatchObject({ object: "response", status: "completed", model: "gpt-test", instructions: "be brief" });
    expect(res.id).toMatch(/^resp_/);
    expect(res.output_text).toBe("Hello there.");
    expect(res.usage).toEqual({
      input_tokens: 57,
      input_tokens_details: { cached_tokens: 40, cache_write_tokens: 5 },
      output_tokens: 3,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 60,
    });
    expect(model.requests[0]).toMatchObject({ dialect: "openai-responses", auth: "bearer", path: "/v1/responses", outcome: "completed" });
    expect(model.requests[0]!.view).toMatchObject({
      system: "be brief",
      messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }],
    });
  });

  it("marks a max_tokens stop as incomplete", async () => {
    const { client } = await start({ script: [{ response: { content: [{ type: "text", text: "cut" }], stop_reason: "max_tokens" } }] });
    const res = await client.responses.create({ model: "gpt-test", input: "long" });
    expect([res.status, res.incomplete_details]).toEqual(["incomplete", { reason: "max_output_tokens" }]);
  });
});

describe("responses.stream", () => {
  it("streams the typed events a client consumes, in API order", async () => {
    const { client } = await start({
      script: [
        {
          response: {
            content: [
              { type: "thinking", thinking: "plan it" },
              { type: "text", text: "Running it." },
              { type: "tool_use", id: "call_fixed", name: "bash", input: { command: "ls -la" } },
            ],
            usage: { input_tokens: 20, output_tokens: 10, reasoning_tokens: 4, cache_read_input_tokens: 8 },
            chunk_chars: 4,
          },
        },
      ],
    });
    const stream = await client.responses.create({ model: "gpt-test", input: "go", tools: [bash], stream: true });
    const events: ResponseStreamEvent[] = [];
    for await (const e of stream) events.push(e);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const types = [...new Set(events.map((e) => e.type))];
    expect(types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.reasoning_summary_part.added",
      "response.reasoning_summary_text.delta",
      "response.reasoning_summary_text.done",
      "response.reasoning_summary_part.done",
      "response.output_item.done",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.completed",
    ]);
    const args = events.flatMap((e) => (e.type === "response.function_call_arguments.delta" ? [e.delta] : []));
    expect(args.length).toBeGreaterThan(3);
    expect(JSON.parse(args.join(""))).toEqual({ command: "ls -la" });
    const completed = events.at(-1)!;
    expect(completed.type === "response.completed" && completed.response.usage).toEqual({
      input_tokens: 28,
      input_tokens_details: { cached_tokens: 8, cache_write_tokens: 0 },
      output_tokens: 10,
      output_tokens_details: { reasoning_tokens: 4 },
      total_tokens: 38,
    });
  });

  it("reassembles to the same response the JSON call gets, through the SDK's stream helper", async () => {
    const content = [
      { type: "text" as const, text: "Let me look." },
      { type: "tool_use" as const, id: "call_1", name: "bash", input: { command: "cat notes.md" } },
    ];
    const turn = { response: { content, usage: { input_tokens: 1, output_tokens: 1 }, chunk_chars: 3 } };
    const { client } = await start({ script: [turn, turn] });
    const json = await client.responses.create({ model: "gpt-test", input: "a", tools: [bash] });
    const streamed = await client.responses.stream({ model: "gpt-test", input: "b", tools: [bash] }).finalResponse();
    const strip = (r: typeof json) => ({
      output: r.output.map((item) => ({ ...item, id: undefined })),
      output_text: r.output_text,
      usage: r.usage,
      status: r.status,
    });
    // toMatchObject: the stream helper adds its own `parsed` fields.
    expect(strip(streamed)).toMatchObject(strip(json));
    expect(json.output[1]).toMatchObject({
      type: "function_call",
      call_id: "call_1",
      name: "bash",
      arguments: '{"command":"cat notes.md"}',
    });
  });
});

describe("a tool call round trip", () => {
  it("matches function_call_output items by the tool they answer", async () => {
    const { client, model } = await start({
      script: [
        {
          label: "ask",
          match: { tools_include: ["bash"] },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: "ls" } }] },
        },
        { label: "answer", match: { tool_result_for: "bash", tool_result_contains: "notes.md" }, response: "There is a notes file." },
      ],
    });
    const input: ResponseInputItem[] = [
      { role: "developer", content: "You are Codex." },
      { role: "user", content: "what is here?" },
    ];
    const first = await client.responses.stream({ model: "gpt-test", input, tools: [bash] }).finalResponse();
    const call = first.output.find((o) => o.type === "function_call");
    if (call?.type !== "function_call") throw new Error("expected a function call");
    expect(call.call_id).toMatch(/^call_/);
    input.push(call, { type: "function_call_output", call_id: call.call_id, output: "notes.md\n" });
    const second = await client.responses.stream({ model: "gpt-test", input, tools: [bash] }).finalResponse();
    expect(second.output_text).toBe("There is a notes file.");
    expect(model.unusedTurns()).toEqual([]);
    expect(model.requests[1]!.view!.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "what is here?" }] },
      { role: "assistant", content: [{ type: "tool_use", id: call.call_id, name: "bash", input: { command: "ls" } }] },
      {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: call.call_id, tool_name: "bash", text: "notes.md\n", is_error: false }],
      },
    ]);
    expect(model.requests[1]!.view!.system).toBe("You are Codex.");
  });

  it("answers a tool declared as custom (free-form) with a custom_tool_call", async () => {
    const patch = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n";
    const { client } = await start({
      script: [{ response: { content: [{ type: "tool_use", name: "apply_patch", input: { input: patch } }] } }],
    });
    const tools = [{ type: "custom" as const, name: "apply_patch", description: "apply a patch" }];
    const res = await client.responses.stream({ model: "gpt-test", input: "add a.txt", tools }).finalResponse();
    expect(res.output).toEqual([expect.objectContaining({ type: "custom_tool_call", name: "apply_patch", input: patch })]);
  });
});

describe("errors", () => {
  it.each([
    { status: 429, cls: RateLimitError, code: "rate_limit_exceeded", sent: 429 },
    { status: 500, cls: InternalServerError, code: null, sent: 500 },
    { status: 529, cls: InternalServerError, code: "server_is_overloaded", sent: 503 },
  ])("an injected $status reaches the client as $cls.name with OpenAI's envelope", async ({ status, cls, code, sent }) => {
    const { client, model } = await start({ script: [{ response: "after the fault" }] });
    model.inject({ type: "error", status, message: "scripted trouble" });
    const err = await client.responses.create({ model: "gpt-test", input: "x" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(cls);
    expect((err as APIError).status).toBe(sent);
    expect((err as APIError).code).toBe(code);
    expect((err as APIError).requestID).toMatch(/^req_/);
    expect((await client.responses.create({ model: "gpt-test", input: "x" })).output_text).toBe("after the fault");
  });

  it("lets a retrying client come back at once through retry-after-ms", async () => {
    const { model } = await start({ script: [{ response: "recovered" }] });
    model.inject({ type: "error", status: 429, retry_after_ms: 1 });
    const retrying = new OpenAI({ baseURL: model.baseUrls.openai, apiKey: KEY, maxRetries: 2 });
    expect((await retrying.responses.create({ model: "gpt-test", input: "x" })).output_text).toBe("recovered");
    expect(model.requests.map((r) => r.status)).toEqual([429, 200]);
  });

  it("breaks a stream with an error event the SDK raises", async () => {
    const { client, model } = await start({ script: [{ response: "never finished" }] });
    model.inject({ type: "stream_error", after_events: 3, message: "Overloaded" });
    const err = await client.responses
      .stream({ model: "gpt-test", input: "x" })
      .finalResponse()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).message).toMatch(/Overloaded/);
    await model.idle();
    expect(model.requests[0]!.outcome).toBe("stream_error");
    expect(model.unusedTurns()).toHaveLength(1);
  });

  it("rejects a wrong key and a stored-response reference in OpenAI's shape", async () => {
    const { model, client } = await start({ script: [{ response: "x" }] });
    const wrong = new OpenAI({ baseURL: model.baseUrls.openai, apiKey: "sk-wrong", maxRetries: 0 });
    const denied = await wrong.responses.create({ model: "gpt-test", input: "x" }).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(AuthenticationError);
    expect((denied as APIError).code).toBe("invalid_api_key");
    const stored = await client.responses
      .create({ model: "gpt-test", input: "x", previous_response_id: "resp_1" })
      .catch((e: unknown) => e);
    expect(stored).toBeInstanceOf(BadRequestError);
    expect((stored as APIError).message).toMatch(/previous_response_id/);
    expect(model.unusedTurns()).toHaveLength(1);
  });
});

describe("input token counting", () => {
  it("answers /v1/responses/input_tokens without using a turn", async () => {
    const { client, model } = await start({ script: [{ response: "x" }] });
    const counted = await client.responses.inputTokens.count({ model: "gpt-test", input: "count me" });
    expect(counted).toMatchObject({ object: "response.input_tokens", input_tokens: expect.any(Number) });
    expect(counted.input_tokens).toBeGreaterThan(0);
    expect(model.sideRequests.map((r) => r.kind)).toEqual(["count_tokens"]);
    expect(model.requests).toEqual([]);
  });
});
