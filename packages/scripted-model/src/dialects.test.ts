/**
 * One script, four dialects: the same two-turn tool conversation runs through
 * the Anthropic, OpenAI Responses, OpenAI Chat Completions and Gemini official
 * clients at once, each in its own session of the script, and every dialect's
 * last request reads as the same conversation in the neutral view.
 */
import Anthropic from "@anthropic-ai/sdk";
import type { MessageParam } from "@anthropic-ai/sdk/resources/messages";
import { type Content, GoogleGenAI } from "@google/genai";
import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import type { ResponseInputItem } from "openai/resources/responses/responses";
import { afterEach, describe, expect, it } from "vitest";
import { type Dialect, type ScriptedModel, type ScriptInput, startScriptedModel, type ViewMessage } from "./index.ts";

const KEY = "sk-all-dialects";
let model: ScriptedModel | null = null;

afterEach(async () => {
  await model?.close();
  model = null;
});

const SCRIPT: ScriptInput = {
  session_key: { pattern: "\\[session ([\\w-]+)\\]" },
  turns: [
    {
      label: "call",
      match: { last_user_text_contains: "inspect", tools_include: ["bash"] },
      response: {
        content: [
          { type: "text", text: "Let me look." },
          { type: "tool_use", name: "bash", input: { command: "ls" } },
        ],
        usage: { input_tokens: 30, output_tokens: 12, cache_read_input_tokens: 10 },
      },
    },
    { label: "answer", match: { tool_result_for: "bash", tool_result_contains: "notes.md" }, response: "The workspace has notes.md." },
    // The second user turn must carry the first: prompt, call, result, answer, and the new prompt.
    { label: "thanks", match: { last_user_text_contains: "thanks", message_count: 5 }, response: "You're welcome." },
  ],
};

const SCHEMA = { type: "object", properties: { command: { type: "string" } }, required: ["command"] };
const system = (d: Dialect) => `You are a helpful agent. [session ${d}]`;

/** What a driver reports: the assistant's text per request and the usage of the first answer as the client saw it. */
interface Run {
  texts: string[];
  firstUsage: unknown;
}

async function anthropicRun(m: ScriptedModel): Promise<Run> {
  const client = new Anthropic({ baseURL: m.baseUrls.anthropic, apiKey: KEY, maxRetries: 0 });
  const tools = [{ name: "bash", input_schema: SCHEMA as Anthropic.Tool.InputSchema }];
  const base = { model: "claude-test", max_tokens: 256, system: system("anthropic"), tools };
  const messages: MessageParam[] = [{ role: "user", content: "Please inspect the workspace." }];
  const first = await client.messages.stream({ ...base, messages }).finalMessage();
  const use = first.content.find((b) => b.type === "tool_use")!;
  messages.push({ role: "assistant", content: first.content });
  messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "notes.md\n" }] });
  const second = await client.messages.create({ ...base, messages });
  messages.push({ role: "assistant", content: second.content }, { role: "user", content: "thanks" });
  const third = await client.messages.stream({ ...base, messages }).finalMessage();
  const text = (c: Anthropic.ContentBlock[]) => c.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("");
  return { texts: [text(first.content), text(second.content), text(third.content)], firstUsage: first.usage.cache_read_input_tokens };
}

async function responsesRun(m: ScriptedModel): Promise<Run> {
  const client = new OpenAI({ baseURL: m.baseUrls.openai, apiKey: KEY, maxRetries: 0 });
  const base = {
    model: "gpt-test",
    instructions: system("openai-responses"),
    tools: [{ type: "function" as const, name: "bash", parameters: SCHEMA, strict: false }],
  };
  const input: ResponseInputItem[] = [{ role: "user", content: "Please inspect the workspace." }];
  const first = await client.responses.stream({ ...base, input }).finalResponse();
  for (const item of first.output) {
    if (item.type === "message")
      input.push({ role: "assistant", content: item.content.map((c) => (c.type === "output_text" ? c.text : "")).join("") });
    if (item.type === "function_call") {
      input.push({ type: "function_call", call_id: item.call_id, name: item.name, arguments: item.arguments });
      input.push({ type: "function_call_output", call_id: item.call_id, output: "notes.md\n" });
    }
  }
  const second = await client.responses.create({ ...base, input });
  input.push({ role: "assistant", content: second.output_text }, { role: "user", content: "thanks" });
  const third = await client.responses.stream({ ...base, input }).finalResponse();
  return { texts: [first.output_text, second.output_text, third.output_text], firstUsage: first.usage?.input_tokens_details.cached_tokens };
}

async function chatRun(m: ScriptedModel): Promise<Run> {
  const client = new OpenAI({ baseURL: m.baseUrls.openai, apiKey: KEY, maxRetries: 0 });
  const base = { model: "gpt-test", tools: [{ type: "function" as const, function: { name: "bash", parameters: SCHEMA } }] };
  const messages: ChatCompletionMessageParam[] = [
    { role: "system", content: system("openai-chat") },
    { role: "user", content: "Please inspect the workspace." },
  ];
  const first = await client.chat.completions.stream({ ...base, messages, stream_options: { include_usage: true } }).finalChatCompletion();
  const msg = first.choices[0]!.message;
  messages.push({ role: "assistant", content: msg.content, tool_calls: msg.tool_calls! });
  messages.push({ role: "tool", tool_call_id: msg.tool_calls![0]!.id, content: "notes.md\n" });
  const second = await client.chat.completions.create({ ...base, messages });
  messages.push({ role: "assistant", content: second.choices[0]!.message.content }, { role: "user", content: "thanks" });
  const third = await client.chat.completions.stream({ ...base, messages }).finalChatCompletion();
  return {
    texts: [msg.content ?? "", second.choices[0]!.message.content ?? "", third.choices[0]!.message.content ?? ""],
    firstUsage: first.usage?.prompt_tokens_details?.cached_tokens,
  };
}

async function geminiRun(m: ScriptedModel): Promise<Run> {
  const ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: m.baseUrls.gemini, apiVersion: "v1beta" } });
  const config = {
    systemInstruction: system("gemini"),
    tools: [{ functionDeclarations: [{ name: "bash", parametersJsonSchema: SCHEMA }] }],
  };
  const contents: Content[] = [{ role: "user", parts: [{ text: "Please inspect the workspace." }] }];
  const parts: Content["parts"] = [];
  let firstUsage: unknown;
  for await (const c of await ai.models.generateContentStream({ model: "gemini-test", contents, config })) {
    parts.push(...(c.candidates?.[0]?.content?.parts ?? []));
    firstUsage = c.usageMetadata?.cachedContentTokenCount ?? firstUsage;
  }
  const call = parts.find((p) => p.functionCall)!.functionCall!;
  contents.push(
    { role: "model", parts },
    { role: "user", parts: [{ functionResponse: { name: call.name!, response: { output: "notes.md\n" } } }] },
  );
  const second = await ai.models.generateContent({ model: "gemini-test", contents, config });
  contents.push(second.candidates![0]!.content!, { role: "user", parts: [{ text: "thanks" }] });
  const third = await ai.models.generateContent({ model: "gemini-test", contents, config });
  const firstText = parts.flatMap((p) => (p.text ? [p.text] : [])).join("");
  return { texts: [firstText, second.text ?? "", third.text ?? ""], firstUsage };
}

/** The conversation without the dialect's own call ids, which differ by design. */
function withoutIds(messages: ViewMessage[]): unknown {
  return messages.map((m) => ({
    role: m.role,
    content: m.content.map((b) => (b.type === "tool_use" ? { ...b, id: "-" } : b.type === "tool_result" ? { ...b, tool_use_id: "-" } : b)),
  }));
}

describe("one script through every dialect", () => {
  it("runs the same two-turn tool conversation for Anthropic, Responses, Chat Completions and Gemini clients", async () => {
    model = await startScriptedModel({ apiKey: KEY, script: SCRIPT });
    const m = model;
    const runs = await Promise.all([anthropicRun(m), responsesRun(m), chatRun(m), geminiRun(m)]);
    for (const run of runs) {
      expect(run.texts).toEqual(["Let me look.", "The workspace has notes.md.", "You're welcome."]);
      expect(run.firstUsage).toBe(10);
    }
    expect(m.unusedTurns()).toEqual([]);
    expect(m.sideRequests).toEqual([]);
    const dialects: Dialect[] = ["anthropic", "openai-responses", "openai-chat", "gemini"];
    for (const d of dialects) {
      const mine = m.requests.filter((r) => r.session_key === d);
      expect(mine.map((r) => [r.dialect, r.turn, r.outcome])).toEqual([
        [d, 0, "completed"],
        [d, 1, "completed"],
        [d, 2, "completed"],
      ]);
    }
    // The last request of each dialect carries the same five messages.
    const last = dialects.map((d) => m.requests.filter((r) => r.session_key === d).at(-1)!.view!);
    const expected = withoutIds(last[0]!.messages);
    expect(expected).toEqual([
      { role: "user", content: [{ type: "text", text: "Please inspect the workspace." }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: "Let me look." },
          { type: "tool_use", id: "-", name: "bash", input: { command: "ls" } },
        ],
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "-", tool_name: "bash", text: "notes.md\n", is_error: false }] },
      { role: "assistant", content: [{ type: "text", text: "The workspace has notes.md." }] },
      { role: "user", content: [{ type: "text", text: "thanks" }] },
    ]);
    for (const view of last) {
      expect(withoutIds(view.messages)).toEqual(expected);
      expect(view.tools).toEqual(["bash"]);
    }
  });
});
