/**
 * OpenAI Chat Completions (`POST /v1/chat/completions`), which OpenCode, Qwen
 * Code, pi and Copilot can speak: messages read into the neutral view, and a
 * scripted response rendered as a `chat.completion` or as `data:` chunks with
 * `choices[].delta` (tool calls streamed as indexed deltas), a final usage
 * chunk when `stream_options.include_usage` asks for it, and `data: [DONE]`.
 * Thinking travels as `reasoning_content`, the field OpenAI-compatible
 * servers use for it (the official API has none).
 */
import type { ChatCompletion, ChatCompletionChunk, ChatCompletionMessage } from "openai/resources/chat/completions";
import type { CompletionUsage } from "openai/resources/completions";
import { z } from "zod";
import { type BuildContext, type DialectSpec, validate } from "../dialect.ts";
import { randomId } from "../errors.ts";
import { chunk, DEFAULT_CHUNK_CHARS, dataFrame } from "../frames.ts";
import type { ResponseSpec } from "../script.ts";
import { resolveUsage, stopKind, totalInput } from "../usage.ts";
import { parseMaybeJson, pushToolResult, type RequestView, resolveToolNames, type ViewBlock, type ViewMessage } from "../view.ts";
import { openaiAuthFailure, openaiCredentials, openaiError, openaiErrorResponse, openaiHeaders, unixSeconds } from "./openai.ts";

const partSchema = z.looseObject({ type: z.string().max(128) });
const contentSchema = z.union([z.string(), z.array(partSchema).max(100_000), z.null()]);

const toolCallSchema = z.looseObject({
  id: z.string().max(256).optional(),
  type: z.string().max(64).optional(),
  function: z.looseObject({ name: z.string().max(256), arguments: z.string().optional() }).optional(),
  custom: z.looseObject({ name: z.string().max(256), input: z.string().optional() }).optional(),
});

const requestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  messages: z
    .array(
      z.looseObject({
        role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
        content: contentSchema.optional(),
        tool_calls: z.array(toolCallSchema).max(10_000).nullable().optional(),
        tool_call_id: z.string().max(256).optional(),
        name: z.string().max(256).optional(),
        reasoning_content: z.string().nullable().optional(),
      }),
    )
    .min(1)
    .max(100_000),
  tools: z
    .array(
      z.looseObject({
        type: z.string().max(64),
        function: z.looseObject({ name: z.string().max(256) }).optional(),
        custom: z.looseObject({ name: z.string().max(256) }).optional(),
      }),
    )
    .max(10_000)
    .nullable()
    .optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullable().optional(),
  max_tokens: z.number().int().min(1).max(100_000_000).nullable().optional(),
  max_completion_tokens: z.number().int().min(1).max(100_000_000).nullable().optional(),
  response_format: z
    .looseObject({ type: z.string().max(64), json_schema: z.looseObject({ schema: z.unknown().optional() }).optional() })
    .nullable()
    .optional(),
  user: z.string().max(1024).optional(),
  safety_identifier: z.string().max(1024).optional(),
  metadata: z.record(z.string(), z.string()).nullable().optional(),
});

type ChatRequest = z.output<typeof requestSchema>;
type ChatMessage = ChatRequest["messages"][number];
type Part = z.output<typeof partSchema>;

function textOf(content: ChatMessage["content"]): string {
  if (typeof content === "string") return content;
  return (content ?? [])
    .filter((p: Part) => typeof p.text === "string")
    .map((p: Part) => p.text as string)
    .join("\n");
}

function addMessage(messages: ViewMessage[], system: string[], m: ChatMessage): void {
  switch (m.role) {
    case "system":
    case "developer":
      system.push(textOf(m.content));
      return;
    case "user": {
      const parts = typeof m.content === "string" ? [{ type: "text", text: m.content }] : (m.content ?? []);
      messages.push({
        role: "user",
        content: parts.map((p: Part) => (typeof p.text === "string" ? { type: "text", text: p.text } : { type: "other", kind: p.type })),
      });
      return;
    }
    case "assistant": {
      // Each assistant message is one turn: its thinking, its text and the calls it made.
      const content: ViewBlock[] = [];
      if (m.reasoning_content) content.push({ type: "thinking", text: m.reasoning_content });
      const text = textOf(m.content);
      if (text) content.push({ type: "text", text });
      for (const call of m.tool_calls ?? []) {
        const name = call.function?.name ?? call.custom?.name ?? "";
        const input = call.function ? parseMaybeJson(call.function.arguments ?? "") : { input: call.custom?.input };
        content.push({ type: "tool_use", id: call.id ?? null, name, input });
      }
      messages.push({ role: "assistant", content });
      return;
    }
    default:
      // `tool` answers a call by id; the legacy `function` role names the function instead.
      pushToolResult(messages, {
        type: "tool_result",
        tool_use_id: m.tool_call_id ?? null,
        tool_name: m.role === "function" ? (m.name ?? null) : null,
        text: textOf(m.content),
        is_error: false,
      });
  }
}

function toView(req: ChatRequest): RequestView {
  const system: string[] = [];
  const messages: ViewMessage[] = [];
  for (const m of req.messages) addMessage(messages, system, m);
  const format = req.response_format?.type;
  return {
    dialect: "openai-chat",
    model: req.model,
    stream: req.stream === true,
    system: system.filter(Boolean).join("\n"),
    messages: resolveToolNames(messages),
    tools: (req.tools ?? []).map((t) => t.function?.name ?? t.custom?.name ?? t.type),
    user_id: req.metadata?.user_id ?? req.user ?? req.safety_identifier ?? null,
    max_output_tokens: req.max_completion_tokens ?? req.max_tokens ?? null,
    json_output: format === "json_schema" || format === "json_object",
    json_schema: format === "json_schema" ? (req.response_format?.json_schema?.schema ?? null) : null,
  };
}

function usageOf(spec: ResponseSpec, view: RequestView): CompletionUsage {
  const u = resolveUsage(spec, view);
  const prompt = totalInput(u);
  return {
    prompt_tokens: prompt,
    completion_tokens: u.output,
    total_tokens: prompt + u.output,
    prompt_tokens_details: { cached_tokens: u.cacheRead, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: u.reasoning,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

const FINISH = { stop: "stop", tool_calls: "tool_calls", length: "length", refusal: "content_filter" } as const;

type Message = ChatCompletionMessage & { reasoning_content?: string };

function messageOf(spec: ResponseSpec): Message {
  const text = spec.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("");
  const thinking = spec.content.flatMap((b) => (b.type === "thinking" ? [b.thinking] : [])).join("");
  const calls = spec.content.flatMap((b) =>
    b.type === "tool_use"
      ? [{ id: b.id ?? randomId("call"), type: "function" as const, function: { name: b.name, arguments: JSON.stringify(b.input) } }]
      : [],
  );
  return {
    role: "assistant",
    content: text || calls.length === 0 ? text : null,
    refusal: null,
    annotations: [],
    ...(calls.length ? { tool_calls: calls } : {}),
    ...(thinking ? { reasoning_content: thinking } : {}),
  };
}

interface Built {
  completion: ChatCompletion;
  message: Message;
}

function build(spec: ResponseSpec, view: RequestView, ctx: BuildContext): Built {
  const message = messageOf(spec);
  const completion: ChatCompletion = {
    id: `chatcmpl-${randomId("c").slice(2)}`,
    object: "chat.completion",
    created: unixSeconds(ctx.now),
    model: spec.model ?? view.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: FINISH[stopKind(spec)] }],
    usage: usageOf(spec, view),
    service_tier: "default",
    system_fingerprint: "fp_scripted",
  };
  return { completion, message };
}

type Delta = ChatCompletionChunk.Choice.Delta & { reasoning_content?: string };

function chunks(spec: ResponseSpec, view: RequestView, ctx: BuildContext, includeUsage: boolean): ChatCompletionChunk[] {
  const { completion, message } = build(spec, view, ctx);
  const size = spec.chunk_chars ?? DEFAULT_CHUNK_CHARS;
  const head = { id: completion.id, object: "chat.completion.chunk" as const, created: completion.created, model: completion.model };
  const tail = {
    service_tier: completion.service_tier,
    system_fingerprint: completion.system_fingerprint,
    ...(includeUsage ? { usage: null } : {}),
  };
  const of = (delta: Delta, finish: ChatCompletionChunk.Choice["finish_reason"] = null): ChatCompletionChunk => ({
    ...head,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...tail,
  });
  const out = [of({ role: "assistant", content: "", refusal: null })];
  for (const piece of chunk(message.reasoning_content ?? "", size)) out.push(of({ reasoning_content: piece }));
  for (const piece of chunk(message.content ?? "", size)) out.push(of({ content: piece }));
  (message.tool_calls ?? []).forEach((call, index) => {
    if (call.type !== "function") return;
    out.push(of({ tool_calls: [{ index, id: call.id, type: "function", function: { name: call.function.name, arguments: "" } }] }));
    for (const piece of chunk(call.function.arguments, size)) out.push(of({ tool_calls: [{ index, function: { arguments: piece } }] }));
  });
  out.push(of({}, completion.choices[0]!.finish_reason));
  if (includeUsage) out.push({ ...head, choices: [], ...tail, usage: completion.usage ?? null });
  return out;
}

export const openaiChat: DialectSpec = {
  name: "openai-chat",
  credentials: openaiCredentials,
  authFailure: openaiAuthFailure,
  errorResponse: openaiErrorResponse,
  // Chat streams carry an error as a bare data chunk, which the SDK raises as an APIError.
  streamErrorFrame: (type, message) => dataFrame({ error: openaiError(type, message) }),
  headers: openaiHeaders,
  parse(body) {
    const parsed = validate(requestSchema, body);
    if (!parsed.ok) return parsed;
    const req = parsed.value;
    const view = toView(req);
    const includeUsage = req.stream_options?.include_usage === true;
    return {
      ok: true,
      value: {
        view,
        json: (spec, ctx) => build(spec, view, ctx).completion,
        frames: (spec, ctx) => [...chunks(spec, view, ctx, includeUsage).map((c) => dataFrame(c)), dataFrame("[DONE]")],
      },
    };
  },
};
