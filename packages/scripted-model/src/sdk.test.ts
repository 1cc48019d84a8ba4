/** The scripted model as the official SDK sees it: `messages.create`, `messages.stream`, errors, faults. */
import Anthropic, {
  APIConnectionError,
  APIError,
  AuthenticationError,
  BadRequestError,
  InternalServerError,
  RateLimitError,
} from "@anthropic-ai/sdk";
import type { Message, MessageParam, Tool } from "@anthropic-ai/sdk/resources/messages";
import { afterEach, describe, expect, it } from "vitest";
import { type ScriptedModel, type ScriptedModelOptions, startScriptedModel } from "./index.ts";

const KEY = "sk-scripted-test";
let model: ScriptedModel | null = null;

afterEach(async () => {
  await model?.close();
  model = null;
});

async function start(opts: ScriptedModelOptions): Promise<{ model: ScriptedModel; client: Anthropic }> {
  model = await startScriptedModel({ apiKey: KEY, ...opts });
  return { model, client: new Anthropic({ baseURL: model.url, apiKey: KEY, maxRetries: 0 }) };
}

const ask = (text: string) => ({ model: "claude-test-1", max_tokens: 256, messages: [{ role: "user" as const, content: text }] });

describe("messages.create (JSON)", () => {
  it("returns the scripted text with the exact usage", async () => {
    const { client } = await start({
      script: [
        {
          response: {
            content: [{ type: "text", text: "Hello there." }],
            usage: { input_tokens: 12, output_tokens: 3, cache_creation_input_tokens: 5, cache_read_input_tokens: 40 },
          },
        },
      ],
    });
    const msg = await client.messages.create(ask("hi"));
    expect(msg).toMatchObject({
      type: "message",
      role: "assistant",
      model: "claude-test-1",
      content: [{ type: "text", text: "Hello there." }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: { input_tokens: 12, output_tokens: 3, cache_creation_input_tokens: 5, cache_read_input_tokens: 40 },
    });
    expect(msg.id).toMatch(/^msg_/);
  });

  it("returns tool_use blocks with stop_reason tool_use", async () => {
    const { client } = await start({
      script: [{ response: { content: [{ type: "tool_use", id: "toolu_fixed", name: "bash", input: { command: "ls" } }] } }],
    });
    const msg = await client.messages.create(ask("list"));
    expect(msg.stop_reason).toBe("tool_use");
    expect(msg.content).toEqual([expect.objectContaining({ type: "tool_use", id: "toolu_fixed", name: "bash", input: { command: "ls" } })]);
  });

  it("honours a scripted stop_reason and model", async () => {
    const { client } = await start({
      script: [{ response: { content: [{ type: "text", text: "cut" }], stop_reason: "max_tokens", model: "claude-other" } }],
    });
    const msg = await client.messages.create(ask("long"));
    expect([msg.stop_reason, msg.model]).toEqual(["max_tokens", "claude-other"]);
  });
});

describe("messages.stream", () => {
  it("streams thinking, text and tool_use that reassemble to the scripted message", async () => {
    const input = { file_path: "/work/notes.md", content: 'line 1\nline 2 with "quotes"\n', flags: [true, null, 3.5] };
    const { client } = await start({
      script: [
        {
          response: {
            content: [
              { type: "thinking", thinking: "I should write the notes file first.", signature: "sig-abc" },
              { type: "text", text: "Writing the file now." },
              { type: "tool_use", name: "write", input },
            ],
            usage: { input_tokens: 100, output_tokens: 42, cache_read_input_tokens: 64 },
            chunk_chars: 4,
          },
        },
      ],
    });
    const stream = client.messages.stream(ask("write notes"));
    const jsonParts: string[] = [];
    const thinkingParts: string[] = [];
    stream.on("inputJson", (partial) => jsonParts.push(partial));
    stream.on("thinking", (delta) => thinkingParts.push(delta));
    const msg = await stream.finalMessage();
    expect(msg.content).toEqual([
      { type: "thinking", thinking: "I should write the notes file first.", signature: "sig-abc" },
      expect.objectContaining({ type: "text", text: "Writing the file now." }),
      expect.objectContaining({ type: "tool_use", name: "write", input, id: expect.stringMatching(/^toolu_/) }),
    ]);
    expect(jsonParts.length).toBeGreaterThan(5);
    expect(JSON.parse(jsonParts.join(""))).toEqual(input);
    expect(thinkingParts.join("")).toBe("I should write the notes file first.");
    expect(msg.stop_reason).toBe("tool_use");
    expect(msg.usage).toMatchObject({ input_tokens: 100, output_tokens: 42, cache_read_input_tokens: 64, cache_creation_input_tokens: 0 });
  });

  it("serves the same scripted answer to JSON and streaming callers", async () => {
    const turn = { response: { content: [{ type: "text" as const, text: "same" }], usage: { input_tokens: 1, output_tokens: 1 } } };
    const { client } = await start({ script: [turn, turn] });
    const json = await client.messages.create(ask("a"));
    const streamed = await client.messages.stream(ask("b")).finalMessage();
    const strip = (m: Message) => ({ content: m.content, stop_reason: m.stop_reason, usage: m.usage });
    expect(strip(streamed)).toEqual(strip(json));
  });
});

describe("a scripted multi-step tool conversation", () => {
  const tools: Tool[] = [
    { name: "bash", input_schema: { type: "object", properties: { command: { type: "string" } } } },
    { name: "read", input_schema: { type: "object", properties: { path: { type: "string" } } } },
  ];

  it("follows the matchers turn by turn", async () => {
    const { client, model } = await start({
      script: [
        {
          label: "list",
          match: { last_user_text_contains: "inspect", tools_include: ["bash", "read"] },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: "ls" } }] },
        },
        {
          label: "read",
          match: { tool_result_for: "bash", tool_result_contains: "notes.md" },
          response: { content: [{ type: "tool_use", name: "read", input: { path: "notes.md" } }] },
        },
        { label: "answer", match: { tool_result_for: "read" }, response: "The notes say hello." },
      ],
    });
    const messages: MessageParam[] = [{ role: "user", content: "Please inspect the workspace." }];
    const toolOutput: Record<string, string> = { bash: "notes.md\n", read: "hello" };
    for (let step = 0; step < 3; step++) {
      const msg = await client.messages.stream({ model: "claude-test-1", max_tokens: 256, tools, messages }).finalMessage();
      messages.push({ role: "assistant", content: msg.content });
      const uses = msg.content.filter((b) => b.type === "tool_use");
      if (msg.stop_reason !== "tool_use") break;
      messages.push({
        role: "user",
        content: uses.map((u) => ({ type: "tool_result" as const, tool_use_id: u.id, content: toolOutput[u.name]! })),
      });
    }
    const last = messages.at(-1)!;
    expect(last.role).toBe("assistant");
    expect(last.content).toEqual([expect.objectContaining({ type: "text", text: "The notes say hello." })]);
    expect(model.requests.map((r) => [r.turn, r.outcome])).toEqual([
      [0, "completed"],
      [1, "completed"],
      [2, "completed"],
    ]);
    expect(model.unusedTurns()).toEqual([]);
  });

  it("answers a clear 500 when no remaining turn matches", async () => {
    const { client } = await start({ script: [{ label: "after-bash", match: { tool_result_for: "bash" }, response: "x" }] });
    const err = await client.messages.create(ask("hello")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InternalServerError);
    expect((err as InternalServerError).apiMessage).toMatch(
      /no remaining turn matches.*turn 0 \(after-bash\): last message has no tool_result for tool "bash"/,
    );
  });
});

describe("script exhaustion", () => {
  it("answers 500 api_error 'script exhausted' without inviting SDK retries", async () => {
    const { model } = await start({ script: [{ response: "only once" }] });
    const retrying = new Anthropic({ baseURL: model.url, apiKey: KEY, maxRetries: 3 });
    await retrying.messages.create(ask("one"));
    const err = await retrying.messages.create(ask("two")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InternalServerError);
    const apiErr = err as InternalServerError;
    expect([apiErr.status, apiErr.type]).toEqual([500, "api_error"]);
    expect(apiErr.message).toMatch(/script exhausted/);
    expect(apiErr.requestID).toMatch(/^req_/);
    expect(model.requests).toHaveLength(2); // x-should-retry: false kept the SDK from retrying
  });
});

describe("injected faults", () => {
  it.each([
    { status: 429, cls: RateLimitError, type: "rate_limit_error" },
    { status: 500, cls: InternalServerError, type: "api_error" },
    { status: 529, cls: InternalServerError, type: "overloaded_error" },
  ])("a one-shot $status surfaces as the SDK's error and leaves the turn for the next request", async ({ status, cls, type }) => {
    const { client, model } = await start({ script: [{ response: "after the fault" }] });
    model.inject({ type: "error", status });
    const err = await client.messages.create(ask("x")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(cls);
    expect([(err as APIError).status, (err as APIError).type]).toEqual([status, type]);
    const ok = await client.messages.create(ask("x"));
    expect(ok.content).toEqual([expect.objectContaining({ text: "after the fault" })]);
    expect(model.requests.map((r) => r.outcome)).toEqual(["fault", "completed"]);
  });

  it("lets a retrying SDK recover at once through retry-after-ms", async () => {
    const { model } = await start({ script: [{ response: "recovered" }] });
    model.inject({ type: "error", status: 529, retry_after_ms: 1 });
    const retrying = new Anthropic({ baseURL: model.url, apiKey: KEY, maxRetries: 2 });
    const msg = await retrying.messages.create(ask("x"));
    expect(msg.content).toEqual([expect.objectContaining({ text: "recovered" })]);
    expect(model.requests.map((r) => [r.status, r.headers["x-stainless-retry-count"]])).toEqual([
      [529, "0"],
      [200, "1"],
    ]);
  });

  it("drops a stream mid-way, and the retry gets the whole turn", async () => {
    const { client, model } = await start({
      script: [{ response: { content: [{ type: "text", text: "a fairly long answer that streams in many chunks" }] } }],
    });
    model.inject({ type: "drop", after_events: 4 });
    const stream = client.messages.stream(ask("x"));
    const seen: string[] = [];
    stream.on("streamEvent", (e) => seen.push(e.type));
    const err = await stream.finalMessage().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(APIError); // a transport failure, not an API answer
    expect(seen).toEqual(["message_start", "content_block_start", "content_block_delta"]); // the 4th event was the (hidden) ping
    await model.idle();
    expect(model.requests[0]).toMatchObject({ outcome: "dropped", turn: 0 });
    const again = await client.messages.stream(ask("x")).finalMessage();
    expect(again.content).toEqual([expect.objectContaining({ text: "a fairly long answer that streams in many chunks" })]);
  });

  it("drops a non-streaming request before answering", async () => {
    const { client, model } = await start({ script: [{ response: "kept" }] });
    model.inject({ type: "drop" });
    const err = await client.messages.create(ask("x")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIConnectionError);
    expect((await client.messages.create(ask("x"))).content).toEqual([expect.objectContaining({ text: "kept" })]);
  });

  it("sends an in-stream error event", async () => {
    const { client, model } = await start({ script: [{ response: "never finished" }] });
    model.inject({ type: "stream_error", after_events: 3, message: "Overloaded" });
    const stream = client.messages.stream(ask("x"));
    const seen: string[] = [];
    stream.on("streamEvent", (e) => seen.push(e.type));
    const err = await stream.finalMessage().catch((e: unknown) => e);
    expect(seen).toEqual(["message_start", "content_block_start"]); // then the error, in place of the first delta
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).type).toBe("overloaded_error");
    expect((err as APIError).message).toMatch(/Overloaded/);
  });

  it("applies a guarded fault only to the request it matches", async () => {
    const { client, model } = await start({ script: [{ times: 2, response: "fine" }] });
    model.inject({ type: "error", status: 429, match: { system_contains: "victim" } });
    await expect(client.messages.create({ ...ask("x"), system: "bystander" })).resolves.toBeTruthy();
    await expect(client.messages.create({ ...ask("x"), system: "the victim" })).rejects.toBeInstanceOf(RateLimitError);
  });

  it("scripts an error as a turn of its own", async () => {
    const { client } = await start({ script: [{ error: { status: 529, message: "busy" } }, { response: "ok" }] });
    const err = await client.messages.create(ask("x")).catch((e: unknown) => e);
    expect([(err as APIError).status, (err as APIError).type]).toEqual([529, "overloaded_error"]);
    expect((await client.messages.create(ask("x"))).content).toEqual([expect.objectContaining({ text: "ok" })]);
  });
});

describe("request checks", () => {
  it("rejects a wrong key with authentication_error and accepts Bearer tokens", async () => {
    const { model } = await start({ script: [{ response: "hi" }] });
    const wrong = new Anthropic({ baseURL: model.url, apiKey: "sk-wrong", maxRetries: 0 });
    const err = await wrong.messages.create(ask("x")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthenticationError);
    expect((err as APIError).type).toBe("authentication_error");
    const bearer = new Anthropic({ baseURL: model.url, authToken: KEY, maxRetries: 0 });
    await expect(bearer.messages.create(ask("x"))).resolves.toMatchObject({ type: "message" });
  });

  it("answers 400 invalid_request_error naming the field", async () => {
    const { client } = await start({ script: [{ response: "hi" }] });
    const bad = await client.messages.create({ model: "claude-test-1", max_tokens: 10, messages: [] }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(BadRequestError);
    expect((bad as APIError).message).toMatch(/messages: Too small/);
    const role = await client.messages
      .create({ model: "claude-test-1", max_tokens: 10, messages: [{ role: "robot" as "user", content: "x" }] })
      .catch((e: unknown) => e);
    expect((role as APIError).message).toMatch(/messages\.0\.role/);
  });

  it("records requests without credentials", async () => {
    const { client, model } = await start({ script: [{ response: "hi" }] });
    await client.messages.create({ ...ask("record me"), system: "sys" });
    const [rec] = model.requests;
    expect(rec).toMatchObject({ method: "POST", path: "/v1/messages", auth: "bearer", stream: false, status: 200, outcome: "completed" });
    expect(rec!.body).toMatchObject({ system: "sys", messages: [{ role: "user", content: "record me" }] });
    expect(JSON.stringify(rec)).not.toContain(KEY);
  });
});

describe("concurrent sessions", () => {
  it("gives each session its own copy of the script", async () => {
    const { client, model } = await start({
      script: {
        session_key: { pattern: "\\[session (\\w+)\\]" },
        turns: [
          { response: { content: [{ type: "tool_use", name: "bash", input: { command: "pwd" } }] } },
          { match: { tool_result_for: "bash" }, response: "done" },
        ],
      },
    });
    const run = async (id: string) => {
      const system = `Agent prompt [session ${id}]`;
      const messages: MessageParam[] = [{ role: "user", content: "go" }];
      const first = await client.messages.stream({ model: "m", max_tokens: 64, system, messages }).finalMessage();
      const use = first.content.find((b) => b.type === "tool_use")!;
      messages.push(
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "/" }] },
      );
      const second = await client.messages.stream({ model: "m", max_tokens: 64, system, messages }).finalMessage();
      return second.content;
    };
    const ids = Array.from({ length: 10 }, (_, i) => `s${i}`);
    const results = await Promise.all(ids.map(run));
    for (const content of results) expect(content).toEqual([expect.objectContaining({ text: "done" })]);
    expect(new Set(model.requests.map((r) => r.session_key))).toEqual(new Set(ids));
    expect(model.requests.every((r) => r.outcome === "completed")).toBe(true);
  });

  it("never hands a single-use turn to two concurrent requests", async () => {
    const { client, model } = await start({ script: [{ times: 20, response: "ok" }] });
    const results = await Promise.allSettled(Array.from({ length: 25 }, () => client.messages.stream(ask("x")).finalMessage()));
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(20);
    const rejected = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    expect(rejected).toHaveLength(5);
    for (const r of rejected) expect(String(r.reason)).toMatch(/script exhausted/);
    expect(model.unusedTurns()).toEqual([]);
  });
});
