/** Stream framing the SDKs hide, per dialect, over raw HTTP: event lines, terminators, CRLF frames, claude's side traffic. */
import { afterEach, describe, expect, it } from "vitest";
import { type ScriptedModel, type ScriptInput, startScriptedModel } from "./index.ts";

const KEY = "sk-wire-test";
let model: ScriptedModel | null = null;

afterEach(async () => {
  await model?.close();
  model = null;
});

async function start(script: ScriptInput): Promise<ScriptedModel> {
  model = await startScriptedModel({ script, apiKey: KEY });
  return model;
}

const TOOL_TURN: ScriptInput = [
  {
    response: {
      content: [
        { type: "text", text: "ok" },
        { type: "tool_use", name: "bash", input: { command: "ls" } },
      ],
      usage: { input_tokens: 3, output_tokens: 2 },
    },
  },
];

async function post(url: string, payload: unknown, headers: Record<string, string>): Promise<Response> {
  return fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(payload) });
}

describe("stream framing", () => {
  it("Responses: an event line naming each frame's type, and sequence numbers from 0", async () => {
    const m = await start(TOOL_TURN);
    const res = await post(`${m.url}/v1/responses`, { model: "gpt-test", input: "hi", stream: true }, { authorization: `Bearer ${KEY}` });
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(res.headers.get("x-request-id")).toMatch(/^req_/);
    const frames = (await res.text()).split("\n\n").filter(Boolean);
    const parsed = frames.map((f) => {
      const [event, data] = f.split("\n");
      return {
        event: event!.replace(/^event: /, ""),
        data: JSON.parse(data!.replace(/^data: /, "")) as { type: string; sequence_number: number },
      };
    });
    for (const [i, f] of parsed.entries()) expect([f.event, f.data.sequence_number]).toEqual([f.data.type, i]);
    expect(parsed.at(-1)!.data).toMatchObject({
      type: "response.completed",
      response: { status: "completed", usage: { total_tokens: 5 } },
    });
    // The wire response leaves out the SDK's own convenience field.
    expect(JSON.stringify(parsed.at(-1)!.data)).not.toContain('output_text":');
  });

  it("Chat Completions: bare data lines ending with [DONE]", async () => {
    const m = await start(TOOL_TURN);
    const res = await post(
      `${m.url}/v1/chat/completions`,
      { model: "gpt-test", messages: [{ role: "user", content: "hi" }], stream: true },
      { authorization: `Bearer ${KEY}` },
    );
    const frames = (await res.text()).split("\n\n").filter(Boolean);
    expect(frames.every((f) => f.startsWith("data: ") && !f.includes("\n"))).toBe(true);
    expect(frames.at(-1)).toBe("data: [DONE]");
    expect(JSON.parse(frames.at(-2)!.slice(6))).toMatchObject({
      object: "chat.completion.chunk",
      choices: [{ finish_reason: "tool_calls" }],
    });
  });

  it("Gemini: data frames separated by CRLF pairs", async () => {
    const m = await start(TOOL_TURN);
    const res = await post(
      `${m.url}/v1beta/models/gemini-test:streamGenerateContent?alt=sse`,
      { contents: [{ role: "user", parts: [{ text: "hi" }] }] },
      { "x-goog-api-key": KEY },
    );
    const text = await res.text();
    const frames = text.split("\r\n\r\n").filter(Boolean);
    expect(frames).toHaveLength(2);
    expect(frames.map((f) => Object.keys(JSON.parse(f.replace(/^data: /, ""))))).toEqual([
      ["candidates", "modelVersion", "responseId"],
      ["candidates", "usageMetadata", "modelVersion", "responseId"],
    ]);
  });

  it("Anthropic: a wrong dialect's credential does not pass (x-goog-api-key on /v1/messages)", async () => {
    const m = await start([{ response: "x" }]);
    const res = await post(
      `${m.url}/v1/messages`,
      { model: "claude-test", max_tokens: 8, messages: [{ role: "user", content: "hi" }] },
      { "x-goog-api-key": KEY },
    );
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ type: "error", error: { type: "authentication_error" } });
  });
});

describe("Claude Code's side traffic", () => {
  it("answers HEAD /api/hello, /v1/messages?beta=true and count_tokens", async () => {
    const m = await start([{ response: "hello" }]);
    expect((await fetch(`${m.url}/api/hello`, { method: "HEAD" })).status).toBe(200);
    const res = await post(
      `${m.url}/v1/messages?beta=true`,
      { model: "claude-test", max_tokens: 8, messages: [{ role: "user", content: "hi" }] },
      { "x-api-key": KEY },
    );
    expect(await res.json()).toMatchObject({ content: [{ text: "hello" }] });
    const counted = await post(
      `${m.url}/v1/messages/count_tokens`,
      { model: "claude-test", messages: [{ role: "user", content: "count me" }] },
      { "x-api-key": KEY },
    );
    expect(await counted.json()).toEqual({ input_tokens: expect.any(Number) });
    expect(m.sideRequests.map((r) => [r.kind, r.dialect])).toEqual([["count_tokens", "anthropic"]]);
  });
});
