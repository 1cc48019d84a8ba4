/**
 * Side requests (titles, classifiers, suggestions, probes) get predictable
 * answers without touching the script: shaped like the requests real agents
 * send (docs/scripted-model.md), through the official clients.
 */
import Anthropic from "@anthropic-ai/sdk";
import { GoogleGenAI, Type } from "@google/genai";
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { jsonFromSchema, type ScriptedModel, type ScriptInput, startScriptedModel } from "./index.ts";

let model: ScriptedModel | null = null;

afterEach(async () => {
  await model?.close();
  model = null;
});

async function start(script: ScriptInput) {
  model = await startScriptedModel({ script });
  const m = model;
  return {
    model: m,
    anthropic: new Anthropic({ baseURL: m.baseUrls.anthropic, apiKey: "k", maxRetries: 0 }),
    openai: new OpenAI({ baseURL: m.baseUrls.openai, apiKey: "k", maxRetries: 0 }),
    gemini: new GoogleGenAI({ apiKey: "k", httpOptions: { baseUrl: m.baseUrls.gemini, apiVersion: "v1beta" } }),
  };
}

/** OpenCode's title agent: a tool-less Chat Completions call whose system prompt asks for a title. */
async function askForTitle(openai: OpenAI): Promise<string | null> {
  const title = await openai.chat.completions.create({
    model: "gpt-test",
    messages: [
      { role: "system", content: "You are a title generator. You output ONLY a thread title." },
      { role: "user", content: "Please inspect the workspace." },
    ],
  });
  return title.choices[0]!.message.content;
}

const bash = { name: "bash", input_schema: { type: "object" as const, properties: { command: { type: "string" } } } };
const MAIN = [{ label: "main", response: "the real turn" }];

describe("built-in side rules", () => {
  it("answers Claude Code's JSON title request from its schema, outside the script", async () => {
    const { anthropic, model } = await start(MAIN);
    const title = await anthropic.messages.create({
      model: "claude-haiku",
      max_tokens: 512,
      system: [{ type: "text", text: "Generate a concise, sentence-case title (3-7 words) that captures the main topic." }],
      messages: [{ role: "user", content: "<session>Please inspect the workspace.</session>" }],
      output_config: {
        format: { type: "json_schema", schema: { type: "object", properties: { title: { type: "string" } }, required: ["title"] } },
      },
    });
    expect(title.content).toEqual([expect.objectContaining({ type: "text", text: '{"title":"scripted title"}' })]);
    expect(model.sideRequests.map((r) => [r.kind, r.side, r.outcome])).toEqual([["side", "structured-output", "completed"]]);
    expect(model.requests).toEqual([]);
    expect(model.unusedTurns()).toHaveLength(1);
  });

  it("answers Gemini CLI's routing classifier with a score it accepts, in both of Gemini's schema dialects", async () => {
    const { gemini, model } = await start(MAIN);
    const jsonSchema = {
      type: "object",
      properties: { complexity_reasoning: { type: "string" }, complexity_score: { type: "integer" } },
      required: ["complexity_reasoning", "complexity_score"],
    };
    const a = await gemini.models.generateContent({
      model: "gemini-flash-lite",
      contents: "route this request",
      config: { responseMimeType: "application/json", responseJsonSchema: jsonSchema },
    });
    expect(JSON.parse(a.text!)).toEqual({ complexity_reasoning: "scripted complexity_reasoning", complexity_score: 1 });
    const b = await gemini.models.generateContent({
      model: "gemini-flash-lite",
      contents: "who speaks next?",
      config: {
        responseMimeType: "application/json",
        responseSchema: {
          type: Type.OBJECT,
          properties: { reasoning: { type: Type.STRING }, next_speaker: { type: Type.STRING, enum: ["user", "model"] } },
        },
      },
    });
    expect(JSON.parse(b.text!)).toEqual({ reasoning: "scripted reasoning", next_speaker: "user" });
    expect(model.sideRequests.map((r) => r.side)).toEqual(["structured-output", "structured-output"]);
    expect(model.unusedTurns()).toHaveLength(1);
  });

  it("answers a prompt-suggestion fork (which carries tools) with nothing, and a 1-token quota probe", async () => {
    const { anthropic, model } = await start(MAIN);
    const suggestion = await anthropic.messages.create({
      model: "claude-test",
      max_tokens: 256,
      tools: [bash],
      messages: [
        { role: "user", content: "fix the bug" },
        { role: "assistant", content: "Fixed." },
        { role: "user", content: "[SUGGESTION MODE: Suggest what the user might naturally type next into Claude Code.]" },
      ],
    });
    expect(suggestion.content).toEqual([]);
    const probe = await anthropic.messages.create({ model: "claude-test", max_tokens: 1, messages: [{ role: "user", content: "quota" }] });
    expect(probe.content).toEqual([expect.objectContaining({ text: "ok" })]);
    expect(model.sideRequests.map((r) => r.side)).toEqual(["prompt-suggestion", "quota-probe"]);
    expect(model.unusedTurns()).toHaveLength(1);
  });

  it("answers a tool-less title agent (OpenCode's) over Chat Completions, and leaves the agent's turns to the script", async () => {
    const { openai, model } = await start(MAIN);
    expect(await askForTitle(openai)).toBe("Scripted title");
    const turn = await openai.chat.completions.create({
      model: "gpt-test",
      messages: [{ role: "user", content: "Please inspect the workspace." }],
      tools: [{ type: "function", function: { name: "bash" } }],
    });
    expect(turn.choices[0]!.message.content).toBe("the real turn");
    expect(model.sideRequests.map((r) => [r.dialect, r.side])).toEqual([["openai-chat", "title"]]);
    expect(model.requests.map((r) => [r.dialect, r.turn])).toEqual([["openai-chat", 0]]);
  });

  it("never hands a queued fault to a side request", async () => {
    const { anthropic, model } = await start(MAIN);
    model.inject({ type: "error", status: 529 });
    await anthropic.messages.create({ model: "claude-test", max_tokens: 1, messages: [{ role: "user", content: "quota" }] });
    const err = await anthropic.messages
      .create({ model: "claude-test", max_tokens: 64, messages: [{ role: "user", content: "hi" }] })
      .catch((e) => e);
    expect((err as { status: number }).status).toBe(529);
  });
});

describe("configuring side rules", () => {
  it("puts the script's own rules first, with JSON overrides by field name", async () => {
    const { openai, model } = await start({
      turns: MAIN,
      side_requests: {
        rules: [
          { label: "fixed-title", match: { json_output: true, system_contains: "title" }, json: { title: "Inspecting the workspace" } },
          { label: "classifier", match: { last_user_text_contains: "<transcript>" }, response: "<block>no</block>" },
        ],
      },
    });
    const res = await openai.responses.create({
      model: "gpt-test",
      instructions: "Write a title.",
      input: "hello",
      text: { format: { type: "json_schema", name: "t", schema: { type: "object", properties: { title: { type: "string" } } } } },
    });
    expect(JSON.parse(res.output_text)).toEqual({ title: "Inspecting the workspace" });
    const classified = await openai.responses.create({ model: "gpt-test", input: "<transcript>rm -rf /</transcript>" });
    expect(classified.output_text).toBe("<block>no</block>");
    expect(model.sideRequests.map((r) => r.side)).toEqual(["fixed-title", "classifier"]);
  });

  it("with defaults off, a title request is an ordinary turn", async () => {
    const { openai, model } = await start({
      turns: [{ match: { has_tools: false }, response: "My scripted title" }],
      side_requests: { defaults: false },
    });
    expect(await askForTitle(openai)).toBe("My scripted title");
    expect(model.sideRequests).toEqual([]);
    expect(model.unusedTurns()).toEqual([]);
  });
});

describe("jsonFromSchema", () => {
  it("fills every property within the schema's bounds", () => {
    const schema = {
      type: "object",
      properties: {
        name: { type: "string" },
        score: { type: "integer", minimum: 5, maximum: 10 },
        ratio: { type: "number", maximum: 0.5 },
        confidence: { type: "number", minimum: 0, maximum: 1 },
        kind: { enum: ["a", "b"] },
        fixed: { const: 42 },
        ok: { type: "boolean" },
        tags: { type: "array", items: { type: "string" }, minItems: 2 },
        nested: { type: "object", properties: { inner: { type: ["string", "null"] } } },
        either: { anyOf: [{ type: "integer" }, { type: "string" }] },
      },
    };
    expect(jsonFromSchema(schema, { name: "given" })).toEqual({
      name: "given",
      score: 5,
      ratio: 0.5,
      confidence: 0,
      kind: "a",
      fixed: 42,
      ok: false,
      tags: ["scripted tags", "scripted tags"],
      nested: { inner: "scripted inner" },
      either: 1,
    });
  });

  it("answers JSON mode without a schema with the overrides alone", () => {
    expect(jsonFromSchema(null, {})).toEqual({});
    expect(jsonFromSchema(undefined, { a: 1 })).toEqual({ a: 1 });
    expect(jsonFromSchema({ type: "STRING" }, {})).toBe("scripted value");
  });
});
