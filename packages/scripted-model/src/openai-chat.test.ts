/** The scripted model as the official `openai` client sees Chat Completions: create, stream chunks, tool calls, usage, errors. */
import OpenAI, { APIError, AuthenticationError, InternalServerError, RateLimitError } from "openai";
import type { ChatCompletionChunk, ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import { afterEach, describe, expect, it } from "vitest";
import { type ScriptedModel, type ScriptedModelOptions, startScriptedModel } from "./index.ts";

const KEY = "sk-chat-test";
let model: ScriptedModel | null = null;

afterEach(async () => {
  await model?.close();
  model = null;
});

async function start(opts: ScriptedModelOptions): Promise<{ model: ScriptedModel; client: OpenAI }> {
  model = await startScriptedModel({ apiKey: KEY, ...opts });
  return { model, client: new OpenAI({ baseURL: model.baseUrls.openai, apiKey: KEY, maxRetries: 0 }) };
}

const tools: ChatCompletionTool[] = [
  { type: "function", function: { name: "bash", parameters: { type: "object", properties: { command: { type: "string" } } } } },
];
const ask = (text: string) => ({ model: "gpt-test", messages: [{ role: "user" as const, content: text }] });

describe("chat.completions.create (JSON)", () => {
  it("returns the scripted text and usage with cached and reasoning tokens", async () => {
    const { client, model } = await start({
      script: [
        {
          response: {
            content: [
              { type: "thinking", thinking: "hmm" },
              { type: "text", text: "Hello there." },
            ],
            usage: { input_tokens: 12, output_tokens: 6, reasoning_tokens: 2, cache_read_input_tokens: 40 },
          },
        },
      ],
    });
    const res = await client.chat.completions.create(ask("hi"));
    expect(res).toMatchObject({ object: "chat.completion", model: "gpt-test" });
    expect(res.id).toMatch(/^chatcmpl-/);
    expect(res.choices).toEqual([
      {
        index: 0,
        message: { role: "assistant", content: "Hello there.", refusal: null, annotations: [], reasoning_content: "hmm" },
        logprobs: null,
        finish_reason: "stop",
      },
    ]);
    expect(res.usage).toMatchObject({
      prompt_tokens: 52,
      completion_tokens: 6,
      total_tokens: 58,
      prompt_tokens_details: { cached_tokens: 40 },
      completion_tokens_details: { reasoning_tokens: 2 },
    });
    expect(model.requests[0]).toMatchObject({ dialect: "openai-chat", path: "/v1/chat/completions", auth: "bearer" });
  });

  it("returns tool calls with finish_reason tool_calls", async () => {
    const { client } = await start({
      script: [{ response: { content: [{ type: "tool_use", id: "call_fixed", name: "bash", input: { command: "ls" } }] } }],
    });
    const res = await client.chat.completions.create({ ...ask("list"), tools });
    expect(res.choices[0]!.finish_reason).toBe("tool_calls");
    expect(res.choices[0]!.message).toMatchObject({
      content: null,
      tool_calls: [{ id: "call_fixed", type: "function", function: { name: "bash", arguments: '{"command":"ls"}' } }],
    });
  });
});

describe("streaming", () => {
  it("sends delta chunks, tool call deltas, a final usage chunk and [DONE]", async () => {
    const { client } = await start({
      script: [
        {
          response: {
            content: [
              { type: "text", text: "Looking now." },
              { type: "tool_use", name: "bash", input: { command: "cat notes.md" } },
            ],
            usage: { input_tokens: 9, output_tokens: 4 },
            chunk_chars: 5,
          },
        },
      ],
    });
    const stream = await client.chat.completions.create({ ...ask("go"), tools, stream: true, stream_options: { include_usage: true } });
    const chunks: ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "", refusal: null });
    const text = chunks.flatMap((c) => (c.choices[0]?.delta.content ? [c.choices[0].delta.content] : [])).join("");
    expect(text).toBe("Looking now.");
    const calls = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
    expect(calls[0]).toMatchObject({
      index: 0,
      id: expect.stringMatching(/^call_/),
      type: "function",
      function: { name: "bash", arguments: "" },
    });
    expect(JSON.parse(calls.map((t) => t.function?.arguments ?? "").join(""))).toEqual({ command: "cat notes.md" });
    const finish = chunks.at(-2)!;
    expect(finish.choices[0]).toMatchObject({ delta: {}, finish_reason: "tool_calls" });
    expect(finish.usage).toBeNull();
    const usage = chunks.at(-1)!;
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 });
  });

  it("omits the usage chunk unless asked, and reassembles through the SDK's stream helper", async () => {
    const turn = { response: { content: [{ type: "tool_use" as const, id: "call_7", name: "bash", input: { command: "pwd" } }] } };
    const { client } = await start({ script: [turn, turn] });
    const raw = await client.chat.completions.create({ ...ask("a"), tools, stream: true });
    const chunks: ChatCompletionChunk[] = [];
    for await (const c of raw) chunks.push(c);
    expect(chunks.every((c) => c.choices.length === 1 && c.usage === undefined)).toBe(true);
    const final = await client.chat.completions.stream({ ...ask("b"), tools }).finalChatCompletion();
    expect(final.choices[0]!.message.tool_calls).toEqual([
      expect.objectContaining({
        id: "call_7",
        type: "function",
        function: expect.objectContaining({ name: "bash", arguments: '{"command":"pwd"}' }),
      }),
    ]);
  });
});

describe("a tool call round trip", () => {
  it("matches tool messages by the call they answer", async () => {
    const { client, model } = await start({
      script: [
        {
          match: { last_user_text_contains: "inspect" },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: "ls" } }] },
        },
        { match: { tool_result_for: "bash", tool_result_contains: "notes.md" }, response: "Found notes.md." },
      ],
    });
    const messages: ChatCompletionMessageParam[] = [
      { role: "system", content: "You are an agent." },
      { role: "user", content: "Please inspect." },
    ];
    const first = await client.chat.completions.stream({ model: "gpt-test", messages, tools }).finalChatCompletion();
    const msg = first.choices[0]!.message;
    const call = msg.tool_calls![0]!;
    messages.push({ role: "assistant", content: msg.content, tool_calls: msg.tool_calls! });
    messages.push({ role: "tool", tool_call_id: call.id, content: "notes.md\n" });
    const second = await client.chat.completions.create({ model: "gpt-test", messages, tools });
    expect(second.choices[0]!.message.content).toBe("Found notes.md.");
    expect(model.unusedTurns()).toEqual([]);
    expect(model.requests[1]!.view).toMatchObject({
      system: "You are an agent.",
      messages: [
        { role: "user", content: [{ type: "text", text: "Please inspect." }] },
        { role: "assistant", content: [{ type: "tool_use", id: call.id, name: "bash", input: { command: "ls" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, tool_name: "bash", text: "notes.md\n", is_error: false }] },
      ],
    });
  });
});

describe("errors", () => {
  it.each([
    { status: 429, cls: RateLimitError, sent: 429 },
    { status: 500, cls: InternalServerError, sent: 500 },
    { status: 529, cls: InternalServerError, sent: 503 },
  ])("an injected $status reaches the client as $cls.name", async ({ status, cls, sent }) => {
    const { client, model } = await start({ script: [{ response: "after the fault" }] });
    model.inject({ type: "error", status });
    const err = await client.chat.completions.create(ask("x")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(cls);
    expect((err as APIError).status).toBe(sent);
    expect((await client.chat.completions.create(ask("x"))).choices[0]!.message.content).toBe("after the fault");
  });

  it("breaks a stream with an error chunk the SDK raises", async () => {
    const { client, model } = await start({ script: [{ response: "never finished" }] });
    model.inject({ type: "stream_error", after_events: 2, message: "Overloaded" });
    const stream = await client.chat.completions.create({ ...ask("x"), stream: true });
    const err = await (async () => {
      for await (const _ of stream) {
        // drain until the error chunk
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).message).toMatch(/Overloaded/);
  });

  it("answers a script mismatch with a clear 500 the SDK does not retry", async () => {
    const { model } = await start({ script: [{ label: "after-bash", match: { tool_result_for: "bash" }, response: "x" }] });
    const retrying = new OpenAI({ baseURL: model.baseUrls.openai, apiKey: KEY, maxRetries: 3 });
    const err = await retrying.chat.completions.create(ask("hello")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InternalServerError);
    expect((err as APIError).message).toMatch(/no remaining turn matches.*turn 0 \(after-bash\)/);
    expect(model.requests).toHaveLength(1);
    expect(model.requests[0]!.error).toMatch(/no remaining turn matches/);
  });

  it("rejects a missing key with AuthenticationError", async () => {
    const { model } = await start({ script: [{ response: "x" }] });
    const res = await fetch(`${model.baseUrls.openai}/chat/completions`, { method: "POST", body: JSON.stringify(ask("x")) });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ error: { type: "invalid_request_error", param: null } });
    const wrong = new OpenAI({ baseURL: model.baseUrls.openai, apiKey: "sk-wrong", maxRetries: 0 });
    await expect(wrong.chat.completions.create(ask("x"))).rejects.toBeInstanceOf(AuthenticationError);
  });
});
