/**
 * The OpenAI Responses API (`POST /v1/responses`), which Codex speaks: input
 * items read into the neutral view, and a scripted response rendered as the
 * `Response` object or its typed SSE events (`response.created`, …,
 * `response.completed`). Thinking becomes a reasoning item with a summary,
 * tool_use a `function_call` item (a `custom_tool_call` when the request
 * declares the tool as a custom, free-form one, like Codex's apply_patch).
 */
import type {
  Response as OpenAIResponse,
  ResponseOutputItem,
  ResponseStreamEvent,
  ResponseUsage,
} from "openai/resources/responses/responses";
import { z } from "zod";
import { type BuildContext, type DialectSpec, type ParseResult, validate } from "../dialect.ts";
import { randomId } from "../errors.ts";
import { chunk, DEFAULT_CHUNK_CHARS, sseFrame } from "../frames.ts";
import type { BlockSpec, ResponseSpec } from "../script.ts";
import { resolveUsage, stopKind, totalInput } from "../usage.ts";
import {
  parseMaybeJson,
  pushBlock,
  pushToolResult,
  type RequestView,
  resolveToolNames,
  type ViewBlock,
  type ViewMessage,
} from "../view.ts";
import { openaiAuthFailure, openaiCredentials, openaiError, openaiErrorResponse, openaiHeaders, unixSeconds } from "./openai.ts";

const itemSchema = z.looseObject({ type: z.string().max(128).optional(), role: z.string().max(64).optional() });

const countSchema = z.looseObject({
  model: z.string().min(1).max(256).optional(),
  input: z.union([z.string(), z.array(itemSchema).max(100_000)]),
  instructions: z.string().nullable().optional(),
  tools: z
    .array(z.looseObject({ type: z.string().max(128), name: z.string().max(256).optional() }))
    .max(10_000)
    .optional(),
  text: z
    .looseObject({ format: z.looseObject({ type: z.string().max(128), schema: z.unknown().optional() }).optional() })
    .nullable()
    .optional(),
  previous_response_id: z.string().nullable().optional(),
});

const requestSchema = countSchema.extend({
  model: z.string().min(1).max(256),
  stream: z.boolean().nullable().optional(),
  max_output_tokens: z.number().int().min(1).max(100_000_000).nullable().optional(),
  metadata: z.record(z.string(), z.string()).nullable().optional(),
  user: z.string().max(1024).optional(),
  safety_identifier: z.string().max(1024).optional(),
  include: z.array(z.string()).nullable().optional(),
});

type CountRequest = z.output<typeof countSchema>;
type ResponsesRequest = z.output<typeof requestSchema>;
type Item = Record<string, unknown>;

function partsText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return (content as Item[])
    .filter((p) => typeof p.text === "string" && (p.type === "input_text" || p.type === "output_text" || p.type === "text"))
    .map((p) => p.text as string)
    .join("\n");
}

function messageBlocks(content: unknown): ViewBlock[] {
  if (typeof content === "string") return [{ type: "text", text: content }];
  if (!Array.isArray(content)) return [];
  return (content as Item[]).map((p) =>
    typeof p.text === "string" && p.type !== "refusal" ? { type: "text", text: p.text } : { type: "other", kind: String(p.type) },
  );
}

/** One input item into the view: messages by role, calls to the assistant, outputs as tool results. */
function addItem(messages: ViewMessage[], system: string[], item: Item): void {
  const type = item.type ?? "message";
  const callId = typeof item.call_id === "string" ? item.call_id : null;
  if (type === "message") {
    if (item.role === "system" || item.role === "developer") system.push(partsText(item.content));
    // Assistant items of one turn (reasoning, text, calls) form one message; each user message item is a turn of its own.
    else if (item.role === "assistant") for (const b of messageBlocks(item.content)) pushBlock(messages, "assistant", b);
    else messages.push({ role: "user", content: messageBlocks(item.content) });
  } else if (type === "function_call") {
    pushBlock(messages, "assistant", {
      type: "tool_use",
      id: callId,
      name: String(item.name),
      input: parseMaybeJson(String(item.arguments ?? "")),
    });
  } else if (type === "custom_tool_call") {
    pushBlock(messages, "assistant", { type: "tool_use", id: callId, name: String(item.name), input: { input: item.input } });
  } else if (type === "function_call_output" || type === "custom_tool_call_output") {
    pushToolResult(messages, { type: "tool_result", tool_use_id: callId, tool_name: null, text: partsText(item.output), is_error: false });
  } else if (type === "reasoning") {
    const summary = Array.isArray(item.summary) ? partsText((item.summary as Item[]).map((s) => ({ ...s, type: "text" }))) : "";
    pushBlock(messages, "assistant", { type: "thinking", text: summary });
  } else {
    pushBlock(messages, "assistant", { type: "other", kind: String(type) });
  }
}

function toView(req: CountRequest, extra: Pick<RequestView, "model" | "stream" | "user_id" | "max_output_tokens">): RequestView {
  const system = [req.instructions ?? ""];
  const messages: ViewMessage[] = [];
  if (typeof req.input === "string") messages.push({ role: "user", content: [{ type: "text", text: req.input }] });
  else for (const item of req.input) addItem(messages, system, item);
  const format = req.text?.format;
  const jsonOutput = format?.type === "json_schema" || format?.type === "json_object";
  return {
    dialect: "openai-responses",
    system: system.filter(Boolean).join("\n"),
    messages: resolveToolNames(messages),
    tools: (req.tools ?? []).map((t) => t.name ?? t.type),
    json_output: jsonOutput,
    json_schema: format?.type === "json_schema" ? (format.schema ?? null) : null,
    ...extra,
  };
}

function usageOf(spec: ResponseSpec, view: RequestView): ResponseUsage {
  const u = resolveUsage(spec, view);
  const input = totalInput(u);
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: u.cacheRead, cache_write_tokens: u.cacheCreation },
    output_tokens: u.output,
    output_tokens_details: { reasoning_tokens: u.reasoning },
    total_tokens: input + u.output,
  };
}

interface Ctx {
  req: ResponsesRequest;
  customTools: Set<string>;
  encrypted: boolean;
}

function outputItem(b: BlockSpec, ctx: Ctx): ResponseOutputItem {
  switch (b.type) {
    case "text":
      return {
        id: randomId("msg"),
        type: "message",
        role: "assistant",
        status: "completed",
        content: [{ type: "output_text", text: b.text, annotations: [], logprobs: [] }],
      };
    case "thinking":
      return {
        id: randomId("rs"),
        type: "reasoning",
        summary: [{ type: "summary_text", text: b.thinking }],
        ...(ctx.encrypted ? { encrypted_content: b.signature ?? randomId("enc") } : {}),
      };
    case "redacted_thinking":
      return { id: randomId("rs"), type: "reasoning", summary: [], encrypted_content: b.data };
    default: {
      const callId = b.id ?? randomId("call");
      if (ctx.customTools.has(b.name)) {
        const input = typeof b.input.input === "string" ? b.input.input : JSON.stringify(b.input);
        return { id: randomId("ctc"), type: "custom_tool_call", call_id: callId, name: b.name, input };
      }
      return {
        id: randomId("fc"),
        type: "function_call",
        call_id: callId,
        name: b.name,
        arguments: JSON.stringify(b.input),
        status: "completed",
      };
    }
  }
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
type EventDraft = DistributiveOmit<ResponseStreamEvent, "sequence_number">;

/** The events that stream one output item: announced empty, filled by deltas, then done. */
function itemEvents(item: ResponseOutputItem, output_index: number, size: number): EventDraft[] {
  const item_id = item.id ?? "";
  const base = { item_id, output_index };
  const out: EventDraft[] = [];
  if (item.type === "message") {
    const part = item.content[0]!;
    const text = part.type === "output_text" ? part.text : "";
    out.push({ type: "response.output_item.added", output_index, item: { ...item, status: "in_progress", content: [] } });
    out.push({ type: "response.content_part.added", ...base, content_index: 0, part: { ...part, text: "" } as typeof part });
    for (const delta of chunk(text, size)) out.push({ type: "response.output_text.delta", ...base, content_index: 0, delta, logprobs: [] });
    out.push({ type: "response.output_text.done", ...base, content_index: 0, text, logprobs: [] });
    out.push({ type: "response.content_part.done", ...base, content_index: 0, part });
  } else if (item.type === "reasoning") {
    out.push({ type: "response.output_item.added", output_index, item: { ...item, summary: [] } });
    item.summary.forEach((s, summary_index) => {
      out.push({ type: "response.reasoning_summary_part.added", ...base, summary_index, part: { type: "summary_text", text: "" } });
      for (const delta of chunk(s.text, size)) out.push({ type: "response.reasoning_summary_text.delta", ...base, summary_index, delta });
      out.push({ type: "response.reasoning_summary_text.done", ...base, summary_index, text: s.text });
      out.push({ type: "response.reasoning_summary_part.done", ...base, summary_index, part: s });
    });
  } else if (item.type === "function_call") {
    out.push({ type: "response.output_item.added", output_index, item: { ...item, arguments: "", status: "in_progress" } });
    for (const delta of chunk(item.arguments, size)) out.push({ type: "response.function_call_arguments.delta", ...base, delta });
    out.push({ type: "response.function_call_arguments.done", ...base, arguments: item.arguments, name: item.name } as EventDraft);
  } else if (item.type === "custom_tool_call") {
    out.push({ type: "response.output_item.added", output_index, item: { ...item, input: "" } });
    for (const delta of chunk(item.input, size)) out.push({ type: "response.custom_tool_call_input.delta", ...base, delta });
    out.push({ type: "response.custom_tool_call_input.done", ...base, input: item.input });
  } else {
    out.push({ type: "response.output_item.added", output_index, item });
  }
  out.push({ type: "response.output_item.done", output_index, item });
  return out;
}

function buildResponse(spec: ResponseSpec, ctx: Ctx, view: RequestView, build: BuildContext): OpenAIResponse {
  const kind = stopKind(spec);
  const incomplete = kind === "length" || kind === "refusal";
  return {
    id: randomId("resp"),
    object: "response",
    created_at: unixSeconds(build.now),
    status: incomplete ? "incomplete" : "completed",
    completed_at: incomplete ? null : unixSeconds(build.now),
    error: null,
    incomplete_details: incomplete ? { reason: kind === "length" ? "max_output_tokens" : "content_filter" } : null,
    instructions: ctx.req.instructions ?? null,
    max_output_tokens: ctx.req.max_output_tokens ?? null,
    metadata: ctx.req.metadata ?? {},
    model: spec.model ?? view.model,
    output: spec.content.map((b) => outputItem(b, ctx)),
    output_text: spec.content.map((b) => (b.type === "text" ? b.text : "")).join(""),
    access_programs: null,
    parallel_tool_calls: true,
    previous_response_id: null,
    temperature: 1,
    top_p: 1,
    tool_choice: "auto",
    tools: (ctx.req.tools ?? []) as OpenAIResponse["tools"],
    text: { format: { type: "text" } },
    truncation: "disabled",
    usage: usageOf(spec, view),
  };
}

function frames(spec: ResponseSpec, ctx: Ctx, view: RequestView, build: BuildContext): string[] {
  const final = buildResponse(spec, ctx, view, build);
  const { usage: _usage, output_text: _text, ...rest } = final;
  const snapshot: OpenAIResponse = {
    ...rest,
    status: "in_progress",
    completed_at: null,
    incomplete_details: null,
    output: [],
    output_text: "",
  };
  const size = spec.chunk_chars ?? DEFAULT_CHUNK_CHARS;
  const drafts: EventDraft[] = [
    { type: "response.created", response: snapshot },
    { type: "response.in_progress", response: snapshot },
    ...final.output.flatMap((item, i) => itemEvents(item, i, size)),
    final.status === "incomplete" ? { type: "response.incomplete", response: final } : { type: "response.completed", response: final },
  ];
  return drafts.map((d, sequence_number) => {
    const event = { ...d, sequence_number } as ResponseStreamEvent;
    // The SDK fills in `output_text` itself; the wire object does not carry it.
    const wire = "response" in event ? { ...event, response: { ...event.response, output_text: undefined } } : event;
    return sseFrame(event.type, wire);
  });
}

/** Refuse a reference to a stored response: the whole conversation must come with the request. */
function refuseStored<T extends { previous_response_id?: string | null | undefined }>(parsed: ParseResult<T>): ParseResult<T> {
  if (parsed.ok && parsed.value.previous_response_id) {
    return { ok: false, message: "previous_response_id: the scripted model stores no responses; send the whole conversation in input" };
  }
  return parsed;
}

export const openaiResponses: DialectSpec = {
  name: "openai-responses",
  credentials: openaiCredentials,
  authFailure: openaiAuthFailure,
  errorResponse: openaiErrorResponse,
  streamErrorFrame: (type, message, _requestId, sequence_number) => {
    const e = openaiError(type, message);
    return sseFrame("error", { type: "error", code: e.code ?? e.type, message, param: null, sequence_number });
  },
  headers: openaiHeaders,
  parse(body) {
    const parsed = refuseStored(validate(requestSchema, body));
    if (!parsed.ok) return parsed;
    const req = parsed.value;
    const view = toView(req, {
      model: req.model,
      stream: req.stream === true,
      user_id: req.metadata?.user_id ?? req.user ?? req.safety_identifier ?? null,
      max_output_tokens: req.max_output_tokens ?? null,
    });
    const ctx: Ctx = {
      req,
      customTools: new Set((req.tools ?? []).filter((t) => t.type === "custom" && t.name).map((t) => t.name!)),
      encrypted: (req.include ?? []).includes("reasoning.encrypted_content"),
    };
    return {
      ok: true,
      value: {
        view,
        json: (spec, build) => ({ ...buildResponse(spec, ctx, view, build), output_text: undefined }),
        frames: (spec, build) => frames(spec, ctx, view, build),
      },
    };
  },
  count: {
    parse(body) {
      const parsed = refuseStored(validate(countSchema, body));
      if (!parsed.ok) return parsed;
      const req = parsed.value;
      return { ok: true, value: toView(req, { model: req.model ?? "", stream: false, user_id: null, max_output_tokens: null }) };
    },
    body: (tokens) => ({ object: "response.input_tokens", input_tokens: tokens }),
  },
};
