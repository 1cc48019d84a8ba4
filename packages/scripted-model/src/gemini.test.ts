/** The scripted model as the official `@google/genai` client sees the Gemini API: generate, stream, count, function calls, errors. */
import { ApiError, type Content, type FunctionDeclaration, GoogleGenAI } from "@google/genai";
import { afterEach, describe, expect, it } from "vitest";
import { type ScriptedModel, type ScriptedModelOptions, startScriptedModel } from "./index.ts";

const KEY = "gemini-test-key";
let model: ScriptedModel | null = null;

afterEach(async () => {
  await model?.close();
  model = null;
});

async function start(opts: ScriptedModelOptions): Promise<{ model: ScriptedModel; ai: GoogleGenAI }> {
  model = await startScriptedModel({ apiKey: KEY, ...opts });
  // Gemini CLI calls v1beta (the SDK's own default is v1, which is served too).
  return { model, ai: new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: model.baseUrls.gemini, apiVersion: "v1beta" } }) };
}

const shell: FunctionDeclaration = {
  name: "run_shell_command",
  parametersJsonSchema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] },
};

describe("models.generateContent", () => {
  it("returns the scripted text with usageMetadata counting cached and thought tokens", async () => {
    const { ai, model } = await start({
      script: [
        {
          response: {
            content: [
              { type: "thinking", thinking: "consider" },
              { type: "text", text: "Hello there." },
            ],
            usage: { input_tokens: 12, output_tokens: 9, reasoning_tokens: 3, cache_read_input_tokens: 40 },
          },
        },
      ],
    });
    const res = await ai.models.generateContent({ model: "gemini-test", contents: "hi", config: { systemInstruction: "be brief" } });
    expect(res.text).toBe("Hello there.");
    expect(res.candidates![0]!.content!.parts).toEqual([{ text: "consider", thought: true }, { text: "Hello there." }]);
    expect(res.candidates![0]!.finishReason).toBe("STOP");
    expect(res.usageMetadata).toMatchObject({
      promptTokenCount: 52,
      cachedContentTokenCount: 40,
      candidatesTokenCount: 6,
      thoughtsTokenCount: 3,
      totalTokenCount: 61,
    });
    expect(res.modelVersion).toBe("gemini-test");
    expect(model.requests[0]).toMatchObject({
      dialect: "gemini",
      auth: "x-goog-api-key",
      path: "/v1beta/models/gemini-test:generateContent",
      stream: false,
    });
    expect(model.requests[0]!.view).toMatchObject({ model: "gemini-test", system: "be brief" });
  });

  it("reports a max_tokens stop as MAX_TOKENS", async () => {
    const { ai } = await start({ script: [{ response: { content: [{ type: "text", text: "cut" }], stop_reason: "max_tokens" } }] });
    const res = await ai.models.generateContent({ model: "gemini-test", contents: "long" });
    expect(res.candidates![0]!.finishReason).toBe("MAX_TOKENS");
  });
});

describe("models.generateContentStream", () => {
  it("streams text pieces and a whole functionCall, with finishReason and usage on the last chunk", async () => {
    const { ai, model } = await start({
      script: [
        {
          response: {
            content: [
              { type: "text", text: "Running the command." },
              { type: "tool_use", name: "run_shell_command", input: { command: "ls -la" } },
            ],
            usage: { input_tokens: 20, output_tokens: 7 },
            chunk_chars: 5,
          },
        },
      ],
    });
    const stream = await ai.models.generateContentStream({
      model: "gemini-test",
      contents: "go",
      config: { tools: [{ functionDeclarations: [shell] }] },
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks.length).toBeGreaterThan(3);
    const parts = chunks.flatMap((c) => c.candidates![0]!.content!.parts!);
    expect(parts.flatMap((p) => (p.text ? [p.text] : [])).join("")).toBe("Running the command.");
    const last = chunks.at(-1)!;
    expect(last.functionCalls).toEqual([{ name: "run_shell_command", args: { command: "ls -la" } }]);
    expect(last.candidates![0]!.finishReason).toBe("STOP");
    expect(last.usageMetadata).toMatchObject({ promptTokenCount: 20, candidatesTokenCount: 7, totalTokenCount: 27 });
    expect(chunks.slice(0, -1).every((c) => c.usageMetadata === undefined && c.candidates![0]!.finishReason === undefined)).toBe(true);
    expect(model.requests[0]).toMatchObject({ path: "/v1beta/models/gemini-test:streamGenerateContent", stream: true });
  });
});

describe("a function call round trip", () => {
  it("matches functionResponse parts by the function they answer", async () => {
    const { ai, model } = await start({
      script: [
        {
          match: { tools_include: ["run_shell_command"], last_user_text_contains: "what" },
          response: { content: [{ type: "tool_use", name: "run_shell_command", input: { command: "ls" } }] },
        },
        { match: { tool_result_for: "run_shell_command", tool_result_contains: "notes.md" }, response: "There is a notes file." },
      ],
    });
    const config = { tools: [{ functionDeclarations: [shell] }] };
    const contents: Content[] = [{ role: "user", parts: [{ text: "what is here?" }] }];
    const first = await ai.models.generateContent({ model: "gemini-test", contents, config });
    const call = first.functionCalls![0]!;
    contents.push(first.candidates![0]!.content!, {
      role: "user",
      parts: [{ functionResponse: { id: "gc-1", name: call.name!, response: { output: "notes.md\n" } } }],
    });
    const second = await ai.models.generateContent({ model: "gemini-test", contents, config });
    expect(second.text).toBe("There is a notes file.");
    expect(model.unusedTurns()).toEqual([]);
    expect(model.requests[1]!.view!.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "what is here?" }] },
      { role: "assistant", content: [{ type: "tool_use", id: null, name: "run_shell_command", input: { command: "ls" } }] },
      {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "gc-1", tool_name: "run_shell_command", text: "notes.md\n", is_error: false }],
      },
    ]);
  });

  it("reads a functionResponse carrying an error as a failed tool result", async () => {
    const { ai } = await start({
      script: [{ match: { tool_result_is_error: true, tool_result_contains: "denied" }, response: "It failed." }],
    });
    const contents: Content[] = [
      { role: "user", parts: [{ text: "go" }] },
      { role: "model", parts: [{ functionCall: { name: "run_shell_command", args: { command: "rm" } } }] },
      { role: "user", parts: [{ functionResponse: { name: "run_shell_command", response: { error: "permission denied" } } }] },
    ];
    expect((await ai.models.generateContent({ model: "gemini-test", contents })).text).toBe("It failed.");
  });
});

describe("models.countTokens", () => {
  it("counts without using a turn", async () => {
    const { ai, model } = await start({ script: [{ response: "x" }] });
    const counted = await ai.models.countTokens({ model: "gemini-test", contents: "count these words" });
    expect(counted.totalTokens).toBeGreaterThan(0);
    expect(model.sideRequests.map((r) => [r.kind, r.path])).toEqual([["count_tokens", "/v1beta/models/gemini-test:countTokens"]]);
    expect(model.unusedTurns()).toHaveLength(1);
  });
});

describe("errors and auth", () => {
  it.each([
    { status: 429, sent: 429, rpc: "RESOURCE_EXHAUSTED" },
    { status: 500, sent: 500, rpc: "INTERNAL" },
    { status: 529, sent: 503, rpc: "UNAVAILABLE" },
  ])("an injected $status reaches the client as an ApiError with status $sent", async ({ status, sent, rpc }) => {
    const { ai, model } = await start({ script: [{ response: "after the fault" }] });
    model.inject({ type: "error", status, message: "scripted trouble", retry_after_ms: 1500 });
    const err = await ai.models.generateContent({ model: "gemini-test", contents: "x" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(sent);
    const body = JSON.parse((err as ApiError).message) as { error: { code: number; status: string; message: string; details: unknown[] } };
    expect(body.error).toMatchObject({ code: sent, status: rpc, message: "scripted trouble" });
    expect(body.error.details).toContainEqual({ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: "1.5s" });
    expect((await ai.models.generateContent({ model: "gemini-test", contents: "x" })).text).toBe("after the fault");
  });

  it("breaks a stream with an error chunk the SDK raises", async () => {
    const { ai, model } = await start({ script: [{ response: { content: [{ type: "text", text: "never finished" }], chunk_chars: 2 } }] });
    model.inject({ type: "stream_error", after_events: 2, message: "The model is overloaded." });
    const stream = await ai.models.generateContentStream({ model: "gemini-test", contents: "x" });
    const err = await (async () => {
      for await (const _ of stream) {
        // drain until the error chunk
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(503);
  });

  it("takes the key as ?key=, refuses a wrong one with 400 API_KEY_INVALID and a missing one with 403", async () => {
    const { model } = await start({ script: [{ response: "by query" }] });
    const url = `${model.url}/v1beta/models/gemini-test:generateContent`;
    const body = JSON.stringify({ contents: [{ role: "user", parts: [{ text: "hi" }] }] });
    const post = (suffix: string) => fetch(`${url}${suffix}`, { method: "POST", headers: { "content-type": "application/json" }, body });
    const wrong = await post("?key=nope");
    expect(wrong.status).toBe(400);
    expect(await wrong.json()).toMatchObject({
      error: { code: 400, status: "INVALID_ARGUMENT", details: [{ reason: "API_KEY_INVALID" }] },
    });
    const missing = await post("");
    expect(missing.status).toBe(403);
    expect(await missing.json()).toMatchObject({ error: { code: 403, status: "PERMISSION_DENIED" } });
    const ok = await post(`?key=${KEY}`);
    expect(await ok.json()).toMatchObject({ candidates: [{ content: { role: "model", parts: [{ text: "by query" }] } }] });
    expect(model.requests.map((r) => [r.auth, r.status])).toEqual([
      ["query-key", 400],
      [null, 403],
      ["query-key", 200],
    ]);
    expect(JSON.stringify(model.requests)).not.toContain(KEY);
  });

  it("answers streamGenerateContent without alt=sse as one JSON array of chunks, on v1 too", async () => {
    const { model } = await start({ script: [{ response: { content: [{ type: "text", text: "abcdef" }], chunk_chars: 3 } }] });
    const res = await fetch(`${model.url}/v1/models/gemini-test:streamGenerateContent`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-goog-api-key": KEY },
      body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "hi" }] }] }),
    });
    const chunks = (await res.json()) as { candidates: { content: { parts: { text: string }[] } }[] }[];
    expect(chunks.map((c) => c.candidates[0]!.content.parts[0]!.text)).toEqual(["abc", "def"]);
  });
});
